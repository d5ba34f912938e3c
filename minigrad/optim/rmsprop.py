"""RMSprop: steps scaled by a running root mean square of the gradient."""
from .optimizer import Optimizer


class RMSprop(Optimizer):
    """PyTorch's RMSprop. For each parameter p with gradient g:

        g = g + weight_decay * p
        s = alpha * s + (1 - alpha) * g^2                  (square_avg)
        a = alpha * a + (1 - alpha) * g                    (grad_avg, when centered)
        d = sqrt(s - a^2) + eps  if centered  else  sqrt(s) + eps
        b = momentum * b + g / d;  p = p - lr * b          (momentum > 0)
        p = p - lr * g / d                                 (momentum = 0)
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay))

    non_negative = ("lr", "alpha", "eps", "weight_decay", "momentum")

    def _update(self, param, grad, state, group):
        xp = param.backend.xp
        first, second = self._work_arrays(param)
        alpha = group["alpha"]
        if not state:
            state["step"] = 0
            state["square_avg"] = xp.zeros_like(param.array)
            if group["momentum"] > 0:
                state["momentum_buffer"] = xp.zeros_like(param.array)
            if group["centered"]:
                state["grad_avg"] = xp.zeros_like(param.array)
        state["step"] += 1
        if group["weight_decay"]:
            grad = xp.add(grad, xp.multiply(param.array, group["weight_decay"], out=first),
                          out=first)
        square_avg = state["square_avg"]
        square_avg *= alpha
        squared = xp.multiply(grad, grad, out=second)
        squared *= 1.0 - alpha
        square_avg += squared
        if group["centered"]:
            grad_avg = state["grad_avg"]
            grad_avg *= alpha
            grad_avg += xp.multiply(grad, 1.0 - alpha, out=second)
            avg = xp.multiply(grad_avg, grad_avg, out=second)
            avg = xp.subtract(square_avg, avg, out=second)
            avg = xp.sqrt(avg, out=second)
        else:
            avg = xp.sqrt(square_avg, out=second)
        avg += group["eps"]
        scaled = xp.divide(grad, avg, out=second)
        if group["momentum"] > 0:
            buf = state["momentum_buffer"]
            buf *= group["momentum"]
            buf += scaled
            scaled = xp.multiply(buf, -group["lr"], out=second)
        else:
            scaled *= -group["lr"]
        param.array += scaled
