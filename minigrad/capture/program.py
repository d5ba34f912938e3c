"""`Program`: the steps of one traced call, replayed on the arrays of a later one.

A replay fills the slots (the call's tensors, the constants by reference), runs each step and
drops each slot after the last step that reads it (so an activation is freed after its
backward formula, as eager mode frees it), then builds the return value: tensors made by the
program come back as new tensors that require no grad.
"""
from ..grad_mode import switched_to
from . import steps as steps_module
from .differentiable import CompiledCall
from .tracer import is_array


class Program:
    """The steps of a traced call. For a differentiable call (`wrt`: what a backward after it
    differentiates, differentiable.py) the steps from `split` on are its backward."""

    def __init__(self, tracer, name, arg_names, result, outputs=(), wrt=None):
        self.name, self.arg_names = name, arg_names
        self.steps = tracer.steps
        self.result = tracer.spec(result)
        self.wrt, self.split = wrt, tracer.split if wrt is not None else None
        if wrt is not None:   # the outputs come back from CompiledCall, in slots of their own
            self.output_slots = [tracer.slot(o.array) for o in outputs]
            self.seed_slots, self.grad_slots = tracer.seeds, tracer.grads
            self.returned = [tracer._new(o) for o in outputs]
            self.result = _swapped(self.result, dict(zip(self.output_slots, self.returned,
                                                         strict=True)))
        self.template = [None] * len(tracer.kept)
        for slot, value in tracer.constants.items():
            self.template[slot] = value
        self.inputs = tuple(tracer.inputs.items())
        self.arg_slots = tuple(tracer.arg_slots)
        self.get_result = steps_module.getter(self.result)
        self.names = _names(tracer, arg_names)
        for output, returned in zip(getattr(self, "output_slots", ()),
                                    getattr(self, "returned", ()), strict=True):
            self.names[returned] = self.names[output]
        self.signature = (tuple(s.signature for s in self.steps), self.inputs,
                          tuple(_fingerprint(tracer.constants[k], tracer)
                                for k in sorted(tracer.constants)),
                          self.split, None if wrt is None else tuple(
                              (kind, what if kind == "arg" else id(what)) for kind, what in wrt))
        kept = steps_module.slots_read(self.result)
        if wrt is not None:
            kept |= set(self.output_slots) | {k for k in self.grad_slots if k is not None}
        if wrt is None:
            self.run = _compiled(self.steps, kept, "replay")
        else:
            self.run_forward, self.run_backward = _compiled(self.steps, kept, "forward",
                                                            self.split)

    def __call__(self, tensors):
        s = self.template.copy()
        for slot, i in self.inputs:
            s[slot] = tensors[i].array
        for slot, t in zip(self.arg_slots, tensors, strict=True):
            s[slot] = t
        if self.wrt is not None:   # one node for the call, its backward the backward steps
            outputs = CompiledCall.apply(*[tensors[what] if kind == "arg" else what
                                           for kind, what in self.wrt], program=self, slots=s)
            for slot, out in zip(self.returned, outputs, strict=True):
                s[slot] = out
            return self.get_result(s)
        with switched_to(False):
            self.run(s)
        return self.get_result(s)

    @property
    def code(self):
        """The program as straight-line Python: one line per step."""
        lines = [f"def {self.name}({', '.join(self.arg_names)}):"]
        lines += ["    " + step.line(self.names) for step in self.steps[:self.split]]
        if self.split is not None:
            lines.append("    # the backward, run when the result is differentiated ("
                         + ", ".join(self.names[k] for k in self.seed_slots)
                         + ": the gradient of each output)")
            lines += ["    " + step.line(self.names) for step in self.steps[self.split:]]
        lines.append(f"    return {steps_module.show(self.result, self.names)}")
        return "\n".join(lines)


def _swapped(spec, slots):
    """`spec` with each tensor made from slot k (a key of `slots`) read from slots[k]."""
    kind = spec[0]
    if kind == "tensor" and spec[1] in slots:
        return ("slot", slots[spec[1]])
    if kind == "seq":
        return ("seq", spec[1], tuple(_swapped(p, slots) for p in spec[2]))
    if kind == "dict":
        return ("dict", tuple((k, _swapped(p, slots)) for k, p in spec[1]))
    return spec


def _compiled(steps, kept, name, split=None):
    """The steps as one Python function of the slots (two, the forward and the backward,
    with a `split`), each step followed by dropping the slots it read or wrote for the last
    time (but those in `kept`, which the call returns)."""
    last = {}
    for i, step in enumerate(steps):
        for slot in step.reads | step.writes:
            last[slot] = i
    dead = [[] for _ in steps]
    for slot, i in last.items():
        if slot not in kept:
            dead[i].append(slot)
    used = {step.context for step in steps if isinstance(step, steps_module.Backward)}
    made_by_backward = {k for step in steps if isinstance(step, steps_module.Backward)
                        for k in step.writes}
    parts = [(name, 0, len(steps))] if split is None else [
        ("forward", 0, split), ("backward", split, len(steps))]
    functions = []
    for part, start, stop in parts:
        source = steps_module.Source()
        for i, gone in zip(range(start, stop), dead[start:stop], strict=True):
            step = steps[i]
            if isinstance(step, steps_module.Call) and step.hands_over(gone, made_by_backward):
                step.write(source, used, owned=True)
            else:
                step.write(source, used)
            if gone:
                source.lines.append(" = ".join(f"s[{k}]" for k in gone) + " = None")
        functions.append(source.function(part))
    return functions[0] if split is None else functions


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
    for i, slot in enumerate(tracer.seeds):
        names[slot] = f"grad_output{i}"
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
