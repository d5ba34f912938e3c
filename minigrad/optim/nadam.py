"""NAdam: Adam with Nesterov momentum, its momentum warmed up by `momentum_decay`."""
from .adam import decayed_gradient
from .optimizer import Optimizer


class NAdam(Optimizer):
    """PyTorch's NAdam. For each parameter p with gradient g (-g when maximize), at step
    t = 1, 2, ...:

        g = g + weight_decay * p                       (coupled: the default)
        p = p * (1 - lr * weight_decay)                (decoupled_weight_decay, g unchanged)
        mu_t = beta1 * (1 - 0.96^(t * momentum_decay) / 2)
        P = P * mu_t                                   (mu_product, the product of mu_1..mu_t)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        d = sqrt(v / (1 - beta2^t)) + eps
        p = p - lr * (1 - mu_t) / (1 - P) * g / d - lr * mu_(t+1) / (1 - P * mu_(t+1)) * m / d
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    non_negative = ("lr", "eps", "weight_decay", "momentum_decay")
    scalar_state = ("step", "mu_product")

    def _update(self, param, grad, state, group):
        xp, p, lr = param.backend.xp, param.array, group["lr"]
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["mu_product"] = 1.0
            state["exp_avg"] = xp.zeros_like(p)
            state["exp_avg_sq"] = xp.zeros_like(p)
        state["step"] += 1
        t = state["step"]
        grad = decayed_gradient(p, grad, group)
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (t * group["momentum_decay"]))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * group["momentum_decay"]))
        state["mu_product"] *= mu
        product = state["mu_product"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m *= beta1
        m += (1.0 - beta1) * grad
        v *= beta2
        v += grad * grad * (1.0 - beta2)
        d = xp.sqrt(v / (1.0 - beta2 ** t)) + group["eps"]
        p -= grad / d * (lr * (1.0 - mu) / (1.0 - product))
        p -= m / d * (lr * mu_next / (1.0 - product * mu_next))

