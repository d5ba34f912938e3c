"""Adam (and AMSGrad), with weight decay added to the gradient or decoupled from it (AdamW)."""
import math

from .optimizer import Optimizer


class Adam(Optimizer):
    """PyTorch's Adam. For each parameter p with gradient g (-g when maximize), at step
    t = 1, 2, ...:

        g = g + weight_decay * p                       (coupled: the default)
        p = p * (1 - lr * weight_decay)                (decoupled_weight_decay, g unchanged)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g^2
        v_max = max(v_max, v)                          (amsgrad; then v_max replaces v below)
        p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay))

    non_negative = ("lr", "eps", "weight_decay")

    def _update(self, param, grad, state, group):
        xp, p = param.backend.xp, param.array
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(p)
            state["exp_avg_sq"] = xp.zeros_like(p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = xp.zeros_like(p)
        state["step"] += 1
        t = state["step"]
        grad = decayed_gradient(p, grad, group)
        m, v = state["exp_avg"], state["exp_avg_sq"]
        # two temporaries, reused in place: the same bits as the formula's one array a step
        step = (1.0 - beta1) * grad
        m *= beta1
        m += step
        denom = grad * grad
        denom *= 1.0 - beta2
        v *= beta2
        v += denom
        if group["amsgrad"]:
            v = xp.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
        xp.sqrt(v, out=denom)
        denom /= math.sqrt(1.0 - beta2 ** t)
        denom += group["eps"]
        xp.divide(m, denom, out=step)
        step *= group["lr"] / (1.0 - beta1 ** t)
        p -= step


def decayed_gradient(p, grad, group):
    """Weight decay as the Adam family does it: with `decoupled_weight_decay` (AdamW's rule)
    `p = p * (1 - lr * weight_decay)` in place and g as it was, else `g + weight_decay * p`.
    Returns the gradient to use."""
    decay = group["weight_decay"]
    if decay and group["decoupled_weight_decay"]:
        p *= 1.0 - group["lr"] * decay
    elif decay:
        grad = grad + decay * p
    return grad


class AdamW(Adam):
    """PyTorch's AdamW: Adam with decoupled weight decay (default 0.01), which shrinks the
    parameter directly instead of adding to the gradient that the moments average:

        p = p * (1 - lr * weight_decay),  then the Adam step with g unchanged.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize, foreach=foreach,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
