"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""
from .optimizer import Optimizer


class SGD(Optimizer):
    """PyTorch's SGD. For each parameter p with gradient g (-g when maximize):

        g = g + weight_decay * p
        b = g                                    (first step)
        b = momentum * b + (1 - dampening) * g   (later steps)
        g = g + momentum * b  if nesterov  else  b        (when momentum != 0)
        p = p - lr * g
    """

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    non_negative = ("lr", "momentum", "weight_decay")

    def _check_settings(self, group):
        super()._check_settings(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0, got "
                             f"momentum={group['momentum']}, dampening={group['dampening']}")

    def _update(self, param, grad, state, group):
        p, momentum, dampening = param.array, group["momentum"], group["dampening"]
        step = None   # a temporary of this update once there is one: scaled by lr in place
        if group["weight_decay"]:
            step = group["weight_decay"] * p
            step += grad   # g + weight_decay * p, the same bits (addition commutes)
            grad = step
        if momentum:
            b = state.get("momentum_buffer")
            if b is None:
                b = state["momentum_buffer"] = grad.copy()
            else:
                b *= momentum
                b += grad if dampening == 0 else (1.0 - dampening) * grad   # 1.0 * g is g
            if group["nesterov"]:
                step = momentum * b
                step += grad
            else:
                grad, step = b, None   # the buffer itself, kept for the next step
        if step is None:
            p -= group["lr"] * grad
        else:
            step *= group["lr"]
            p -= step
