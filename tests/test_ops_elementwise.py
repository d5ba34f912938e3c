"""Elementwise ops against PyTorch (forward and backward, broadcasting, non-contiguous inputs),
finite differences, second derivatives and errors."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad.ops import Op

from ops_oracle import (
    BINARY,
    check_vjp_derivatives,
    compare_with_torch,
    leaves,
    non_contiguous,
    rng,
)

SHAPE_PAIRS = [((3, 4), (3, 4)), ((2, 3, 1), (4,)), ((1, 4), (3, 1)), ((), (2, 3)), ((5,), ())]


def _binary_inputs(name, shape_a, shape_b, seed=0):
    r = rng(seed)
    a, b = r.standard_normal(shape_a), r.standard_normal(shape_b)
    if name == "pow":
        a = np.abs(a) + 0.5       # real powers of positive bases
    if name == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    return a, b


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
def test_binary_matches_torch_with_broadcasting(name, shapes):
    a, b = _binary_inputs(name, *shapes)
    compare_with_torch(*BINARY[name], [a, b])


@pytest.mark.parametrize("name", BINARY)
def test_binary_matches_torch_on_non_contiguous_inputs(name):
    a, b = _binary_inputs(name, (4, 3), (4, 3), seed=1)
    compare_with_torch(*BINARY[name], [non_contiguous(a), b[::-1]])


@pytest.mark.parametrize("name", BINARY)
def test_binary_gradcheck(name):
    a, b = _binary_inputs(name, (2, 3), (3,), seed=2)
    assert mg.gradcheck(BINARY[name][0], leaves(a, b))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div"])
def test_binary_with_a_number_on_either_side(name):
    mg_fn, torch_fn = BINARY[name]
    a = rng(3).standard_normal((2, 3)) + 3.0
    compare_with_torch(lambda x: mg_fn(x, 2.5), lambda x: torch_fn(x, 2.5), [a])
    compare_with_torch(lambda x: mg_fn(2.5, x), lambda x: torch_fn(torch.tensor(2.5,
                       dtype=torch.float64), x), [a])


def test_maximum_splits_the_gradient_on_ties_like_torch():
    a = np.array([1.0, 2.0, 3.0, -1.0])
    b = np.array([1.0, 0.0, 3.0, 5.0])
    compare_with_torch(mg.ops.maximum, torch.maximum, [a, b])


UNARY = {
    "neg": (mg.ops.neg, torch.neg, None),
    "exp": (mg.ops.exp, torch.exp, None),
    "log": (mg.ops.log, torch.log, "positive"),
    "sqrt": (mg.ops.sqrt, torch.sqrt, "positive"),
    "relu": (mg.ops.relu, torch.relu, None),
    "tanh": (mg.ops.tanh, torch.tanh, None),
    "sigmoid": (mg.ops.sigmoid, torch.sigmoid, None),
    "square": (lambda x: mg.ops.pow(x, 2), lambda x: torch.pow(x, 2), None),
    "cube": (lambda x: mg.ops.pow(x, 3), lambda x: torch.pow(x, 3), None),
    "pow_half": (lambda x: mg.ops.pow(x, 0.5), lambda x: torch.pow(x, 0.5), "positive"),
    "reciprocal": (lambda x: mg.ops.pow(x, -1), lambda x: torch.pow(x, -1), "positive"),
    "pow_one": (lambda x: mg.ops.pow(x, 1), lambda x: torch.pow(x, 1), None),
}


def _unary_input(domain, shape=(3, 4), seed=0):
    x = rng(seed).standard_normal(shape)
    return np.abs(x) + 0.1 if domain == "positive" else x


@pytest.mark.parametrize("name", UNARY)
def test_unary_matches_torch(name):
    mg_fn, torch_fn, domain = UNARY[name]
    x = _unary_input(domain)
    compare_with_torch(mg_fn, torch_fn, [x])
    compare_with_torch(mg_fn, torch_fn, [non_contiguous(x)])


@pytest.mark.parametrize("name", UNARY)
def test_unary_gradcheck(name):
    mg_fn, _, domain = UNARY[name]
    assert mg.gradcheck(mg_fn, leaves(_unary_input(domain, (2, 3), seed=4)))


def test_relu_gradient_at_zero_is_zero_like_torch():
    compare_with_torch(mg.ops.relu, torch.relu, [np.array([-1.0, 0.0, 2.0])])


def test_sigmoid_does_not_overflow():
    x = np.array([-1000.0, -30.0, 0.0, 30.0, 1000.0])
    compare_with_torch(mg.ops.sigmoid, torch.sigmoid, [x])


def test_where_matches_torch_with_broadcast_condition():
    r = rng(5)
    condition = np.array([[True], [False], [True]])
    a, b = r.standard_normal((3, 4)), r.standard_normal((4,))
    compare_with_torch(lambda x, y: mg.ops.where(condition, x, y),
                       lambda x, y: torch.where(torch.tensor(condition), x, y), [a, b])
    assert mg.gradcheck(lambda x, y: mg.ops.where(condition, x, y), leaves(a, b))


def test_where_takes_a_boolean_tensor_and_numbers():
    x = mg.tensor(np.array([1.0, -2.0, 3.0]), requires_grad=True)
    out = mg.ops.where(x > 0, x, 0.0)
    out.backward(mg.tensor(np.array([1.0, 1.0, 1.0])))
    np.testing.assert_array_equal(out.detach().numpy(), [1.0, 0.0, 3.0])
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 0.0, 1.0])


def test_cast_matches_torch_and_returns_the_gradient_in_the_input_dtype():
    x = rng(6).standard_normal((2, 3))
    compare_with_torch(lambda t: mg.ops.cast(t, "float32") * 2,
                       lambda t: t.to(torch.float32) * 2, [x], atol=1e-6, rtol=1e-6)
    t = mg.tensor(x, requires_grad=True)
    mg.ops.cast(t, "float32").sum().backward()
    assert t.grad.dtype == np.float64
    assert mg.gradcheck(lambda t: mg.ops.cast(t, "float64") * t, leaves(x))


def test_mixed_float_dtypes_promote_like_numpy_and_torch():
    a32 = mg.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    b64 = mg.tensor(np.full((2,), 3.0), requires_grad=True)
    out = a32 * b64
    assert out.dtype == np.float64
    out.backward(mg.tensor(np.ones((2, 2))))
    assert a32.grad.dtype == np.float32 and b64.grad.dtype == np.float64
    np.testing.assert_array_equal(b64.grad.numpy(), [2.0, 2.0])


# ------------------------------------------------------------------------- second derivatives

@pytest.mark.parametrize("fn", [
    lambda a, b: a * b / (b * b + 1.0),             # mul, div, add
    lambda a, b: (a - b) * (a + b),                 # add, sub
    lambda a, b: mg.ops.exp(a) * mg.ops.log(b * b + 1.0),
    lambda a, b: mg.ops.sqrt(a * a + 1.0) * mg.ops.pow(b, 3),
    lambda a, b: mg.ops.tanh(a) * mg.ops.sigmoid(b),
    lambda a, b: mg.ops.pow(a * a + 1.0, b),        # tensor exponent
], ids=["arith", "add_sub", "exp_log", "sqrt_pow", "tanh_sigmoid", "tensor_pow"])
def test_gradgradcheck_elementwise_families(fn):
    r = rng(7)
    assert mg.gradgradcheck(fn, leaves(r.standard_normal((2, 3)), r.standard_normal((3,))))


@pytest.mark.parametrize("fn", [
    lambda a, b: mg.ops.maximum(a, b) * a,
    lambda a, b: mg.ops.relu(a) * b,
    lambda a, b: mg.ops.where(a.array > 0, a * b, -b),
    lambda a, b: mg.ops.neg(a) + b,
], ids=["maximum", "relu", "where", "neg_add"])
def test_second_derivatives_of_piecewise_and_linear_ops(fn):
    r = rng(8)
    check_vjp_derivatives(fn, [r.standard_normal((2, 3)), r.standard_normal((2, 3))])


# ------------------------------------------------------------------------- errors

@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum"])
def test_shape_mismatch_names_the_op_and_shapes(name):
    with pytest.raises(ValueError, match=rf"{name}: shapes \(2, 3\) and \(4, 3\)"):
        BINARY[name][0](mg.zeros(2, 3), mg.zeros(4, 3))


def test_where_shape_mismatch_names_the_op():
    with pytest.raises(ValueError, match="where"):
        mg.ops.where(np.ones((2, 3), bool), mg.zeros(2, 3), mg.zeros(4, 3))


def test_where_condition_shape_mismatch_names_the_op():
    with pytest.raises(ValueError, match=r"where: shapes \(3,\) and \(2, 1\) and \(2, 4\)"):
        mg.ops.where(np.ones(3, bool), mg.zeros(2, 1), mg.zeros(2, 4))


# ------------------------------------------------------------------------- gradcheck itself

class _BadSquare(Op):
    """x^2 with a deliberately wrong backward (g x instead of 2 g x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return g * x


def test_gradcheck_catches_a_wrong_backward():
    x = leaves(rng(9).standard_normal((3,)) + 2.0)
    assert mg.gradcheck(_BadSquare.apply, x, raise_exception=False) is False
    with pytest.raises(mg.GradcheckError, match="mismatch"):
        mg.gradcheck(_BadSquare.apply, x)
    assert mg.gradcheck(lambda t: t * t, x)   # the right formula passes


def test_abs_and_pow_zero_have_pytorchs_gradient_at_zero():
    import torch

    values = [-1.5, 0.0, 2.0]
    for f in (lambda t: t.abs(), lambda t: t ** 0, lambda t: t ** 2):
        x = mg.tensor(values, requires_grad=True)
        f(x).sum().backward()
        xt = torch.tensor(values, requires_grad=True)
        f(xt).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
