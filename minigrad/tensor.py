"""Tensor: an array, its gradient, and the node that made it. Every operator calls an op."""
from . import autograd
from .backends import backend_of, get_backend, normalize_device

_FLOAT_KINDS = "fc"


def _resolve_dtype(xp, dtype):
    return None if dtype is None else xp.dtype(dtype)


class Tensor:
    """A backend array (`data`) with autograd bookkeeping.

    `requires_grad` marks tensors whose gradient is wanted; `grad` receives it after
    `backward()`. A tensor made by an op that was recorded remembers its `Node` (`grad_fn`) and
    which of the node's outputs it is.
    """

    __slots__ = ("data", "requires_grad", "grad", "_node", "_index", "_backend", "__weakref__")
    __array_ufunc__ = None  # `ndarray + tensor` defers to Tensor.__radd__

    def __init__(self, data, requires_grad=False, dtype=None, device=None):
        if isinstance(data, Tensor):
            data = data.data
        source = backend_of(data)
        backend = source if device is None else get_backend(device)
        xp = backend.xp
        if backend is not source:
            data = source.to_numpy(data)
        if dtype is None and not hasattr(data, "dtype"):
            array = xp.asarray(data)
            if array.dtype.kind == "f":
                array = array.astype(xp.float32)   # Python floats become float32
        else:
            array = xp.asarray(data, dtype=_resolve_dtype(xp, dtype))
        if requires_grad and array.dtype.kind not in _FLOAT_KINDS:
            raise TypeError(f"tensor: only floating tensors can require grad, not {array.dtype}")
        self.data = array
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self._node = None
        self._index = 0
        self._backend = backend

    @classmethod
    def _wrap(cls, array, backend):
        """A constant tensor around a backend array (no copy, no checks)."""
        t = object.__new__(cls)
        t.data, t.requires_grad, t.grad, t._node, t._index, t._backend = (
            array, False, None, None, 0, backend)
        return t

    @classmethod
    def _from_node(cls, array, node, index):
        """Output `index` of a recorded node."""
        t = cls._wrap(array, node.ctx.backend)
        t.requires_grad, t._node, t._index = True, node, index
        return t

    # ------------------------------------------------------------------ properties
    shape = property(lambda self: tuple(self.data.shape))
    ndim = property(lambda self: self.data.ndim)
    dtype = property(lambda self: self.data.dtype)
    device = property(lambda self: self._backend.device)
    backend = property(lambda self: self._backend)
    is_leaf = property(lambda self: self._node is None)
    grad_fn = property(lambda self: self._node)
    T = property(lambda self: self.transpose())

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        return int(self.data.size)

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ------------------------------------------------------------------ conversion
    def numpy(self):
        """The data as a NumPy array (a copy from the GPU; shared memory on the CPU)."""
        return self._backend.to_numpy(self.data)

    def item(self):
        if self.data.size != 1:
            raise ValueError(f"item(): only one-element tensors convert to a Python number, "
                             f"this one has shape {self.shape}")
        return self.data.reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def detach(self):
        """The same data, cut from the graph."""
        return Tensor._wrap(self.data, self._backend)

    def to(self, device=None, dtype=None):
        """A copy on `device` and/or with `dtype` (differentiable in dtype; device moves detach
        from the graph unless they are no-ops)."""
        out = self
        if dtype is not None and self._backend.xp.dtype(dtype) != self.dtype:
            out = out.astype(dtype)
        if device is not None and normalize_device(device) != self.device:
            moved = Tensor(out.data, dtype=out.dtype, device=device)
            moved.requires_grad = out.requires_grad and out.is_leaf
            out = moved
        return out

    def cpu(self):
        return self.to("cpu")

    def cuda(self):
        return self.to("cuda")

    def astype(self, dtype):
        return ops.cast(self, dtype)

    def float(self):
        return self.astype("float32")

    def double(self):
        return self.astype("float64")

    def requires_grad_(self, requires_grad=True):
        if not self.is_leaf:
            raise RuntimeError("requires_grad_: only leaf tensors can change requires_grad; use "
                               ".detach() to get a leaf")
        if requires_grad and self.dtype.kind not in _FLOAT_KINDS:
            raise TypeError(f"requires_grad_: only floating tensors can require grad, "
                            f"not {self.dtype}")
        self.requires_grad = requires_grad
        return self

    def zero_(self):
        """Fill with zeros in place (for buffers and gradients; not recorded)."""
        self.data[...] = 0
        return self

    def __dlpack__(self, *args, **kwargs):
        return self.data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()

    # ------------------------------------------------------------------ autograd
    def backward(self, grad=None, retain_graph=None, create_graph=False):
        """Accumulate the gradient of this tensor into `.grad` of the leaves behind it."""
        autograd.backward(self, grad, retain_graph=retain_graph, create_graph=create_graph)

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, other): return ops.add(self, other)
    def __radd__(self, other): return ops.add(other, self)
    def __sub__(self, other): return ops.sub(self, other)
    def __rsub__(self, other): return ops.sub(other, self)
    def __mul__(self, other): return ops.mul(self, other)
    def __rmul__(self, other): return ops.mul(other, self)
    def __truediv__(self, other): return ops.div(self, other)
    def __rtruediv__(self, other): return ops.div(other, self)
    def __matmul__(self, other): return ops.matmul(self, other)
    def __rmatmul__(self, other): return ops.matmul(other, self)
    def __pow__(self, exponent): return ops.pow(self, exponent)
    def __rpow__(self, base): return ops.pow(ops.base.lift(ops.Pow, base, self), self)
    def __neg__(self): return ops.neg(self)
    def __pos__(self): return self
    def __getitem__(self, index): return ops.getitem(self, index)

    # Comparisons are not differentiable: they give boolean tensors.
    def _compare(self, other, name):
        other = other.data if isinstance(other, Tensor) else other
        return Tensor._wrap(getattr(self._backend.xp, name)(self.data, other), self._backend)

    def __eq__(self, other): return self._compare(other, "equal")
    def __ne__(self, other): return self._compare(other, "not_equal")
    def __lt__(self, other): return self._compare(other, "less")
    def __le__(self, other): return self._compare(other, "less_equal")
    def __gt__(self, other): return self._compare(other, "greater")
    def __ge__(self, other): return self._compare(other, "greater_equal")
    __hash__ = object.__hash__

    def __bool__(self):
        if self.data.size != 1:
            raise ValueError(f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                             "use .any() or .all()")
        return bool(self.item())

    def __float__(self): return float(self.item())
    def __int__(self): return int(self.item())

    # ------------------------------------------------------------------ methods that call ops
    def exp(self): return ops.exp(self)
    def log(self): return ops.log(self)
    def sqrt(self): return ops.sqrt(self)
    def relu(self): return ops.relu(self)
    def tanh(self): return ops.tanh(self)
    def sigmoid(self): return ops.sigmoid(self)
    def abs(self): return ops.where(self.data >= 0, self, -self)
    def maximum(self, other): return ops.maximum(self, other)
    def sum(self, axis=None, keepdims=False): return ops.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return ops.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return ops.max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return -ops.max(-self, axis, keepdims)

    def var(self, axis=None, keepdims=False, correction=1):
        return ops.var(self, axis, keepdims, correction)

    def argmax(self, axis=None):
        return Tensor._wrap(self.data.argmax(axis=axis), self._backend)

    def any(self): return bool(self.data.any())
    def all(self): return bool(self.data.all())

    def reshape(self, *shape):
        return ops.reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int)
                           else shape)

    view = reshape

    def flatten(self, start_dim=0):
        return self.reshape(self.shape[:start_dim] + (-1,))

    def permute(self, *axes):
        return ops.transpose(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int)
                             else axes)

    def transpose(self, dim0=None, dim1=None):
        """Reverse all axes (no arguments) or swap two, as in PyTorch."""
        if dim0 is None:
            return ops.transpose(self)
        return self.swapaxes(dim0, dim1)

    def swapaxes(self, dim0, dim1):
        axes = list(range(self.ndim))
        axes[dim0], axes[dim1] = axes[dim1], axes[dim0]
        return ops.transpose(self, axes)

    def broadcast_to(self, shape): return ops.broadcast_to(self, shape)

    def expand(self, *shape):
        return self.broadcast_to(shape[0] if len(shape) == 1 and not isinstance(shape[0], int)
                                 else shape)

    # ------------------------------------------------------------------ display
    def __repr__(self):
        body = repr(self.numpy()).replace("array(", "tensor(", 1)
        extras = [f"device='{self.device}'"] if self.device != "cpu" else []
        if self._node is not None:
            extras.append(f"grad_fn={self._node.name}")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return body[:-1] + ", " + ", ".join(extras) + ")" if extras else body


from . import ops  # noqa: E402  (ops build on Tensor; import last to close the cycle)
