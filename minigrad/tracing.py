"""The switch that capture (`mg.compile`, minigrad/capture/) turns on while it records a call.

The engine touches arrays in a few named places (docs/architecture.md, "The op contract"): an
op's forward and backward, the walk's sum of two gradients, gradient accumulation, optimizer
updates, in-place writes and layers' buffers. Each asks `_state.tracer` (per thread, like grad
mode) and, when a tracer is there, hands it the call to run and record as one step of a
program; otherwise it runs as it always did. Reading a value to the host and drawing random
numbers outside such a step tell the tracer too, which then refuses to replay the call.
`capturing` (how many captures are under way, in any thread) is read first, a plain module
global, so that eager mode pays for the switch only a few nanoseconds at each place.
"""
import threading


class _ThreadState(threading.local):
    tracer = None   # a class attribute: every thread starts without one


_state = _ThreadState()
capturing = 0
_counting = threading.Lock()


def begin(tracer):
    """Hand this thread's array calls to `tracer` (until `end`)."""
    global capturing
    with _counting:
        capturing += 1
    _state.tracer = tracer


def end():
    global capturing
    _state.tracer = None
    with _counting:
        capturing -= 1


def active():
    """This thread's tracer, or None."""
    return _state.tracer if capturing else None


def run(function, *args, **kwargs):
    """`function(*args, **kwargs)`; while a call is captured, also a step of its program, run
    again on the arrays of each replay (the engine's array code outside ops goes through here)."""
    tracer = _state.tracer if capturing else None
    if tracer is None:
        return function(*args, **kwargs)
    return tracer.call(function, args, kwargs)


def refuse(reason):
    """Something a replay could not do again happens: a capture under way will not replay."""
    tracer = _state.tracer if capturing else None
    if tracer is not None:
        tracer.refuse(reason)


def value_read(what):
    """A tensor's values are read into Python (`item`, `numpy`): a replay could not take the
    branch they decide."""
    if capturing and _state.tracer is not None:
        refuse(f"{what} reads a tensor's values into Python")


def random_draw(what):
    """Random numbers are drawn outside a recorded step: a replay would not draw them again."""
    if capturing and _state.tracer is not None:
        refuse(f"{what} draws random numbers outside an op")
