"""The newer primitives (math.py, ordering.py, rearrange.py) against PyTorch, forward and
backward, with gradcheck and second derivatives in float64."""
import numpy as np
import pytest
import torch

import minigrad as mg

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, rng

ops = mg.ops
X = rng(0).standard_normal((3, 4, 5))
SQUARE = rng(1).standard_normal((2, 4, 4))

UNARY = {   # name -> (minigrad f(x), torch f(x), input)
    "sin": (ops.sin, torch.sin, X), "cos": (ops.cos, torch.cos, X),
    "cumsum0": (lambda x: ops.cumsum(x, 0), lambda x: torch.cumsum(x, 0), X),
    "cumsum_last": (lambda x: ops.cumsum(x, -1), lambda x: torch.cumsum(x, -1), X),
    "cumprod": (lambda x: ops.cumprod(x, 1), lambda x: torch.cumprod(x, 1), X),
    "flip": (lambda x: ops.flip(x, (0, 2)), lambda x: torch.flip(x, (0, 2)), X),
    "roll": (lambda x: ops.roll(x, (1, -2), (0, 2)), lambda x: torch.roll(x, (1, -2), (0, 2)), X),
    "roll_flat": (lambda x: ops.roll(x, 3), lambda x: torch.roll(x, 3), X),
    "diagonal": (lambda x: ops.diagonal(x, 1, 1, 2), lambda x: torch.diagonal(x, 1, 1, 2), SQUARE),
    "diagonal_neg": (lambda x: ops.diagonal(x, -1, -1, 0),
                     lambda x: torch.diagonal(x, -1, -1, 0), X),
    "tril": (lambda x: ops.tril(x, -1), lambda x: torch.tril(x, -1), SQUARE),
    "triu": (lambda x: ops.triu(x, 1), lambda x: torch.triu(x, 1), X),
    "repeat": (lambda x: ops.repeat(x, (2, 1, 1, 3)), lambda x: x.repeat(2, 1, 1, 3), X),
    "tile": (lambda x: ops.tile(x, (2, 2)), lambda x: torch.tile(x, (2, 2)), X),
    "squeeze": (lambda x: ops.squeeze(ops.reshape(x, (3, 1, 20, 1))),
                lambda x: x.reshape(3, 1, 20, 1).squeeze(), X),
    "squeeze_dim": (lambda x: ops.squeeze(ops.reshape(x, (3, 1, 20, 1)), (1, 2)),
                    lambda x: x.reshape(3, 1, 20, 1).squeeze((1, 2)), X),
    "unsqueeze": (lambda x: ops.unsqueeze(x, -1), lambda x: x.unsqueeze(-1), X),
    "clone": (ops.clone, torch.clone, X),
    "sort": (lambda x: ops.sort(x, 1)[0], lambda x: torch.sort(x, 1)[0], X),
    "sort_desc": (lambda x: ops.sort(x, -1, descending=True)[0],
                  lambda x: torch.sort(x, -1, descending=True)[0], X),
    "topk": (lambda x: ops.topk(x, 2, 1)[0], lambda x: torch.topk(x, 2, 1)[0], X),
    "topk_smallest": (lambda x: ops.topk(x, 3, largest=False)[0],
                      lambda x: torch.topk(x, 3, largest=False)[0], X),
    "norm": (ops.norm, torch.linalg.vector_norm, X),
    "norm_dim": (lambda x: ops.norm(x, 2, (0, 2), True),
                 lambda x: torch.linalg.vector_norm(x, 2, (0, 2), True), X),
    "norm1": (lambda x: ops.norm(x, 1, 1), lambda x: torch.linalg.vector_norm(x, 1, 1), X),
    "norm3": (lambda x: ops.norm(x, 3, -1), lambda x: torch.linalg.vector_norm(x, 3, -1), X),
    "norm_inf": (lambda x: ops.norm(x, float("inf"), 0),
                 lambda x: torch.linalg.vector_norm(x, float("inf"), 0), X),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_matches_torch_forward_and_backward(name):
    ours, theirs, x = UNARY[name]
    compare_with_torch(ours, theirs, [x])


@pytest.mark.parametrize("name", sorted(UNARY))
def test_gradcheck_and_second_derivatives(name):
    ours, _, x = UNARY[name]
    x = x[:2, :3] if x.ndim == 3 and name not in ("diagonal", "tril", "squeeze",
                                                   "squeeze_dim") else x
    assert mg.gradcheck(ours, leaves(x))
    check_vjp_derivatives(ours, [x])


@pytest.mark.parametrize("name,ours,theirs", [
    ("sign", ops.sign, torch.sign), ("floor", ops.floor, torch.floor),
    ("ceil", ops.ceil, torch.ceil),
    ("round", ops.round, torch.round),
    ("round2", lambda x: ops.round(x, 2), lambda x: torch.round(x, decimals=2))])
def test_step_functions_match_torch_with_zero_gradients(name, ours, theirs):
    x = np.array([-2.5, -1.5, -0.4, 0.0, 0.5, 1.5, 2.5, 3.14159])
    compare_with_torch(ours, theirs, [x])


def test_cumprod_with_zeros_has_torchs_gradient():
    x = np.array([[2.0, 0.0, 3.0, 0.0, 4.0], [1.5, -2.0, 0.0, 5.0, 1.0]])
    compare_with_torch(lambda t: ops.cumprod(t, 1), lambda t: torch.cumprod(t, 1), [x])
    assert mg.gradcheck(lambda t: ops.cumprod(t, 1), leaves(x))


def test_norm_of_zero_has_a_zero_gradient_like_torch():
    compare_with_torch(ops.norm, torch.linalg.vector_norm, [np.zeros((2, 3))])


def test_remainder_matches_python_and_torch_signs():
    a = np.array([5.5, -5.5, 5.5, -5.5, 0.25])
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.5])
    compare_with_torch(ops.remainder, torch.remainder, [a, b])


def test_sort_indices_are_stable_and_nan_goes_where_torch_puts_it():
    x = np.array([[3.0, 1.0, 3.0, np.nan, 1.0, 2.0]])
    for descending in (False, True):
        values, indices = ops.sort(mg.tensor(x), descending=descending)
        ref = torch.sort(torch.tensor(x), descending=descending, stable=True)
        np.testing.assert_array_equal(values.numpy(), ref.values.numpy())
        np.testing.assert_array_equal(indices.numpy(), ref.indices.numpy())
    np.testing.assert_array_equal(ops.argsort(mg.tensor([2, 0, 1])).numpy(), [1, 2, 0])
    _, top = ops.topk(mg.tensor(x[:, :3]), 2)
    np.testing.assert_array_equal(top.numpy(), torch.topk(torch.tensor(x[:, :3]), 2).indices)


@pytest.mark.parametrize("ours,theirs,dim", [
    (lambda t: ops.split(t, 2, 1), lambda t: torch.split(t, 2, 1), 1),
    (lambda t: ops.split(t, [1, 3], 1), lambda t: torch.split(t, [1, 3], 1), 1),
    (lambda t: ops.chunk(t, 3, -1), lambda t: torch.chunk(t, 3, -1), -1)])
def test_split_and_chunk_give_torchs_pieces_and_gradients(ours, theirs, dim):
    assert [p.shape for p in ours(mg.tensor(X))] == [tuple(e.shape)
                                                       for e in theirs(torch.tensor(X))]
    # each piece weighted differently, so a gradient sent to the wrong piece shows
    compare_with_torch(lambda t: ops.concatenate([p * (k + 1) for k, p in enumerate(ours(t))], dim),
                       lambda t: torch.cat([p * (k + 1) for k, p in enumerate(theirs(t))], dim),
                       [X])


def test_errors_name_the_op_and_what_was_expected():
    t = mg.tensor(X)
    with pytest.raises(ValueError, match="flip: axis 3 is out of range"):
        ops.flip(t, 3)
    with pytest.raises(ValueError, match=r"roll: 1 shifts for 2 dims"):
        ops.roll(t, 1, (0, 1))
    with pytest.raises(ValueError, match=r"diagonal: dim1 and dim2 are the same axis 1"):
        ops.diagonal(t, 0, 1, -2)
    with pytest.raises(ValueError, match=r"tril: needs a tensor with at least 2 dims"):
        ops.tril(mg.zeros(3))
    with pytest.raises(ValueError, match=r"repeat: sizes \(2,\) must be non-negative ints, at "
                                         r"least one per axis"):
        ops.repeat(t, (2,))
    with pytest.raises(ValueError, match=r"split: sections \[1, 1\] sum to 2"):
        ops.split(t, [1, 1], 0)
    with pytest.raises(ValueError, match=r"topk: k=6 must be an int in \[0, 5\]"):
        ops.topk(t, 6)
    with pytest.raises(TypeError, match=r"cumsum: dim is required"):
        ops.cumsum(t, None)
    with pytest.raises(ValueError, match=r"norm: p must be 'fro' or a number"):
        ops.norm(t, "nuc")
    with pytest.raises(TypeError, match=r"softmax: expected a floating tensor"):
        ops.softmax(mg.tensor([1, 2]))   # sin of an int tensor is float32, as in torch
