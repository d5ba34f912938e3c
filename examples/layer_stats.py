"""Activations and gradients per layer, over one training step of a deep tanh MLP, for three
weight scales (the diagnostic plots of Karpathy's makemore lectures, part 3).

    python examples/layer_stats.py [--out runs/layer_stats]

The net: 5 hidden layers Linear(100) -> Tanh on 30 inputs, then Linear(10), cross-entropy on a
random batch. Each Linear's weights are gain * N(0, 1) / sqrt(fan_in):

- gain 0.5: each layer shrinks its input, the activations collapse towards 0 layer by layer,
  and so do the gradients flowing back;
- gain 5/3: PyTorch's recommended gain for tanh (kaiming_normal with nonlinearity='tanh'):
  the spread of activations and of gradients stays about the same from layer to layer;
- gain 3: the pre-activations are large and some 40% of the tanh outputs sit at +-1
  ("saturated": |t| > 0.97, where tanh' is nearly 0); the gradients no longer keep one scale
  from layer to layer (here they shrink about threefold from the first layer to the last).

mg.viz.LayerStats hooks the Tanh layers (a forward hook keeps each output, a tensor hook its
gradient); the table per gain is printed and the histograms are drawn, one PNG per gain
(needs matplotlib).
"""
import argparse
import pathlib

import minigrad as mg
from minigrad import nn

GAINS = {"0.5": 0.5, "5/3": 5 / 3, "3": 3.0}
INPUTS, WIDTH, DEPTH, CLASSES, BATCH = 30, 100, 5, 10, 64


def mlp(gain, seed=0):
    """The tanh MLP with weights gain * N(0, 1) / sqrt(fan_in) and zero biases."""
    mg.manual_seed(seed)
    layers, width = [], INPUTS
    for _ in range(DEPTH):
        layers += [nn.Linear(width, WIDTH), nn.Tanh()]
        width = WIDTH
    layers.append(nn.Linear(width, CLASSES))
    model = nn.Sequential(*layers)
    with mg.no_grad():
        for layer in model:
            if isinstance(layer, nn.Linear):
                fan_in = layer.weight.shape[1]
                layer.weight.array[...] = (mg.randn(*layer.weight.shape) * gain
                                           / fan_in ** 0.5).array
                layer.bias.array[...] = 0
    return model


def batch(seed=1):
    mg.manual_seed(seed)
    return mg.randn(BATCH, INPUTS), mg.randint(0, CLASSES, (BATCH,))


def step_stats(gain):
    """LayerStats of the Tanh layers over one forward and backward at `gain`."""
    model = mlp(gain)
    x, y = batch()
    with mg.viz.LayerStats(model, kinds=(nn.Tanh,)) as stats:
        nn.functional.cross_entropy(model(x), y).backward()
    return stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/layer_stats",
                        help="folder for the PNGs (default runs/layer_stats)")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for label, gain in GAINS.items():
        stats = step_stats(gain)
        print(f"gain {label}:")
        print(stats.table())
        png = out / f"layers_gain_{label.replace('/', '_')}.png"
        if stats.plot(png):
            print(f"histograms: {png}")
        else:
            print("histograms: matplotlib is not installed, no PNG written")
        print()


if __name__ == "__main__":
    import cli  # examples/cli.py: expected errors as one line, not a traceback
    cli.run(main)
