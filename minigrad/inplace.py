"""In-place operations: `x += y`, `x.add_(y)`, `x.copy_(y)`, `x[index] = y`, ... as in PyTorch.

Every one of them changes `x`'s memory (so `x.detach()` and views of `x` see the change) and
bumps its version counter (minigrad/version.py). With autograd:

- grad mode off (`with mg.no_grad():`): the numbers change and nothing is recorded. This is how
  a training loop updates its parameters: `w -= lr * w.grad` keeps `w` the same leaf.
- grad mode on, `x` a leaf that requires grad: an error, as in PyTorch (the gradient of the
  leaf's old value would have nowhere to go).
- grad mode on, `x` or the value requiring grad: the op is recorded out of place, from a copy
  of `x`'s old value, the result is written into `x`'s memory, and `x` moves to the new node:
  `x.grad_fn` is the in-place op, whose input is the old value ("rebasing" its history, as
  PyTorch does). Nodes recorded before keep the old value's place in the graph; those that
  saved the old value for backward find its version changed and raise.
- `x` a view (minigrad/views.py: `x[i]`, `x.T`, `x.reshape(...)`) recorded so: its base moves
  to the new node instead, which writes the view's new value at the view's places (PyTorch's
  CopySlices), and the view takes its new place from the base when next read. A view of a leaf
  that requires grad, one made under no_grad and one of several views of one op (chunk) are
  refused, as in PyTorch.

Each write into an array goes through `tracing.run`, so that mg.compile records it.
"""
from . import autograd, forward_ad, grad_mode, hooks, modes, ops, random, tracing, views
from .ops._promotion import category
from .ops.errors import DTypeError, ShapeError
from .ops.indexing import IndexPut, has_arrays, normalize_index, put
from .tensor import Tensor, as_tensor
from .version import bump_version, in_place
from .views import View

_ARITHMETIC = {"add_": ops.add, "sub_": ops.sub, "mul_": ops.mul, "div_": ops.div}
_UFUNC = {"add_": "add", "sub_": "subtract", "mul_": "multiply", "div_": "true_divide"}


@in_place
def arithmetic(x, name, other, alpha=1):
    """x <- x (+ - * /) other, other broadcast to x's shape; add_ and sub_ scale it by alpha."""
    value = _operand(x, name, other)
    if alpha != 1:
        value = value * alpha
    xp = x.backend.xp
    true_division = (1.0,) if name == "div_" else ()   # an integer / an integer is a float
    same_dtype = not true_division and isinstance(value, Tensor) and value.dtype == x.dtype
    _check_fits(x, name, value, x.dtype if same_dtype else
                xp.result_type(x.array, _raw(value), *true_division))
    if _records(x, name, [value]):
        new = _ARITHMETIC[name](_old_value(x), value)
        _rebase(x, new if new.dtype == x.dtype else new.astype(x.dtype))
    else:
        tracing.run(getattr(xp, _UFUNC[name]), _writable(x, name), _raw(value), out=x.array,
                    casting="unsafe")   # allowed by _check_fits
    bump_version(x)
    return x


@in_place
def assign(x, name, index, value):
    """x[index] <- value (copy_, fill_ and zero_ assign to x[...]), cast to x's dtype."""
    if name == "fill_" and isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError(f"fill_: the value must be a number or a 0-d tensor, got a tensor of "
                           f"shape {value.shape}")
    value = _operand(x, name, value)
    parts, gathers = normalize_index(x, index)
    _check_index_put_dtype(x, name, parts, value)
    if _records(x, name, [value]):
        if isinstance(value, Tensor) and value.dtype != x.dtype:
            value = value.astype(x.dtype)
        _rebase(x, IndexPut.apply(_old_value(x), value, index=parts, gathers=gathers))
    else:
        try:
            tracing.run(put, _writable(x, name), parts, _raw(value))
        except (ValueError, IndexError) as error:
            kind = ShapeError if isinstance(error, ValueError) else IndexError
            raise kind(f"{name}: cannot assign a value of shape {_shape(value)} to a tensor of "
                       f"shape {x.shape} at index {index!r}: {error}") from None
    bump_version(x)
    return x


def _check_index_put_dtype(x, name, parts, value):
    """PyTorch's index put: with an array in the index, a tensor value must have x's dtype
    (a basic index copies and casts; so does x[mask] = 0-d value, which is masked_fill)."""
    if not isinstance(value, Tensor) or value.dtype == x.dtype or not has_arrays(parts):
        return
    one_mask = len(parts) == 1 and getattr(getattr(parts[0], "dtype", None), "kind", "") == "b"
    if one_mask and value.ndim == 0:
        return
    raise DTypeError(f"{name}: index put requires the value's dtype to match the tensor's (as "
                     f"in PyTorch): got {value.dtype} for a tensor of {x.dtype} (shape "
                     f"{x.shape}); cast the value, e.g. value.to({x.dtype})")


@in_place
def clamp(x, min=None, max=None):
    """x <- min(max(x, min), max); values outside get the gradient 0, as in PyTorch."""
    if min is None and max is None:
        raise RuntimeError("clamp_: at least one of min and max must be given")
    bounds = [b for b in (min, max) if b is not None]
    if not all(isinstance(b, (int, float)) for b in bounds):
        raise TypeError(f"clamp_: min and max must be numbers, got "
                        f"{[type(b).__name__ for b in bounds]}")
    xp = x.backend.xp
    _check_fits(x, "clamp_", bounds[0], xp.result_type(x.array, *bounds))
    if _records(x, "clamp_", []):
        new = _old_value(x)
        if min is not None:
            new = ops.where(new < min, min, new)
        if max is not None:
            new = ops.where(new > max, max, new)
        _rebase(x, new)
    else:
        tracing.run(xp.clip, _writable(x, "clamp_"), min, max, out=x.array)
    bump_version(x)
    return x


def apply(x, name, op, *args, **kwargs):
    """x <- op(x, *args), for the in-place twins of ops (exp_, sqrt_, pow_, sigmoid_, ...): the
    result computed out of place, checked to fit x's shape and dtype, then written into x's
    memory (recorded, as above, when autograd follows it)."""
    values = [a for a in args if isinstance(a, Tensor)]
    if _records(x, name, values):
        new = op(_old_value(x), *args, **kwargs)
        _check_fits(x, name, new, new.dtype)
        _rebase(x, new if new.dtype == x.dtype else new.astype(x.dtype))
    else:
        with grad_mode.switched_to(False):
            new = op(x.detach(), *args, **kwargs)
        _check_fits(x, name, new, new.dtype)
        tracing.run(put, _writable(x, name), Ellipsis, new.array)
    bump_version(x)
    return x


def detach(x):
    """x cut from the graph in place (detach_): a leaf that does not require grad."""
    if type(x) is View:
        raise RuntimeError(f"detach_: can't detach views in-place (the tensor of shape {x.shape} "
                           "views another's memory); use detach() for a new tensor instead")
    x.requires_grad, x._node, x._index = False, None, 0
    return x


def _records(x, name, values):
    """Whether this in-place change goes on the tape; raises where PyTorch would refuse."""
    if x._version_counter.inference and not grad_mode.is_inference_mode_enabled():
        raise RuntimeError(
            f"{name}: an in-place update to an inference tensor (shape {x.shape}, made in "
            "inference_mode) outside inference_mode is not allowed; clone it to get a normal "
            "tensor first")
    if modes.open_levels and forward_ad._state.levels:
        forward_ad.refuse_in_place(name, x, values)
    if not autograd.is_grad_enabled():
        return False
    if x.requires_grad and x._node is None:
        raise RuntimeError(
            f"{name}: a leaf Variable that requires grad is being used in an in-place operation "
            f"(a tensor of shape {x.shape}). Change it under `with mg.no_grad():`, as optimizers "
            "do, or change a copy")
    if not (x.requires_grad or any(isinstance(v, Tensor) and v.requires_grad for v in values)):
        return False
    if type(x) is View:
        refused = views.refusal(x, name)
        if refused is not None:
            raise RuntimeError(refused)
    return True


def _old_value(x):
    """x's value before the change, in memory of its own, at x's place in the graph."""
    old = Tensor.from_array(tracing.run(type(x.array).copy, x.array), x.backend)
    old.requires_grad, old._node, old._index = x.requires_grad, x._node, x._index
    return old


def _rebase(x, new):
    """x takes new's value (into x's own memory) and new's place in the graph. A view's base
    does that instead, with `new` at the view's places (x follows when next read: views.py)."""
    if type(x) is View:
        _writable(x, "in-place")   # (refuses a broadcast view)
        _rebase(x._base, _copy_slices(x, new))
        return
    tracing.run(put, _writable(x, "in-place"), Ellipsis, new.array)
    retained = hooks.forget_retained(x)
    x.requires_grad, x._node, x._index = new.requires_grad, new._node, new._index
    if retained:   # retain_grad follows the tensor to its new version, as in PyTorch
        hooks.retain_grad(x)


def _copy_slices(view, new):
    """The value of `view`'s base with `new` written where the view lies, recorded as an index
    put into the base (PyTorch's CopySlices): the base's gradient there goes to `new`, the rest
    to the base's old value (an alias: `base` itself moves to the new node)."""
    base = view._base
    if base.ndim == 0:   # the view is all of it
        return ops.reshape(new, ())
    places = base.backend.xp.unravel_index(views.positions(view), base.shape)
    return IndexPut.apply(base._alias(), new, index=places, gathers=True)


def _writable(x, name):
    """x's array, ready to be written: an op's output that views its input's memory comes
    read-only from Op.apply (the view forward got), and is made writable here, as the memory
    it views is; a broadcast view, whose elements share memory, cannot be written."""
    data = x.array
    if not getattr(data.flags, "writeable", True):
        if any(step == 0 and n > 1 for step, n in zip(data.strides, data.shape, strict=True)):
            raise RuntimeError(f"{name}: more than one element of the tensor (shape {x.shape}) "
                               "refers to a single memory location (it is a broadcast view); "
                               "change a copy instead")
        data.flags.writeable = True
    return data


def _operand(x, name, value):
    """`value` as a tensor on x's device, or a number as it is."""
    if isinstance(value, (bool, int, float)):
        return value
    if not isinstance(value, Tensor):
        value = as_tensor(value, device=x.device)
    if value.device != x.device:
        raise RuntimeError(f"{name}: the value is on {value.device} but the tensor (shape "
                           f"{x.shape}) is on {x.device}")
    return value


def _check_fits(x, name, value, result_dtype):
    """The result has x's shape and a dtype of x's category or a lower one (PyTorch's rule: an
    integer tensor cannot take a float result in place, but uint8 takes an int16 one)."""
    xp = x.backend.xp
    if category(result_dtype) > category(x.dtype):
        raise RuntimeError(f"{name}: result type {result_dtype} can't be cast to the tensor's "
                           f"dtype {x.dtype}")
    if _shape(value) in (x.shape, ()):   # the common cases, decided without NumPy's rule
        return
    try:
        fits = xp.broadcast_shapes(x.shape, _shape(value)) == x.shape
    except ValueError:
        fits = False
    if not fits:
        raise RuntimeError(f"{name}: a value of shape {_shape(value)} does not broadcast to the "
                           f"tensor's shape {x.shape}")


def _raw(value):
    return value.array if isinstance(value, Tensor) else value


def _shape(value):
    return value.shape if isinstance(value, Tensor) else ()


class InPlaceMethods:
    """Tensor's methods that write into the tensor (attached by tensor_methods.attach)."""

    # ------------------------------------------------------------------ arithmetic and assignment
    def add_(self, other, alpha=1): return arithmetic(self, "add_", other, alpha)
    def sub_(self, other, alpha=1): return arithmetic(self, "sub_", other, alpha)
    def mul_(self, other): return arithmetic(self, "mul_", other)
    def div_(self, other): return arithmetic(self, "div_", other)
    def copy_(self, src): return assign(self, "copy_", Ellipsis, src)
    def fill_(self, value): return assign(self, "fill_", Ellipsis, value)
    def zero_(self): return assign(self, "zero_", Ellipsis, 0)
    def clamp_(self, min=None, max=None): return clamp(self, min, max)
    def __setitem__(self, index, value): assign(self, "setitem", index, value)

    # ------------------------------------------------------------------ random (random.py)
    def normal_(self, mean=0.0, std=1.0, *, generator=None):
        """Fill with samples of N(mean, std^2), drawn on the CPU from `generator`."""
        draws = random.numpy_generator(generator, "normal_").normal(mean, std, self.shape)
        return assign(self, "normal_", Ellipsis, draws)

    def uniform_(self, a=0.0, b=1.0, *, generator=None):   # PyTorch names them from, to
        """Fill with samples of U(a, b), drawn on the CPU from `generator`."""
        draws = random.numpy_generator(generator, "uniform_").uniform(a, b, self.shape)
        return assign(self, "uniform_", Ellipsis, draws)

    def bernoulli_(self, p=0.5, *, generator=None):
        """Fill with 1 with probability p (a number or a tensor broadcast to this one), else 0."""
        p = p.numpy(force=True) if isinstance(p, Tensor) else p
        draws = random.bernoulli_draws("bernoulli_", p, self.shape, generator)
        return assign(self, "bernoulli_", Ellipsis, draws)

    def __iadd__(self, other): return self.add_(other)
    def __isub__(self, other): return self.sub_(other)
    def __imul__(self, other): return self.mul_(other)
    def __itruediv__(self, other): return self.div_(other)

    # the in-place twins of ops: the op out of place, written back (apply)
    def pow_(self, exponent): return apply(self, "pow_", ops.pow, exponent)
    def exp_(self): return apply(self, "exp_", ops.exp)
    def log_(self): return apply(self, "log_", ops.log)
    def log2_(self): return apply(self, "log2_", ops.log2)
    def log10_(self): return apply(self, "log10_", ops.log10)
    def log1p_(self): return apply(self, "log1p_", ops.log1p)
    def expm1_(self): return apply(self, "expm1_", ops.expm1)
    def sqrt_(self): return apply(self, "sqrt_", ops.sqrt)
    def rsqrt_(self): return apply(self, "rsqrt_", ops.rsqrt)
    def square_(self): return apply(self, "square_", ops.square)
    def reciprocal_(self): return apply(self, "reciprocal_", ops.reciprocal)
    def abs_(self): return apply(self, "abs_", ops.abs)
    def neg_(self): return apply(self, "neg_", ops.neg)
    def sign_(self): return apply(self, "sign_", ops.sign)
    def sin_(self): return apply(self, "sin_", ops.sin)
    def cos_(self): return apply(self, "cos_", ops.cos)
    def tanh_(self): return apply(self, "tanh_", ops.tanh)
    def sigmoid_(self): return apply(self, "sigmoid_", ops.sigmoid)
    def relu_(self): return apply(self, "relu_", ops.relu)
    def floor_(self): return apply(self, "floor_", ops.floor)
    def ceil_(self): return apply(self, "ceil_", ops.ceil)
    def round_(self, decimals=0): return apply(self, "round_", ops.round, decimals)
    def masked_fill_(self, mask, value):
        return apply(self, "masked_fill_", ops.masked_fill, mask, value)
    def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
        return apply(self, "scatter_", ops.scatter, dim, index, src, value,
                             reduce=reduce)
    def scatter_add_(self, dim, index, src):
        return apply(self, "scatter_add_", ops.scatter_add, dim, index, src)
    def index_add_(self, dim, index, source, *, alpha=1):
        return apply(self, "index_add_", ops.index_add, dim, index, source, alpha=alpha)
    def detach_(self): return detach(self)
