"""RMSprop: steps scaled by a running root mean square of the gradient."""
from .optimizer import Optimizer


class RMSprop(Optimizer):
    """PyTorch's RMSprop. For each parameter p with gradient g (-g when maximize):

        g = g + weight_decay * p
        s = alpha * s + (1 - alpha) * g^2                  (square_avg)
        a = alpha * a + (1 - alpha) * g                    (grad_avg, when centered)
        d = sqrt(s - a^2) + eps  if centered  else  sqrt(s) + eps
        b = momentum * b + g / d;  p = p - lr * b          (momentum > 0)
        p = p - lr * g / d                                 (momentum = 0)
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    non_negative = ("lr", "alpha", "eps", "weight_decay", "momentum")

    def _update(self, param, grad, state, group):
        xp, p, alpha = param.backend.xp, param.array, group["alpha"]
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(p)
            if group["momentum"] > 0:
                state["momentum_buffer"] = xp.zeros_like(p)
            if group["centered"]:
                state["grad_avg"] = xp.zeros_like(p)
        state["step"] += 1
        if group["weight_decay"]:
            grad = grad + group["weight_decay"] * p
        s = state["square_avg"]
        s *= alpha
        s += grad * grad * (1.0 - alpha)
        if group["centered"]:
            a = state["grad_avg"]
            a *= alpha
            a += (1.0 - alpha) * grad
            d = xp.sqrt(s - a * a) + group["eps"]
        else:
            d = xp.sqrt(s) + group["eps"]
        if group["momentum"] > 0:
            b = state["momentum_buffer"]
            b *= group["momentum"]
            b += grad / d
            p -= group["lr"] * b
        else:
            p -= grad / d * group["lr"]
