"""Names for the tensors of a picture (graph.py) or a printed walk (trace.py).

    names={"x": x, "h": h}      # any tensors: leaves, or op outputs (then their data is shown too)
    module=model                # every parameter and buffer by its path: conv1.weight, bn1.bias

`module` is the cleaner of the two for a model (PyTorch's torchviz takes
`params=dict(model.named_parameters())`, which `names=` also accepts); where both name a tensor,
`names` wins. A tensor is keyed by the value it is in the graph (autograd.value_key), so a leaf
and an op output are named alike. A name is shown with its control characters and lone
surrogates (which XML and UTF-8 cannot hold) written as escapes: "a\\x07", "\\udc80".
"""
import unicodedata

from ..autograd import Tensor, value_key


def printable(text, lines=False):
    """`text` with control characters (but line breaks where `lines`), lone surrogates and the
    non-characters U+FFFE and U+FFFF written as Python escapes, so that any file format (SVG,
    DOT, UTF-8) can hold it."""
    text = str(text)
    if lines:
        return "\n".join(printable(line) for line in text.split("\n"))
    if text.isprintable():
        return text
    return "".join(ascii(c)[1:-1] if unicodedata.category(c) in ("Cc", "Cs") or
                   c in "\ufffe\uffff" else c for c in text)


def names_of(names=None, module=None, where="mg.viz"):
    """{value_key: name} from `module`'s named parameters and buffers, then `names`."""
    found = {}
    if module is not None:
        if not hasattr(module, "named_parameters"):
            raise TypeError(f"{where}: module must be an nn.Module (its parameters and buffers "
                            f"are named by their paths), not {type(module).__name__}")
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            found.setdefault(value_key(tensor), printable(name))
    for name, tensor in (names or {}).items():
        if not isinstance(tensor, Tensor):
            raise TypeError(f"{where}: names must map names to tensors, but {name!r} maps to a "
                            f"{type(tensor).__name__}")
        found[value_key(tensor)] = printable(name)
    return found


def named_values(names=None):
    """{value_key: tensor} of the op outputs in `names`: the caller holds them, so their data is
    known even after backward has freed the graph's copies."""
    return {value_key(t): t for t in (names or {}).values()
            if isinstance(t, Tensor) and t._node is not None}
