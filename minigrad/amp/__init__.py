"""`mg.amp`: mixed precision, as torch.amp: `autocast` runs the products in bfloat16 (CPU) or
float16 (GPU) and keeps the losses in float32 (autocast_mode.py); `GradScaler` scales the loss
so float16 gradients neither vanish nor overflow unnoticed (grad_scaler.py); `mg.cuda.amp`
holds the older spellings (cuda_amp.py)."""
from . import cuda_amp
from .autocast_mode import autocast, float32_inputs, get_autocast_dtype, is_autocast_enabled
from .grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "float32_inputs", "get_autocast_dtype",
           "is_autocast_enabled"]
