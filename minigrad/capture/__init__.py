"""`mg.compile(fn)`: capture a call once, replay its array program on later calls.

    step = mg.compile(train_step)     # train_step(x, y): forward, backward, optimizer step
    loss = step(x, y)                 # traced: runs eagerly, each step recorded
    loss = step(x, y)                 # traced again: the two programs must agree
    loss = step(x, y)                 # replayed: the same array calls, no Tensors or Nodes
    print(step.code)                  # the program, one line per step

The first calls run `fn` eagerly while the engine hands each array call it makes to a tracer
(minigrad/tracing.py, capture/tracer.py): op forwards, backward formulas, the walk's sums,
gradient accumulation, optimizer updates, in-place writes, buffer updates. Two traces that
agree step for step and constant for constant make the program (an array made outside the
recorded steps, a random mask, a copy of a value, would differ, and is refused); later calls
whose guards hold (capture/guards.py) replay it: the same functions on the same arrays in the
same order, so the same bits as eager mode. A call whose guards fail is traced again (up to
`cache_size` programs); a call that cannot be replayed (a value read into Python, a hook, a
random draw outside an op, create_graph) runs eagerly, with one warning saying why and where.
"""
import inspect
import warnings

from .. import forward_ad, grad_mode, tracing, vmap_levels
from ..nn.module import Module
from .differentiable import outputs_needing_grad, trace_backward
from .guards import call_key, environment
from .program import Program
from .tracer import Tracer


def compile(fn, cache_size=8):  # noqa: A001  (mg.compile, as torch.compile)
    """`fn` compiled: a callable that replays its captured program (see above); a Module
    comes back as a module whose calls are compiled (`model = mg.compile(model)`)."""
    if isinstance(fn, Module):
        return CompiledModule(fn, cache_size)
    if not callable(fn):
        raise TypeError(f"mg.compile: expected a function or a Module, got {type(fn).__name__}")
    return Compiled(fn, cache_size)


class _Entry:
    """What is known of calls with one key: the program (once two traces agreed), the last
    trace's program waiting for a second, or why such calls run eagerly."""

    def __init__(self):
        self.program = self.candidate = self.check = self.refusal = None
        self.side_effects = 0


class Compiled:
    """A compiled function: `compiled(*args)`, `compiled.code` (the last program made)."""

    def __init__(self, fn, cache_size=8):
        self.fn, self.cache_size = fn, cache_size
        self.__wrapped__, self.__name__ = fn, getattr(fn, "__name__", "fn")
        self.entries = {}
        self.traces = 0
        self.eager = None       # why every call now runs eagerly
        self.warned = set()
        self.last = None        # the program made last
        try:
            self.arg_names = list(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            self.arg_names = []

    @property
    def code(self):
        if self.last is None:
            return f"# {self.__name__}: no program yet (it is made on the second call)"
        return self.last.code

    def __call__(self, *args, **kwargs):
        if self.eager is not None or tracing.active() is not None or _beside_a_transform():
            return self.fn(*args, **kwargs)
        tensors, names, key = call_key(args, kwargs, self.arg_names)
        entry = self.entries.get(key)
        if entry is not None and entry.refusal is not None:
            return self.fn(*args, **kwargs)
        if entry is not None and entry.program is not None and entry.check(self.fn, args, kwargs):
            return entry.program(tensors)
        if self.traces >= 2 * self.cache_size:
            self._warn(f"traced {self.traces} times (cache_size={self.cache_size}); it runs "
                       "eagerly from now on. Calls differ each time in what the guards see "
                       "(shapes, dtypes, non-tensor arguments, module attributes, Python values "
                       "the function reads)")
            self.eager = "too many traces"
            return self.fn(*args, **kwargs)
        return self._trace(self.entries.setdefault(key, _Entry()), tensors, names, args, kwargs)

    def _trace(self, entry, tensors, names, args, kwargs):
        self.traces += 1
        before, state, state_names, _ = environment(self.fn, args, kwargs)
        tracer = Tracer(tensors, state, state_names)
        tracing.begin(tracer)
        try:
            result = self.fn(*args, **kwargs)
            outputs = outputs_needing_grad(result)
            wrt = None
            if outputs and not tracer.backwards and tracer.refusal is None:
                wrt = trace_backward(tracer, outputs, tensors)   # for a backward after it
        finally:
            tracing.end()
        after, _, _, check = environment(self.fn, args, kwargs, named=False, checked=True)
        if tracer.refusal is not None:
            entry.refusal = tracer.refusal
            self._warn(f"cannot be replayed, so it runs eagerly: {tracer.refusal}")
            return result
        program = Program(tracer, self.__name__, names, result, outputs, wrt)
        if before != after:   # the call changed a Python value it sees: again, once more
            entry.side_effects += 1
            entry.candidate = None
            if entry.side_effects > 1:
                entry.refusal = "each call changes a Python value it reads"
                self._warn("changes a Python value it can see (a list, a number, a module "
                           "attribute) on every call, which a replay would not: it runs "
                           "eagerly")
            return result
        if entry.candidate is not None and entry.candidate.signature == program.signature:
            entry.program, entry.check = program, check
        entry.candidate = program
        self.last = program
        return result

    def _warn(self, message):
        if message not in self.warned:
            self.warned.add(message)
            warnings.warn(f"mg.compile: {self.__name__} {message}", RuntimeWarning,
                          stacklevel=4)


def _beside_a_transform():
    """Forward mode, vmap or autocast is on (or a trace, above): a program holds neither
    tangents, batch axes nor autocast's casts (and its cache), so the call runs as it is, and
    the transform sees every op."""
    return (bool(forward_ad._state.levels) or vmap_levels.state.dispatch is not None
            or grad_mode._state.autocast is not None)


class CompiledModule(Module):
    """A module whose calls run compiled: `model = mg.compile(model)`. Its parameters,
    buffers and state dict are the wrapped module's."""

    def __init__(self, module, cache_size=8):
        super().__init__()
        self.module = module
        compiled = Compiled(module.__call__, cache_size)
        compiled.__name__ = "forward"   # the listing reads as the module's forward
        compiled.arg_names = list(inspect.signature(module.forward).parameters)
        object.__setattr__(self, "_compiled", compiled)

    def forward(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def __getattr__(self, name):   # the wrapped module's attributes, as torch's wrapper gives
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(super().__getattr__("module"), name)

    @property
    def code(self):
        return self._compiled.code
