"""Images per second through DataLoader(num_workers=0, 1, 2) on MNIST's training set.

Two pipelines: the fast path (no transform: one np.take per batch, where workers only add the
cost of shipping the batch between processes), and a per-sample transform (each image scaled,
normalised and randomly shifted by up to 2 pixels, in Python per sample), the work worker
processes exist to take off the training loop.

    MINIGRAD_DATA=/work/shared/data python benchmarks/bench_dataloader.py [--epochs 1] [--batch 64]
"""
import argparse
import time

import numpy as np

import minigrad as mg


def augment(image):
    """Scale to [0, 1], normalise with MNIST's mean and std, shift by up to 2 pixels."""
    x = (image.astype(np.float32) / 255.0 - 0.1307) / 0.3081
    rng = np.random.default_rng()
    dy, dx = rng.integers(-2, 3, size=2)
    return np.roll(x, (int(dy), int(dx)), axis=(0, 1))


def images_per_second(dataset, batch, workers, epochs):
    loader = mg.data.DataLoader(dataset, batch, shuffle=True, seed=0, num_workers=workers,
                                persistent_workers=workers > 0)
    next(iter(loader))   # start the workers (and warm the caches) before timing
    start, seen = time.perf_counter(), 0
    for _ in range(epochs):
        for images, _ in loader:
            seen += images.shape[0]
    return seen / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    print(f"MNIST train, batch {args.batch}, {args.epochs} epoch(s), shuffled; "
          f"multiprocessing context {mg.data.worker.default_context()}")
    for name, transform in (("fast path (no transform)", None),
                            ("per-sample transform", augment)):
        dataset = mg.data.MNIST(train=True, download=False, transform=transform)
        for workers in (0, 1, 2):
            rate = images_per_second(dataset, args.batch, workers, args.epochs)
            print(f"{name:26} num_workers={workers}: {rate:10,.0f} images/s")


if __name__ == "__main__":
    main()
