"""Adam (and AMSGrad)."""
import math

from .optimizer import Optimizer


class Adam(Optimizer):
    """PyTorch's Adam. For each parameter p with gradient g, at step t = 1, 2, ...:

        g = g + weight_decay * p
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        v_max = max(v_max, v)                          (amsgrad; then v_max replaces v below)
        p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad))

    def _check_settings(self, group):
        for key in ("lr", "eps", "weight_decay"):
            if group[key] < 0:
                raise ValueError(f"Adam: {key} must be >= 0, not {group[key]}")
        if len(group["betas"]) != 2 or not all(0.0 <= b < 1.0 for b in group["betas"]):
            raise ValueError(f"Adam: betas must be two numbers in [0, 1), not {group['betas']}")

    def _update(self, param, grad, state, group):
        xp = param.backend.xp
        first, second = self._work_arrays(param)
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(param.data)
            state["exp_avg_sq"] = xp.zeros_like(param.data)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = xp.zeros_like(param.data)
        state["step"] += 1
        step = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        if group["weight_decay"]:
            grad = xp.add(grad, xp.multiply(param.data, group["weight_decay"], out=first),
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
        param.data += update
