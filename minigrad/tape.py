"""Tape recording, for teaching: `with mg.autograd.record() as tape:` keeps the nodes made
inside the block, and `print(tape)` shows them as a Wengert list (one line per op)."""
import inspect
import threading

from . import graph


class _Recording(threading.local):
    tape = None   # the Tape of this thread's innermost `record()` block, if any


_recording = _Recording()


class Tape:
    """The nodes recorded inside a `record()` block, printable as a Wengert list:

        %0 = input  shape (3, 4)  requires_grad
        %1 = input  shape (3, 4)
        %2 = mul(%0, %1)  shape (3, 4)
        %3 = sum(%2, axis=1)  shape (3,)

    Iterating gives the nodes in the order they ran. Attributes left at their default value
    (keepdims=False, ...) are not printed.
    """

    def __init__(self):
        self.entries = []   # (node, output tensors, attrs), in the order the ops ran

    def append(self, node, outputs, attrs):
        self.entries.append((node, outputs, attrs))

    def __len__(self):
        return len(self.entries)

    def __iter__(self):
        return (node for node, _, _ in self.entries)

    def __str__(self):
        names, lines = {}, []

        def name(tensor):
            key = graph.value_key(tensor)
            if key not in names:   # first seen as an input: a tensor made outside the block
                names[key] = f"%{len(names)}"
                grad = "  requires_grad" if tensor.requires_grad else ""
                lines.append(f"{names[key]} = input  shape {tensor.shape}{grad}")
            return names[key]

        for node, outputs, attrs in self.entries:
            args = ["None" if t is None else name(t) for t in node.inputs]
            args += _attr_texts(node.op, attrs)
            for out in outputs:
                names[graph.value_key(out)] = f"%{len(names)}"
            targets = ", ".join(names[graph.value_key(out)] for out in outputs)
            shapes = ", ".join(str(out.shape) for out in outputs)
            lines.append(f"{targets} = {node.name}({', '.join(args)})  shape {shapes}")
        return "\n".join(lines)

    __repr__ = __str__


def _attr_texts(op, attrs):
    """`key=value` for the attributes that differ from the defaults of `op.forward`."""
    defaults = {name: p.default for name, p in inspect.signature(op.forward).parameters.items()
                if p.default is not p.empty}
    return [f"{key}={_attr_text(value)}" for key, value in attrs.items()
            if key not in defaults or not _is_default(value, defaults[key])]


def _is_default(value, default):
    return value is default or (type(value) is type(default)
                                and isinstance(value, (bool, int, float, str, tuple))
                                and value == default)


def _attr_text(value):
    if hasattr(value, "shape") and hasattr(value, "dtype"):   # an array or a tensor
        return f"<{value.dtype} array {tuple(value.shape)}>"
    if hasattr(value, "itemsize") and hasattr(value, "kind"):  # a dtype object
        return repr(str(value))
    return repr(value)


class record:
    """`with mg.autograd.record() as tape:` keeps every node made inside; `print(tape)`."""

    def __enter__(self):
        self._previous = _recording.tape
        _recording.tape = Tape()
        return _recording.tape

    def __exit__(self, *exc):
        _recording.tape = self._previous


def active_tape():
    return _recording.tape
