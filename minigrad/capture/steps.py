"""The steps of a captured program. Each is written as a line of Python over `s`, the list of
slots of one replay (`Source`: the lines of a program become one function), which runs the
same code the engine ran while tracing (an op's forward on a fresh Context or its `replay`,
its backward formula, a call of the engine's array code), so a replay makes the same
operations in the same order as eager mode: the same bits. Each also says which slots it
reads and writes (for freeing arrays after their last use), what identifies it (two traces of
a call must agree) and how it reads in the listing (`compiled.code`).
"""
import numpy

from ..graph import accumulate_grad
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
    if type(value) is dict:   # an optimizer's group: its parameters by name, its settings
        return "{" + ", ".join(f"{k!r}: {show(('const', v), names)}"
                               for k, v in value.items()) + "}"
    if type(value) is list and value and all(isinstance(v, Tensor) for v in value):
        shown = [show(("const", v), names) for v in value[:_LISTED]]
        more = f", ... ({len(value)} tensors)" if len(value) > _LISTED else ""
        return f"[{', '.join(shown)}{more}]"
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    return name if name and callable(value) else repr(value)


_LISTED = 3   # the tensors of a list shown in the listing (a group's parameters), then a count


def keywords(spec, names):
    """`key=value, ...` of a dict spec (an op's attrs, a call's keywords)."""
    if spec[0] == "const":
        return [f"{k}={show(('const', v), names)}" for k, v in spec[1].items()]
    return [f"{k}={show(p, names)}" for k, p in spec[1]]


def _stored(value, backend, op):
    """An op's output as the engine keeps it (a NumPy scalar as a 0-d array)."""
    return value if value is None or type(value) is backend.xp.ndarray else _backend_array(
        value, backend, op)


class Source:
    """The Python source of a replay being written: its lines over the slots `s`, and the
    objects (ops' replays, functions, constants) its names stand for."""

    def __init__(self):
        self.lines, self.namespace, self.named = [], {}, {}

    def bind(self, value):
        """A name for `value` in the source (one name for one object)."""
        name = self.named.get(id(value))
        if name is None:
            name = self.named[id(value)] = f"c{len(self.named)}"
            self.namespace[name] = value
        return name

    def expression(self, spec):
        """A value spec of Tracer.spec as an expression: what getter(spec) gives."""
        kind = spec[0]
        if kind == "slot":
            return f"s[{spec[1]}]"
        if kind == "tensor":
            return f"{self.bind(Tensor.from_array)}(s[{spec[1]}], {self.bind(spec[2])})"
        if kind == "seq":
            parts = [self.expression(p) for p in spec[2]]
            return f"({''.join(p + ', ' for p in parts)})" if spec[1] is tuple else \
                f"[{', '.join(parts)}]"
        if kind == "dict":
            return "{" + ", ".join(f"{k!r}: {self.expression(p)}" for k, p in spec[1]) + "}"
        return self.bind(spec[1])

    def arguments(self, args, kwargs):
        """`a, b, key=c` of a call whose positional and keyword specs are `args`, `kwargs`."""
        parts = [self.expression(p) for p in args[2]] if args[0] == "seq" else (
            [f"*{self.bind(args[1])}"] if args[1] else [])
        if kwargs[0] == "dict":
            parts += [f"{k}={self.expression(p)}" for k, p in kwargs[1]]
        elif kwargs[1]:
            parts.append(f"**{self.bind(kwargs[1])}")
        return ", ".join(parts)

    def targets(self, slots, many):
        """The left side of an assignment to `slots` (`_` for an output nobody reads)."""
        names = [f"s[{k}]" if k is not None else "_" for k in slots]
        return f"({''.join(n + ', ' for n in names)})" if many else names[0]

    def converted(self, slots, scalars, convert):
        """Lines turning the outputs that were NumPy scalars while tracing into 0-d arrays."""
        self.lines += [f"s[{k}] = {self.bind(convert)}(s[{k}])"
                       for k, scalar in zip(slots, scalars, strict=True)
                       if scalar and k is not None]

    def function(self, name):
        """The lines as the function `name(s)`."""
        lines = "".join(f"    {line}\n" for line in self.lines) or "    pass\n"
        exec(compile(f"def {name}(s):\n{lines}", f"<mg.compile {name}>", "exec"),
             self.namespace)
        return self.namespace[name]


class Forward:
    """`outputs = op.forward(Context, *inputs, **attrs)`, its Context kept in a slot for the
    backward formula that reads what it saved; or, for an op with a replay (Op.replay),
    `outputs, saved = kernel(*inputs)`, `saved` kept in that slot."""

    def __init__(self, op, backend, needs, inputs, attrs, outputs, context, many, kernel=None,
                 scalars=()):
        self.op, self.backend, self.needs, self.inputs = op, backend, needs, inputs
        self.attrs, self.outputs, self.context, self.many = attrs, outputs, context, many
        self.kernel, self.scalars = kernel, scalars   # scalars: outputs that were NumPy scalars
        self.reads = set(inputs) | slots_read(attrs)
        self.writes = {k for k in outputs if k is not None} | {context}
        self.signature = ("forward", op, needs, inputs, keyword_identity(attrs), outputs)

    def write(self, source, used):
        """Its line in `source`; its Context (or saved values) kept only where a backward step
        reads it (`used`)."""
        keep = self.context in used
        if self.kernel is None:
            source.lines.append(f"{source.bind(self.runner(keep))}(s)")
            return
        args = [f"s[{k}]" for k in self.inputs]
        if self.attrs[0] != "const":   # the attrs hold arrays: they come as keywords
            args += [f"{k}={source.expression(p)}" for k, p in self.attrs[1]]
        saved = f"s[{self.context}]" if keep else "_"
        source.lines.append(f"{source.targets(self.outputs, self.many)}, {saved} = "
                            f"{source.bind(self.kernel)}({', '.join(args)})")
        backend, op = self.backend, self.op
        source.converted(self.outputs, self.scalars, lambda v: _stored(v, backend, op))

    def runner(self, keep):
        """The step as a function of the slots: `op.forward` on a fresh Context."""
        op, backend, needs, inputs, outputs = (self.op, self.backend, self.needs, self.inputs,
                                               self.outputs)
        context = self.context if keep else None
        many, single = self.many, self.outputs[0]
        attrs = self.attrs[1] if self.attrs[0] == "const" else None
        get_attrs = getter(self.attrs)
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
        return run

    def line(self, names):
        args = [names[k] for k in self.inputs] + keywords(self.attrs, names)
        outs = [names[k] if k is not None else "_" for k in self.outputs]
        if self.context in names.used:
            outs.append(names[self.context])
        return f"{', '.join(outs)} = {self.op.name()}({', '.join(args)})"


class Backward:
    """The backward formula of the op whose Context is in slot `context`: on arrays (an op
    marked array_backward) or on tensors made around the arrays for it; or the backward of
    the op's replay, on what its forward kept."""

    def __init__(self, op, backend, context, inputs, outputs, on_arrays, kernel=None,
                 many=True, scalars=()):
        self.op, self.backend, self.context, self.inputs = op, backend, context, inputs
        self.outputs, self.on_arrays = outputs, on_arrays
        self.kernel, self.many, self.scalars = kernel, many, scalars
        self.reads = {context} | {k for k in inputs if k is not None}
        self.writes = {k for k in outputs if k is not None}
        self.signature = ("backward", op, context, inputs, outputs, on_arrays)

    def write(self, source, used):
        if self.kernel is None:
            source.lines.append(f"{source.bind(self.runner())}(s)")
            return
        grads = [f"s[{k}]" if k is not None else "None" for k in self.inputs]
        source.lines.append(f"{source.targets(self.outputs, self.many)} = "
                            f"{source.bind(self.kernel)}(s[{self.context}], {', '.join(grads)})")
        backend, op = self.backend, self.op
        source.converted(self.outputs, self.scalars, lambda v: _stored(v, backend, op))

    def runner(self):
        op, backend, context, inputs, outputs = (self.op, self.backend, self.context,
                                                 self.inputs, self.outputs)
        on_arrays = self.on_arrays

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
        return run

    def line(self, names):
        grads = [names[k] if k is not None else "None" for k in self.inputs]
        outs = [names[k] if k is not None else "_" for k in self.outputs]
        return (f"{', '.join(outs)} = {self.op.name()}.backward({names[self.context]}, "
                f"{', '.join(grads)})")


class Call:
    """`function(*args, **kwargs)`: the engine's array code outside ops (a sum of gradients,
    gradient accumulation, an optimizer's update of one parameter, an in-place write)."""

    def __init__(self, function, args, kwargs, outputs, kind, scalars=()):
        self.function, self.args, self.kwargs, self.outputs, self.kind = (
            function, args, kwargs, outputs, kind)
        self.scalars = scalars   # the outputs that were NumPy scalars while tracing
        self.reads = slots_read(args) | slots_read(kwargs)
        self.writes = {k for k in outputs if k is not None}
        self.signature = ("call", identity(("const", function)), identity(args),
                          keyword_identity(kwargs), outputs)

    def hands_over(self, gone, made_by_backward):
        """Whether this is gradient accumulation (accumulate_grad, without create_graph) of a
        gradient that a backward step made and no later step reads (its slot is in `gone`):
        then nothing else holds that array, and the leaf may take it as its `.grad` without a
        copy (graph.accumulate_grad's `owned`)."""
        if (self.function is not accumulate_grad or self.args[0] != "seq" or self.kwargs[1]
                or len(self.args[2]) != 3):
            return False
        _, grad, create_graph = self.args[2]
        return (grad[0] == "slot" and create_graph == ("const", False)
                and grad[1] in made_by_backward and grad[1] in gone)

    def write(self, source, used, owned=False):
        arguments = source.arguments(self.args, self.kwargs)
        call = f"{source.bind(self.function)}({arguments}{', owned=True' if owned else ''})"
        if all(k is None for k in self.outputs):
            source.lines.append(call)
            return
        if self.kind == "tensor":
            call += ".array"
        source.lines.append(f"{source.targets(self.outputs, self.kind is tuple)} = {call}")
        source.converted(self.outputs, self.scalars, numpy.asarray)

    def line(self, names):
        args = [show(p, names) for p in self.args[2]] if self.args[0] == "seq" else [
            show(("const", v), names) for v in self.args[1]]
        call = (f"{show(('const', self.function), names)}("
                f"{', '.join(args + keywords(self.kwargs, names))})")
        if all(k is None for k in self.outputs):
            return call
        return f"{', '.join(names[k] if k is not None else '_' for k in self.outputs)} = {call}"
