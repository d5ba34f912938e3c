"""RAdam: Adam whose adaptive step is switched on, and rectified, once the variance of its
running second moment is defined."""
import math

from .adam import decayed_gradient
from .optimizer import Optimizer


class RAdam(Optimizer):
    """PyTorch's RAdam. For each parameter p with gradient g (-g when maximize), at step
    t = 1, 2, ...:

        g = g + weight_decay * p                       (coupled: the default)
        p = p * (1 - lr * weight_decay)                (decoupled_weight_decay, g unchanged)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)
        r = sqrt((rho_t - 4) (rho_t - 2) rho_inf / ((rho_inf - 4) (rho_inf - 2) rho_t))
        p = p - lr * m / (1 - beta1^t) * sqrt(1 - beta2^t) / (sqrt(v) + eps) * r   (rho_t > 5)
        p = p - lr * m / (1 - beta1^t)                                             (otherwise)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize,
                                      foreach=foreach, capturable=capturable,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      differentiable=differentiable))

    non_negative = ("lr", "eps", "weight_decay")

    def _update(self, param, grad, state, group):
        xp, p, lr = param.backend.xp, param.array, group["lr"]
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(p)
            state["exp_avg_sq"] = xp.zeros_like(p)
        state["step"] += 1
        t = state["step"]
        grad = decayed_gradient(p, grad, group)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= beta1
        m += (1.0 - beta1) * grad
        v *= beta2
        v += grad * grad * (1.0 - beta2)
        bias_correction2 = 1.0 - beta2 ** t
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho_t = rho_inf - 2.0 * t * beta2 ** t / bias_correction2
        step = m / (1.0 - beta1 ** t) * lr
        if rho_t > 5.0:
            r = math.sqrt((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
                          / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
            step = step * (math.sqrt(bias_correction2) / (xp.sqrt(v) + group["eps"])) * r
        p -= step
