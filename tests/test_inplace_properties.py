"""Differential tests (hypothesis) of in-place ops against PyTorch: random sequences of in-place
changes on no_grad leaves (values and version counters) and on non-leaf tensors inside a graph
(values and the gradients of every leaf, or the same refusal)."""
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import minigrad as mg

SHAPE = (3, 4)
METHODS = ["add_", "sub_", "mul_", "div_", "clamp_", "fill_", "zero_", "copy_", "setitem"]


@st.composite
def steps(draw):
    """A list of (method, value kind, value, index) describing in-place changes."""
    found = []
    for _ in range(draw(st.integers(1, 6))):
        method = draw(st.sampled_from(METHODS))
        kind = draw(st.sampled_from(["number", "row", "column", "full"]))
        magnitude = draw(st.floats(0.5, 2.0)) * draw(st.sampled_from([-1.0, 1.0]))
        index = draw(st.sampled_from([1, (slice(None), 2), slice(0, 2), [2, 0], "mask"]))
        found.append((method, kind, magnitude, index))
    return found


def value_for(kind, magnitude, shape, requires_grad=False):
    """The same value in both libraries: a number or a tensor that broadcasts to `shape`."""
    if kind == "number":
        return magnitude, magnitude
    value_shape = {"row": shape[1:], "column": shape[:1] + (1,) * (len(shape) - 1),
                   "full": shape}[kind]
    array = magnitude * (1 + np.arange(int(np.prod(value_shape))).reshape(value_shape) / 4)
    return (mg.tensor(array, requires_grad=requires_grad),
            torch.tensor(array, requires_grad=requires_grad))


def apply(step, ours, theirs, leaves=None):
    """Apply one in-place change to both tensors; `leaves` (ours, theirs) supply values that
    require grad, so the value is part of the graph too."""
    method, kind, magnitude, index = step
    if method == "setitem":
        if index == "mask":
            mask = ours.detach().numpy() > 0
            index, tindex = mask, torch.tensor(mask)
        else:
            tindex = torch.tensor(index) if isinstance(index, list) else index
        shape = tuple(theirs[tindex].shape)
        value, tvalue = value_for(kind if len(shape) == 2 else "number", magnitude, shape)
        if leaves is not None and kind != "number" and len(shape) == 2:
            value, tvalue = value * leaves[0].sum(), tvalue * leaves[1].sum()
        ours[index] = value
        theirs[tindex] = tvalue
        return
    value, tvalue = value_for(kind, magnitude, SHAPE)
    if leaves is not None and kind != "number":
        value, tvalue = value * leaves[0], tvalue * leaves[1]
    if method == "clamp_":
        bounds = sorted([magnitude, -magnitude])
        ours.clamp_(min=bounds[0], max=bounds[1])
        theirs.clamp_(min=bounds[0], max=bounds[1])
    elif method == "zero_":
        ours.zero_()
        theirs.zero_()
    elif method == "fill_":
        ours.fill_(magnitude)
        theirs.fill_(magnitude)
    elif method == "copy_":
        ours.copy_(value if kind != "number" else mg.tensor(magnitude, dtype="float64"))
        theirs.copy_(tvalue if kind != "number" else torch.tensor(magnitude,
                                                                  dtype=torch.float64))
    else:
        getattr(ours, method)(value)
        getattr(theirs, method)(tvalue)


@settings(max_examples=60, deadline=None)
@given(steps())
def test_in_place_sequences_on_no_grad_leaves_match_torch(sequence):
    start = np.linspace(-2.0, 3.0, 12).reshape(SHAPE)
    ours = mg.tensor(start, requires_grad=True)
    theirs = torch.tensor(start, requires_grad=True)
    with mg.no_grad(), torch.no_grad():
        for step in sequence:
            apply(step, ours, theirs)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12,
                               atol=1e-12)
    assert ours._version == theirs._version == len(sequence)
    assert ours.is_leaf and ours.requires_grad


@settings(max_examples=60, deadline=None)
@given(steps(), st.booleans())
def test_in_place_sequences_on_non_leaves_match_torch_values_and_gradients(sequence, from_value):
    start = np.linspace(-2.0, 3.0, 12).reshape(SHAPE)
    x, tx = mg.tensor(start, requires_grad=True), torch.tensor(start, requires_grad=True)
    w, tw = mg.tensor([0.5, -1.5, 2.0, 1.0], dtype="float64", requires_grad=True), \
        torch.tensor([0.5, -1.5, 2.0, 1.0], dtype=torch.float64, requires_grad=True)
    ours, theirs = x * 1.5, tx * 1.5
    leaves = (w, tw) if from_value else None
    for step in sequence:
        apply(step, ours, theirs, leaves)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(),
                               rtol=1e-12, atol=1e-12)
    failures = []
    for out, library in ((ours, "minigrad"), (theirs, "torch")):
        try:
            (out * out).sum().backward()
        except RuntimeError as error:       # both refuse, or neither
            failures.append((library, str(error)))
    assert len(failures) in (0, 2), failures
    if not failures:
        for mine, reference in ((x, tx), (w, tw)):
            if reference.grad is None:
                assert mine.grad is None
            else:
                np.testing.assert_allclose(mine.grad.numpy(), reference.grad.numpy(),
                                           rtol=1e-10, atol=1e-12)
