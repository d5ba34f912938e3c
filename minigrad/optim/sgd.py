"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""
from .optimizer import Optimizer


class SGD(Optimizer):
    """PyTorch's SGD. For each parameter p with gradient g:

        d = g + weight_decay * p
        b = d                                    (first step)
        b = momentum * b + (1 - dampening) * d   (later steps)
        d = d + momentum * b  if nesterov  else  b        (when momentum != 0)
        p = p - lr * d
    """

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0,
                 nesterov=False):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov))

    non_negative = ("lr", "momentum", "weight_decay")

    def _check_settings(self, group):
        super()._check_settings(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0, got "
                             f"momentum={group['momentum']}, dampening={group['dampening']}")

    def _update(self, param, grad, state, group):
        xp = param.backend.xp
        first, second = self._work_arrays(param)
        momentum = group["momentum"]
        d = grad
        if group["weight_decay"]:
            d = xp.multiply(param.array, group["weight_decay"], out=first)
            d += grad
        if momentum:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = d.copy()
            else:
                buf *= momentum
                if group["dampening"]:
                    buf += xp.multiply(d, 1.0 - group["dampening"], out=second)
                else:
                    buf += d
            if group["nesterov"]:
                d = xp.add(d, xp.multiply(buf, momentum, out=second), out=second)
            else:
                d = buf
        param.array += xp.multiply(d, -group["lr"], out=second)
