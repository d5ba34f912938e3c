"""Adagrad: steps scaled by the root of each coordinate's summed squared gradients."""
from .optimizer import Optimizer


class Adagrad(Optimizer):
    """PyTorch's Adagrad. For each parameter p with gradient g (-g when maximize), at step
    t = 1, 2, ...:

        g = g + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g^2                          (sum, starting at initial_accumulator_value)
        p = p - clr * g / (sqrt(s) + eps)
    """

    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10, foreach=None, *, maximize=False,
                 differentiable=False, fused=None):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable, fused=fused))

    non_negative = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")

    def _update(self, param, grad, state, group):
        p = param.array
        if not state:
            state["step"] = 0
            state["sum"] = param.backend.xp.full_like(p, group["initial_accumulator_value"])
        state["step"] += 1
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * p
        clr = group["lr"] / (1.0 + (state["step"] - 1) * group["lr_decay"])
        s = state["sum"]
        s += grad * grad
        p -= grad / (param.backend.xp.sqrt(s) + group["eps"]) * clr
