"""Adadelta: steps sized by the ratio of running roots of past updates and past gradients."""
from .optimizer import Optimizer


class Adadelta(Optimizer):
    """PyTorch's Adadelta (the optimizer of pytorch/examples' MNIST). For each parameter p
    with gradient g (-g when maximize):

        g = g + weight_decay * p
        s = rho * s + (1 - rho) * g^2                      (square_avg)
        d = sqrt(u + eps) / sqrt(s + eps) * g              (u: acc_delta, the past updates)
        u = rho * u + (1 - rho) * d^2
        p = p - lr * d
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, capturable=capturable,
                                      foreach=foreach, differentiable=differentiable))

    non_negative = ("lr", "eps", "weight_decay")

    def _check_settings(self, group):
        super()._check_settings(group)
        if not 0.0 <= group["rho"] <= 1.0:
            raise ValueError(f"Adadelta: rho must be in [0, 1], not {group['rho']}")

    def _update(self, param, grad, state, group):
        xp, p, rho, eps = param.backend.xp, param.array, group["rho"], group["eps"]
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(p)
            state["acc_delta"] = xp.zeros_like(p)
        state["step"] += 1
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * p
        s, u = state["square_avg"], state["acc_delta"]
        s *= rho
        s += grad * grad * (1.0 - rho)
        d = xp.sqrt(u + eps) / xp.sqrt(s + eps) * grad
        u *= rho
        u += d * d * (1.0 - rho)
        p -= group["lr"] * d
