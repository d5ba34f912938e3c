"""`Program`: the steps of one traced call, replayed on the arrays of a later one.

A replay fills the slots (the call's tensors, the constants by reference), checks the guards
(values that decided a branch while tracing: a different one gives back `MISSED`, and the
call is traced again), runs each step and
drops each slot after the last step that reads it (so an activation is freed after its
backward formula, as eager mode frees it), then builds the return value: tensors made by the
program come back as new tensors that require no grad.
"""
from ..grad_mode import switched_to
from . import steps as steps_module
from .tracer import is_array

MISSED = object()   # what a replay whose guard failed returns


class Program:
    def __init__(self, tracer, name, arg_names, result):
        self.name, self.arg_names = name, arg_names
        self.steps = tracer.steps
        self.template = [None] * len(tracer.kept)
        for slot, value in tracer.constants.items():
            self.template[slot] = value
        self.inputs = tuple(tracer.inputs.items())
        self.arg_slots = tuple(tracer.arg_slots)
        self.result = tracer.spec(result)
        self.get_result = steps_module.getter(self.result)
        self.names = _names(tracer, arg_names)
        self.signature = (tuple(s.signature for s in self.steps), self.inputs,
                          tuple(_fingerprint(tracer.constants[k], tracer)
                                for k in sorted(tracer.constants)))
        self.runs = _runners(self.steps, steps_module.slots_read(self.result))
        self.guards = [(function, steps_module.getter(spec), value)
                       for function, spec, value in tracer.guards]
        self.signature += tuple((steps_module.identity(("const", function)),
                                 steps_module.identity(spec), value)
                                for function, spec, value in tracer.guards)

    def __call__(self, tensors):
        s = self.template.copy()
        for slot, i in self.inputs:
            s[slot] = tensors[i].array
        for slot, t in zip(self.arg_slots, tensors, strict=True):
            s[slot] = t
        for function, get_args, value in self.guards:
            if function(*get_args(s)) != value:
                return MISSED
        with switched_to(False):
            for run in self.runs:
                run(s)
        return self.get_result(s)

    @property
    def code(self):
        """The program as straight-line Python: one line per step."""
        lines = [f"def {self.name}({', '.join(self.arg_names)}):"]
        lines += ["    " + step.line(self.names) for step in self.steps]
        lines.append(f"    return {steps_module.show(self.result, self.names)}")
        return "\n".join(lines)


def _runners(steps, kept):
    """Each step's runner, which then drops the slots it read or wrote for the last time
    (but those the call returns)."""
    last = {}
    for i, step in enumerate(steps):
        for slot in step.reads | step.writes:
            last[slot] = i
    dead = [[] for _ in steps]
    for slot, i in last.items():
        if slot not in kept:
            dead[i].append(slot)
    used = {step.context for step in steps if isinstance(step, steps_module.Backward)}
    return [step.runner(tuple(gone), used) for step, gone in zip(steps, dead, strict=True)]


def _fingerprint(value, tracer):
    """A constant as two traces compare it: the arrays of tensors the function can see
    (parameters, buffers) by identity, any other array by its values."""
    if value is None or id(value) in tracer.state:
        return id(value)
    array = value.get() if hasattr(value, "get") else value   # CuPy: to the host
    return (array.shape, array.dtype.str, array.tobytes())


class _Names(dict):
    """slot -> its name in the listing; `used` holds the Contexts a backward step reads,
    `arrays` the names of parameters and buffers by the id of their array."""
    used = frozenset()
    arrays = {}


def _names(tracer, arg_names):
    names = _Names()
    names.arrays = tracer.names
    for slot, i in tracer.inputs.items():
        names[slot] = arg_names[i]
    for slot, i in zip(tracer.arg_slots, range(len(arg_names)), strict=True):
        names[slot] = arg_names[i]
    for slot, value in enumerate(tracer.kept):
        if slot in names:
            continue
        if slot in tracer.constants:
            names[slot] = _constant_name(value, slot, tracer)
        elif is_array(value):
            names[slot] = f"t{slot}"
        else:
            names[slot] = f"ctx{slot}"
    names.used = frozenset(step.context for step in tracer.steps
                           if isinstance(step, steps_module.Backward))
    return names


def _constant_name(value, slot, tracer):
    if value is None:
        return "None"
    name = tracer.names.get(id(value))
    if name is not None:
        return name
    if value.ndim == 0:
        return f"{value.dtype}({value.item()!r})"
    return f"c{slot}"
