"""matmul against PyTorch for every operand rank, batch broadcasting and non-contiguous
operands; linear (F.linear's one op) for every input rank, with and without bias; gradcheck,
second derivatives and errors."""
import numpy as np
import pytest
import torch

import minigrad as mg

from ops_oracle import compare_with_torch, leaves, non_contiguous, rng

SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
          ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5)), ((2, 3, 4), (4,))]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_matches_torch(shapes):
    r = rng(0)
    a, b = r.standard_normal(shapes[0]), r.standard_normal(shapes[1])
    compare_with_torch(mg.ops.matmul, torch.matmul, [a, b])
    compare_with_torch(mg.ops.matmul, torch.matmul, [non_contiguous(a), non_contiguous(b)])


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_gradcheck_and_gradgradcheck(shapes):
    r = rng(1)
    inputs = leaves(r.standard_normal(shapes[0]), r.standard_normal(shapes[1]))
    assert mg.gradcheck(mg.ops.matmul, inputs)
    assert mg.gradgradcheck(mg.ops.matmul, inputs)


def test_matmul_gradient_only_where_needed():
    a = mg.tensor(rng(2).standard_normal((2, 3)), requires_grad=True)
    b = mg.tensor(rng(3).standard_normal((3, 4)))
    (a @ b).sum().backward()
    assert a.grad.shape == (2, 3) and b.grad is None


@pytest.mark.parametrize("a, b", [((2, 3), (4, 5)), ((3,), (4,)), ((), (3,)),
                                  ((2, 3, 4), (5, 4, 2))], ids=str)
def test_matmul_shape_mismatch_names_the_op_and_shapes(a, b):
    with pytest.raises(ValueError, match=r"matmul: shapes"):
        mg.ops.matmul(mg.zeros(*a), mg.zeros(*b))


LINEAR_SHAPES = [(4,), (3, 4), (2, 3, 4), (0, 4), (2, 0, 4)]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("x_shape", LINEAR_SHAPES, ids=str)
def test_linear_matches_torch(x_shape, bias):
    r = rng(4)
    arrays = [r.standard_normal(x_shape), r.standard_normal((5, 4))] + (
        [r.standard_normal(5)] if bias else [])
    compare_with_torch(mg.ops.linear, torch.nn.functional.linear, arrays)
    if 0 not in x_shape:   # an empty array has no other layout
        compare_with_torch(mg.ops.linear, torch.nn.functional.linear,
                           [non_contiguous(a) for a in arrays])


@pytest.mark.parametrize("x_shape", [(4,), (3, 4), (2, 3, 4)], ids=str)
def test_linear_gradcheck_and_gradgradcheck(x_shape):
    r = rng(5)
    inputs = leaves(r.standard_normal(x_shape), r.standard_normal((5, 4)), r.standard_normal(5))
    assert mg.gradcheck(mg.ops.linear, inputs)
    assert mg.gradgradcheck(mg.ops.linear, inputs)


def test_linear_is_one_node_and_computes_only_the_gradients_asked_for():
    x = mg.tensor(rng(6).standard_normal((3, 4)))
    weight = mg.tensor(rng(7).standard_normal((5, 4)), requires_grad=True)
    out = mg.ops.linear(x, weight, mg.zeros(5, dtype="float64"))
    assert out.grad_fn.name == "linear"
    out.sum().backward()
    np.testing.assert_allclose(weight.grad.numpy(), np.ones((5, 3)) @ x.numpy())


@pytest.mark.parametrize("x, weight, bias, message", [
    ((3, 4), (5, 3), None, r"linear: input of shape \(3, 4\) does not fit weight of shape"),
    ((3, 4), (4,), None, "linear: input of shape"),
    ((3, 4), (5, 4), (4,), r"linear: bias of shape \(4,\) does not fit weight of shape"),
], ids=["in_features", "weight_1d", "bias"])
def test_linear_shape_errors_name_the_op_and_shapes(x, weight, bias, message):
    with pytest.raises(ValueError, match=message):
        mg.ops.linear(mg.zeros(*x), mg.zeros(*weight), None if bias is None else mg.zeros(*bias))
