"""matmul against PyTorch for every operand rank, batch broadcasting and non-contiguous
operands; gradcheck, second derivatives and errors."""
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
