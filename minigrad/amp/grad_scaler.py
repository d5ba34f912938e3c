"""`mg.amp.GradScaler`: dynamic loss scaling for float16 training, as torch.amp.GradScaler.

float16 stops at 65504 and rounds gradients under 6e-8 to zero. The scaler multiplies the loss
by a large `scale` before backward, so small gradients survive in float16, and divides the
gradients by it before the step. A step whose gradients hold an inf or a NaN (the scale was too
large: something overflowed) is skipped, never applied:

    scaler.scale(loss).backward()   loss * scale, backward of that
    scaler.step(optimizer)          unscale_ (grads / scale; inf or NaN found?) and the step,
                                    unless an inf or NaN was found
    scaler.update()                 scale * backoff_factor after a skipped step, scale *
                                    growth_factor after growth_interval steps in a row

The scale is a float32 number, and the gradients are unscaled in their own dtype (float16
gradients are refused, as in PyTorch: keep the parameters in float32 under autocast). As in
PyTorch, `GradScaler()` means device "cuda", and a "cuda" scaler without a GPU warns and passes
through: `scale` returns the outputs as they are and `step` is `optimizer.step()`.
"""
import warnings

import numpy

from .. import version
from ..cuda import is_available as cuda_available
from ..tensor import Tensor, as_tensor

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"   # an optimizer's stage in a step


class GradScaler:
    """Loss scaling with PyTorch's arguments, defaults, methods and state dict."""

    def __init__(self, device="cuda", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        self._device, self._enabled = device, enabled
        if device == "cuda" and enabled and not cuda_available():
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  "
                          "Disabling.", stacklevel=2)
            self._enabled = False
        if not self._enabled:
            return
        if growth_factor <= 1.0:
            raise AssertionError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise AssertionError("The backoff factor must be < 1.0.")
        self._scale = None   # a float32 number, set by the first scale() as in PyTorch
        self._init_scale, self._growth_tracker = init_scale, 0
        self._growth_factor, self._backoff_factor = growth_factor, backoff_factor
        self._growth_interval = growth_interval
        self._per_optimizer = {}   # id(optimizer) -> {"stage", "found_inf_per_device"}

    def scale(self, outputs):
        """outputs (a tensor, or nested lists and tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = numpy.float32(self._init_scale)
        if isinstance(outputs, Tensor):
            return outputs * as_tensor(self._scale, device=outputs.device)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(out) for out in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer):
        """Divide the optimizer's gradients by the scale, in place, noting whether any is inf
        or NaN; once per optimizer between updates (before clipping gradients, say)."""
        if not self._enabled:
            return
        self._check_scaled("unscale_")
        state = self._state(optimizer)
        if state["stage"] is _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the "
                               "last update().")
        if state["stage"] is _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = numpy.float32(1.0 / numpy.float64(self._scale))   # as PyTorch: in float64
        found = state["found_inf_per_device"]
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.dtype == numpy.float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                grad, xp = p.grad, p.grad.backend.xp
                finite = bool(xp.isfinite(grad.array).all())
                found[grad.device] = found.get(grad.device, False) or not finite
                with version.IN_PLACE_LOCK:
                    xp.multiply(grad.array, inv_scale.astype(grad.dtype), out=grad.array)
                version.bump_version(grad)
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """unscale_ (unless done already) and `optimizer.step(*args, **kwargs)`, skipped when a
        gradient is inf or NaN; returns what the step returned (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        self._check_scaled("step")
        state = self._state(optimizer)
        if state["stage"] is _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _READY:
            self.unscale_(optimizer)
        if not state["found_inf_per_device"]:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        result = None
        if not any(state["found_inf_per_device"].values()):
            result = optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None):
        """The next scale: `new_scale` if given; else backoff after any skipped step, growth
        after growth_interval unskipped steps in a row. Call once per iteration, after step."""
        if not self._enabled:
            return
        self._check_scaled("update")
        if new_scale is not None:
            self._scale = numpy.float32(self._checked_new_scale(new_scale))
        else:
            found = [inf for state in self._per_optimizer.values()
                     for inf in state["found_inf_per_device"].values()]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(found):
                self._scale = numpy.float32(float(self._scale) * self._backoff_factor)
                self._growth_tracker = 0
            elif self._growth_tracker + 1 == self._growth_interval:
                grown = numpy.float32(float(self._scale) * self._growth_factor)
                self._scale = grown if numpy.isfinite(grown) else self._scale
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
        self._per_optimizer = {}

    def _checked_new_scale(self, new_scale):
        if isinstance(new_scale, float):
            return new_scale
        reason = ("new_scale should be a float or a 1-element torch.cuda.FloatTensor or "
                  "torch.FloatTensor with requires_grad=False.")
        if (not isinstance(new_scale, Tensor) or new_scale.device != self._device
                or new_scale.numel() != 1 or new_scale.requires_grad):
            raise AssertionError(reason)
        return new_scale.item()

    def _state(self, optimizer):
        return self._per_optimizer.setdefault(
            id(optimizer), {"stage": _READY, "found_inf_per_device": {}})

    def _check_scaled(self, name):
        if self._scale is None:
            raise AssertionError(f"Attempted {name} but _scale is None.  This may indicate your "
                                 "script did not use scaler.scale(loss or outputs) earlier in "
                                 "the iteration.")

    def get_scale(self):
        """The scale as a Python float (1.0 when disabled)."""
        if not self._enabled:
            return 1.0
        return float(self._init_scale if self._scale is None else self._scale)

    def get_growth_factor(self):
        return self._growth_factor

    def set_growth_factor(self, new_factor):
        self._growth_factor = new_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def set_backoff_factor(self, new_factor):
        self._backoff_factor = new_factor

    def get_growth_interval(self):
        return self._growth_interval

    def set_growth_interval(self, new_interval):
        self._growth_interval = new_interval

    def is_enabled(self):
        return self._enabled

    def state_dict(self):
        """PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval and
        _growth_tracker (unskipped steps in a row); {} when disabled."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        if self._scale is not None:
            self._scale = numpy.float32(state_dict["scale"])
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._growth_tracker = state_dict["_growth_tracker"]

