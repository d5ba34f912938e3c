"""Moving a tensor to another device, as an op: the gradient moves back the way it came."""
from ..backends import get_backend
from .base import Op
from .tangents import linear


class ToDevice(Op):
    """x copied to `device` ("cpu" | "cuda");  dx = g copied back to x's device.
    jvp: dy = dx copied to `device`."""
    batching = "elementwise"

    @staticmethod
    def forward(ctx, x, device):
        source, target = ctx.backend, get_backend(device)
        ctx.source_device = source.device
        ctx.backend, ctx.xp = target, target.xp   # Op.apply wraps the output on ctx.backend
        return target.asarray(source.to_numpy(x))

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.source_device)

    jvp = staticmethod(linear)


def to_device(x, device):
    """x copied to `device`; differentiable (the gradient is copied back)."""
    return ToDevice.apply(x, device=device)
