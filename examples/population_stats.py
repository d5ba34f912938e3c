"""Precise batch norm: exact population statistics against running averages, on MNIST.

    python examples/population_stats.py [--subset 2000] [--epochs 1] [--device cpu|cuda]
                                        [--data FOLDER]

The complaint (a Knet.jl issue): at test time batch norm wants the mean and variance of its
input over the whole training set, but the layers keep only running averages of batch
statistics -- an exponential average that still remembers its initial (0, 1) and the statistics
of weights that training has since changed. Computing the real averages meant accumulating them
by hand. In minigrad it is one call:

    mg.nn.utils.recompute_batchnorm_stats(model, batches)

which resets the running statistics and averages them exactly over `batches` with today's
weights. This script trains a small LeNet-style network with BatchNorm2d and BatchNorm1d and, at
a few points during training, evaluates the test set twice: with the running averages, and with
precise statistics recomputed over training images (the first 10000 by default: an exact average
over a large sample is what "precise BN" uses in practice; --stat-images 60000 takes them all).

Data: mg.data.MNIST from --data, else $MINIGRAD_DATA, else ~/.cache/minigrad (the folder with the
files or its parent; downloaded if absent).
"""
import argparse
import copy
import time

import numpy as np

import minigrad as mg

nn = mg.nn
F = mg.nn.functional


def lenet_bn():
    return nn.Sequential(
        nn.Conv2d(1, 8, 5), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),      # 8 x 12 x 12
        nn.Conv2d(8, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),    # 16 x 4 x 4
        nn.Flatten(), nn.Linear(256, 64), nn.BatchNorm1d(64), nn.ReLU(),
        nn.Linear(64, 10))


def accuracy(model, loader):
    model.eval()
    correct = total = 0
    with mg.no_grad():
        for images, labels in loader:
            correct += int((model(images).numpy().argmax(axis=1) == labels.numpy()).sum())
            total += labels.shape[0]
    model.train()
    return correct / total


def compare(model, train_eval, test):
    """Test accuracy with running averages and with precise statistics (on a copy, so training
    goes on with its own running averages), and how far apart the two sets of means are."""
    precise = mg.nn.utils.recompute_batchnorm_stats(copy.deepcopy(model), train_eval)
    layers = [(a, b) for a, b in zip(model.modules(), precise.modules(), strict=True)
              if isinstance(a, (nn.BatchNorm1d, nn.BatchNorm2d))]
    gap = max(float(np.abs(a.running_mean.numpy() - b.running_mean.numpy()).max())
              for a, b in layers)
    return accuracy(model, test), accuracy(precise, test), gap


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subset", type=int, default=None,
                        help="use only the first N training and N test images (default: all)")
    parser.add_argument("--stat-images", type=int, default=10000,
                        help="training images to average the precise statistics over")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--data", default=None,
                        help="the MNIST folder, or its parent with the files in mnist/ "
                             "(default: $MINIGRAD_DATA, else ~/.cache/minigrad)")
    args = parser.parse_args()
    for name in ("subset", "stat_images", "epochs", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got "
                         f"{getattr(args, name)}")

    root = mg.data.mnist.resolve_root(args.data or mg.data.mnist.data_folder())
    print(f"MNIST from {root}", flush=True)
    train_set, test_set = mg.data.MNIST(root, train=True), mg.data.MNIST(root, train=False)
    n_train, n_test = len(train_set), len(test_set)
    if args.subset:
        n_train, n_test = min(args.subset, n_train), min(args.subset, n_test)
        train_set = mg.data.TensorDataset(train_set.images[:n_train], train_set.labels[:n_train])
        test_set = mg.data.TensorDataset(test_set.images[:n_test], test_set.labels[:n_test])
    loader = mg.data.DataLoader(train_set, args.batch_size, shuffle=True, seed=0,
                                device=args.device)
    n_stats = min(args.stat_images, n_train)
    stat_set = mg.data.TensorDataset(*(a[:n_stats] for a in train_set.arrays()))
    train_eval = mg.data.DataLoader(stat_set, 200, device=args.device)   # for the statistics
    test = mg.data.DataLoader(test_set, 200, device=args.device)

    mg.manual_seed(0)
    model = lenet_bn().to(args.device)
    optimizer = mg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    total_steps = args.epochs * len(loader)
    checkpoints = sorted({s for s in (1, 3, 10, 100) if s < total_steps} | {total_steps})

    print(f"MNIST: {n_train} training / {n_test} test images, batch {args.batch_size}, "
          f"BatchNorm momentum 0.1, {total_steps} SGD steps; precise statistics over "
          f"{n_stats} training images")
    print(f"{'step':>6}  {'test acc, running averages':>27}  {'test acc, precise BN':>21}  "
          f"{'max |running mean - population mean|':>37}")
    step, start = 0, time.time()
    for _ in range(args.epochs):
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step in checkpoints:
                running, precise, gap = compare(model, train_eval, test)
                print(f"{step:>6}  {running:>27.1%}  {precise:>21.1%}  {gap:>37.4f}")
    print(f"({time.time() - start:.1f} s)")


if __name__ == "__main__":
    import cli  # examples/cli.py: expected errors as one line, not a traceback
    cli.run(main)
