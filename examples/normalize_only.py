"""Batch norm's normalize step on its own, and the fused op with any subset of gamma / beta.

    python examples/normalize_only.py [--device cpu|cuda]

The complaint (a cuDNN forum thread): batch norm is three separable steps -- normalize, multiply
by gamma, add beta -- but the library forced all three, so "just normalize" meant passing
gamma = 1 and beta = 0 and allocating dummy memory for their gradients. In minigrad normalize is
a primitive: no gamma, no multiply, no gradient buffer for it. The fused op takes gamma and beta
separately optional too, and gives the composed result.
"""
import argparse

import numpy as np

import minigrad as mg


def gradients_allocated(leaves):
    """'name (bytes)' for every leaf that received a gradient."""
    return ", ".join(f"{name} ({leaf.grad.array.nbytes} B)" for name, leaf in leaves.items()
                     if leaf is not None and leaf.grad is not None)


def run(batch_norm, x_data, g_data, use_gamma, use_beta, device):
    """Forward + backward of one batch norm; returns (y, gradients by leaf name, tape length,
    leaves)."""
    x = mg.tensor(x_data, requires_grad=True, device=device)
    gamma = mg.tensor(np.linspace(0.5, 2.0, x_data.shape[1]), dtype="float32",
                      requires_grad=True, device=device) if use_gamma else None
    beta = mg.tensor(np.linspace(-1.0, 1.0, x_data.shape[1]), dtype="float32",
                     requires_grad=True, device=device) if use_beta else None
    with mg.autograd.record() as tape:
        y, _, _ = batch_norm(x, gamma, beta, axis=1)
    (y * mg.tensor(g_data, device=device)).sum().backward()
    leaves = {"x": x, "gamma": gamma, "beta": beta}
    grads = {k: v.grad.numpy() for k, v in leaves.items() if v is not None}
    return y.detach().numpy(), grads, len(tape), leaves


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    device = parser.parse_args().device

    rng = np.random.default_rng(0)
    x_data = (rng.standard_normal((8, 4, 5, 5)) * 3 + 10).astype(np.float32)   # NCHW
    g_data = rng.standard_normal(x_data.shape).astype(np.float32)

    print("1. normalize alone: y, mean, var = mg.ops.normalize(x, axes=(0, 2, 3))")
    x = mg.tensor(x_data, requires_grad=True, device=device)
    with mg.autograd.record() as tape:
        y, mean, var = mg.ops.normalize(x, axes=(0, 2, 3))
    (y * mg.tensor(g_data, device=device)).sum().backward()
    print("   tape:", str(tape).replace("\n", "\n         "))
    print("   per-channel mean of y:", y.detach().numpy().mean(axis=(0, 2, 3)).round(6) + 0.0)
    print("   per-channel var of y: ", y.detach().numpy().var(axis=(0, 2, 3)).round(4))
    print("   statistics require grad:", mean.requires_grad, var.requires_grad)
    print("   gradients allocated:", gradients_allocated({"x": x}),
          "-- there is no gamma or beta, so nothing else")

    print("\n2. fused_batch_norm (one op) against normalize -> mul -> add, for every subset;")
    print("   'composed' and 'fused' count the tape nodes each one records")
    print(f"   {'gamma':<7}{'beta':<7}{'composed':<10}{'fused':<8}{'max |y diff|':<14}"
          f"{'max |grad diff|':<17}gradients allocated (fused)")
    for use_gamma in (False, True):
        for use_beta in (False, True):
            y_c, grads_c, nodes_c, _ = run(mg.ops.composed_batch_norm, x_data, g_data,
                                           use_gamma, use_beta, device)
            y_f, grads_f, nodes_f, leaves = run(mg.ops.fused_batch_norm, x_data, g_data,
                                                use_gamma, use_beta, device)
            assert grads_c.keys() == grads_f.keys()
            dy = np.abs(y_c - y_f).max()
            dgrad = max(np.abs(grads_c[k] - grads_f[k]).max() for k in grads_c)
            print(f"   {'yes' if use_gamma else '-':<7}{'yes' if use_beta else '-':<7}"
                  f"{nodes_c:<10}{nodes_f:<8}{dy:<14.2e}{dgrad:<17.2e}"
                  f"{gradients_allocated(leaves)}")


if __name__ == "__main__":
    import cli  # examples/cli.py: expected errors as one line, not a traceback
    cli.run(main)
