"""Shape ops (reshape, transpose, broadcast_to, getitem, concatenate, stack, pad) against
PyTorch, gradcheck, second derivatives and errors."""
import numpy as np
import pytest
import torch

import minigrad as mg

from ops_oracle import check_vjp_derivatives, compare_with_torch, leaves, non_contiguous, rng

X = rng(0).standard_normal((3, 4, 5))


@pytest.mark.parametrize("mg_fn, torch_fn", [
    (lambda t: mg.ops.reshape(t, (4, 15)), lambda t: t.reshape(4, 15)),
    (lambda t: mg.ops.reshape(t, (-1, 5)), lambda t: t.reshape(-1, 5)),
    (lambda t: mg.ops.transpose(t), lambda t: t.permute(2, 1, 0)),
    (lambda t: mg.ops.permute(t, (1, 2, 0)), lambda t: t.permute(1, 2, 0)),
    (lambda t: mg.ops.permute(t, (-1, 0, 1)), lambda t: t.permute(2, 0, 1)),
    (lambda t: mg.ops.broadcast_to(t[:, :1], (2, 3, 4, 5)), lambda t: t[:, :1].expand(2, 3, 4, 5)),
], ids=["reshape", "reshape_infer", "transpose", "permute", "permute_negative", "broadcast_to"])
@pytest.mark.parametrize("layout", ["contiguous", "non_contiguous"])
def test_view_ops_match_torch(mg_fn, torch_fn, layout):
    x = X if layout == "contiguous" else non_contiguous(X)
    compare_with_torch(mg_fn, torch_fn, [x])
    assert mg.gradcheck(mg_fn, leaves(X))
    check_vjp_derivatives(mg_fn, [X])


def test_shape_op_errors_name_the_op():
    with pytest.raises(ValueError, match=r"reshape: cannot reshape a tensor of shape \(3, 4, 5\)"):
        mg.ops.reshape(mg.tensor(X), (7, -1))
    with pytest.raises(ValueError, match="permute: .* is not a permutation"):
        mg.ops.permute(mg.tensor(X), (0, 0, 1))
    with pytest.raises(ValueError, match=r"broadcast_to: cannot broadcast shape \(3, 4, 5\)"):
        mg.ops.broadcast_to(mg.tensor(X), (3, 4, 6))


# ------------------------------------------------------------------------- getitem

IDX = np.array([2, 0, 2, 1])
MASK = np.array([True, False, True, True])

INDEXES = {
    "int": (1, 1),
    "negative_int": (-1, -1),
    "slice_step": (np.s_[::2, 1:3], np.s_[::2, 1:3]),
    "none_ellipsis": (np.s_[None, ..., 1], np.s_[None, ..., 1]),
    "int_array_repeats": (IDX[:3], torch.tensor(IDX[:3])),
    "int_arrays_broadcast": ((IDX[:3, None], IDX[None, :]), (torch.tensor(IDX[:3, None]),
                                                             torch.tensor(IDX[None, :]))),
    "mixed_basic_advanced": (np.s_[1:, IDX, ::2], (slice(1, None), torch.tensor(IDX),
                                                   slice(None, None, 2))),
    "bool_mask": (np.s_[:, MASK], (slice(None), torch.tensor(MASK))),
    "list": ([0, 0, 2], [0, 0, 2]),
    "full_mask": (X > 0, torch.tensor(X > 0)),
}


@pytest.mark.parametrize("name", INDEXES)
def test_getitem_matches_torch(name):
    mg_index, torch_index = INDEXES[name]
    compare_with_torch(lambda t: t[mg_index], lambda t: t[torch_index], [X])
    compare_with_torch(lambda t: t[mg_index], lambda t: t[torch_index], [non_contiguous(X)])


@pytest.mark.parametrize("name", INDEXES)
def test_getitem_gradcheck_and_second_derivatives(name):
    index = INDEXES[name][0]
    x = X[:, :, :3] if name != "full_mask" else X
    index = (x > 0) if name == "full_mask" else index
    assert mg.gradcheck(lambda t: t[index], leaves(x))
    check_vjp_derivatives(lambda t: t[index] * t[index], [x])


def test_getitem_accepts_index_tensors():
    ints, mask = mg.tensor(IDX[:3]), mg.tensor(MASK)   # the mask picks 3 positions
    compare_with_torch(lambda t: t[ints, 1:, mask], lambda t: t[torch.tensor(IDX[:3]), 1:,
                       torch.tensor(MASK)], [X[:, :, :4]])
    compare_with_torch(lambda t: t[mg.tensor(X) > 0], lambda t: t[torch.tensor(X) > 0], [X])


def test_getitem_negative_step_matches_numpy():   # PyTorch has no negative steps
    t = mg.tensor(X, requires_grad=True)
    out = t[::-1, 1, ::-2]
    np.testing.assert_array_equal(out.detach().numpy(), X[::-1, 1, ::-2])
    assert mg.gradcheck(lambda t: t[::-1, 1, ::-2], leaves(X))


def test_repeated_indices_accumulate_their_gradients():
    t = mg.tensor(np.zeros(3), requires_grad=True)
    t[np.array([0, 0, 2, 0])].backward(mg.tensor(np.array([1.0, 2.0, 3.0, 4.0])))
    np.testing.assert_array_equal(t.grad.numpy(), [7.0, 0.0, 3.0])


def test_iterating_a_tensor_stops_at_its_length():
    rows = list(mg.tensor(X[:, :, 0]))
    assert len(rows) == 3 and rows[2].shape == (4,)


def test_getitem_errors_name_the_op():
    t = mg.tensor(X)
    with pytest.raises(IndexError, match=r"getitem: .*\(tensor of shape \(3, 4, 5\)\)"):
        t[3]
    with pytest.raises(IndexError, match="getitem"):
        t[np.array([0, 5])]
    with pytest.raises(TypeError, match="getitem: an index must hold ints or bools, got float64"):
        t[np.array([0.5])]


# ------------------------------------------------------------------------- join and pad

A, B, C = (rng(1).standard_normal(shape) for shape in [(2, 3), (2, 1), (2, 4)])


@pytest.mark.parametrize("axis", [1, -1])
def test_concatenate_matches_torch(axis):
    fn = lambda a, b, c: mg.ops.concatenate([a, b, c], axis=axis)   # noqa: E731
    compare_with_torch(fn, lambda a, b, c: torch.cat([a, b, c], dim=axis),
                       [non_contiguous(A), B, C])
    assert mg.gradcheck(fn, leaves(A, B, C))
    check_vjp_derivatives(fn, [A, B, C])


def test_concatenate_gives_gradients_only_where_needed():
    a, b = mg.tensor(A, requires_grad=True), mg.tensor(A[:, :1])
    mg.ops.concatenate([a, b], axis=1).backward(mg.ones(2, 4, dtype="float64"))
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))
    assert b.grad is None


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_matches_torch(axis):
    fn = lambda a, b: mg.ops.stack([a, b], axis=axis)   # noqa: E731
    compare_with_torch(fn, lambda a, b: torch.stack([a, b], dim=axis), [non_contiguous(A), A * 2])
    assert mg.gradcheck(fn, leaves(A, -A))
    check_vjp_derivatives(fn, [A, -A])


def test_join_errors_name_the_op_and_shapes():
    with pytest.raises(ValueError, match=r"concatenate: input 1 has shape \(3, 1\) but input 0 "
                                         r"has shape \(2, 3\)"):
        mg.ops.concatenate([mg.tensor(A), mg.zeros(3, 1)], axis=1)
    with pytest.raises(ValueError, match=r"stack: input 1 has shape \(2, 1\)"):
        mg.ops.stack([mg.tensor(A), mg.tensor(B)])
    with pytest.raises(ValueError, match="concatenate: axis 2 is out of range"):
        mg.ops.concatenate([mg.tensor(A), mg.tensor(A)], axis=2)
    with pytest.raises(ValueError, match="concatenate: needs at least one tensor"):
        mg.ops.concatenate([])


@pytest.mark.parametrize("pad_width, torch_pad", [
    (1, (1, 1, 1, 1, 1, 1)),
    ((2, 1), (2, 1, 2, 1, 2, 1)),
    (((1, 0), (0, 2), (3, 1)), (3, 1, 0, 2, 1, 0)),
    ([[0, 1]], (0, 1, 0, 1, 0, 1)),
], ids=["int", "pair", "per_axis", "one_pair_list"])
def test_pad_matches_torch_and_numpy(pad_width, torch_pad):
    x = X[:2, :3, :2]
    fn = lambda t: mg.ops.pad(t, pad_width, value=0.5)   # noqa: E731
    compare_with_torch(fn, lambda t: torch.nn.functional.pad(t, torch_pad, value=0.5),
                       [non_contiguous(x)])
    np.testing.assert_array_equal(fn(mg.tensor(x)).numpy(),
                                  np.pad(x, pad_width, constant_values=0.5))
    assert mg.gradcheck(fn, leaves(x))
    check_vjp_derivatives(fn, [x])


def test_pad_errors_name_the_op():
    with pytest.raises(ValueError, match="pad: pad widths must be non-negative"):
        mg.ops.pad(mg.tensor(A), -1)
    with pytest.raises(ValueError, match="pad: pad_width .* does not fit a tensor with 2 dims"):
        mg.ops.pad(mg.tensor(A), ((1, 1), (1, 1), (1, 1)))
