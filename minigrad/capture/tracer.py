"""`Tracer`: what runs while a call is captured. The engine hands it each op's forward, each
backward formula and each array write it makes (minigrad/tracing.py); the tracer runs them as
eager mode would and writes each down as a step over numbered slots (minigrad/capture/steps.py).

A slot holds one array (or a Context, or None). An array gets its slot the first time it is
seen: as an argument of the call, as the output of a step, or else as a constant, an array
that was there before the step used it (a parameter, a buffer, a number lifted to an array),
which a replay reads as it is, by reference. The tracer keeps every array it saw alive until
the trace ends, so an id stands for one array only.
"""
import numpy

from .. import autograd, tracing
from ..ops.base import _backend_array, _forward
from ..tensor import Tensor
from . import steps


def is_array(value):
    """A NumPy or CuPy array (not a NumPy scalar)."""
    return isinstance(value, numpy.ndarray) or type(value).__name__ == "ndarray"


class Tracer:
    def __init__(self, arg_tensors, state, names):
        self.slots = {}        # id(array or Context) -> slot
        self.kept = []         # everything seen, alive while tracing
        self.constants = {}    # slot -> the array (or None) a replay reads as it is
        self.inputs = {}       # slot -> position among the call's tensor arguments
        self.arg_slots = []    # the slot of each tensor argument itself
        self.produced = set()  # the slots steps write
        self.steps = []
        self.kernels = {}      # context slot -> the backward of the op's replay (Op.replay)
        self.split = None      # where the backward of a differentiable call begins
        self.seeds = []        # its slots for the gradients of the outputs
        self.grads = []        # its slots of the gradient of each input (or None)
        self.refusal = None    # why this call cannot be replayed (the first reason)
        self.backwards = 0     # backward formulas recorded
        self.state = state     # ids of the arrays of tensors the function can see
        self.names = names     # id(array) -> a name for the listing (parameters, buffers)
        self.none = self._new(None)
        self.constants[self.none] = None
        for i, t in enumerate(arg_tensors):
            self.arg_slots.append(self._new(t))
            if id(t.array) not in self.slots:
                self.inputs[self._new(t.array)] = i

    # ------------------------------------------------------------------ slots
    def _new(self, value):
        slot = len(self.kept)
        self.kept.append(value)
        self.slots[id(value)] = slot
        return slot

    def slot(self, array):
        """The slot of an array a step reads (a new constant slot for one not seen before)."""
        if array is None:
            return self.none
        slot = self.slots.get(id(array))
        if slot is None:
            slot = self._new(array)
            self.constants[slot] = array
        return slot

    def output(self, value):
        """An array a step returned: a new slot, unless it is one seen already (an op that
        hands back its input, an in-place write returning its target). NumPy scalars become
        0-d arrays, as the engine makes them. Returns (the value, its slot or None)."""
        if value is None:
            return None, None
        if not is_array(value):
            value = numpy.asarray(value) if isinstance(value, numpy.generic) else value
            if not is_array(value):
                return value, None
        if id(value) in self.slots:
            return value, None
        slot = self._new(value)
        self.produced.add(slot)
        return value, slot

    def seed(self, array):
        """A slot for the gradient of an output of a differentiable call, filled at replay."""
        slot = self._new(array)
        self.produced.add(slot)
        self.seeds.append(slot)
        return array

    def spec(self, value):
        """How a replay gets `value`, an argument of a recorded call (steps.py reads it)."""
        if is_array(value):
            return ("slot", self.slot(value))
        if isinstance(value, Tensor):
            if id(value) in self.slots:   # a tensor argument of the call
                return ("slot", self.slots[id(value)])
            slot = self.slots.get(id(value.array))
            if slot is not None and (slot in self.produced or slot in self.inputs):
                return ("tensor", slot, value.backend)
            self.kept.append(value)
            return ("const", value)
        if type(value) in (tuple, list) and any(self._varies(v) for v in value):
            return ("seq", type(value), tuple(self.spec(v) for v in value))
        if type(value) is dict and any(self._varies(v) for v in value.values()):
            return ("dict", tuple((k, self.spec(v)) for k, v in value.items()))
        return ("const", value)   # a dict of settings, a list of parameters: the object itself

    def _varies(self, value):
        """Whether `value` holds an array, or a tensor the call made or was given (what a
        replay must put in anew)."""
        if is_array(value):
            return True
        if isinstance(value, Tensor):
            slot = self.slots.get(id(value.array))
            return id(value) in self.slots or slot in self.produced or slot in self.inputs
        if type(value) in (tuple, list):
            return any(self._varies(v) for v in value)
        return False

    def refuse(self, reason):
        if self.refusal is None:
            self.refusal = f"{reason} (at {caller_line()})"

    # ------------------------------------------------------------------ the engine's calls
    def forward(self, op, ctx, arrays, attrs):
        """Op.apply's forward (ops/base.py `_forward`): run it, record one step."""
        backend, needs = ctx.backend, ctx.needs_input_grad
        if autograd.active_tape() is not None:
            self.refuse("a tape is being recorded (mg.autograd.record)")
        inputs = tuple([self.slot(a) for a in arrays])
        attr_spec = self.spec(attrs) if attrs else ("const", attrs)
        with paused():
            arrays, result = _forward(op, ctx, arrays, attrs)
        many = type(result) is tuple
        results = result if many else (result,)
        scalars = tuple([not is_array(r) for r in results])
        results = tuple([_backend_array(r, ctx.backend, op) for r in results])
        outputs = tuple([self.output(r)[1] for r in results])
        context = self._new(ctx)
        kernels = None if op.replay is None else op.replay(ctx, **attrs)
        if kernels is not None:
            self.kernels[context] = kernels[1]
        self.steps.append(steps.Forward(op, backend, needs, inputs, attr_spec, outputs,
                                        context, many, kernels and kernels[0], scalars))
        return arrays, (results if many else results[0])

    def backward(self, op, ctx, grads, arrays, plain):
        """Node.apply_backward's call of a backward formula, on arrays (`arrays`: an op
        marked array_backward in a plain walk) or on tensors: run it, record one step. A walk
        that is not plain (create_graph, or a hook to show gradients to) is refused."""
        context = self.slots.get(id(ctx))
        if context is None:
            self.refuse(f"backward through {op.name()}, recorded before the call")
        if not plain:
            self.refuse("a backward with create_graph=True, or with a hook or retain_grad "
                        "watching it")
        self.backwards += 1
        inputs = tuple([None if g is None else self.slot(g.array if isinstance(g, Tensor) else g)
                        for g in grads])
        with paused():
            result = op.backward(ctx, *grads)
        many = type(result) is tuple
        results = list(result if many else (result,))
        outputs, scalars = [], []
        for i, g in enumerate(results):
            scalars.append(g is not None and not isinstance(g, Tensor) and not is_array(g))
            if isinstance(g, Tensor):
                outputs.append(self.output(g.array)[1])
            else:
                results[i], slot = self.output(g)
                outputs.append(slot)
        if context is not None:
            self.steps.append(steps.Backward(op, ctx.backend, context, inputs, tuple(outputs),
                                             arrays, self.kernels.get(context), many,
                                             tuple(scalars)))
        return tuple(results) if many else results[0]

    def call(self, function, args, kwargs):
        """Array code of the engine outside ops (tracing.run): run it, record one step. It
        returns an array, a tensor, a tuple of arrays (or Nones), or nothing."""
        arg_spec, kwarg_spec = self.spec(tuple(args)), self.spec(dict(kwargs))
        with paused():
            result = function(*args, **kwargs)
        if isinstance(result, Tensor):
            outputs, scalars = (self.output(result.array)[1],), (False,)
        elif type(result) is tuple:
            scalars = tuple([isinstance(r, numpy.generic) for r in result])
            pairs = [self.output(r) for r in result]
            result, outputs = tuple(r for r, _ in pairs), tuple(k for _, k in pairs)
        else:
            scalars = (isinstance(result, numpy.generic),)
            result, slot = self.output(result)
            outputs = (slot,)
        self.steps.append(steps.Call(function, arg_spec, kwarg_spec, outputs,
                                     "tensor" if isinstance(result, Tensor) else type(result),
                                     scalars))
        return result


class paused:  # noqa: N801  (a `with` block, like no_grad)
    """No tracer for the block: what a recorded step calls is part of that step."""

    def __enter__(self):
        self.tracer, tracing._state.tracer = tracing._state.tracer, None

    def __exit__(self, *exc):
        tracing._state.tracer = self.tracer


def caller_line():
    """file:line of the innermost frame outside minigrad (the user's line that did it)."""
    import sys
    frame = sys._getframe(1)
    root = __file__.rsplit("/capture/", 1)[0]
    while frame is not None and frame.f_code.co_filename.startswith(root):
        frame = frame.f_back
    if frame is None:
        return "an unknown line"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"
