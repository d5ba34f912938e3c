"""Adam (and AMSGrad), with weight decay added to the gradient or decoupled from it (AdamW)."""
import math

from .optimizer import Optimizer


class Adam(Optimizer):
    """PyTorch's Adam. For each parameter p with gradient g, at step t = 1, 2, ...:

        g = g + weight_decay * p                       (coupled: the default)
        p = p * (1 - lr * weight_decay)                (decoupled_weight_decay, g unchanged)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        v_max = max(v_max, v)                          (amsgrad; then v_max replaces v below)
        p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, decoupled_weight_decay=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      decoupled_weight_decay=decoupled_weight_decay))

    non_negative = ("lr", "eps", "weight_decay")

    def _check_settings(self, group):
        super()._check_settings(group)
        name = type(self).__name__
        if len(group["betas"]) != 2 or not all(0.0 <= b < 1.0 for b in group["betas"]):
            raise ValueError(f"{name}: betas must be two numbers in [0, 1), not "
                             f"{group['betas']}")

    def _update(self, param, grad, state, group):
        xp = param.backend.xp
        first, second = self._work_arrays(param)
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(param.array)
            state["exp_avg_sq"] = xp.zeros_like(param.array)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = xp.zeros_like(param.array)
        state["step"] += 1
        step = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        if group["weight_decay"] and group["decoupled_weight_decay"]:
            param.array *= 1.0 - group["lr"] * group["weight_decay"]
        elif group["weight_decay"]:
            grad = xp.add(grad, xp.multiply(param.array, group["weight_decay"], out=first),
                          out=first)
        m *= beta1
        m += xp.multiply(grad, 1.0 - beta1, out=second)
        v *= beta2
        squared = xp.multiply(grad, grad, out=second)
        squared *= 1.0 - beta2
        v += squared
        if group["amsgrad"]:
            v = xp.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
        denom = xp.sqrt(v, out=second)
        denom /= math.sqrt(1.0 - beta2 ** step)
        denom += group["eps"]
        update = xp.divide(m, denom, out=second)
        update *= -group["lr"] / (1.0 - beta1 ** step)
        param.array += update


class AdamW(Adam):
    """PyTorch's AdamW: Adam with decoupled weight decay (default 0.01), which shrinks the
    parameter directly instead of adding to the gradient that the moments average:

        p = p * (1 - lr * weight_decay),  then the Adam step with g unchanged.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, decoupled_weight_decay=True)
