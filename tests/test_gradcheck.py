"""gradcheck and gradgradcheck: they pass right gradients, catch wrong ones, name the worst
element, work in float64 on copies, and answer by raising or by returning False."""
import numpy as np
import pytest

import minigrad as mg
from minigrad.ops import Op


class Cube(Op):
    """x^3;  dx = 3 x^2 g."""

    @staticmethod
    def forward(ctx, x):
        ctx.save(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return g * 3 * x * x


class CubeWrongAtOneElement(Cube):
    """The right derivative except at flat index 4, where it is 1% too large."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        bump = np.ones(x.shape)
        bump.reshape(-1)[4] = 1.01
        return g * 3 * x * x * mg.tensor(bump)


class CubeDetachedBackward(Cube):
    """Right first derivative, but computed from detached data: its own derivative is lost."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved
        return g * (x.detach() * x.detach() * 3)


def inputs(*shape, seed=0):
    values = np.random.default_rng(seed).uniform(0.5, 1.5, size=shape)
    return mg.tensor(values, requires_grad=True)


def test_right_gradients_pass():
    assert mg.gradcheck(Cube.apply, inputs(2, 3))
    assert mg.gradgradcheck(Cube.apply, inputs(2, 3))
    a, b = inputs(2, 3), inputs(3, seed=1)
    assert mg.gradcheck(lambda p, q: (p * q).exp() / (q + p * p), (a, b))
    assert mg.gradgradcheck(lambda p, q: (p * q).tanh(), [a, b])


def test_a_wrong_gradient_raises_naming_the_worst_element():
    with pytest.raises(mg.GradcheckError,
                       match=r"input 0 at index \(1, 1\): analytic [-\d.e]+, numeric [-\d.e]+"):
        mg.gradcheck(CubeWrongAtOneElement.apply, inputs(2, 3))
    constant = mg.tensor(np.ones(2))
    with pytest.raises(mg.GradcheckError, match=r"input 2 at index \(4,\)"):
        mg.gradcheck(lambda c, ok, bad: c * ok.sum() + CubeWrongAtOneElement.apply(bad).sum(),
                     (constant, inputs(3), inputs(6)))


def test_raise_exception_false_returns_false():
    assert mg.gradcheck(CubeWrongAtOneElement.apply, inputs(2, 3), raise_exception=False) is False
    assert mg.gradgradcheck(CubeDetachedBackward.apply, inputs(3),
                            raise_exception=False) is False
    assert mg.gradcheck(CubeDetachedBackward.apply, inputs(3))   # first derivatives are right


def test_tolerances_decide():
    # a 1% error passes a 2% relative tolerance and fails a 0.5% one
    assert mg.gradcheck(CubeWrongAtOneElement.apply, inputs(2, 3), rtol=0.02)
    assert not mg.gradcheck(CubeWrongAtOneElement.apply, inputs(2, 3), rtol=0.005,
                            raise_exception=False)


def test_checks_in_float64_on_copies_of_the_inputs():
    seen = []

    def fn(x):
        seen.append(x.dtype)
        return x * x

    x = mg.tensor([0.5, 1.0, 1.5], requires_grad=True)        # float32
    before = x.detach().numpy().copy()
    assert mg.gradcheck(fn, x)
    assert set(seen) == {np.dtype("float64")}
    assert x.dtype == np.float32 and x.grad is None
    np.testing.assert_array_equal(x.detach().numpy(), before)


def test_non_contiguous_inputs_are_checked_as_they_are():
    base = np.random.default_rng(3).standard_normal((4, 3))
    x = mg.tensor(base, requires_grad=True)
    x.array = x.array.T                                            # a transposed view
    assert not x.array.flags.c_contiguous
    layouts = []

    def fn(t):
        layouts.append(t.array.flags.c_contiguous)
        return t * t.sum(axis=0, keepdims=True)

    assert mg.gradcheck(fn, x)
    assert layouts[0] is False


def test_works_inside_no_grad_and_with_several_outputs():
    def two(x):
        return x.exp(), x * 2, x.numel()                           # a non-tensor output is skipped

    with mg.no_grad():
        assert mg.gradcheck(two, inputs(3))


def test_bad_calls():
    with pytest.raises(ValueError, match="no input requires grad"):
        mg.gradcheck(Cube.apply, mg.tensor([1.0]))
    with pytest.raises(mg.GradcheckError, match="no output requires grad"):
        mg.gradcheck(lambda x: x.detach(), inputs(2))
    assert mg.gradcheck(lambda x: x * 2, mg.zeros(0, 3, requires_grad=True))   # nothing to check
