"""The steps of a captured program. Each runs on `s`, the list of slots of one replay, the same
code the engine ran while tracing (an op's forward on a fresh Context, its backward formula,
a call of the engine's array code), so a replay makes the same operations in the same order
as eager mode: the same bits. Each also says which slots it reads and writes (for freeing
arrays after their last use), what identifies it (two traces of a call must agree) and how it
reads as a line of Python (`compiled.code`).
"""
import numpy

from ..ops.base import Context, _backend_array, _forward
from ..tensor import Tensor


def getter(spec):
    """A function s -> value for a value spec of Tracer.spec."""
    kind = spec[0]
    if kind == "seq" and all(p[0] in ("const", "slot") for p in spec[2]):   # the usual call
        kind, parts = spec[1], [(p[0] == "slot", p[1]) for p in spec[2]]
        return lambda s: kind([s[v] if in_slot else v for in_slot, v in parts])
    if kind == "const":
        value = spec[1]
        return lambda s: value
    if kind == "slot":
        slot = spec[1]
        return lambda s: s[slot]
    if kind == "tensor":
        slot, backend = spec[1], spec[2]
        return lambda s: Tensor.from_array(s[slot], backend)
    if kind == "seq":
        kind, parts = spec[1], [getter(p) for p in spec[2]]
        return lambda s: kind([get(s) for get in parts])
    keys, parts = [k for k, _ in spec[1]], [getter(p) for _, p in spec[1]]
    return lambda s: {k: get(s) for k, get in zip(keys, parts, strict=True)}


def slots_read(spec):
    kind = spec[0]
    if kind in ("slot", "tensor"):
        return {spec[1]}
    if kind == "seq":
        return set().union(*[slots_read(p) for p in spec[2]])
    if kind == "dict":
        return set().union(*[slots_read(p) for _, p in spec[1]])
    return set()


def identity(spec):
    """What a spec stands for, comparable between two traces: numbers, strings, tuples and
    lists of them by value, slots by number, any other object by identity (a dict, such as an
    optimizer's group, is passed by reference and read at replay; a bound method by its object
    and function)."""
    kind = spec[0]
    if kind in ("slot", "tensor"):
        return (kind, spec[1])
    if kind == "seq":
        return (kind, spec[1], tuple(identity(p) for p in spec[2]))
    if kind == "dict":
        return (kind, tuple((k, identity(p)) for k, p in spec[1]))
    value = spec[1]
    if value is None or isinstance(value, (bool, int, float, str, bytes, slice, type)):
        return ("const", type(value), value)
    if type(value) in (tuple, list):
        return ("const", type(value), tuple(identity(("const", v)) for v in value))
    owner = getattr(value, "__self__", None)
    return ("object", id(owner), id(getattr(value, "__func__", value)) if owner is not None
            else id(value))


def keyword_identity(spec):
    """identity() of the keywords of a call (a dict made for the call: by its items)."""
    if spec[0] == "const":
        return tuple((k, identity(("const", v))) for k, v in spec[1].items())
    return identity(spec)


def show(spec, names):
    """A spec as Python source, slots by their names."""
    kind = spec[0]
    if kind == "slot":
        return names[spec[1]]
    if kind == "tensor":
        return names[spec[1]]
    if kind == "seq":
        parts = [show(p, names) for p in spec[2]]
        return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})" if spec[1] is tuple \
            else f"[{', '.join(parts)}]"
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {show(p, names)}" for k, p in spec[1]) + "}"
    value = spec[1]
    if isinstance(value, Tensor):   # a parameter by its name, a tensor made in the call by shape
        return names.arrays.get(id(value.array), f"<tensor {value.shape}>")
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    return name if name and callable(value) else repr(value)


def keywords(spec, names):
    """`key=value, ...` of a dict spec (an op's attrs, a call's keywords)."""
    if spec[0] == "const":
        return [f"{k}={show(('const', v), names)}" for k, v in spec[1].items()]
    return [f"{k}={show(p, names)}" for k, p in spec[1]]


def _stored(value, backend, op):
    """An op's output as the engine keeps it (a NumPy scalar as a 0-d array)."""
    return value if value is None or type(value) is backend.xp.ndarray else _backend_array(
        value, backend, op)


class Forward:
    """`outputs = op.forward(Context, *inputs, **attrs)`, its Context kept in a slot for the
    backward formula that reads what it saved."""

    def __init__(self, op, backend, needs, inputs, attrs, outputs, context, many, kernel=None):
        self.op, self.backend, self.needs, self.inputs = op, backend, needs, inputs
        self.attrs, self.outputs, self.context, self.many = attrs, outputs, context, many
        self.kernel = kernel   # the forward of the op's replay (Op.replay), or None
        self.reads = set(inputs) | slots_read(attrs)
        self.writes = {k for k in outputs if k is not None} | {context}
        self.signature = ("forward", op, needs, inputs, keyword_identity(attrs), outputs)

    def runner(self, gone, used):
        """The step as a function of the slots, which then drops the slots in `gone`; its
        Context is kept only where a backward step reads it (`used`)."""
        op, backend, needs, inputs, outputs = (self.op, self.backend, self.needs, self.inputs,
                                               self.outputs)
        context = self.context if self.context in used else None
        many, single = self.many, self.outputs[0]
        attrs = self.attrs[1] if self.attrs[0] == "const" else None
        get_attrs = getter(self.attrs)
        if self.kernel is not None:
            return self._kernel_runner(gone, context, None if attrs is not None else get_attrs)
        forward = None if op.read_only_inputs else op.forward   # else _forward's checks
        ndarray = backend.xp.ndarray

        def run(s):
            ctx = Context(backend, needs, op)
            kw = attrs if attrs is not None else get_attrs(s)
            if forward is not None:
                result = forward(ctx, *[s[k] for k in inputs], **kw)
            else:
                result = _forward(op, ctx, [s[k] for k in inputs], kw)[1]
            if context is not None:
                s[context] = ctx
            if many:
                for k, out in zip(outputs, result, strict=True):
                    if k is not None:
                        s[k] = _stored(out, ctx.backend, op)
            elif single is not None:
                s[single] = result if type(result) is ndarray else _stored(result, ctx.backend,
                                                                           op)
            for k in gone:
                s[k] = None
        return run

    def _kernel_runner(self, gone, context, get_attrs):
        """The step by its op's replay: `kernel(*inputs)`, or with the attrs as keywords where
        they hold arrays; what it keeps for the backward goes in the Context's slot."""
        kernel, inputs, outputs, many = self.kernel, self.inputs, self.outputs, self.many
        single, backend, op = outputs[0], self.backend, self.op
        ndarray = backend.xp.ndarray

        def run(s):
            if get_attrs is None:
                result, saved = kernel(*[s[k] for k in inputs])
            else:
                result, saved = kernel(*[s[k] for k in inputs], **get_attrs(s))
            if context is not None:
                s[context] = saved
            if many:
                for k, out in zip(outputs, result, strict=True):
                    if k is not None:
                        s[k] = _stored(out, backend, op)
            elif single is not None:
                s[single] = result if type(result) is ndarray else _stored(result, backend, op)
            for k in gone:
                s[k] = None
        return run

    def line(self, names):
        args = [names[k] for k in self.inputs] + keywords(self.attrs, names)
        outs = [names[k] if k is not None else "_" for k in self.outputs]
        if self.context in names.used:
            outs.append(names[self.context])
        return f"{', '.join(outs)} = {self.op.name()}({', '.join(args)})"


class Backward:
    """The backward formula of the op whose Context is in slot `context`: on arrays (an op
    marked array_backward) or on tensors made around the arrays for it."""

    def __init__(self, op, backend, context, inputs, outputs, on_arrays, kernel=None):
        self.op, self.backend, self.context, self.inputs = op, backend, context, inputs
        self.outputs, self.on_arrays = outputs, on_arrays
        self.kernel = kernel   # the backward of the op's replay: its Context slot holds `saved`
        self.reads = {context} | {k for k in inputs if k is not None}
        self.writes = {k for k in outputs if k is not None}
        self.signature = ("backward", op, context, inputs, outputs, on_arrays)

    def runner(self, gone, used):
        op, backend, context, inputs, outputs = (self.op, self.backend, self.context,
                                                 self.inputs, self.outputs)
        on_arrays, kernel = self.on_arrays, self.kernel
        if kernel is not None:
            return self._kernel_runner(gone)

        def run(s):
            ctx = s[context]
            grads = [None if k is None else s[k] for k in inputs]
            if on_arrays:
                ctx._saved = ctx.saved_arrays or None
            else:
                ctx._saved = tuple([a if a is None else Tensor.from_array(a, backend)
                                    for a in ctx.saved_arrays]) or None
                grads = [g if g is None else Tensor.from_array(g, backend) for g in grads]
            try:
                result = op.backward(ctx, *grads)
            finally:
                ctx._saved = None
            for k, g in zip(outputs, result if type(result) is tuple else (result,),
                            strict=True):
                if k is not None:
                    s[k] = _stored(g.array if isinstance(g, Tensor) else g, backend, op)
            for k in gone:
                s[k] = None
        return run

    def _kernel_runner(self, gone):
        kernel, context, inputs, outputs = self.kernel, self.context, self.inputs, self.outputs
        backend, op = self.backend, self.op
        ndarray = backend.xp.ndarray

        def run(s):
            result = kernel(s[context], *[None if k is None else s[k] for k in inputs])
            for k, g in zip(outputs, result if type(result) is tuple else (result,),
                            strict=True):
                if k is not None:
                    s[k] = g if type(g) is ndarray else _stored(g, backend, op)
            for k in gone:
                s[k] = None
        return run

    def line(self, names):
        grads = [names[k] if k is not None else "None" for k in self.inputs]
        outs = [names[k] if k is not None else "_" for k in self.outputs]
        return (f"{', '.join(outs)} = {self.op.name()}.backward({names[self.context]}, "
                f"{', '.join(grads)})")


class Call:
    """`function(*args, **kwargs)`: the engine's array code outside ops (a sum of gradients,
    gradient accumulation, an optimizer's update of one parameter, an in-place write)."""

    def __init__(self, function, args, kwargs, outputs, kind):
        self.function, self.args, self.kwargs, self.outputs, self.kind = (
            function, args, kwargs, outputs, kind)
        self.reads = slots_read(args) | slots_read(kwargs)
        self.writes = {k for k in outputs if k is not None}
        self.signature = ("call", identity(("const", function)), identity(args),
                          keyword_identity(kwargs), outputs)

    def runner(self, gone, used):
        function, outputs, kind = self.function, self.outputs, self.kind
        get_args = getter(self.args)
        kwargs = self.kwargs[1] if self.kwargs[0] == "const" else None
        get_kwargs = (lambda s: kwargs) if kwargs is not None else getter(self.kwargs)
        wanted = [(i, k) for i, k in enumerate(outputs) if k is not None]

        def run(s):
            value = function(*get_args(s), **get_kwargs(s))
            if wanted:
                values = (value.array,) if kind == "tensor" else value if kind is tuple else (
                    value,)
                for i, k in wanted:   # a NumPy scalar becomes a 0-d array, as while tracing
                    s[k] = numpy.asarray(values[i]) if isinstance(values[i], numpy.generic) \
                        else values[i]
            for k in gone:
                s[k] = None
        return run

    def line(self, names):
        args = [show(p, names) for p in self.args[2]] if self.args[0] == "seq" else [
            show(("const", v), names) for v in self.args[1]]
        call = (f"{show(('const', self.function), names)}("
                f"{', '.join(args + keywords(self.kwargs, names))})")
        if all(k is None for k in self.outputs):
            return call
        return f"{', '.join(names[k] if k is not None else '_' for k in self.outputs)} = {call}"
