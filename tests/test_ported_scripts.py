"""Well-known PyTorch scripts port by the documented renames alone.

Each script is one source string written against torch (shortened: a few hundred MNIST images
or small synthetic data, a few steps). It runs twice: as written, with PyTorch, and with the
rename table of docs/coming-from-pytorch.md applied, with minigrad; then the test compares
losses, accuracies and gradients. The two libraries draw different numbers from one seed, so
each script says `same_as_torch(x)` after a random draw (initial weights, minibatch indices):
in the PyTorch run it records x, in the minigrad run it copies the recorded numbers into x in
place. A line that needs changing beyond the renames is a failure here: every script below runs
as its authors wrote it (shortened; a switch the test turns, such as nanoGPT's attention path,
is the same text in both runs), renamed.
"""
import contextlib
import copy
import functools
import io
import pathlib
import re
import textwrap

import numpy as np
import pytest
import torch

import minigrad as mg

from mnist_data import FOUND, MNIST_DIR

ROOT = pathlib.Path(__file__).resolve().parents[1]
RENAME_ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \|$", re.M)


def documented_renames():
    """The (PyTorch text, minigrad text) rows of the docs' rename table, in order."""
    text = (ROOT / "docs" / "coming-from-pytorch.md").read_text()
    section = text.split("## The renames\n", 1)[1].split("\n## ", 1)[0]
    return RENAME_ROW.findall(section)


RENAMES = documented_renames()


def port(source):
    """`source` with the documented renames applied, each at the start of a word."""
    for old, new in RENAMES:
        source = re.sub(r"(?<![\w.])" + re.escape(old), new, source)
    return source


def as_array(value):
    if isinstance(value, (torch.Tensor, mg.Tensor)):
        return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) \
            else value.detach().numpy()
    return np.asarray(value)


def snapshot(value):
    """What PyTorch drew, as NumPy: a tensor, a list of tensors, or a module's state dict."""
    if isinstance(value, torch.nn.Module):
        return {key: as_array(v).copy() for key, v in value.state_dict().items()}
    if isinstance(value, list):
        return [as_array(v).copy() for v in value]
    return as_array(value).copy()


def adopt(value, drawn):
    """minigrad's `value` given PyTorch's numbers `drawn`, in place (a leaf stays the leaf)."""
    if isinstance(value, mg.nn.Module):
        value.load_state_dict(drawn)
        return value
    with mg.no_grad():
        for target, numbers in zip(value if isinstance(value, list) else [value],
                                   drawn if isinstance(value, list) else [drawn], strict=True):
            target.copy_(mg.tensor(numbers))
    return value


class Twin:
    """One script run by PyTorch and, renamed, by minigrad, each in a fresh namespace."""

    def __init__(self, source, **inputs):
        self.source, self.inputs = textwrap.dedent(source), inputs
        self.drawn = []
        torch.manual_seed(0)   # for draws without a generator, whatever ran before
        self.torch = self._namespace(lambda value: self.drawn.append(snapshot(value)) or value)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(self.source, "<torch script>", "exec"), self.torch)

    def _namespace(self, same_as_torch):
        return {"__name__": "__main__", "same_as_torch": same_as_torch,
                **copy.deepcopy(self.inputs)}

    def run_minigrad(self):
        """The renamed script with minigrad."""
        code = port(self.source)
        drawn = iter(self.drawn)
        self.mg = self._namespace(lambda value: adopt(value, next(drawn)))
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "<ported script>", "exec"), self.mg)
        assert next(drawn, None) is None, "the minigrad run drew less than PyTorch's"
        return self

    def check(self, expression, rtol=1e-4, atol=1e-5):
        """`expression`, evaluated in both namespaces, agrees."""
        theirs = eval(expression, self.torch)
        ours = eval(port(expression), self.mg)
        if isinstance(theirs, (list, tuple)):
            assert len(ours) == len(theirs), expression
            for a, b in zip(ours, theirs, strict=True):
                np.testing.assert_allclose(as_array(a), as_array(b), rtol=rtol, atol=atol,
                                           err_msg=expression)
        else:
            np.testing.assert_allclose(as_array(ours), as_array(theirs), rtol=rtol, atol=atol,
                                       err_msg=expression)
        return ours


# --------------------------------------------------------------------------- data
@functools.cache
def mnist_test_split():
    return mg.data.MNIST(MNIST_DIR, train=False, download=False)


def digits(n, offset=0):
    """n MNIST test images ((n, 28, 28) float32 in [0, 1]) and labels (int64); without
    $MINIGRAD_DATA, noisy class templates of the same shapes."""
    if FOUND:
        split = mnist_test_split()
        return (split.images[offset:offset + n, 0].copy(),
                split.labels[offset:offset + n].copy())
    rng = np.random.default_rng(offset)
    # sparse strokes on a dark ground, as MNIST's digits are (dense templates do not train in
    # the few steps the scripts take)
    templates = np.random.default_rng(99).random((10, 28, 28), dtype=np.float32) < 0.2
    labels = rng.integers(0, 10, n)
    noise = rng.random((n, 28, 28), dtype=np.float32)
    images = np.where(templates[labels], 0.6 + 0.4 * noise, 0.2 * (noise > 0.9))
    return images.astype(np.float32), labels.astype(np.int64)


def names(count=120):
    """Made-up names from a few syllables: makemore's names.txt in miniature."""
    rng = np.random.default_rng(7)
    syllables = ["an", "na", "el", "la", "mi", "ra", "jo", "so", "ke", "ti", "ly", "be"]
    return ["".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(count)]


# --------------------------------------------------------------------------- the scripts
MNIST = """
    import argparse
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim
    from torch.optim.lr_scheduler import StepLR

    class Net(nn.Module):
        def __init__(self):
            super(Net, self).__init__()
            self.conv1 = nn.Conv2d(1, 32, 3, 1)
            self.conv2 = nn.Conv2d(32, 64, 3, 1)
            self.dropout1 = nn.Dropout(0.25)
            self.dropout2 = nn.Dropout(0.5)
            self.fc1 = nn.Linear(9216, 128)
            self.fc2 = nn.Linear(128, 10)

        def forward(self, x):
            x = self.conv1(x)
            x = F.relu(x)
            x = self.conv2(x)
            x = F.relu(x)
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = self.fc1(x)
            x = F.relu(x)
            x = self.dropout2(x)
            x = self.fc2(x)
            output = F.log_softmax(x, dim=1)
            return output

    def train(args, model, device, train_loader, optimizer, epoch):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            train_losses.append(loss.item())
            if batch_idx % args.log_interval == 0:
                print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                    epoch, batch_idx * len(data), len(train_loader.dataset),
                    100. * batch_idx / len(train_loader), loss.item()))
                if args.dry_run:
                    break

    def test(model, device, test_loader):
        model.eval()
        test_loss = 0
        correct = 0
        with torch.no_grad():
            for data, target in test_loader:
                data, target = data.to(device), target.to(device)
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction='sum').item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()
        test_loss /= len(test_loader.dataset)
        test_results.append((test_loss, correct))
        print('\\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\\n'.format(
            test_loss, correct, len(test_loader.dataset),
            100. * correct / len(test_loader.dataset)))

    parser = argparse.ArgumentParser(description='PyTorch MNIST Example')
    parser.add_argument('--batch-size', type=int, default=16)
    parser.add_argument('--test-batch-size', type=int, default=64)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--lr', type=float, default=1.0)
    parser.add_argument('--gamma', type=float, default=0.7)
    parser.add_argument('--no-accel', action='store_true')
    parser.add_argument('--dry-run', action='store_true')
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--log-interval', type=int, default=1)
    parser.add_argument('--save-model', action='store_true')
    args = parser.parse_args(argv)

    use_accel = not args.no_accel and torch.accelerator.is_available()

    torch.manual_seed(args.seed)

    if use_accel:
        device = torch.accelerator.current_accelerator()
    else:
        device = torch.device("cpu")

    train_kwargs = {'batch_size': args.batch_size}
    test_kwargs = {'batch_size': args.test_batch_size}
    if use_accel:
        accel_kwargs = {'num_workers': 1,
                        'persistent_workers': True,
                        'pin_memory': True,
                        'shuffle': True}
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)
    # torchvision's ToTensor and Normalize((0.1307,), (0.3081,)), done on the arrays
    dataset1 = torch.utils.data.TensorDataset(
        torch.from_numpy((train_images[:, None] - 0.1307) / 0.3081), torch.from_numpy(train_labels))
    dataset2 = torch.utils.data.TensorDataset(
        torch.from_numpy((test_images[:, None] - 0.1307) / 0.3081), torch.from_numpy(test_labels))
    train_loader = torch.utils.data.DataLoader(dataset1, **train_kwargs)
    test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)
    train_losses, test_results = [], []

    model = Net().to(device)
    same_as_torch(model)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), save_path)
"""


NN_TUTORIAL = """
    import math
    import numpy as np
    import torch

    x_train, y_train, x_valid, y_valid = map(
        torch.tensor, (x_train, y_train, x_valid, y_valid)
    )
    n, c = x_train.shape

    weights = torch.randn(784, 10) / math.sqrt(784)
    weights = same_as_torch(weights)
    weights.requires_grad_()
    bias = torch.zeros(10, requires_grad=True)
    def log_softmax(x):
        return x - x.exp().sum(-1).log().unsqueeze(-1)

    def model(xb):
        return log_softmax(xb @ weights + bias)

    bs = 64
    xb = x_train[0:bs]
    preds = model(xb)
    preds[0], preds.shape

    def nll(input, target):
        return -input[range(target.shape[0]), target].mean()

    loss_func = nll
    yb = y_train[0:bs]
    first_loss = loss_func(preds, yb)

    def accuracy(out, yb):
        preds = torch.argmax(out, dim=1)
        return (preds == yb).float().mean()

    first_accuracy = accuracy(preds, yb)
    lr = 0.5
    epochs = 2

    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            with torch.no_grad():
                weights -= weights.grad * lr
                bias -= bias.grad * lr
                weights.grad.zero_()
                bias.grad.zero_()

    scratch_result = loss_func(model(xb), yb), accuracy(model(xb), yb)

    import torch.nn.functional as F

    loss_func = F.cross_entropy

    def model(xb):
        return xb @ weights + bias

    functional_result = loss_func(model(xb), yb), accuracy(model(xb), yb)

    from torch import nn

    class Mnist_Logistic(nn.Module):
        def __init__(self):
            super().__init__()
            self.weights = nn.Parameter(torch.randn(784, 10) / math.sqrt(784))
            self.bias = nn.Parameter(torch.zeros(10))

        def forward(self, xb):
            return xb @ self.weights + self.bias

    model = Mnist_Logistic()
    same_as_torch(model)
    def fit():
        for epoch in range(epochs):
            for i in range((n - 1) // bs + 1):
                start_i = i * bs
                end_i = start_i + bs
                xb = x_train[start_i:end_i]
                yb = y_train[start_i:end_i]
                pred = model(xb)
                loss = loss_func(pred, yb)

                loss.backward()
                with torch.no_grad():
                    for p in model.parameters():
                        p -= p.grad * lr
                    model.zero_grad()

    fit()
    module_loss = loss_func(model(xb), yb)

    class Mnist_Logistic(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(784, 10)

        def forward(self, xb):
            return self.lin(xb)

    from torch import optim

    def get_model():
        model = Mnist_Logistic()
        return model, optim.SGD(model.parameters(), lr=lr)

    model, opt = get_model()
    same_as_torch(model)
    from torch.utils.data import TensorDataset
    from torch.utils.data import DataLoader

    train_ds = TensorDataset(x_train, y_train)
    train_dl = DataLoader(train_ds, batch_size=bs)
    valid_ds = TensorDataset(x_valid, y_valid)
    valid_dl = DataLoader(valid_ds, batch_size=bs * 2)

    for epoch in range(epochs):
        model.train()
        for xb, yb in train_dl:
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            opt.step()
            opt.zero_grad()

        model.eval()
        with torch.no_grad():
            valid_loss = sum(loss_func(model(xb), yb) for xb, yb in valid_dl)

        print(epoch, valid_loss / len(valid_dl))
    loader_loss = valid_loss / len(valid_dl)

    def loss_batch(model, loss_func, xb, yb, opt=None):
        loss = loss_func(model(xb), yb)

        if opt is not None:
            loss.backward()
            opt.step()
            opt.zero_grad()

        return loss.item(), len(xb)

    val_losses = []

    def fit(epochs, model, loss_func, opt, train_dl, valid_dl):
        for epoch in range(epochs):
            model.train()
            for xb, yb in train_dl:
                loss_batch(model, loss_func, xb, yb, opt)

            model.eval()
            with torch.no_grad():
                losses, nums = zip(
                    *[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl]
                )
            val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)

            print(epoch, val_loss)
            val_losses.append(val_loss)

    def get_data(train_ds, valid_ds, bs):
        return (
            DataLoader(train_ds, batch_size=bs, shuffle=True),
            DataLoader(valid_ds, batch_size=bs * 2),
        )

    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)

    class Mnist_CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1)
            self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1)
            self.conv3 = nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1)

        def forward(self, xb):
            xb = xb.view(-1, 1, 28, 28)
            xb = F.relu(self.conv1(xb))
            xb = F.relu(self.conv2(xb))
            xb = F.relu(self.conv3(xb))
            xb = F.avg_pool2d(xb, 4)
            return xb.view(-1, xb.size(1))

    lr = 0.1
    model = Mnist_CNN()
    same_as_torch(model)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    fit(epochs, model, loss_func, opt, train_dl, valid_dl)
    class Lambda(nn.Module):
        def __init__(self, func):
            super().__init__()
            self.func = func

        def forward(self, x):
            return self.func(x)

    def preprocess(x):
        return x.view(-1, 1, 28, 28)

    model = nn.Sequential(
        Lambda(preprocess),
        nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AvgPool2d(4),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )
    same_as_torch(model)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    fit(epochs, model, loss_func, opt, train_dl, valid_dl)
    def preprocess(x, y):
        return x.view(-1, 1, 28, 28), y

    class WrappedDataLoader:
        def __init__(self, dl, func):
            self.dl = dl
            self.func = func

        def __len__(self):
            return len(self.dl)

        def __iter__(self):
            for b in self.dl:
                yield (self.func(*b))

    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
    train_dl = WrappedDataLoader(train_dl, preprocess)
    valid_dl = WrappedDataLoader(valid_dl, preprocess)

    model = nn.Sequential(
        nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )
    same_as_torch(model)
    print(torch.cuda.is_available())
    dev = torch.device(
        "cuda") if torch.cuda.is_available() else torch.device("cpu")

    def preprocess(x, y):
        return x.view(-1, 1, 28, 28).to(dev), y.to(dev)

    train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
    train_dl = WrappedDataLoader(train_dl, preprocess)
    valid_dl = WrappedDataLoader(valid_dl, preprocess)
    model.to(dev)
    opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    fit(epochs, model, loss_func, opt, train_dl, valid_dl)
"""


MAKEMORE3 = """
    import random
    import torch
    import torch.nn.functional as F

    chars = sorted(list(set(''.join(words))))
    stoi = {s:i+1 for i,s in enumerate(chars)}
    stoi['.'] = 0
    itos = {i:s for s,i in stoi.items()}
    vocab_size = len(itos)

    block_size = 3

    def build_dataset(words):
        X, Y = [], []

        for w in words:
            context = [0] * block_size
            for ch in w + '.':
                ix = stoi[ch]
                X.append(context)
                Y.append(ix)
                context = context[1:] + [ix]

        X = torch.tensor(X)
        Y = torch.tensor(Y)
        print(X.shape, Y.shape)
        return X, Y

    random.seed(42)
    random.shuffle(words)
    n1 = int(0.8*len(words))
    n2 = int(0.9*len(words))

    Xtr,  Ytr  = build_dataset(words[:n1])
    Xdev, Ydev = build_dataset(words[n1:n2])
    Xte,  Yte  = build_dataset(words[n2:])

    n_embd = 10
    n_hidden = 200

    g = torch.Generator().manual_seed(2147483647)
    C  = torch.randn((vocab_size, n_embd),            generator=g)
    W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5/3)/((n_embd * block_size)**0.5)
    W2 = torch.randn((n_hidden, vocab_size),          generator=g) * 0.01
    b2 = torch.randn(vocab_size,                      generator=g) * 0

    bngain = torch.ones((1, n_hidden))
    bnbias = torch.zeros((1, n_hidden))
    bnmean_running = torch.zeros((1, n_hidden))
    bnstd_running = torch.ones((1, n_hidden))

    parameters = [C, W1, W2, b2, bngain, bnbias]
    print(sum(p.nelement() for p in parameters))
    for p in parameters:
        p.requires_grad = True
    same_as_torch(parameters)

    max_steps = 4
    batch_size = 32
    lossi = []

    for i in range(max_steps):
        ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
        ix = same_as_torch(ix)

        Xb, Yb = Xtr[ix], Ytr[ix]

        emb = C[Xb]
        embcat = emb.view(emb.shape[0], -1)
        hpreact = embcat @ W1
        bnmeani = hpreact.mean(0, keepdim=True)
        bnstdi = hpreact.std(0, keepdim=True)
        hpreact = bngain * (hpreact - bnmeani) / bnstdi + bnbias
        with torch.no_grad():
            bnmean_running = 0.999 * bnmean_running + 0.001 * bnmeani
            bnstd_running = 0.999 * bnstd_running + 0.001 * bnstdi
        h = torch.tanh(hpreact)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, Yb)

        for p in parameters:
            p.grad = None
        loss.backward()

        lr = 0.1 if i < 100000 else 0.01
        for p in parameters:
            p.data += -lr * p.grad

        if i % 10000 == 0:
            print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
        lossi.append(loss.log10().item())
    split_losses = {}

    @torch.no_grad()
    def split_loss(split):
        x,y = {
            'train': (Xtr, Ytr),
            'val': (Xdev, Ydev),
            'test': (Xte, Yte),
        }[split]
        emb = C[x]
        embcat = emb.view(emb.shape[0], -1)
        hpreact = embcat @ W1
        hpreact = bngain * (hpreact - bnmean_running) / bnstd_running + bnbias
        h = torch.tanh(hpreact)
        logits = h @ W2 + b2
        loss = F.cross_entropy(logits, y)
        print(split, loss.item())
        split_losses[split] = loss.item()

    split_loss('train')
    split_loss('val')

    g = torch.Generator().manual_seed(2147483647 + 10)
    samples = []
    for _ in range(3):
        out = []
        context = [0] * block_size
        while True:
            emb = C[torch.tensor([context])]
            hpreact = emb.view(1, -1) @ W1
            hpreact = bngain * (hpreact - bnmean_running) / bnstd_running + bnbias
            h = torch.tanh(hpreact)
            logits = h @ W2 + b2
            probs = F.softmax(logits, dim=1)
            ix = torch.multinomial(probs, num_samples=1, generator=g).item()
            context = context[1:] + [ix]
            out.append(ix)
            if ix == 0:
                break
        samples.append(''.join(itos[i] for i in out))

    # calibrate the batch norm at the end of training
    with torch.no_grad():
        emb = C[Xtr]
        embcat = emb.view(emb.shape[0], -1)
        hpreact = embcat @ W1
        bnmean = hpreact.mean(0, keepdim=True)
        bnstd = hpreact.std(0, keepdim=True)

    plotted = torch.tensor(lossi).view(-1, 2).mean(1)
    expected_initial_loss = -torch.tensor(1/27.0).log()
    logits = torch.tensor([0.0, 0.0, 5.0, 0.0])
    probs = torch.softmax(logits, dim=0)
    example_loss = -probs[2].log()
    class Linear:

        def __init__(self, fan_in, fan_out, bias=True):
            self.weight = torch.randn((fan_in, fan_out), generator=g) / fan_in**0.5
            self.bias = torch.zeros(fan_out) if bias else None

        def __call__(self, x):
            self.out = x @ self.weight
            if self.bias is not None:
                self.out += self.bias
            return self.out

        def parameters(self):
            return [self.weight] + ([] if self.bias is None else [self.bias])

    class BatchNorm1d:

        def __init__(self, dim, eps=1e-5, momentum=0.1):
            self.eps = eps
            self.momentum = momentum
            self.training = True
            self.gamma = torch.ones(dim)
            self.beta = torch.zeros(dim)
            self.running_mean = torch.zeros(dim)
            self.running_var = torch.ones(dim)

        def __call__(self, x):
            if self.training:
                xmean = x.mean(0, keepdim=True)
                xvar = x.var(0, keepdim=True)
            else:
                xmean = self.running_mean
                xvar = self.running_var
            xhat = (x - xmean) / torch.sqrt(xvar + self.eps)
            self.out = self.gamma * xhat + self.beta
            if self.training:
                with torch.no_grad():
                    self.running_mean = (1 - self.momentum) * self.running_mean + self.momentum * xmean
                    self.running_var = (1 - self.momentum) * self.running_var + self.momentum * xvar
            return self.out

        def parameters(self):
            return [self.gamma, self.beta]

    class Tanh:
        def __call__(self, x):
            self.out = torch.tanh(x)
            return self.out
        def parameters(self):
            return []

    n_embd = 10
    n_hidden = 100
    g = torch.Generator().manual_seed(2147483647)

    C = torch.randn((vocab_size, n_embd), generator=g)
    layers = [
        Linear(n_embd * block_size, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        Linear(           n_hidden, n_hidden, bias=False), BatchNorm1d(n_hidden), Tanh(),
        Linear(           n_hidden, n_hidden), Tanh(),
        Linear(           n_hidden, vocab_size, bias=False), BatchNorm1d(vocab_size),
    ]

    with torch.no_grad():
        layers[-1].gamma *= 0.1
        for layer in layers[:-1]:
            if isinstance(layer, Linear):
                layer.weight *= 5/3

    parameters = [C] + [p for layer in layers for p in layer.parameters()]
    print(sum(p.nelement() for p in parameters))
    for p in parameters:
        p.requires_grad = True
    same_as_torch(parameters)

    max_steps = 3
    batch_size = 32
    lossi = []
    ud = []

    for i in range(max_steps):
        ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
        ix = same_as_torch(ix)

        Xb, Yb = Xtr[ix], Ytr[ix]

        emb = C[Xb]
        x = emb.view(emb.shape[0], -1)
        for layer in layers:
            x = layer(x)
        loss = F.cross_entropy(x, Yb)

        for layer in layers:
            layer.out.retain_grad()
        for p in parameters:
            p.grad = None
        loss.backward()

        lr = 0.1 if i < 150000 else 0.01
        for p in parameters:
            p.data += -lr * p.grad

        if i % 10000 == 0:
            print(f'{i:7d}/{max_steps:7d}: {loss.item():.4f}')
        lossi.append(loss.log10().item())
        with torch.no_grad():
            ud.append([((lr*p.grad).std() / p.data.std()).log10().item() for p in parameters])
    activations, gradients, ratios = [], [], []
    for i, layer in enumerate(layers[:-1]):
        if isinstance(layer, Tanh):
            t = layer.out
            print('layer %d (%10s): mean %+.2f, std %.2f, saturated: %.2f%%' % (
                i, layer.__class__.__name__, t.mean(), t.std(), (t.abs() > 0.97).float().mean()*100))
            hy, hx = torch.histogram(t, density=True)
            activations.append((hx[:-1].detach(), hy.detach()))
    for i, layer in enumerate(layers[:-1]):
        if isinstance(layer, Tanh):
            t = layer.out.grad
            print('layer %d (%10s): mean %+f, std %e' % (i, layer.__class__.__name__, t.mean(), t.std()))
            hy, hx = torch.histogram(t, density=True)
            gradients.append((hx[:-1].detach(), hy.detach()))
    for i,p in enumerate(parameters):
        t = p.grad
        if p.ndim == 2:
            print('weight %10s | mean %+f | std %e | grad:data ratio %e' % (
                tuple(p.shape), t.mean(), t.std(), t.std() / p.std()))
            ratios.append(float(t.std() / p.std()))

    for layer in layers:
        layer.training = False

    @torch.no_grad()
    def split_loss(split):
        x,y = {
            'train': (Xtr, Ytr),
            'val': (Xdev, Ydev),
            'test': (Xte, Yte),
        }[split]
        emb = C[x]
        x = emb.view(emb.shape[0], -1)
        for layer in layers:
            x = layer(x)
        loss = F.cross_entropy(x, y)
        return loss.item()

    eval_losses = [split_loss('train'), split_loss('val')]
"""


MAKEMORE4 = """
    import random
    import torch
    import torch.nn.functional as F

    chars = sorted(list(set(''.join(words))))
    stoi = {s:i+1 for i,s in enumerate(chars)}
    stoi['.'] = 0
    itos = {i:s for s,i in stoi.items()}
    vocab_size = len(itos)

    block_size = 3

    def build_dataset(words):
        X, Y = [], []

        for w in words:
            context = [0] * block_size
            for ch in w + '.':
                ix = stoi[ch]
                X.append(context)
                Y.append(ix)
                context = context[1:] + [ix]

        X = torch.tensor(X)
        Y = torch.tensor(Y)
        print(X.shape, Y.shape)
        return X, Y

    random.seed(42)
    random.shuffle(words)
    n1 = int(0.8*len(words))
    n2 = int(0.9*len(words))

    Xtr,  Ytr  = build_dataset(words[:n1])
    Xdev, Ydev = build_dataset(words[n1:n2])
    Xte,  Yte  = build_dataset(words[n2:])

    n_embd = 10
    n_hidden = 64

    g = torch.Generator().manual_seed(2147483647)
    C  = torch.randn((vocab_size, n_embd),            generator=g)
    W1 = torch.randn((n_embd * block_size, n_hidden), generator=g) * (5/3)/((n_embd * block_size)**0.5)
    b1 = torch.randn(n_hidden,                        generator=g) * 0.1
    W2 = torch.randn((n_hidden, vocab_size),          generator=g) * 0.1
    b2 = torch.randn(vocab_size,                      generator=g) * 0.1
    bngain = torch.randn((1, n_hidden))*0.1 + 1.0
    bnbias = torch.randn((1, n_hidden))*0.1

    parameters = [C, W1, b1, W2, b2, bngain, bnbias]
    print(sum(p.nelement() for p in parameters))
    for p in parameters:
        p.requires_grad = True
    same_as_torch(parameters)

    batch_size = 32
    n = batch_size

    ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
    ix = same_as_torch(ix)
    Xb, Yb = Xtr[ix], Ytr[ix]

    emb = C[Xb]
    embcat = emb.view(emb.shape[0], -1)
    hprebn = embcat @ W1 + b1
    bnmeani = 1/n*hprebn.sum(0, keepdim=True)
    bndiff = hprebn - bnmeani
    bndiff2 = bndiff**2
    bnvar = 1/(n-1)*(bndiff2).sum(0, keepdim=True)
    bnvar_inv = (bnvar + 1e-5)**-0.5
    bnraw = bndiff * bnvar_inv
    hpreact = bngain * bnraw + bnbias
    h = torch.tanh(hpreact)
    logits = h @ W2 + b2
    logit_maxes = logits.max(1, keepdim=True).values
    norm_logits = logits - logit_maxes
    counts = norm_logits.exp()
    counts_sum = counts.sum(1, keepdims=True)
    counts_sum_inv = counts_sum**-1
    probs = counts * counts_sum_inv
    logprobs = probs.log()
    loss = -logprobs[range(n), Yb].mean()

    for p in parameters:
        p.grad = None
    for t in [logprobs, probs, counts, counts_sum, counts_sum_inv,
              norm_logits, logit_maxes, logits, h, hpreact, bnraw,
              bnvar_inv, bnvar, bndiff2, bndiff, hprebn, bnmeani,
              embcat, emb]:
        t.retain_grad()
    loss.backward()
    comparisons = []

    def cmp(s, dt, t):
        ex = torch.all(dt == t.grad).item()
        app = torch.allclose(dt, t.grad)
        maxdiff = (dt - t.grad).abs().max().item()
        print(f'{s:15s} | exact: {str(ex):5s} | approximate: {str(app):5s} | maxdiff: {maxdiff}')
        comparisons.append((s, app, dt))

    dlogprobs = torch.zeros_like(logprobs)
    dlogprobs[range(n), Yb] = -1.0/n
    dprobs = (1.0 / probs) * dlogprobs
    dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
    dcounts = counts_sum_inv * dprobs
    dcounts_sum = (-counts_sum**-2) * dcounts_sum_inv
    dcounts += torch.ones_like(counts) * dcounts_sum
    dnorm_logits = counts * dcounts
    dlogits = dnorm_logits.clone()
    dlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)
    dlogits += F.one_hot(logits.max(1).indices, num_classes=logits.shape[1]) * dlogit_maxes
    dh = dlogits @ W2.T
    dW2 = h.T @ dlogits
    db2 = dlogits.sum(0)
    dhpreact = (1.0 - h**2) * dh
    dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
    dbnraw = bngain * dhpreact
    dbnbias = dhpreact.sum(0, keepdim=True)
    dbndiff = bnvar_inv * dbnraw
    dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
    dbnvar = (-0.5*(bnvar + 1e-5)**-1.5) * dbnvar_inv
    dbndiff2 = (1.0/(n-1))*torch.ones_like(bndiff2) * dbnvar
    dbndiff += (2*bndiff) * dbndiff2
    dhprebn = dbndiff.clone()
    dbnmeani = (-dbndiff).sum(0)
    dhprebn += 1.0/n * (torch.ones_like(hprebn) * dbnmeani)
    dembcat = dhprebn @ W1.T
    dW1 = embcat.T @ dhprebn
    db1 = dhprebn.sum(0)
    demb = dembcat.view(emb.shape)
    dC = torch.zeros_like(C)
    for k in range(Xb.shape[0]):
        for j in range(Xb.shape[1]):
            ix = Xb[k,j]
            dC[ix] += demb[k,j]

    cmp('logprobs', dlogprobs, logprobs)
    cmp('probs', dprobs, probs)
    cmp('counts_sum_inv', dcounts_sum_inv, counts_sum_inv)
    cmp('counts_sum', dcounts_sum, counts_sum)
    cmp('counts', dcounts, counts)
    cmp('norm_logits', dnorm_logits, norm_logits)
    cmp('logit_maxes', dlogit_maxes, logit_maxes)
    cmp('logits', dlogits, logits)
    cmp('h', dh, h)
    cmp('W2', dW2, W2)
    cmp('b2', db2, b2)
    cmp('hpreact', dhpreact, hpreact)
    cmp('bngain', dbngain, bngain)
    cmp('bnbias', dbnbias, bnbias)
    cmp('bnraw', dbnraw, bnraw)
    cmp('bnvar_inv', dbnvar_inv, bnvar_inv)
    cmp('bnvar', dbnvar, bnvar)
    cmp('bndiff2', dbndiff2, bndiff2)
    cmp('bndiff', dbndiff, bndiff)
    cmp('bnmeani', dbnmeani, bnmeani)
    cmp('hprebn', dhprebn, hprebn)
    cmp('embcat', dembcat, embcat)
    cmp('W1', dW1, W1)
    cmp('b1', db1, b1)
    cmp('emb', demb, emb)
    cmp('C', dC, C)
    loss_fast = F.cross_entropy(logits, Yb)
    print(loss_fast.item(), 'diff:', (loss_fast - loss).item())

    dlogits = F.softmax(logits, 1)
    dlogits[range(n), Yb] -= 1
    dlogits /= n
    cmp('logits', dlogits, logits)

    hpreact_fast = bngain * (hprebn - hprebn.mean(0, keepdim=True)) / torch.sqrt(hprebn.var(0, keepdim=True, unbiased=True) + 1e-5) + bnbias
    print('max diff:', (hpreact_fast - hpreact).abs().max())

    dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
    cmp('hprebn', dhprebn, hprebn)

    max_steps = 3
    lossi = []

    with torch.no_grad():
        for i in range(max_steps):
            ix = torch.randint(0, Xtr.shape[0], (batch_size,), generator=g)
            ix = same_as_torch(ix)

            Xb, Yb = Xtr[ix], Ytr[ix]

            emb = C[Xb]
            embcat = emb.view(emb.shape[0], -1)
            hprebn = embcat @ W1 + b1
            bnmean = hprebn.mean(0, keepdim=True)
            bnvar = hprebn.var(0, keepdim=True, unbiased=True)
            bnvar_inv = (bnvar + 1e-5)**-0.5
            bnraw = (hprebn - bnmean) * bnvar_inv
            hpreact = bngain * bnraw + bnbias
            h = torch.tanh(hpreact)
            logits = h @ W2 + b2
            loss = F.cross_entropy(logits, Yb)

            for p in parameters:
                p.grad = None

            dlogits = F.softmax(logits, 1)
            dlogits[range(n), Yb] -= 1
            dlogits /= n
            dh = dlogits @ W2.T
            dW2 = h.T @ dlogits
            db2 = dlogits.sum(0)
            dhpreact = (1.0 - h**2) * dh
            dbngain = (bnraw * dhpreact).sum(0, keepdim=True)
            dbnbias = dhpreact.sum(0, keepdim=True)
            dhprebn = bngain*bnvar_inv/n * (n*dhpreact - dhpreact.sum(0) - n/(n-1)*bnraw*(dhpreact*bnraw).sum(0))
            dembcat = dhprebn @ W1.T
            dW1 = embcat.T @ dhprebn
            db1 = dhprebn.sum(0)
            demb = dembcat.view(emb.shape)
            dC = torch.zeros_like(C)
            for k in range(Xb.shape[0]):
                for j in range(Xb.shape[1]):
                    ix = Xb[k,j]
                    dC[ix] += demb[k,j]
            grads = [dC, dW1, db1, dW2, db2, dbngain, dbnbias]

            lr = 0.1 if i < 100000 else 0.01
            for p, grad in zip(parameters, grads):
                p.data += -lr * grad

            lossi.append(loss.log10().item())
"""


D2L = """
    import torch
    from torch import nn

    def batch_norm(X, gamma, beta, moving_mean, moving_var, eps, momentum):
        # Use is_grad_enabled to determine whether we are in training mode
        if not torch.is_grad_enabled():
            # In prediction mode, use mean and variance obtained by moving average
            X_hat = (X - moving_mean) / torch.sqrt(moving_var + eps)
        else:
            assert len(X.shape) in (2, 4)
            if len(X.shape) == 2:
                # When using a fully connected layer, calculate the mean and
                # variance on the feature dimension
                mean = X.mean(dim=0)
                var = ((X - mean) ** 2).mean(dim=0)
            else:
                # When using a two-dimensional convolutional layer, calculate the
                # mean and variance on the channel dimension (axis=1). Here we
                # need to maintain the shape of X, so that the broadcasting
                # operation can be carried out later
                mean = X.mean(dim=(0, 2, 3), keepdim=True)
                var = ((X - mean) ** 2).mean(dim=(0, 2, 3), keepdim=True)
            # In training mode, the current mean and variance are used
            X_hat = (X - mean) / torch.sqrt(var + eps)
            # Update the mean and variance using moving average
            moving_mean = (1.0 - momentum) * moving_mean + momentum * mean
            moving_var = (1.0 - momentum) * moving_var + momentum * var
        Y = gamma * X_hat + beta  # Scale and shift
        return Y, moving_mean.data, moving_var.data

    class BatchNorm(nn.Module):
        # num_features: the number of outputs for a fully connected layer
        # or the number of output channels for a convolutional layer. num_dims:
        # 2 for a fully connected layer and 4 for a convolutional layer
        def __init__(self, num_features, num_dims):
            super().__init__()
            if num_dims == 2:
                shape = (1, num_features)
            else:
                shape = (1, num_features, 1, 1)
            # The scale parameter and the shift parameter (model parameters) are
            # initialized to 1 and 0, respectively
            self.gamma = nn.Parameter(torch.ones(shape))
            self.beta = nn.Parameter(torch.zeros(shape))
            # The variables that are not model parameters are initialized to 0 and 1
            self.moving_mean = torch.zeros(shape)
            self.moving_var = torch.ones(shape)

        def forward(self, X):
            # If X is not on the main memory, copy moving_mean and moving_var to
            # the device where X is located
            if self.moving_mean.device != X.device:
                self.moving_mean = self.moving_mean.to(X.device)
                self.moving_var = self.moving_var.to(X.device)
            # Save the updated moving_mean and moving_var
            Y, self.moving_mean, self.moving_var = batch_norm(
                X, self.gamma, self.beta, self.moving_mean,
                self.moving_var, eps=1e-5, momentum=0.1)
            return Y

    net = nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5), BatchNorm(6, num_dims=4), nn.Sigmoid(),
        nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Conv2d(6, 16, kernel_size=5), BatchNorm(16, num_dims=4), nn.Sigmoid(),
        nn.AvgPool2d(kernel_size=2, stride=2), nn.Flatten(),
        nn.Linear(16*4*4, 120), BatchNorm(120, num_dims=2), nn.Sigmoid(),
        nn.Linear(120, 84), BatchNorm(84, num_dims=2), nn.Sigmoid(),
        nn.Linear(84, 10))
    # The d2l package's helpers the chapter calls (d2l.train_ch6 and friends), shortened
    class Accumulator:
        def __init__(self, n):
            self.data = [0.0] * n

        def add(self, *args):
            self.data = [a + float(b) for a, b in zip(self.data, args)]

        def __getitem__(self, idx):
            return self.data[idx]

    def accuracy(y_hat, y):
        if len(y_hat.shape) > 1 and y_hat.shape[1] > 1:
            y_hat = y_hat.argmax(axis=1)
        cmp = y_hat.type(y.dtype) == y
        return float(cmp.type(y.dtype).sum())

    def evaluate_accuracy_gpu(net, data_iter, device=None):
        if isinstance(net, nn.Module):
            net.eval()
            if not device:
                device = next(iter(net.parameters())).device
        metric = Accumulator(2)
        with torch.no_grad():
            for X, y in data_iter:
                if isinstance(X, list):
                    X = [x.to(device) for x in X]
                else:
                    X = X.to(device)
                y = y.to(device)
                metric.add(accuracy(net(X), y), y.numel())
        return metric[0] / metric[1]

    def try_gpu(i=0):
        if torch.cuda.device_count() >= i + 1:
            return torch.device(f'cuda:{i}')
        return torch.device('cpu')

    def load_data_fashion_mnist(batch_size):
        train = torch.utils.data.TensorDataset(torch.from_numpy(train_images),
                                               torch.from_numpy(train_labels))
        test = torch.utils.data.TensorDataset(torch.from_numpy(test_images),
                                              torch.from_numpy(test_labels))
        return (torch.utils.data.DataLoader(train, batch_size, shuffle=True),
                torch.utils.data.DataLoader(test, batch_size, shuffle=False))

    def init_weights(m):
        if type(m) == nn.Linear or type(m) == nn.Conv2d:
            nn.init.xavier_uniform_(m.weight)

    def train_ch6(net, train_iter, test_iter, num_epochs, lr, device):
        print('training on', device)
        net.to(device)
        optimizer = torch.optim.SGD(net.parameters(), lr=lr)
        loss = nn.CrossEntropyLoss()
        for epoch in range(num_epochs):
            metric = Accumulator(3)
            net.train()
            for i, (X, y) in enumerate(train_iter):
                optimizer.zero_grad()
                X, y = X.to(device), y.to(device)
                y_hat = net(X)
                l = loss(y_hat, y)
                l.backward()
                optimizer.step()
                with torch.no_grad():
                    metric.add(l * X.shape[0], accuracy(y_hat, y), X.shape[0])
            train_l = metric[0] / metric[2]
            train_acc = metric[1] / metric[2]
            test_acc = evaluate_accuracy_gpu(net, test_iter)
            history.append((train_l, train_acc, test_acc))

    lr, num_epochs, batch_size = 1.0, 3, 256
    train_iter, test_iter = load_data_fashion_mnist(batch_size)
    history = []
    net.apply(init_weights)
    same_as_torch(net)
    train_ch6(net, train_iter, test_iter, num_epochs, lr, try_gpu())
    scale_and_shift = net[1].gamma.reshape((-1,)), net[1].beta.reshape((-1,))
    net = nn.Sequential(
        nn.Conv2d(1, 6, kernel_size=5), nn.BatchNorm2d(6), nn.Sigmoid(),
        nn.AvgPool2d(kernel_size=2, stride=2),
        nn.Conv2d(6, 16, kernel_size=5), nn.BatchNorm2d(16), nn.Sigmoid(),
        nn.AvgPool2d(kernel_size=2, stride=2), nn.Flatten(),
        nn.Linear(256, 120), nn.BatchNorm1d(120), nn.Sigmoid(),
        nn.Linear(120, 84), nn.BatchNorm1d(84), nn.Sigmoid(),
        nn.Linear(84, 10))
    net.apply(init_weights)
    same_as_torch(net)
    train_ch6(net, train_iter, test_iter, num_epochs, lr, try_gpu())
"""


def run_mnist(tmp_path, dropout=True):
    train_images, train_labels = digits(48)
    test_images, test_labels = digits(64, offset=1000)
    # PyTorch here has no accelerator; minigrad may (CuPy), where its run would shuffle
    argv = ["--save-model"] + (["--no-accel"] if mg.accelerator.is_available() else [])
    source = MNIST if dropout else re.sub(r"nn\.Dropout\(0\.\d+\)", "nn.Dropout(0.0)", MNIST)
    return Twin(source, train_images=train_images, train_labels=train_labels,
                test_images=test_images, test_labels=test_labels, argv=argv,
                save_path=str(tmp_path / "mnist_cnn.pt")).run_minigrad()


def test_mnist_example_matches_torch_without_dropout(tmp_path):
    """The whole main(): Adadelta, StepLR, nll_loss, the accuracy idiom, torch.save. Dropout
    masks are random, so this run has p = 0 in both (the next test keeps them)."""
    twin = run_mnist(tmp_path, dropout=False)
    twin.check("train_losses", rtol=2e-3, atol=1e-4)
    twin.check("[loss for loss, _ in test_results]", rtol=2e-3, atol=1e-4)
    twin.check("[correct for _, correct in test_results]", rtol=0, atol=0)
    twin.check("optimizer.param_groups[0]['lr']", rtol=1e-12)
    twin.check("model.fc2.bias", rtol=2e-3, atol=1e-5)
    saved = mg.load(twin.mg["save_path"])
    np.testing.assert_array_equal(saved["fc2.bias"], twin.mg["model"].fc2.bias.detach().numpy())
    loaded = torch.load(twin.mg["save_path"], weights_only=True)
    assert loaded["conv1.weight"].shape == (32, 1, 3, 3)


def test_mnist_example_trains_with_dropout(tmp_path):
    twin = run_mnist(tmp_path)
    for namespace in (twin.torch, twin.mg):
        losses = namespace["train_losses"]
        assert len(losses) == 6 and all(np.isfinite(losses))
        assert np.mean(losses[3:]) < np.mean(losses[:3])
        assert namespace["test_results"][-1][1] > 0.4 * len(namespace["test_labels"])


def test_nn_tutorial_matches_torch():
    """"What is torch.nn really?", from hand-written weights to the CNN on a device. The
    training set is one batch (64 images), so the shuffling loaders train in the same order."""
    x_train, y_train = digits(64)
    x_valid, y_valid = digits(128, offset=2000)
    twin = Twin(NN_TUTORIAL, x_train=x_train.reshape(64, 784), y_train=y_train,
                x_valid=x_valid.reshape(128, 784), y_valid=y_valid).run_minigrad()
    twin.check("preds")
    twin.check("[first_loss, first_accuracy]")
    twin.check("scratch_result")
    twin.check("functional_result")
    twin.check("module_loss")
    twin.check("loader_loss")
    twin.check("val_losses", rtol=1e-3)
    assert len(twin.mg["val_losses"]) == 6


def test_makemore_part3_batchnorm_matches_torch():
    """The hand-written batch norm MLP, then the same "PyTorch-ified" into layer classes, with
    the activation and gradient statistics the notebook plots."""
    twin = Twin(MAKEMORE3, words=names()).run_minigrad()
    twin.check("[Xtr, Ytr, Xdev, Yte]", rtol=0, atol=0)
    twin.check("[bnmean_running, bnstd_running]")
    twin.check("[split_losses['train'], split_losses['val']]")
    twin.check("[bnmean, bnstd, plotted, expected_initial_loss, probs, example_loss]")
    for namespace in (twin.torch, twin.mg):
        assert all(name.endswith(".") for name in namespace["samples"])
    twin.check("lossi")
    twin.check("ud", rtol=1e-3)
    twin.check("[p.grad for p in parameters]", atol=1e-6)
    twin.check("[layers[1].running_mean, layers[1].running_var]")
    twin.check("[array for pair in activations for array in pair]", atol=1e-4)
    twin.check("[array for pair in gradients for array in pair]", rtol=1e-3, atol=1e-2)
    twin.check("ratios", rtol=1e-3)
    twin.check("eval_losses")


def test_makemore_part4_manual_backprop_matches_torch():
    """Every gradient by hand (exercise 1), the fused cross entropy and batch norm backward
    (exercises 2, 3) and the training loop without loss.backward() (exercise 4)."""
    twin = Twin(MAKEMORE4, words=names()).run_minigrad()
    for namespace in (twin.torch, twin.mg):
        assert len(namespace["comparisons"]) == 28
        assert all(app for _, app, _ in namespace["comparisons"]), namespace["comparisons"]
    twin.check("[dt for _, _, dt in comparisons]", atol=1e-6)
    twin.check("[loss_fast, hpreact_fast]", atol=1e-6)
    twin.check("lossi")
    twin.check("[p.data for p in parameters]")


TEXT = (pathlib.Path(__file__).resolve().parents[1] / "examples" / "data" /
        "declaration.txt").read_text()


def characters(count=6000):
    """The first `count` characters of the bundled text as token ids (uint16, as nanoGPT's
    prepare.py writes them), and the vocabulary size."""
    chars = sorted(set(TEXT))
    stoi = {ch: i for i, ch in enumerate(chars)}
    return np.array([stoi[ch] for ch in TEXT[:count]], dtype=np.uint16), len(chars)


# nanoGPT's model.py (Karpathy, MIT licence) as it is, from_pretrained left out (it downloads
# GPT-2 through transformers); then train.py's loop in short: its get_batch, the cosine learning
# rate with warmup, gradient accumulation, GradScaler, clipping, estimate_loss, and a greedy
# sample from generate (top_k=1: the same tokens whatever the random draws). One word is added:
# `and flash` (the test's switch), so that both attention paths run.
NANOGPT = """
    import math
    import inspect
    from contextlib import nullcontext

    import numpy as np
    from dataclasses import dataclass

    import torch
    import torch.nn as nn
    from torch.nn import functional as F

    class LayerNorm(nn.Module):
        \"\"\" LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False \"\"\"

        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, input):
            return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):

        def __init__(self, config):
            super().__init__()
            assert config.n_embd % config.n_head == 0
            # key, query, value projections for all heads, but in a batch
            self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
            # output projection
            self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
            # regularization
            self.attn_dropout = nn.Dropout(config.dropout)
            self.resid_dropout = nn.Dropout(config.dropout)
            self.n_head = config.n_head
            self.n_embd = config.n_embd
            self.dropout = config.dropout
            # flash attention make GPU go brrrrr but support is only in PyTorch >= 2.0
            self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention') and flash
            if not self.flash:
                print("WARNING: using slow attention. Flash Attention requires PyTorch >= 2.0")
                # causal mask to ensure that attention is only applied to the left in the input sequence
                self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                            .view(1, 1, config.block_size, config.block_size))

        def forward(self, x):
            B, T, C = x.size() # batch size, sequence length, embedding dimensionality (n_embd)

            # calculate query, key, values for all heads in batch and move head forward to be the batch dim
            q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)

            # causal self-attention; Self-attend: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
            if self.flash:
                # efficient attention using Flash Attention CUDA kernels
                y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
            else:
                # manual implementation of attention
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
                att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
                att = F.softmax(att, dim=-1)
                att = self.attn_dropout(att)
                y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
            y = y.transpose(1, 2).contiguous().view(B, T, C) # re-assemble all head outputs side by side

            # output projection
            y = self.resid_dropout(self.c_proj(y))
            return y

    class MLP(nn.Module):

        def __init__(self, config):
            super().__init__()
            self.c_fc    = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
            self.gelu    = nn.GELU()
            self.c_proj  = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
            self.dropout = nn.Dropout(config.dropout)

        def forward(self, x):
            x = self.c_fc(x)
            x = self.gelu(x)
            x = self.c_proj(x)
            x = self.dropout(x)
            return x

    class Block(nn.Module):

        def __init__(self, config):
            super().__init__()
            self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
            self.attn = CausalSelfAttention(config)
            self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
            self.mlp = MLP(config)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            x = x + self.mlp(self.ln_2(x))
            return x

    @dataclass
    class GPTConfig:
        block_size: int = 1024
        vocab_size: int = 50304 # GPT-2 vocab_size of 50257, padded up to nearest multiple of 64 for efficiency
        n_layer: int = 12
        n_head: int = 12
        n_embd: int = 768
        dropout: float = 0.0
        bias: bool = True # True: bias in Linears and LayerNorms, like GPT-2. False: a bit better and faster

    class GPT(nn.Module):

        def __init__(self, config):
            super().__init__()
            assert config.vocab_size is not None
            assert config.block_size is not None
            self.config = config

            self.transformer = nn.ModuleDict(dict(
                wte = nn.Embedding(config.vocab_size, config.n_embd),
                wpe = nn.Embedding(config.block_size, config.n_embd),
                drop = nn.Dropout(config.dropout),
                h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f = LayerNorm(config.n_embd, bias=config.bias),
            ))
            self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
            # with weight tying when using torch.compile() some warnings get generated:
            # "UserWarning: functional_call was passed multiple values for tied weights.
            # This behavior is deprecated and will be an error in future versions"
            # not 100% sure what this is, so far seems to be harmless. TODO investigate
            self.transformer.wte.weight = self.lm_head.weight # https://paperswithcode.com/method/weight-tying

            # init all weights
            self.apply(self._init_weights)
            # apply special scaled init to the residual projections, per GPT-2 paper
            for pn, p in self.named_parameters():
                if pn.endswith('c_proj.weight'):
                    torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * config.n_layer))

            # report number of parameters
            print("number of parameters: %.2fM" % (self.get_num_params()/1e6,))

        def get_num_params(self, non_embedding=True):
            n_params = sum(p.numel() for p in self.parameters())
            if non_embedding:
                n_params -= self.transformer.wpe.weight.numel()
            return n_params

        def _init_weights(self, module):
            if isinstance(module, nn.Linear):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    torch.nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

        def forward(self, idx, targets=None):
            device = idx.device
            b, t = idx.size()
            assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
            pos = torch.arange(0, t, dtype=torch.long, device=device) # shape (t)

            # forward the GPT model itself
            tok_emb = self.transformer.wte(idx) # token embeddings of shape (b, t, n_embd)
            pos_emb = self.transformer.wpe(pos) # position embeddings of shape (t, n_embd)
            x = self.transformer.drop(tok_emb + pos_emb)
            for block in self.transformer.h:
                x = block(x)
            x = self.transformer.ln_f(x)

            if targets is not None:
                # if we are given some desired targets also calculate the loss
                logits = self.lm_head(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            else:
                # inference-time mini-optimization: only forward the lm_head on the very last position
                logits = self.lm_head(x[:, [-1], :]) # note: using list [-1] to preserve the time dim
                loss = None

            return logits, loss

        def crop_block_size(self, block_size):
            # model surgery to decrease the block size if necessary
            assert block_size <= self.config.block_size
            self.config.block_size = block_size
            self.transformer.wpe.weight = nn.Parameter(self.transformer.wpe.weight[:block_size])
            for block in self.transformer.h:
                if hasattr(block.attn, 'bias'):
                    block.attn.bias = block.attn.bias[:,:,:block_size,:block_size]

        def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
            # start with all of the candidate parameters
            param_dict = {pn: p for pn, p in self.named_parameters()}
            # filter out those that do not require grad
            param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
            # create optim groups. Any parameters that is 2D will be weight decayed, otherwise no.
            # i.e. all weight tensors in matmuls + embeddings decay, all biases and layernorms don't.
            decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
            nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
            optim_groups = [
                {'params': decay_params, 'weight_decay': weight_decay},
                {'params': nodecay_params, 'weight_decay': 0.0}
            ]
            num_decay_params = sum(p.numel() for p in decay_params)
            num_nodecay_params = sum(p.numel() for p in nodecay_params)
            print(f"num decayed parameter tensors: {len(decay_params)}, with {num_decay_params:,} parameters")
            print(f"num non-decayed parameter tensors: {len(nodecay_params)}, with {num_nodecay_params:,} parameters")
            # Create AdamW optimizer and use the fused version if it is available
            fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
            use_fused = fused_available and device_type == 'cuda'
            extra_args = dict(fused=True) if use_fused else dict()
            optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
            print(f"using fused AdamW: {use_fused}")

            return optimizer

        def estimate_mfu(self, fwdbwd_per_iter, dt):
            \"\"\" estimate model flops utilization (MFU) in units of A100 bfloat16 peak FLOPS \"\"\"
            N = self.get_num_params()
            cfg = self.config
            L, H, Q, T = cfg.n_layer, cfg.n_head, cfg.n_embd//cfg.n_head, cfg.block_size
            flops_per_token = 6*N + 12*L*H*Q*T
            flops_per_fwdbwd = flops_per_token * T
            flops_per_iter = flops_per_fwdbwd * fwdbwd_per_iter
            flops_achieved = flops_per_iter * (1.0/dt) # per second
            flops_promised = 312e12 # A100 GPU bfloat16 peak flops is 312 TFLOPS
            mfu = flops_achieved / flops_promised
            return mfu

        @torch.no_grad()
        def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
            for _ in range(max_new_tokens):
                # if the sequence context is growing too long we must crop it at block_size
                idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
                # forward the model to get the logits for the index in the sequence
                logits, _ = self(idx_cond)
                # pluck the logits at the final step and scale by desired temperature
                logits = logits[:, -1, :] / temperature
                # optionally crop the logits to only the top k options
                if top_k is not None:
                    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                    logits[logits < v[:, [-1]]] = -float('Inf')
                # apply softmax to convert logits to (normalized) probabilities
                probs = F.softmax(logits, dim=-1)
                # sample from the distribution
                idx_next = torch.multinomial(probs, num_samples=1)
                # append sampled index to the running sequence and continue
                idx = torch.cat((idx, idx_next), dim=1)

            return idx

    # ---------------------------------------------------------------- train.py, in short
    gradient_accumulation_steps = 2
    batch_size = 8
    block_size = 32
    n_layer, n_head, n_embd, dropout, bias = 2, 4, 32, 0.0, False
    learning_rate, max_iters, weight_decay = 1e-3, 8, 1e-1
    beta1, beta2, grad_clip = 0.9, 0.99, 1.0
    warmup_iters, lr_decay_iters, min_lr = 2, 8, 1e-4
    eval_interval, eval_iters = 4, 2
    device = 'cpu'
    dtype = 'float32'
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True # allow tf32 on matmul
    torch.backends.cudnn.allow_tf32 = True # allow tf32 on cudnn
    device_type = 'cuda' if 'cuda' in device else 'cpu' # for later use in torch.autocast
    ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
    ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

    n = int(0.9*len(data))
    train_data, val_data = data[:n], data[n:]

    def get_batch(split):
        data = train_data if split == 'train' else val_data
        ix = torch.randint(len(data) - block_size, (batch_size,))
        ix = same_as_torch(ix)
        x = torch.stack([torch.from_numpy((data[i:i+block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i+1:i+1+block_size]).astype(np.int64)) for i in ix])
        if device_type == 'cuda':
            x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
        else:
            x, y = x.to(device), y.to(device)
        return x, y

    model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                      bias=bias, vocab_size=vocab_size, dropout=dropout)
    gptconf = GPTConfig(**model_args)
    model = GPT(gptconf)
    same_as_torch(model)
    model.to(device)
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ['train', 'val']:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        assert 0 <= decay_ratio <= 1
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio)) # coeff ranges 0..1
        return min_lr + coeff * (learning_rate - min_lr)

    X, Y = get_batch('train') # fetch the very first batch
    iter_num, evals, train_losses = 0, [], []
    while True:
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
        if iter_num % eval_interval == 0:
            losses = estimate_loss()
            evals.append((losses['train'], losses['val']))
        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps # scale the loss to account for gradient accumulation
            X, Y = get_batch('train')
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        train_losses.append(loss.item() * gradient_accumulation_steps)
        iter_num += 1
        if iter_num > max_iters:
            break

    mfu = model.estimate_mfu(batch_size * gradient_accumulation_steps, 0.5)
    sample = model.generate(torch.zeros((1, 1), dtype=torch.long, device=device), 20, top_k=1)
    model.crop_block_size(16)
"""


def test_nanogpt_model_and_train_loop_match_torch():
    data, vocab_size = characters()
    for flash in (True, False):   # F.scaled_dot_product_attention, and the hand-written path
        twin = Twin(NANOGPT, data=data, vocab_size=vocab_size, flash=flash).run_minigrad()
        twin.check("train_losses", rtol=1e-4)
        twin.check("[loss for pair in evals for loss in pair]", rtol=1e-4)
        twin.check("[p for p in model.parameters()]", rtol=1e-3, atol=1e-5)
        twin.check("sample", rtol=0, atol=0)
        twin.check("mfu", rtol=1e-12)
        twin.check("model.transformer.wpe.weight", rtol=1e-3, atol=1e-5)
        assert len(twin.mg["train_losses"]) == 9
        assert twin.mg["train_losses"][-1] < twin.mg["train_losses"][0]


# pytorch/examples' word_language_model (BSD licence): data.py's Dictionary and Corpus, model.py's
# RNNModel, PositionalEncoding and TransformerModel as they are, and main.py's argument parser,
# batchify, get_batch, repackage_hidden, evaluate, train and epoch loop (learning rate annealed
# by 4 when the validation loss stops falling), on a few lines of the bundled text. Left out:
# the checkpoint (main.py pickles the whole model with torch.save(model, f), whose classes live
# in a script's namespace here, for PyTorch as for minigrad), the ONNX export and timing prints.
WORD_LANGUAGE_MODEL = """
    import argparse
    import math
    import os
    import time

    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    # ---------------------------------------------------------------- data.py
    class Dictionary(object):
        def __init__(self):
            self.word2idx = {}
            self.idx2word = []

        def add_word(self, word):
            if word not in self.word2idx:
                self.idx2word.append(word)
                self.word2idx[word] = len(self.idx2word) - 1
            return self.word2idx[word]

        def __len__(self):
            return len(self.idx2word)


    class Corpus(object):
        def __init__(self, path):
            self.dictionary = Dictionary()
            self.train = self.tokenize(os.path.join(path, 'train.txt'))
            self.valid = self.tokenize(os.path.join(path, 'valid.txt'))
            self.test = self.tokenize(os.path.join(path, 'test.txt'))

        def tokenize(self, path):
            \"\"\"Tokenizes a text file.\"\"\"
            assert os.path.exists(path)
            # Add words to the dictionary
            with open(path, 'r', encoding="utf8") as f:
                for line in f:
                    words = line.split() + ['<eos>']
                    for word in words:
                        self.dictionary.add_word(word)

            # Tokenize file content
            with open(path, 'r', encoding="utf8") as f:
                idss = []
                for line in f:
                    words = line.split() + ['<eos>']
                    ids = []
                    for word in words:
                        ids.append(self.dictionary.word2idx[word])
                    idss.append(torch.tensor(ids).type(torch.int64))
                ids = torch.cat(idss)

            return ids

    # ---------------------------------------------------------------- model.py
    class RNNModel(nn.Module):
        \"\"\"Container module with an encoder, a recurrent module, and a decoder.\"\"\"

        def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
            super(RNNModel, self).__init__()
            self.ntoken = ntoken
            self.drop = nn.Dropout(dropout)
            self.encoder = nn.Embedding(ntoken, ninp)
            if rnn_type in ['LSTM', 'GRU']:
                self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
            else:
                try:
                    nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
                except KeyError as e:
                    raise ValueError( \"\"\"An invalid option for `--model` was supplied,
                                     options are ['LSTM', 'GRU', 'RNN_TANH' or 'RNN_RELU']\"\"\") from e
                self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
            self.decoder = nn.Linear(nhid, ntoken)

            # Optionally tie weights as in:
            # "Using the Output Embedding to Improve Language Models" (Press & Wolf 2016)
            if tie_weights:
                if nhid != ninp:
                    raise ValueError('When using the tied flag, nhid must be equal to emsize')
                self.decoder.weight = self.encoder.weight

            self.init_weights()

            self.rnn_type = rnn_type
            self.nhid = nhid
            self.nlayers = nlayers

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.encoder.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, input, hidden):
            emb = self.drop(self.encoder(input))
            output, hidden = self.rnn(emb, hidden)
            output = self.drop(output)
            decoded = self.decoder(output)
            decoded = decoded.view(-1, self.ntoken)
            return F.log_softmax(decoded, dim=1), hidden

        def init_hidden(self, bsz):
            weight = next(self.parameters())
            if self.rnn_type == 'LSTM':
                return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                        weight.new_zeros(self.nlayers, bsz, self.nhid))
            else:
                return weight.new_zeros(self.nlayers, bsz, self.nhid)

    # Temporarily leave PositionalEncoding module here. Will be moved somewhere else.
    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=5000):
            super(PositionalEncoding, self).__init__()
            self.dropout = nn.Dropout(p=dropout)

            pe = torch.zeros(max_len, d_model)
            position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            pe = pe.unsqueeze(0).transpose(0, 1)
            self.register_buffer('pe', pe)

        def forward(self, x):
            x = x + self.pe[:x.size(0), :]
            return self.dropout(x)

    class TransformerModel(nn.Transformer):
        \"\"\"Container module with an encoder, a recurrent or transformer module, and a decoder.\"\"\"

        def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
            super(TransformerModel, self).__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers)
            self.model_type = 'Transformer'
            self.src_mask = None
            self.pos_encoder = PositionalEncoding(ninp, dropout)

            self.input_emb = nn.Embedding(ntoken, ninp)
            self.ninp = ninp
            self.decoder = nn.Linear(ninp, ntoken)

            self.init_weights()

        def _generate_square_subsequent_mask(self, sz):
            return torch.log(torch.tril(torch.ones(sz,sz)))

        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)

        def forward(self, src, has_mask=True):
            if has_mask:
                device = src.device
                if self.src_mask is None or self.src_mask.size(0) != len(src):
                    mask = self._generate_square_subsequent_mask(len(src)).to(device)
                    self.src_mask = mask
            else:
                self.src_mask = None

            src = self.input_emb(src) * math.sqrt(self.ninp)
            src = self.pos_encoder(src)
            output = self.encoder(src, mask=self.src_mask)
            output = self.decoder(output)
            return F.log_softmax(output, dim=-1)

    # ---------------------------------------------------------------- main.py
    parser = argparse.ArgumentParser(description='PyTorch Wikitext-2 RNN/LSTM/GRU/Transformer Language Model')
    parser.add_argument('--data', type=str, default='./data/wikitext-2',
                        help='location of the data corpus')
    parser.add_argument('--model', type=str, default='LSTM',
                        help='type of network (RNN_TANH, RNN_RELU, LSTM, GRU, Transformer)')
    parser.add_argument('--emsize', type=int, default=200,
                        help='size of word embeddings')
    parser.add_argument('--nhid', type=int, default=200,
                        help='number of hidden units per layer')
    parser.add_argument('--nlayers', type=int, default=2,
                        help='number of layers')
    parser.add_argument('--lr', type=float, default=20,
                        help='initial learning rate')
    parser.add_argument('--clip', type=float, default=0.25,
                        help='gradient clipping')
    parser.add_argument('--epochs', type=int, default=40,
                        help='upper epoch limit')
    parser.add_argument('--batch_size', type=int, default=20, metavar='N',
                        help='batch size')
    parser.add_argument('--bptt', type=int, default=35,
                        help='sequence length')
    parser.add_argument('--dropout', type=float, default=0.2,
                        help='dropout applied to layers (0 = no dropout)')
    parser.add_argument('--tied', action='store_true',
                        help='tie the word embedding and softmax weights')
    parser.add_argument('--seed', type=int, default=1111,
                        help='random seed')
    parser.add_argument('--log-interval', type=int, default=200, metavar='N',
                        help='report interval')
    parser.add_argument('--nhead', type=int, default=2,
                        help='the number of heads in the encoder/decoder of the transformer model')
    args = parser.parse_args(argv)

    # Set the random seed manually for reproducibility.
    torch.manual_seed(args.seed)
    device = torch.device("cpu")

    corpus = Corpus(args.data)

    def batchify(data, bsz):
        # Work out how cleanly we can divide the dataset into bsz parts.
        nbatch = data.size(0) // bsz
        # Trim off any extra elements that wouldn't cleanly fit (remainders).
        data = data.narrow(0, 0, nbatch * bsz)
        # Evenly divide the data across the bsz batches.
        data = data.view(bsz, -1).t().contiguous()
        return data.to(device)

    eval_batch_size = 10
    train_data = batchify(corpus.train, args.batch_size)
    val_data = batchify(corpus.valid, eval_batch_size)
    test_data = batchify(corpus.test, eval_batch_size)

    ntokens = len(corpus.dictionary)
    if args.model == 'Transformer':
        model = TransformerModel(ntokens, args.emsize, args.nhead, args.nhid, args.nlayers, args.dropout).to(device)
    else:
        model = RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout, args.tied).to(device)
    same_as_torch(model)

    criterion = nn.NLLLoss()

    def repackage_hidden(h):
        \"\"\"Wraps hidden states in new Tensors, to detach them from their history.\"\"\"

        if isinstance(h, torch.Tensor):
            return h.detach()
        else:
            return tuple(repackage_hidden(v) for v in h)

    def get_batch(source, i):
        seq_len = min(args.bptt, len(source) - 1 - i)
        data = source[i:i+seq_len]
        target = source[i+1:i+1+seq_len].view(-1)
        return data, target

    def evaluate(data_source):
        # Turn on evaluation mode which disables dropout.
        model.eval()
        total_loss = 0.
        ntokens = len(corpus.dictionary)
        if args.model != 'Transformer':
            hidden = model.init_hidden(eval_batch_size)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, args.bptt):
                data, targets = get_batch(data_source, i)
                if args.model == 'Transformer':
                    output = model(data)
                    output = output.view(-1, ntokens)
                else:
                    output, hidden = model(data, hidden)
                    hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    def train():
        # Turn on training mode which enables dropout.
        model.train()
        total_loss = 0.
        start_time = time.time()
        ntokens = len(corpus.dictionary)
        if args.model != 'Transformer':
            hidden = model.init_hidden(args.batch_size)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            data, targets = get_batch(train_data, i)
            # Starting each batch, we detach the hidden state from how it was previously produced.
            # If we didn't, the model would try backpropagating all the way to start of the dataset.
            model.zero_grad()
            if args.model == 'Transformer':
                output = model(data)
                output = output.view(-1, ntokens)
            else:
                hidden = repackage_hidden(hidden)
                output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            loss.backward()

            # `clip_grad_norm` helps prevent the exploding gradient problem in RNNs / LSTMs.
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)

            total_loss += loss.item()
            train_losses.append(loss.item())

    # Loop over epochs.
    lr = args.lr
    best_val_loss = None
    train_losses, val_losses = [], []

    for epoch in range(1, args.epochs+1):
        epoch_start_time = time.time()
        train()
        val_loss = evaluate(val_data)
        val_losses.append(val_loss)
        print('| end of epoch {:3d} | valid loss {:5.2f} | valid ppl {:8.2f}'.format(
            epoch, val_loss, math.exp(val_loss)))
        # Save the model if the validation loss is the best we've seen so far.
        if not best_val_loss or val_loss < best_val_loss:
            best_val_loss = val_loss
        else:
            # Anneal the learning rate if no improvement has been seen in the validation dataset.
            lr /= 4.0

    # Run on test data.
    test_loss = evaluate(test_data)
"""


def word_language_model(tmp_path, *argv):
    """The script on the first lines of the bundled text (train, valid and test files)."""
    lines = [line for line in TEXT.splitlines() if line.strip()]
    for name, part in (("train", lines[:24]), ("valid", lines[24:30]), ("test", lines[30:36])):
        (tmp_path / f"{name}.txt").write_text("\\n".join(part) + "\\n")
    argv = ["--data", str(tmp_path), "--emsize", "16", "--nhid", "16", "--epochs", "3",
            "--batch_size", "4", "--bptt", "12", "--dropout", "0", "--lr", "5", *argv]
    return Twin(WORD_LANGUAGE_MODEL, argv=argv).run_minigrad()


@pytest.mark.parametrize("argv", [["--model", "LSTM"], ["--model", "GRU", "--tied"]])
def test_word_language_model_matches_torch(tmp_path, argv):
    twin = word_language_model(tmp_path, *argv)
    twin.check("train_losses", rtol=2e-4)
    twin.check("val_losses", rtol=2e-4)
    twin.check("[test_loss, lr]", rtol=2e-4)
    twin.check("[p for p in model.parameters()]", rtol=2e-3, atol=1e-5)
    losses = twin.mg["train_losses"]
    assert len(losses) > 6 and np.mean(losses[-3:]) < np.mean(losses[:3])


def test_word_language_model_transformer_matches_torch(tmp_path):
    """TransformerModel keeps nn.Transformer's dropout of 0.1 (its --dropout reaches only the
    positional encoding), so the two runs draw different masks: both learn, and minigrad's
    evaluate() with PyTorch's trained weights gives PyTorch's test loss."""
    twin = word_language_model(tmp_path, "--model", "Transformer", "--nhead", "2")
    for namespace in (twin.torch, twin.mg):
        losses = namespace["train_losses"]
        assert len(losses) > 6 and np.mean(losses[-3:]) < np.mean(losses[:3])
    trained = {key: mg.tensor(value.numpy()) for key, value in
               twin.torch["model"].state_dict().items()}
    twin.mg["model"].load_state_dict(trained)
    np.testing.assert_allclose(twin.mg["evaluate"](twin.mg["test_data"]),
                               twin.torch["test_loss"], rtol=1e-5)


def test_d2l_batch_norm_chapter_matches_torch():
    """From scratch and concise; the training set is one batch of 256 (the loader shuffles)."""
    train_images, train_labels = digits(256)
    test_images, test_labels = digits(256, offset=3000)
    twin = Twin(D2L, train_images=train_images[:, None], train_labels=train_labels,
                test_images=test_images[:, None], test_labels=test_labels).run_minigrad()
    twin.check("history", rtol=1e-3)
    assert len(twin.mg["history"]) == 6
    twin.check("scale_and_shift", rtol=1e-3, atol=1e-5)
    twin.check("[net[1].running_mean, net[1].running_var]", rtol=1e-3, atol=1e-6)


def test_renames_are_the_documented_ones():
    """The table is there and does what the docs say it does."""
    assert len(RENAMES) >= 5
    assert port("import torch.nn.functional as F") == "import minigrad.nn.functional as F"
    assert port("from torch import nn\nimport torch") == \
        "from minigrad import nn\nimport minigrad as mg"
    assert port("torch.utils.data.DataLoader(torch.tensor(x))") == \
        "mg.data.DataLoader(mg.tensor(x))"
    assert port("from torch.utils.data import TensorDataset") == \
        "from minigrad.data import TensorDataset"


def test_accelerator_answers_as_torch_accelerator():
    """torch.accelerator (what current scripts ask) on a machine without a GPU, as PyTorch's
    CPU build answers; with CuPy's GPU, the device is "cuda"."""
    if mg.cuda.is_available():
        assert mg.accelerator.current_accelerator() == "cuda"
        assert mg.accelerator.device_count() == 1 and mg.accelerator.is_available()
        return
    assert not torch.accelerator.is_available()
    assert mg.accelerator.is_available() == torch.accelerator.is_available()
    assert mg.accelerator.device_count() == torch.accelerator.device_count()
    assert mg.accelerator.current_accelerator() is torch.accelerator.current_accelerator()
