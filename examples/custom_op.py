"""Write your own op: softplus as a new minigrad primitive (the code of docs/new-op.md).

    python examples/custom_op.py [--device cpu|cuda]

Prints the op's values and gradients, a comparison with the naive formula, and the results of
gradcheck (first derivatives) and gradgradcheck (second derivatives) in float64.
"""
import argparse

import minigrad as mg


class Softplus(mg.ops.Op):
    """softplus(x) = log(1 + exp(x)), computed as max(x, 0) + log1p(exp(-|x|)) so that exp
    never overflows.  d softplus(x) / dx = sigmoid(x)."""

    @staticmethod
    def forward(ctx, x):
        xp = ctx.xp                     # numpy on the CPU, cupy on the GPU: one source for both
        ctx.save(x)                     # backward needs x
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved                # comes back as a Tensor, still connected to the graph
        return g * mg.ops.sigmoid(x)    # minigrad ops, so this is differentiable too


def softplus(x):
    return Softplus.apply(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    device = parser.parse_args().device

    x = mg.tensor([-100.0, -1.0, 0.0, 1.0, 100.0], requires_grad=True, device=device)
    y = softplus(x)
    y.sum().backward()
    print("x               ", x.detach().numpy())
    print("softplus(x)     ", y.detach().numpy())
    print("d softplus / dx ", x.grad.numpy())
    naive = mg.ops.log(1 + mg.ops.exp(x.detach()))
    print("naive log(1+e^x)", naive.numpy(), " <- exp(100) overflows float32")

    mg.manual_seed(0)
    x64 = mg.randn(3, 4, dtype="float64", requires_grad=True, device=device)
    print("gradcheck       ", mg.gradcheck(softplus, x64))
    print("gradgradcheck   ", mg.gradgradcheck(softplus, x64))


if __name__ == "__main__":
    import cli  # examples/cli.py: expected errors as one line, not a traceback
    cli.run(main)
