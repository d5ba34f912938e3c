"""The tape of a small computation (docs/tour.md as a script): a linear layer, batch norm as
normalize * gamma + beta, and a squared-error loss.

    python examples/tape_tour.py [--out runs/tape_tour/graph.svg]

Prints the recorded tape (a Wengert list), the order in which backward visits it, the reverse
walk step by step (mg.viz.trace_backward: the gradient each node receives and sends to each
input) and the gradients, then draws the graph with mg.viz: an SVG drawn by minigrad itself (no
Graphviz needed), a PNG or PDF through matplotlib, or the DOT text for a .dot path. The boxes
show each tensor's value and gradient after the backward: the trace supplies the gradients of
the op outputs, and the tape, which keeps every output of the ops it recorded, their values
(the graph itself frees them as backward goes).
"""
import argparse
import pathlib

import minigrad as mg


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n")[2])
    parser.add_argument("--out", default="runs/tape_tour/graph.svg",
                        help="the picture of the graph: .svg (drawn by minigrad), .png or .pdf "
                             "(by matplotlib), or .dot for Graphviz's text; its folder is "
                             "created if needed (default runs/tape_tour/graph.svg)")
    args = parser.parse_args()
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)

    mg.manual_seed(0)
    x = mg.randn(4, 3)
    w = mg.randn(3, 2, requires_grad=True)
    gamma = mg.ones(2, requires_grad=True)
    beta = mg.zeros(2, requires_grad=True)
    target = mg.randn(4, 2)

    with mg.autograd.record() as tape:
        h = x @ w
        y, mean, var = mg.ops.normalize(h, axes=(0,))
        out = y * gamma + beta
        loss = ((out - target) ** 2).mean()

    print("The tape, in the order it was recorded:")
    print(tape)
    print("\nBackward visits the nodes from the highest sequence number down:")
    print("  " + " <- ".join(f"{n.name}#{n.seq}" for n in sorted(tape, key=lambda n: -n.seq)))

    print("\nThe reverse walk, step by step:")
    names = {"x": x, "w": w, "gamma": gamma, "beta": beta, "target": target}
    trace = mg.viz.trace_backward(loss, names=names)
    print(f"\nloss = {loss.item():.6f}")
    for name, leaf in (("w", w), ("gamma", gamma), ("beta", beta)):
        print(f"d loss / d {name}:\n{leaf.grad.numpy()}")

    written = mg.viz.render(loss, args.out, values=True, grads=trace, names=names, tape=tape)
    print(f"\ngraph written to {written}")


if __name__ == "__main__":
    import cli  # examples/cli.py: expected errors as one line, not a traceback
    cli.run(main)
