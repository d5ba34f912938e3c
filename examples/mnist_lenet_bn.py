"""LeNet-5 with batch normalization on MNIST: train, evaluate both BN modes, checkpoint, plot.

    MINIGRAD_DATA=../shared/data python examples/mnist_lenet_bn.py            # 3 epochs, CPU
    python examples/mnist_lenet_bn.py --bn none          # the same net without batch norm
    python examples/mnist_lenet_bn.py --device cuda      # on the GPU (needs CuPy)
    mpiexec -n 2 python examples/mnist_lenet_bn.py --distributed   # 2 processes (see below)
    python examples/mnist_lenet_bn.py --export lenet.onnx   # also write the model as ONNX
    python examples/mnist_lenet_bn.py --compile          # the training step via mg.compile

The network (BN after each convolution and each hidden linear layer):

    conv 1->6 5x5 pad 2 -> BN2d -> ReLU -> maxpool 2      (N, 6, 14, 14)
    conv 6->16 5x5      -> BN2d -> ReLU -> maxpool 2      (N, 16, 5, 5)
    flatten -> linear 400->120 -> BN1d -> ReLU -> linear 120->84 -> BN1d -> ReLU -> linear 84->10

A layer followed by BN has no bias: BN subtracts the channel mean, so a bias would cancel out
(beta takes its role). SGD with Nesterov momentum; the learning rate warms up linearly over the
first few hundred steps, then follows a cosine down to zero at the last step.

--distributed (under mpiexec; needs `pip install 'minigrad[distributed]'`, and as root
`mpiexec --allow-run-as-root --oversubscribe -n 2 ...`): the BN layers become SyncBatchNorm and
the model is wrapped in DistributedDataParallel; each of the N ranks takes batch-size / N images
of every global batch (DistributedSampler), so the steps are those of one process on the same
global batch. Every rank scores the whole test set (the same numbers); only rank 0 prints and
saves.

After every epoch the test set is scored twice: with the BN layers in eval mode (running
statistics, what a deployed model does) and in train mode (each test batch normalized with its
own statistics). The train-mode pass runs on copies of the running statistics, so it does not
disturb them. The checkpoint is reloaded into a fresh model to show it reproduces the accuracy.
--export PATH writes the trained model as an ONNX file (mg.onnx.export, batch norm in eval mode,
any batch size; needs `pip install 'minigrad[onnx]'`) and, when onnxruntime is installed, checks
that it gives minigrad's test-set outputs.

Speed on the CPU: `mg.tune_cpu()` at the start keeps matrix products on one BLAS thread (the
default; see `mg.set_num_threads`) and raises glibc's malloc thresholds so NumPy's large
temporaries are reused; it prints what is in force. --no-malloc-tuning leaves glibc's defaults.
benchmarks/README.md has the measurements behind both.
"""
import argparse
import contextlib
import math
import os
import pathlib
import sys
import time

import numpy as np

try:
    import minigrad as mg
except ImportError:   # run from a checkout without installing: the package is one folder up
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    import minigrad as mg

from minigrad import nn
from minigrad.atomic import atomic_write

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
WARMUP_STEPS = 200


def lenet5(bn="fused", nn=nn):
    """LeNet-5 with batch norm ("fused" or "composed" BN layers) or without it ("none").

    `nn` is the layer namespace: minigrad.nn, or torch.nn for the same network in PyTorch (the
    names, arguments and state_dict keys are the same; PyTorch has one kind of BN layer)."""
    if bn not in ("fused", "composed", "none"):
        raise ValueError(f"lenet5: bn must be 'fused', 'composed' or 'none', not {bn!r}")
    with_bn = bn != "none"
    choice = {"fused": bn == "fused"} if nn is mg.nn else {}

    def norm(layer, features):
        return layer(features, **choice) if with_bn else nn.Identity()

    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2, bias=not with_bn), norm(nn.BatchNorm2d, 6), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, bias=not with_bn), norm(nn.BatchNorm2d, 16), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120, bias=not with_bn), norm(nn.BatchNorm1d, 120), nn.ReLU(),
        nn.Linear(120, 84, bias=not with_bn), norm(nn.BatchNorm1d, 84), nn.ReLU(),
        nn.Linear(84, 10),
    )


def load_mnist(root, train, limit=None):
    """(images normalized with the MNIST mean and std, labels) as a TensorDataset."""
    split = mg.data.MNIST(root, train=train)
    images, labels = split.arrays()
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    images = (images - np.float32(MNIST_MEAN)) / np.float32(MNIST_STD)
    return mg.data.TensorDataset(images, labels)


def sgd(model, lr, momentum, weight_decay, optim=mg.optim):
    """SGD with Nesterov momentum; weight decay on the conv and linear weights only (decaying
    BN's gamma and beta or the biases only fights the normalization).

    `optim` is the optimizer namespace: minigrad.optim, or torch.optim for the PyTorch twin."""
    params = list(model.parameters())
    return optim.SGD([{"params": [p for p in params if p.ndim > 1],
                       "weight_decay": weight_decay},
                      {"params": [p for p in params if p.ndim == 1], "weight_decay": 0.0}],
                     lr=lr, momentum=momentum, nesterov=momentum > 0)


def warmup_cosine(optimizer, total, lr_scheduler=mg.optim.lr_scheduler):
    """A scheduler (step it after each optimizer step) that scales the optimizer's lr by a
    linear warmup over WARMUP_STEPS (shorter for short runs), then a cosine down to 0."""
    warmup = min(WARMUP_STEPS, total // 10)

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(total - warmup, 1)))

    return lr_scheduler.LambdaLR(optimizer, factor)


@contextlib.contextmanager
def kept_buffers(model):
    """Run a block and put every buffer (running statistics, batch counters) back as it was."""
    saved = [(buffer, buffer.array.copy()) for _, buffer in model.named_buffers()]
    try:
        yield
    finally:
        for buffer, data in saved:
            buffer.array[...] = data


def accuracy(model, loader, bn_mode="eval"):
    """Test accuracy in percent, with the BN layers in `bn_mode` ("eval": running statistics;
    "train": each batch normalized with its own statistics, running statistics untouched)."""
    was_training = model.training
    correct = total = 0
    with mg.no_grad(), kept_buffers(model):
        model.train(bn_mode == "train")
        for images, labels in loader:
            predicted = model(images).argmax(axis=1)
            correct += int((predicted == labels).array.sum())
            total += labels.shape[0]
    model.train(was_training)
    return 100.0 * correct / total


class Progress:
    """A tqdm bar per epoch with loss, accuracy and examples/s, or one plain line per epoch."""

    def __init__(self, epoch, epochs, steps, plain):
        self.label, self.bar = f"epoch {epoch}/{epochs}", None
        if not plain:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=steps, desc=self.label, unit="step", leave=True,
                                dynamic_ncols=True)
            except ImportError:
                pass
        self.start, self.examples, self.loss_sum, self.correct = time.perf_counter(), 0, 0.0, 0
        self.step_losses = []

    def update(self, loss, correct, batch):
        self.examples += batch
        self.loss_sum += loss * batch
        self.step_losses.append(loss)
        self.correct += correct
        if self.bar is not None:
            self.bar.update(1)
            if self.bar.n % 20 == 0 or self.bar.n == self.bar.total:
                self.bar.set_postfix_str(self.summary(), refresh=False)

    def summary(self):
        rate = self.examples / max(time.perf_counter() - self.start, 1e-9)
        return (f"loss {self.loss_sum / max(self.examples, 1):.4f}  acc "
                f"{100.0 * self.correct / max(self.examples, 1):.2f}%  {rate:,.0f} examples/s")

    def close(self):
        seconds = time.perf_counter() - self.start
        if self.bar is not None:
            self.bar.set_postfix_str(self.summary())
            self.bar.close()
        else:
            print(f"{self.label}: {self.summary()}", flush=True)
        return seconds


def training_step(model, optimizer):
    """step(images, labels) -> (logits, loss): forward, backward and the optimizer's step."""
    def step(images, labels):
        logits = model(images)
        loss = mg.nn.functional.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return logits, loss
    return step


def train_epoch(model, step, loader, scheduler, progress):
    """One pass over `loader` with `step` (training_step, perhaps compiled), stepping the lr
    `scheduler` after every batch (the optimizer reads its lr at every step, compiled or not);
    returns the mean training loss."""
    model.train()
    for images, labels in loader:
        logits, loss = step(images, labels)
        scheduler.step()
        correct = int((logits.array.argmax(axis=1) == labels.array).sum())
        progress.update(loss.item(), correct, labels.shape[0])
    return progress.loss_sum / max(progress.examples, 1)


def plot_curves(history, path, title):
    """Training loss per step (and its running mean) and test accuracy per epoch, as a PNG;
    False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    losses = np.asarray(history["step_losses"])
    at = np.arange(1, len(losses) + 1) * len(history["loss"]) / max(len(losses), 1)   # epochs
    window = max(1, len(losses) // 50)
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    epochs = np.arange(1, len(history["loss"]) + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(at, losses, alpha=0.3, linewidth=0.6, label="per step")
    left.plot(at[window - 1:], smooth, label=f"mean of {window} steps")
    left.set(xlabel="epoch", ylabel="training loss", yscale="log", title="loss")
    left.legend()
    for key, label in (("train_acc", "training batches (running)"),
                       ("test_eval", "test, BN eval mode"), ("test_train", "test, BN train mode")):
        right.plot(epochs, history[key], marker="o", label=label)
    right.set(xlabel="epoch", ylabel="accuracy (%)", title="accuracy", xticks=epochs)
    right.legend()
    fig.suptitle(title)
    fig.tight_layout()
    # through minigrad's atomic writer: no half-written PNG, a symlink at the name is not followed
    atomic_write(path, lambda file: fig.savefig(file, format="png", dpi=100))
    plt.close(fig)
    return True


def export_onnx(model, test_set, path):
    """Write `model` as ONNX (eval mode, any batch size) and, with onnxruntime, compare its
    outputs on the first 100 test images with minigrad's."""
    images = mg.tensor(test_set.arrays()[0][:100])
    mg.onnx.export(model.to("cpu"), images[:2], path)
    try:
        import onnxruntime
    except ImportError:
        print(f"onnx: {path} written (pip install onnxruntime to run it)")
        return
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input": images.numpy()})[0]
    model.eval()
    with mg.no_grad():
        want = model(images).numpy()
    print(f"onnx: {path} written; onnxruntime on {len(got)} test images: largest difference "
          f"from minigrad {np.abs(got - want).max():.1e}")


def join_ranks(args):
    """--distributed: join the ranks of mpiexec (only rank 0 prints from here on); the rank."""
    import minigrad.distributed as dist

    # Open MPI's blocking calls give the core up while they wait instead of spinning on it
    # (read when MPI starts, inside init_process_group; docs/distributed.md, "Speed")
    os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        raise ValueError(f"--distributed: batch size {args.batch_size} does not split evenly "
                         f"over {world} ranks")
    if rank != 0:
        sys.stdout = open(os.devnull, "w")
    print(f"distributed: {world} ranks, {args.batch_size // world} images per rank per step "
          "(the progress line counts rank 0's images)")
    return rank


def data_parallel(model, train_set, args):
    """--distributed: (the model with SyncBatchNorm, wrapped in DDP; this rank's training
    loader; its sampler). Each rank gets batch_size / world_size images of every global batch."""
    sampler = mg.data.DistributedSampler(train_set, seed=args.seed, drop_last=True)
    loader = mg.data.DataLoader(train_set, args.batch_size // sampler.num_replicas,
                                drop_last=True, device=args.device, sampler=sampler)
    model = nn.parallel.DistributedDataParallel(nn.SyncBatchNorm.convert_sync_batchnorm(model))
    return model, loader, sampler


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--epochs", type=int, default=3, help="passes over the training set (default 3)")
    add("--batch-size", type=int, default=64, help="images per step (default 64)")
    add("--lr", type=float, default=0.05, help="peak learning rate (default 0.05)")
    add("--momentum", type=float, default=0.9, help="Nesterov momentum (default 0.9)")
    add("--weight-decay", type=float, default=5e-4,
        help="on conv and linear weights, not on BN parameters and biases (default 5e-4)")
    add("--device", choices=("cpu", "cuda"), default="cpu", help="(default cpu)")
    add("--bn", choices=("fused", "composed", "none"), default="fused",
        help="batch norm as one fused op, as normalize * gamma + beta, or none (default fused)")
    add("--seed", type=int, default=0, help="weights and batch order (default 0)")
    add("--data", default=None,
        help="the MNIST folder, or its parent with the files in mnist/ (default: "
             "$MINIGRAD_DATA, else ~/.cache/minigrad); downloaded there when missing")
    add("--out", default="runs/mnist_lenet_bn",
        help="folder for the checkpoint and the PNG of the curves (default runs/mnist_lenet_bn)")
    add("--limit", type=int, default=None,
        help="use only the first N images of each split (quick runs, tests)")
    add("--plain", action="store_true", help="one line per epoch instead of a progress bar")
    add("--no-malloc-tuning", action="store_true", help="leave glibc's malloc thresholds alone")
    add("--export", metavar="PATH", default=None,
        help="also write the trained model as ONNX to PATH (needs the extra `onnx`)")
    add("--distributed", action="store_true",
        help="data-parallel over the ranks of mpiexec: SyncBatchNorm + DDP (see above)")
    add("--compile", action="store_true",
        help="run the training step through mg.compile (docs/compile.md): the same numbers")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "limit"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}"
                         + (" (0 epochs would train nothing)" if name == "epochs" else ""))
    if args.limit is not None and args.limit < args.batch_size:
        parser.error(f"--limit {args.limit} is smaller than one batch (--batch-size "
                     f"{args.batch_size}): every step uses a full batch, so there would be none")
    return args


def main(argv=None):
    args = parse_args(argv)
    mg.get_backend(args.device)   # a missing GPU fails here, before the data is read
    rank = join_ranks(args) if args.distributed else 0
    settings = mg.tune_cpu(malloc=not args.no_malloc_tuning)
    mg.manual_seed(args.seed)
    root = mg.data.mnist.resolve_root(args.data or mg.data.mnist.data_folder())
    print(f"MNIST from {root}", flush=True)
    train_set = load_mnist(root, True, args.limit)
    test_set = load_mnist(root, False, args.limit)
    train_loader = mg.data.DataLoader(train_set, args.batch_size, shuffle=True, drop_last=True,
                                      seed=args.seed, device=args.device)
    # eval mode: large batches (the answer does not depend on them); train mode: the training
    # batch size, since batch statistics are what that mode measures
    eval_loader = mg.data.DataLoader(test_set, 1000, device=args.device)
    batch_loader = mg.data.DataLoader(test_set, args.batch_size, device=args.device)

    model = lenet5(args.bn).to(args.device)
    sampler = None
    if args.distributed:
        model, train_loader, sampler = data_parallel(model, train_set, args)
    net = model.module if args.distributed else model   # what is scored and saved
    optimizer = sgd(model, args.lr, args.momentum, args.weight_decay)
    scheduler = warmup_cosine(optimizer, args.epochs * len(train_loader))
    step = training_step(model, optimizer)
    step = mg.compile(step) if args.compile else step

    print(f"minigrad LeNet-5, bn={args.bn}, device={args.device}, {len(train_set)} training / "
          f"{len(test_set)} test images, batch {args.batch_size}, {args.epochs} epochs, "
          f"{len(train_loader)} steps per epoch, seed {args.seed}")
    print("settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    history = {key: [] for key in ("loss", "step_losses", "train_acc", "test_eval", "test_train",
                                   "seconds")}
    for epoch in range(1, args.epochs + 1):
        if sampler is not None:
            sampler.set_epoch(epoch)
        progress = Progress(epoch, args.epochs, len(train_loader), args.plain or rank != 0)
        history["loss"].append(train_epoch(model, step, train_loader, scheduler, progress))
        history["step_losses"] += progress.step_losses
        history["train_acc"].append(100.0 * progress.correct / max(progress.examples, 1))
        history["seconds"].append(progress.close())
        history["test_eval"].append(accuracy(net, eval_loader, "eval"))
        line = (f"epoch {epoch}: {history['seconds'][-1]:.1f} s, test accuracy "
                f"{history['test_eval'][-1]:.2f}% (eval mode)")
        if args.bn != "none":
            history["test_train"].append(accuracy(net, batch_loader, "train"))
            line += f", {history['test_train'][-1]:.2f}% (train-mode BN)"
        print(line, flush=True)
    if args.bn != "none":
        print("why the two differ: eval mode normalizes with the running averages of the "
              "training statistics (fixed, one image at a time); train mode normalizes each test "
              f"batch of {args.batch_size} with that batch's own mean and variance, which are "
              "noisy and make every prediction depend on the other images in the batch")
    else:
        history["test_train"] = history["test_eval"]   # no BN: both modes are the same

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = out / "lenet_bn.safetensors"
    if rank == 0:
        mg.save(net.state_dict(), checkpoint)
    if args.distributed:   # rank 0 saves; every rank loads once the file is complete
        mg.distributed.barrier()
    fresh = lenet5(args.bn).to(args.device)
    fresh.load_state_dict(mg.load(checkpoint))
    reloaded = accuracy(fresh, eval_loader, "eval")
    same = "identical" if reloaded == history["test_eval"][-1] else "DIFFERENT"
    print(f"checkpoint {checkpoint}: reloaded into a fresh model, test accuracy "
          f"{reloaded:.2f}% ({same})")
    png = out / "curves.png"
    if rank != 0:
        return history
    if args.export:
        export_onnx(net, test_set, args.export)
    if plot_curves(history, png, f"minigrad LeNet-5, bn={args.bn}, batch {args.batch_size}"):
        print(f"curves: {png}")
    else:
        print("curves: matplotlib is not installed, no PNG written (pip install matplotlib)")
    return history


if __name__ == "__main__":
    import cli  # examples/cli.py: expected errors as one line, not a traceback
    cli.run(main)
