"""Adamax: Adam with the infinity norm of past gradients in place of their root mean square."""
from .optimizer import Optimizer


class Adamax(Optimizer):
    """PyTorch's Adamax. For each parameter p with gradient g (-g when maximize), at step
    t = 1, 2, ...:

        g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g
        u = max(beta2 * u, |g| + eps)                      (exp_inf)
        p = p - lr / (1 - beta1^t) * m / u
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    non_negative = ("lr", "eps", "weight_decay")

    def _update(self, param, grad, state, group):
        xp, p = param.backend.xp, param.array
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(p)
            state["exp_inf"] = xp.zeros_like(p)
        state["step"] += 1
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * p
        m, u = state["exp_avg"], state["exp_inf"]
        m *= beta1
        m += (1.0 - beta1) * grad
        u *= beta2
        xp.maximum(u, xp.abs(grad) + group["eps"], out=u)
        p -= m / u * (group["lr"] / (1.0 - beta1 ** state["step"]))
