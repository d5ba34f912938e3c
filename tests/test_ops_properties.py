"""Property-based tests (hypothesis): broadcasting binary ops over random broadcast-compatible
shapes, and reductions over random axis subsets, against PyTorch."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes

from ops_oracle import BINARY, REDUCTIONS, compare_with_torch

SETTINGS = settings(max_examples=40, deadline=None)


@SETTINGS
@given(name=st.sampled_from(["add", "sub", "mul", "div", "maximum"]),
       shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=3),
       seed=st.integers(0, 2**16))
def test_binary_broadcasting_matches_torch(name, shapes, seed):
    r = np.random.default_rng(seed)
    a, b = (r.standard_normal(s) for s in shapes.input_shapes)
    if name == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    # compare_with_torch checks each gradient's shape against its input's shape
    compare_with_torch(*BINARY[name], [a, b], seed=seed)


@st.composite
def _shape_and_axes(draw):
    shape = draw(array_shapes(min_dims=1, max_dims=4, max_side=4))
    axes = draw(st.none() | st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    if axes is not None:   # mix negative and positive spellings of the same axes
        axes = tuple(a - len(shape) if draw(st.booleans()) else a for a in axes)
        if len(axes) == 1 and draw(st.booleans()):
            axes = axes[0]
    return shape, axes


@SETTINGS
@given(name=st.sampled_from(["sum", "mean", "max", "var_biased"]), shape_axes=_shape_and_axes(),
       keepdims=st.booleans(), seed=st.integers(0, 2**16))
def test_reductions_match_torch(name, shape_axes, keepdims, seed):
    shape, axes = shape_axes
    mg_fn, torch_fn = REDUCTIONS[name]
    x = np.random.default_rng(seed).standard_normal(shape)
    compare_with_torch(lambda t: mg_fn(t, axes, keepdims), lambda t: torch_fn(t, axes, keepdims),
                       [x], seed=seed)
