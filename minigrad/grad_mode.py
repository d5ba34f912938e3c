"""Grad mode and inference mode: per-thread switches, as in PyTorch.

Ops record themselves on the tape only while grad mode is on (`is_grad_enabled()`), which is
the default in every thread. The switches change it for the current thread only:

    with mg.no_grad():             off inside the block       (@mg.no_grad, mg.no_grad(fn))
    with mg.enable_grad():         on inside the block, e.g. within no_grad
    mg.set_grad_enabled(False)     off at once; as a `with` block, back at its end
    with mg.inference_mode():      off, and the tensors made inside are inference tensors

Each `with` puts back exactly what it found when it began, in its own thread: one switch object
may be entered by several threads, or again inside itself, and each block restores its own
state. As decorators they apply to every call of a function, and to every step of a generator
or a coroutine (the caller's mode in between, as PyTorch does for generators).

Inference tensors (`t.is_inference()`) are made in inference mode; as in PyTorch, changing one
in place outside inference mode is an error (minigrad/inplace.py). minigrad marks them in their
version counter (minigrad/version.py), so a view of a normal tensor stays normal.
"""
import functools
import inspect
import threading


class _ThreadState(threading.local):
    grad_enabled = True   # class attributes: every new thread starts with recording on,
    inference = False     # outside inference mode
    autocast = None       # the casting rules of mg.autocast while a block is on (minigrad/amp/)


_state = _ThreadState()


def is_grad_enabled():
    """True when ops record themselves on the tape (the default, in every thread)."""
    return _state.grad_enabled


def is_inference_mode_enabled():
    """True inside `inference_mode()` (in this thread)."""
    return _state.inference


class switched_to:  # noqa: N801  (used as a `with` statement, like no_grad)
    """`with switched_to(enabled):` grad mode on or off for the block, in this thread, and what
    it was put back at the end: the engine's own switch (the reverse walk, gradient
    accumulation, in-place updates), entered several times per training step. It is the
    public switches' job without their other forms (decorators, switching at once), so it
    costs a fraction of a microsecond instead of several."""

    __slots__ = ("enabled", "found")

    def __init__(self, enabled):
        self.enabled = enabled

    def __enter__(self):
        self.found, _state.grad_enabled = _state.grad_enabled, self.enabled

    def __exit__(self, *exc):
        _state.grad_enabled = self.found


class _Switch:
    """Sets some fields of this thread's state while a `with` block runs (or a decorated
    function, generator or coroutine runs) and puts back what each block found."""

    def __init__(self, **fields):
        self._fields = fields
        self._found = {}   # thread id -> what its open `with` blocks found, innermost last

    def __enter__(self):
        found = _set(self._fields)
        self._found.setdefault(threading.get_ident(), []).append(found)

    def __exit__(self, *exc):
        _set(self._found[threading.get_ident()].pop())

    def __call__(self, function):
        """Decorate `function`: each call (each step of a generator or coroutine) runs under a
        fresh switch with these fields, so recursion and threads are safe."""
        fields = self._fields
        if inspect.isgeneratorfunction(function):
            @functools.wraps(function)
            def generator(*args, **kwargs):
                return (yield from _stepwise(function(*args, **kwargs), fields))
            return generator
        if inspect.iscoroutinefunction(function):
            @functools.wraps(function)
            async def coroutine(*args, **kwargs):
                return await _Steps(function(*args, **kwargs), fields)
            return coroutine

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with _Switch(**fields):
                return function(*args, **kwargs)
        return wrapper


def _set(fields):
    """Set the fields of this thread's state; returns their values from before."""
    found = {name: getattr(_state, name) for name in fields}
    for name, value in fields.items():
        setattr(_state, name, value)
    return found


def _stepwise(steps, fields):
    """Drive a generator or coroutine `steps`, each step under a switch with `fields` and the
    caller's state in between; values, exceptions and close() pass through both ways."""
    send, value = steps.send, None
    while True:
        try:
            with _Switch(**fields):
                value = send(value)
        except StopIteration as stop:
            return stop.value
        try:
            send, value = steps.send, (yield value)
        except GeneratorExit:
            with _Switch(**fields):
                steps.close()
            raise
        except BaseException as error:  # thrown into us: throw it into `steps`, in the mode
            send, value = steps.throw, error


class _Steps:
    """An awaitable that runs a coroutine step by step under a switch (see `_stepwise`)."""

    def __init__(self, coroutine, fields):
        self.coroutine, self.fields = coroutine, fields

    def __await__(self):
        return _stepwise(self.coroutine, self.fields)


class set_grad_enabled(_Switch):
    """Recording on or off, for the current thread only. `mg.set_grad_enabled(False)` switches
    at once (as in PyTorch); as a `with` block or decorator the mode from before comes back at
    the end."""

    def __init__(self, mode):
        super().__init__(grad_enabled=bool(mode))
        self._at_once = (threading.get_ident(), _set(self._fields))

    def __enter__(self):
        if self._at_once is not None and self._at_once[0] == threading.get_ident():
            found, self._at_once = self._at_once[1], None   # switched already by __init__
            self._found.setdefault(threading.get_ident(), []).append(found)
        else:
            super().__enter__()

    def __call__(self, function):
        if self._at_once is not None:   # as a decorator it must not switch at definition
            _set(self._at_once[1])
            self._at_once = None
        return super().__call__(function)


class _BareOrCalled(_Switch):
    """A switch usable as `@switch`, `@switch()`, `switch(fn)` and `with switch():`."""

    def __new__(cls, function=None):
        if function is None:
            return super().__new__(cls)
        return cls()(function)


class no_grad(_BareOrCalled):
    """`with mg.no_grad():`, `@mg.no_grad` or `@mg.no_grad()`: nothing inside is recorded and
    results do not require grad."""

    def __init__(self, function=None):
        super().__init__(grad_enabled=False)


class enable_grad(_BareOrCalled):
    """`with mg.enable_grad():` (or as a decorator): record again inside `no_grad`."""

    def __init__(self, function=None):
        super().__init__(grad_enabled=True)


class inference_mode(_Switch):
    """`with mg.inference_mode():`, `@mg.inference_mode` or `@mg.inference_mode()`: as no_grad,
    and the tensors made inside are inference tensors. `inference_mode(False)` leaves it
    (recording again), as in PyTorch."""

    def __new__(cls, mode=True):
        if isinstance(mode, bool):
            return super().__new__(cls)
        return cls()(mode)   # bare, on a function

    def __init__(self, mode=True):
        super().__init__(grad_enabled=not mode, inference=bool(mode))
