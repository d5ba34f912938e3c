"""mg.autograd.Function against torch.autograd.Function, and the two traps of mg.ops.Op.

Each custom Function here is written once, against a module `lib` that is either torch or
minigrad, so the same source runs in both frameworks: porting is renaming. The cases follow
what PyTorch's own test_autograd.py checks for custom Functions (non-tensor arguments, several
and non-tensor outputs, None gradients, materialized gradients, non-differentiable and dirty
outputs, returning an input, saved-tensor versions, double backward), plus the tutorials:
LegendrePolynomial3 from "Learning PyTorch with Examples" and Exp / MyReLU / LinearFunction /
MulConstant from the docs' "Extending PyTorch".
"""
import math

import numpy as np
import pytest
import torch

import minigrad as mg

LIBS = pytest.mark.parametrize("lib", [torch, mg], ids=["torch", "mg"])


def arr(t):
    return t.detach().numpy()


def same(mg_value, torch_value, rtol=1e-6, atol=1e-7):
    np.testing.assert_allclose(arr(mg_value), arr(torch_value), rtol=rtol, atol=atol)


# ----------------------------------------------------------------------------------------------
# The tutorials, written once for both frameworks


def legendre_fit(torch, steps):   # noqa: A002 (the tutorial's code, with `torch` a parameter)
    """"Learning PyTorch with Examples": fit a + b * P3(c + d * x) to sin(x)."""
    class LegendrePolynomial3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input):   # noqa: A002
            ctx.save_for_backward(input)
            return 0.5 * (5 * input ** 3 - 3 * input)

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors   # noqa: A001
            return grad_output * 1.5 * (5 * input ** 2 - 1)

    dtype = torch.float
    device = torch.device("cpu")
    x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
    y = torch.sin(x)
    a = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
    b = torch.full((), -1.0, device=device, dtype=dtype, requires_grad=True)
    c = torch.full((), 0.0, device=device, dtype=dtype, requires_grad=True)
    d = torch.full((), 0.3, device=device, dtype=dtype, requires_grad=True)
    learning_rate = 5e-6
    losses = []
    for _ in range(steps):
        P3 = LegendrePolynomial3.apply
        y_pred = a + b * P3(c + d * x)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            a -= learning_rate * a.grad
            b -= learning_rate * b.grad
            c -= learning_rate * c.grad
            d -= learning_rate * d.grad
            a.grad = None
            b.grad = None
            c.grad = None
            d.grad = None
    return losses, [a.item(), b.item(), c.item(), d.item()]


def test_legendre_tutorial_ports_by_renaming():
    mg_losses, mg_params = legendre_fit(mg, 60)
    torch_losses, torch_params = legendre_fit(torch, 60)
    np.testing.assert_allclose(mg_losses, torch_losses, rtol=1e-4)
    np.testing.assert_allclose(mg_params, torch_params, rtol=1e-4, atol=1e-6)
    assert mg_losses[-1] < mg_losses[0]


def relu_net(torch, x_data, y_data, w1_data, w2_data, steps):   # noqa: A002
    """The two-layer network of the old tutorial, with a custom ReLU."""
    class MyReLU(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input):   # noqa: A002
            ctx.save_for_backward(input)
            return input.clamp(min=0)

        @staticmethod
        def backward(ctx, grad_output):
            input, = ctx.saved_tensors   # noqa: A001
            grad_input = grad_output.clone()
            grad_input[input < 0] = 0
            return grad_input

    x, y = torch.tensor(x_data), torch.tensor(y_data)
    w1 = torch.tensor(w1_data, requires_grad=True)
    w2 = torch.tensor(w2_data, requires_grad=True)
    losses = []
    for _ in range(steps):
        y_pred = MyReLU.apply(x.mm(w1)).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        losses.append(loss.item())
        loss.backward()
        with torch.no_grad():
            w1 -= 1e-6 * w1.grad
            w2 -= 1e-6 * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    return losses, w1.detach().numpy().copy(), w2.detach().numpy().copy()


def test_my_relu_tutorial_ports_by_renaming():
    rng = np.random.default_rng(0)
    data = [rng.standard_normal(s).astype(np.float32) for s in [(64, 100), (64, 10),
                                                               (100, 50), (50, 10)]]
    mg_run = relu_net(mg, *data, steps=20)
    torch_run = relu_net(torch, *data, steps=20)
    np.testing.assert_allclose(mg_run[0], torch_run[0], rtol=1e-4)
    np.testing.assert_allclose(mg_run[1], torch_run[1], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(mg_run[2], torch_run[2], rtol=1e-4, atol=1e-6)


def extending_functions(lib):
    """The docs' examples: Exp (saves its output), LinearFunction (needs_input_grad, an optional
    input), MulConstant (a non-tensor argument), and LinearFunction in the setup_context form."""
    class Exp(lib.autograd.Function):
        @staticmethod
        def forward(ctx, i):
            result = i.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad_output):
            result, = ctx.saved_tensors
            return grad_output * result

    class LinearFunction(lib.autograd.Function):
        @staticmethod
        def forward(ctx, input, weight, bias=None):   # noqa: A002
            ctx.save_for_backward(input, weight, bias)
            output = input.mm(weight.t())
            if bias is not None:
                output += bias.unsqueeze(0).expand_as(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors   # noqa: A001
            grad_input = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.mm(weight)
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output.t().mm(input)
            if bias is not None and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(0)
            return grad_input, grad_weight, grad_bias

    class MulConstant(lib.autograd.Function):
        @staticmethod
        def forward(ctx, tensor, constant):
            ctx.constant = constant
            return tensor * constant

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output * ctx.constant, None

    class LinearSetup(lib.autograd.Function):
        @staticmethod
        def forward(input, weight, bias):   # noqa: A002
            return input.mm(weight.t()) + bias

        @staticmethod
        def setup_context(ctx, inputs, output):
            input, weight, bias = inputs   # noqa: A001
            ctx.save_for_backward(input, weight)

        @staticmethod
        def backward(ctx, grad_output):
            input, weight = ctx.saved_tensors   # noqa: A001
            return grad_output.mm(weight), grad_output.t().mm(input), grad_output.sum(0)

    return Exp, LinearFunction, MulConstant, LinearSetup


def test_extending_pytorch_examples_match_torch():
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s) for s in [(4, 3), (2, 3), (2,)])
    results = {}
    for lib in (mg, torch):
        Exp, Linear, MulConstant, LinearSetup = extending_functions(lib)
        xt, wt, bt = (lib.tensor(v, requires_grad=True) for v in (x, w, b))
        frozen = lib.tensor(w)   # needs no gradient: backward skips it
        loss = (Exp.apply(xt).sum() + Linear.apply(xt, wt, bt).pow(2).sum()
                + Linear.apply(xt, frozen).sum() + MulConstant.apply(xt, 2.5).sum()
                + LinearSetup.apply(xt, wt, bt).sin().sum())
        loss.backward()
        results[lib] = [loss, xt.grad, wt.grad, bt.grad]
    for m, t in zip(results[mg], results[torch], strict=True):
        same(m, t)
    mg_exp = extending_functions(mg)[0]
    x64 = mg.tensor(x, requires_grad=True)
    assert mg.gradcheck(mg_exp.apply, x64) and mg.gradgradcheck(mg_exp.apply, x64)


def square_function(lib):
    """Square: x * x, saving its input; dx = 2 * x * g."""
    class Square(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * x * g

    return Square


def half_function(lib):
    """Half: MulConstant (x * k) whose backward returns one gradient for its two inputs."""
    class Half(extending_functions(lib)[2]):
        @staticmethod
        def backward(ctx, g):
            return g

    return Half


# ----------------------------------------------------------------------------------------------
# Higher derivatives: the backward is recorded with create_graph=True


def cube_and_silu(lib):
    class Cube(lib.autograd.Function):   # saves its input
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * g * x ** 2

    class Silu(lib.autograd.Function):   # saves input and output, recomputes sigmoid
        @staticmethod
        def forward(ctx, x):
            y = x * x.sigmoid()
            ctx.save_for_backward(x, y)
            return y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            s = x.sigmoid()
            return g * (s + y * (1 - s))

    return Cube, Silu


@pytest.mark.parametrize("which", [0, 1], ids=["cube", "silu"])
def test_double_and_triple_backward_match_torch(which):
    data = np.linspace(-2, 2, 7)
    values = {}
    for lib in (mg, torch):
        f = cube_and_silu(lib)[which]
        x = lib.tensor(data, requires_grad=True)
        g, = lib.autograd.grad(f.apply(x).sum(), x, create_graph=True)
        gg, = lib.autograd.grad(g.sum(), x, create_graph=True)
        ggg, = lib.autograd.grad(gg.sum(), x)
        values[lib] = (g, gg, ggg)
    for m, t in zip(values[mg], values[torch], strict=True):
        same(m, t)
    x = mg.tensor(data, requires_grad=True)
    f = cube_and_silu(mg)[which]
    assert mg.gradcheck(f.apply, x) and mg.gradgradcheck(f.apply, x)
    if which == 1:   # the same second derivative as the built-in silu
        g, = mg.grad(mg.nn.functional.silu(x).sum(), x, create_graph=True)
        same(values[mg][1], mg.grad(g.sum(), x)[0])


def test_function_with_number_argument_and_create_graph():
    """PyTorch's test_function: (tensor, number, tensor), backward(create_graph=True) leaves
    gradients that are themselves in a graph."""
    rng = np.random.default_rng(2)
    data = rng.standard_normal((2, 5, 5))
    grads = {}
    for lib in (mg, torch):
        class MyFunction(lib.autograd.Function):
            @staticmethod
            def forward(ctx, tensor1, pyscalar, tensor2):
                ctx.pyscalar = pyscalar
                ctx.save_for_backward(tensor1, tensor2)
                return tensor1 + pyscalar * tensor2 + tensor1 * tensor2

            @staticmethod
            def backward(ctx, grad_output):
                var1, var2 = ctx.saved_tensors
                return (grad_output + grad_output * var2, None,
                        grad_output * ctx.pyscalar + grad_output * var1)

        x, y = (lib.tensor(v, requires_grad=True) for v in data)
        MyFunction.apply(x, 2, y).sum().backward(create_graph=True)
        assert x.grad.grad_fn is not None and y.grad.grad_fn is not None
        (x.grad * y.grad).sum().backward()   # through the recorded backward
        grads[lib] = (x.grad, y.grad)
    for m, t in zip(grads[mg], grads[torch], strict=True):
        same(m, t)


# ----------------------------------------------------------------------------------------------
# Saved tensors


def test_saved_intermediate_is_loud_only_where_it_would_be_wrong():
    """A tensor computed in forward and saved is a constant to backward: right for a first
    derivative, silently wrong for a second one (PyTorch gives it). minigrad raises there."""
    class SiluSavesSigmoid(mg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            s = x.sigmoid()
            ctx.save_for_backward(x, s)
            return x * s

        @staticmethod
        def backward(ctx, g):
            x, s = ctx.saved_tensors
            return g * (s + x * s * (1 - s))

    x = mg.tensor(np.linspace(-2, 2, 5), requires_grad=True)
    first, = mg.grad(SiluSavesSigmoid.apply(x).sum(), x)
    same(first, mg.grad(mg.nn.functional.silu(x).sum(), x)[0])
    with pytest.raises(RuntimeError, match="SiluSavesSigmoid: saved value 1 .* neither an input "
                                           "nor an output"):
        mg.grad(SiluSavesSigmoid.apply(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="SiluSavesSigmoid"):
        mg.gradgradcheck(SiluSavesSigmoid.apply, x)


def test_saved_boolean_intermediate_is_fine_in_a_recorded_backward():
    class MaskedDouble(mg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            mask = x > 0
            ctx.save_for_backward(x, mask)
            return mg.where(mask, x * x, x)

        @staticmethod
        def backward(ctx, g):
            x, mask = ctx.saved_tensors
            return g * mg.where(mask, 2 * x, mg.ones_like(x))

    x = mg.tensor([-1.0, 0.5, 2.0], dtype="float64", requires_grad=True)
    assert mg.gradcheck(MaskedDouble.apply, x) and mg.gradgradcheck(MaskedDouble.apply, x)


def test_save_for_backward_twice_raises_and_rejects_non_tensors():
    class Twice(mg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctx.save_for_backward(x * 3)
            return x * 2

    with pytest.raises(RuntimeError, match="Twice: save_for_backward was called twice"):
        Twice.apply(mg.ones(3, requires_grad=True))

    for lib in (mg, torch):
        class SavesNumber(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(3)
                return x

        with pytest.raises(TypeError, match="argument 0 is of type int"):
            SavesNumber.apply(lib.ones(3, requires_grad=True))


@LIBS
def test_save_none_and_nothing(lib):
    class MyFn(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(None, x, None)
            return x * x

        @staticmethod
        def backward(ctx, g):
            n1, x, n2 = ctx.saved_tensors
            assert n1 is None and n2 is None
            return 2 * x * g

    class NothingSaved(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = lib.tensor([1.0, -2.0], requires_grad=True)
    MyFn.apply(x).sum().backward()
    np.testing.assert_allclose(arr(x.grad), [2.0, -4.0])
    y = NothingSaved.apply(x).sum()
    y.backward()
    y.backward()   # saved nothing: a second backward works, as in PyTorch
    np.testing.assert_allclose(arr(x.grad), [6.0, 0.0])


@LIBS
def test_in_place_change_of_a_saved_input_raises(lib):
    Square = square_function(lib)
    leaf = lib.tensor([1.0, 2.0], requires_grad=True)
    h = leaf * 1
    out = Square.apply(h)
    h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    out = Square.apply(leaf * 1)   # changes after the node are fine
    out.sum().backward()
    np.testing.assert_allclose(arr(leaf.grad), [2.0, 4.0])


@LIBS
def test_backward_twice_and_a_stashed_ctx_raise(lib):
    stashed = []

    class Id(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            stashed.append(ctx)
            return g * ctx.saved_tensors[0] / ctx.saved_tensors[0]

    x = lib.tensor([1.0, 2.0], requires_grad=True)
    y = Id.apply(x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()
    with pytest.raises(RuntimeError):
        _ = stashed[0].saved_tensors


# ----------------------------------------------------------------------------------------------
# Inputs, outputs and gradients


@LIBS
def test_needs_input_grad_and_no_grad(lib):
    seen = []

    class Spy(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, k):
            seen.append((ctx.needs_input_grad, lib.is_grad_enabled()))
            return a * b * k

        @staticmethod
        def backward(ctx, g):
            return g, g, None

    a, b = lib.ones(2, requires_grad=True), lib.ones(2)
    out = Spy.apply(a, b, 3.0)
    with lib.no_grad():
        quiet = Spy.apply(a, b, 3.0)
    assert seen == [((True, False, False), False)] * 2
    assert out.requires_grad and out.grad_fn is not None
    assert not quiet.requires_grad and quiet.grad_fn is None
    assert not Spy.apply(b, b, 1.0).requires_grad


def test_non_tensor_inputs_and_outputs_match_torch():
    """PyTorch's test_custom_function_non_tensor_inputs_outputs: numbers, None, True and a
    string among the outputs pass through; backward gets None in their slots."""
    rng = np.random.default_rng(3)
    data = rng.random((3, 10))
    results = {}
    for lib in (mg, torch):
        class MyFunction(lib.autograd.Function):
            @staticmethod
            def forward(ctx, t1, t2, scale, t3):
                t4 = t1 + t2 * t3
                t5 = t1 * t2 + t3
                t4 *= scale
                t5 *= scale
                ctx.scale = scale
                ctx.save_for_backward(t1, t2, t3)
                return scale, t4, None, True, t5, "bar", t1

            @staticmethod
            def backward(ctx, *grads):
                assert len(grads) == 7
                assert all(grads[i] is None for i in (0, 2, 3, 5))
                scale = ctx.scale
                var1, var2, var3 = ctx.saved_tensors
                return (grads[1] * scale + grads[4] * var2 * scale + grads[6],
                        grads[1] * var3 * scale + grads[4] * var1 * scale, None,
                        grads[1] * var2 * scale + grads[4] * scale)

        t1, t2 = (lib.tensor(v, requires_grad=True) for v in data[:2])
        t3 = lib.tensor(data[2])
        res = MyFunction.apply(t1, t2, 4, t3)
        assert (res[0], res[2], res[3], res[5]) == (4, None, True, "bar")
        lib.autograd.backward([res[1].sum(), res[4].sum(), res[6].sum()])
        assert t3.grad is None
        results[lib] = (res[1], res[4], res[6], t1.grad, t2.grad)
    for m, t in zip(results[mg], results[torch], strict=True):
        same(m, t)


@LIBS
def test_mark_non_differentiable_and_materialized_grads(lib):
    class Split(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            a, b = x + 1, x * 2
            ctx.mark_non_differentiable(a)
            return a, b, x > 0

        @staticmethod
        def backward(ctx, grad_a, grad_b, grad_mask):
            assert (arr(grad_a) == 0).all() and (arr(grad_mask) == 0).all()
            return grad_b * 2

    class Lazy(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 1, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            assert g1 is None
            return g2 * 3

    x = lib.tensor([1.0, -1.0], requires_grad=True)
    a, b, mask = Split.apply(x)
    assert not a.requires_grad and b.requires_grad and not mask.requires_grad
    b.sum().backward()
    np.testing.assert_allclose(arr(x.grad), [2.0, 2.0])
    Lazy.apply(x)[1].sum().backward()
    np.testing.assert_allclose(arr(x.grad), [5.0, 5.0])


@LIBS
def test_none_gradients_and_extra_trailing_nones(lib):
    class NoGrad(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return None

    class TooMany(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g, None, None

    x = lib.ones(3, requires_grad=True)
    NoGrad.apply(x).sum().backward()
    assert x.grad is None
    assert lib.autograd.grad(NoGrad.apply(x).sum(), x, allow_unused=True)[0] is None
    TooMany.apply(x).sum().backward()
    np.testing.assert_allclose(arr(x.grad), np.ones(3))


@LIBS
def test_broadcast_gradient_is_summed_back(lib):
    class Expanding(extending_functions(lib)[2]):   # MulConstant, x * k
        @staticmethod
        def backward(ctx, g):
            return g.expand(4, 3) * 1.0, None

    x = lib.ones(3, requires_grad=True)
    Expanding.apply(x, 2.0).sum().backward()
    np.testing.assert_allclose(arr(x.grad), [4.0, 4.0, 4.0])


def test_wrong_gradients_are_clear_errors_naming_the_function():
    Half = half_function(mg)

    class WrongShape(Half):
        @staticmethod
        def backward(ctx, g):
            return g[:2], None

    class GradForNumber(Half):
        @staticmethod
        def backward(ctx, g):
            return g, g

    class ArrayGrad(Half):
        @staticmethod
        def backward(ctx, g):
            return g.array, None

    x = mg.ones(3, requires_grad=True)
    cases = [(Half, RuntimeError, r"Half.backward returned 1 gradients, but forward took 2 "),
             (WrongShape, RuntimeError, r"WrongShape.backward returned a gradient of shape \(2,\) "
                                        r"for argument 0, a tensor of shape \(3,\)"),
             (GradForNumber, RuntimeError, "GradForNumber.backward returned a gradient for "
                                           "argument 1, which is not a tensor"),
             (ArrayGrad, TypeError, "ArrayGrad.backward returned a gradient of type ndarray")]
    for function, error, message in cases:
        with pytest.raises(error, match=message):
            function.apply(x, 2.0).sum().backward()
    tx = torch.ones(3, requires_grad=True)   # PyTorch raises RuntimeError for the same three
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        half_function(torch).apply(tx, 2.0).sum().backward()


@LIBS
def test_returning_an_input_as_it_is(lib):
    class Identity(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a, a + b

        @staticmethod
        def backward(ctx, grad_a, grad_b):
            return grad_a + grad_b, grad_b

    x, y = lib.ones(2, requires_grad=True), lib.ones(2, requires_grad=True)
    q, p = Identity.apply(x, y)
    assert q is not x and q.grad_fn is not None
    (q + p + x).sum().backward()
    np.testing.assert_allclose(arr(x.grad), [3.0, 3.0])
    np.testing.assert_allclose(arr(y.grad), [1.0, 1.0])
    with lib.no_grad():
        x.mul_(2)   # q shares x's memory
    np.testing.assert_allclose(arr(q), [2.0, 2.0])


@LIBS
def test_the_same_output_twice_is_one_tensor(lib):
    class DoubleDuplicate(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            output = x * 2
            return output, output

        @staticmethod
        def backward(ctx, grad1, grad2):
            return grad1 * 2 + grad2 * 2

    def fn(x):
        a, b = DoubleDuplicate.apply(x)
        assert a is b
        return a + b

    x = lib.tensor(np.linspace(-1, 1, 6), requires_grad=True)
    if lib is mg:
        assert mg.gradcheck(fn, x) and mg.gradgradcheck(fn, x)
    else:
        assert torch.autograd.gradcheck(fn, x) and torch.autograd.gradgradcheck(fn, x)


@LIBS
def test_mark_dirty(lib):
    class Inplace(lib.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.mark_dirty(a)
            return a.add_(b), b + 2

        @staticmethod
        def backward(ctx, grad_a, grad_b):
            return grad_a, grad_a + grad_b

    x, y = lib.ones(3), lib.ones(3, requires_grad=True)
    q, p = Inplace.apply(x, y)
    assert q is x and q.requires_grad and q.grad_fn is not None
    np.testing.assert_allclose(arr(q), [2.0, 2.0, 2.0])
    (q * 3 + p).sum().backward()
    np.testing.assert_allclose(arr(y.grad), [4.0, 4.0, 4.0])
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        Inplace.apply(lib.ones(3, requires_grad=True), y)


def test_mark_dirty_gradients_match_torch():
    data = np.array([0.5, -1.0, 2.0])
    grads = {}
    for lib in (mg, torch):
        class ScaleInPlace(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x.mul_(3)
                ctx.mark_dirty(x)
                ctx.save_for_backward(x)   # the changed tensor: the output
                return x

            @staticmethod
            def backward(ctx, g):
                out, = ctx.saved_tensors
                return g * 3 + 0 * out

        w = lib.tensor(data, requires_grad=True)
        h = w * w
        out = ScaleInPlace.apply(h)
        assert out is h
        (out * w).sum().backward()
        grads[lib] = (out, w.grad)
    for m, t in zip(grads[mg], grads[torch], strict=True):
        same(m, t)


def test_legacy_call_and_once_differentiable():
    plain = square_function(mg)
    with pytest.raises(RuntimeError, match="non-static forward method is deprecated"):
        plain()(mg.ones(2))

    class Square(plain):
        @staticmethod
        @mg.autograd.once_differentiable
        def backward(ctx, g):
            assert not mg.is_grad_enabled()
            return plain.backward(ctx, g)

    x = mg.tensor([1.0, 3.0], requires_grad=True)
    g, = mg.grad(Square.apply(x).sum(), x)
    np.testing.assert_allclose(arr(g), [2.0, 6.0])
    g, = mg.grad(Square.apply(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice .* @once_differentiable "
                                           r"\(Square.backward\)"):
        g.sum().backward()


def test_the_tape_shows_the_function_by_name():
    Exp = extending_functions(mg)[0]
    x = mg.ones(2, requires_grad=True)
    with mg.autograd.record() as tape:
        Exp.apply(x)
    assert str(tape).splitlines()[-1] == "%1 = Exp(%0)  shape (2,)"


# ----------------------------------------------------------------------------------------------
# The traps of mg.ops.Op (the array-level API)


class SiluSavingSigmoid(mg.ops.Op):
    """silu(x) = x * sigmoid(x), saving the sigmoid (an intermediate).  dx = g * (s + x s (1-s))."""

    @staticmethod
    def forward(ctx, x):
        s = 1 / (1 + ctx.xp.exp(-x))
        ctx.save(x, s)
        return x * s

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved
        return g * (s + x * s * (1 - s))


class SiluRecomputing(SiluSavingSigmoid):
    @staticmethod
    def backward(ctx, g):
        (x, _) = ctx.saved
        s = mg.ops.sigmoid(x)
        return g * (s + x * s * (1 - s))


def test_op_saved_intermediate_is_right_once_and_loud_twice():
    x = mg.tensor(np.linspace(-3, 3, 7), requires_grad=True)
    builtin = mg.grad(mg.nn.functional.silu(x).sum(), x, create_graph=True)[0]
    first, = mg.grad(SiluSavingSigmoid.apply(x).sum(), x)
    same(first, builtin)
    with pytest.raises(RuntimeError, match="silu_saving_sigmoid: saved value 1 "):
        mg.grad(SiluSavingSigmoid.apply(x).sum(), x, create_graph=True)
    second_builtin, = mg.grad(builtin.sum(), x)
    g, = mg.grad(SiluRecomputing.apply(x).sum(), x, create_graph=True)
    same(mg.grad(g.sum(), x)[0], second_builtin)
    xt = torch.tensor(np.linspace(-3, 3, 7), requires_grad=True)
    gt, = torch.autograd.grad(torch.nn.functional.silu(xt).sum(), xt, create_graph=True)
    same(second_builtin, torch.autograd.grad(gt.sum(), xt)[0])


def test_op_save_twice_raises():
    class SavesTwice(mg.ops.Op):
        @staticmethod
        def forward(ctx, x):
            ctx.save(x)
            ctx.save(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    with pytest.raises(RuntimeError, match="saves_twice: ctx.save was called twice"):
        SavesTwice.apply(mg.ones(2, requires_grad=True))


def test_cross_entropy_soft_targets_second_derivative():
    """cross_entropy kept its log-probabilities as a saved intermediate; a recorded backward
    now recomputes them, also when only the targets require grad."""
    rng = np.random.default_rng(4)
    logits, q = rng.standard_normal((2, 3, 4))
    q = np.exp(q) / np.exp(q).sum(1, keepdims=True)
    results = {}
    for lib, F in ((mg, mg.nn.functional), (torch, torch.nn.functional)):
        z = lib.tensor(logits)
        t = lib.tensor(q, requires_grad=True)
        g, = lib.autograd.grad(F.cross_entropy(z, t) * (t * t).sum(), t, create_graph=True)
        gg, = lib.autograd.grad((g * g).sum(), t)
        results[lib] = (g, gg)
    for m, t in zip(results[mg], results[torch], strict=True):
        same(m, t)
