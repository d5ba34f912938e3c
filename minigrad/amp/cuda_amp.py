"""`mg.cuda.amp`: PyTorch's older spellings, `torch.cuda.amp.autocast(...)` and
`torch.cuda.amp.GradScaler(...)`, deprecated there for `torch.amp`'s with device "cuda". They
warn as PyTorch's do and are the "cuda" forms of mg.amp's (which, without a GPU, pass through)."""
import warnings

from . import autocast_mode, grad_scaler


class autocast(autocast_mode.autocast):  # noqa: N801  (PyTorch's name)
    def __init__(self, enabled=True, dtype=autocast_mode.float16, cache_enabled=True):
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", dtype, enabled, cache_enabled)


class GradScaler(grad_scaler.GradScaler):
    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval,
                         enabled)
