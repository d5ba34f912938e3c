"""Ops marked `array_backward` run their backward formula on arrays in a plain backward (no
create_graph, no hooks) and on tensors in a recorded one: the same formula, so the gradients
must agree to the bit. Every marked op has a case here, in float32 and float64; the walk's
other rules (type checks, version errors, hooks, 0-d gradients) hold on arrays too."""
import numpy as np
import pytest

import minigrad as mg
import minigrad.nn.functional as F
from minigrad.ops import Op


def _marked_ops():
    found, pending = set(), list(Op.__subclasses__())
    while pending:
        op = pending.pop()
        pending.extend(op.__subclasses__())
        if op.__dict__.get("array_backward") and op.__module__.startswith("minigrad."):
            found.add(op)
    return found


def _values(shape, seed, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


# name -> (function of the tensors, shapes of the inputs, range of their values)
CASES = {
    "add broadcast": (lambda a, b: a + b, [(3, 4), (4,)], None),
    "sub column": (lambda a, b: a - b, [(3, 4), (3, 1)], None),
    "mul by a 0-d tensor": (lambda a, b: a * b, [(3, 4), ()], None),
    "div": (lambda a, b: a / b, [(2, 3, 4), (1, 4)], (0.5, 2.0)),
    "neg": (lambda a: -a, [(5,)], None),
    "exp": (lambda a: a.exp(), [(3, 4)], None),
    "log": (lambda a: a.log(), [(3, 4)], (0.1, 3.0)),
    "sqrt": (lambda a: a.sqrt(), [(3, 4)], (0.1, 3.0)),
    "tanh": (lambda a: a.tanh(), [(3, 4)], None),
    "sigmoid": (lambda a: a.sigmoid(), [(3, 4)], None),
    "cast": (lambda a: a.double() * 3, [(3, 4)], None),
    "pow": (lambda a: sum((a ** p).sum() for p in (0, 1, 2, 3, 0.5, -0.5, -1, 1.5)),
            [(3, 4)], (0.5, 2.0)),
    "sum": (lambda a: a.sum() + a.sum(0).sum() + a.sum((0, 2), keepdim=True).sum(),
            [(2, 3, 4)], None),
    "mean": (lambda a: a.mean() + a.mean(1).sum() + a.mean(-1, keepdim=True).sum(),
             [(2, 3, 4)], None),
    "var": (lambda a: a.var(0).sum() + a.var(correction=0) + a[:1, :1].var(), [(5, 4)], None),
    "matmul": (lambda a, b, v: (a @ b).sum() + (v @ b).sum() + (a @ v[:4, None]).sum()
               + (a.reshape(1, 3, 4) @ b).sum(), [(3, 4), (4, 5), (4,)], None),
    "batched matmul": (lambda a, b: a @ b, [(2, 3, 4), (4, 5)], None),
    "linear": (lambda x, w, b: F.linear(x, w, b), [(2, 3, 4), (5, 4), (5,)], None),
    "reshape": (lambda a: a.reshape(4, 3) * 2, [(3, 4)], None),
    "log_softmax": (lambda a: F.log_softmax(a, dim=1), [(3, 5)], None),
    "cross_entropy": (lambda a: F.cross_entropy(a, mg.tensor([1, 0, 4]))
                      + F.cross_entropy(a, mg.tensor([1, -100, 4]), reduction="sum")
                      + F.cross_entropy(a, mg.tensor([1, 7, 4]), ignore_index=7,
                                        label_smoothing=0.1)
                      + F.cross_entropy(a, mg.tensor([2, 0, 3]), reduction="none").sum(),
                      [(3, 5)], None),
    "getitem": (lambda a: a[1:, ::2].sum() + a[mg.tensor([0, 2, 0, 0])].sum(0)
                + a[a > 0].sum() + a[1] * 3, [(3, 4)], None),
    "relu": (lambda a: F.relu(a) * 3, [(3, 4)], None),
    "cross_entropy with probabilities": (
        lambda a, q: F.cross_entropy(a, q.softmax(1)), [(3, 5), (3, 5)], None),
}


def _grads(case, dtype, create_graph):
    fn, shapes, bounds = CASES[case]
    inputs = [mg.tensor(_values(s, i, *(bounds or (-2.0, 2.0))).astype(dtype),
                        requires_grad=True) for i, s in enumerate(shapes)]
    out = fn(*inputs)
    seed = mg.tensor(_values(out.shape, 9).astype(out.dtype))
    return mg.grad(out, inputs, seed, create_graph=create_graph)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_plain_backward_on_arrays_gives_the_bits_of_the_recorded_one(case, dtype):
    on_arrays = _grads(case, dtype, create_graph=False)
    on_tensors = _grads(case, dtype, create_graph=True)
    for a, t in zip(on_arrays, on_tensors, strict=True):
        assert (a.shape, a.dtype) == (t.shape, t.dtype)
        assert type(a.array) is np.ndarray
        assert a.array.tobytes() == t.array.tobytes(), case


def test_every_marked_op_has_a_case():
    ran = set()
    for fn, shapes, _ in CASES.values():
        with mg.autograd.record() as tape:
            fn(*[mg.ones(s, requires_grad=True) for s in shapes])
        ran.update(node.op for node in tape)
    missing = sorted(op.name() for op in _marked_ops() - ran)
    assert not missing, f"ops marked array_backward without a case here: {missing}"


class Twice(Op):
    """2a;  da = 2 g, written with an operator, so it runs on arrays as well."""

    array_backward = True

    @staticmethod
    def forward(ctx, a):
        return a * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class TwiceReturningAnArray(Twice):
    """Unmarked: its backward must give tensors, and returning an array is an error."""

    array_backward = False

    @staticmethod
    def backward(ctx, g):
        return np.asarray(g) * 2


def test_a_custom_op_may_be_marked_and_an_unmarked_one_must_return_tensors():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    Twice.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    with pytest.raises(TypeError, match="twice_returning_an_array.backward returned a gradient "
                                        "of type ndarray"):
        TwiceReturningAnArray.apply(x).sum().backward()


class TwiceTwice(Twice):
    """4a, its backward calling another op with Op.either (on tensors or arrays)."""

    @staticmethod
    def backward(ctx, g):
        return Twice.either(Twice.either(g))


class WritesItsInput(Op):
    @staticmethod
    def forward(ctx, a):
        a += 1
        return a


def test_op_either_runs_an_op_on_tensors_or_on_arrays():
    x = mg.tensor([1.0, -2.0], requires_grad=True)
    (plain,) = mg.grad(TwiceTwice.apply(x).sum(), x)
    (recorded,) = mg.grad(TwiceTwice.apply(x).sum(), x, create_graph=True)
    assert plain.tolist() == recorded.tolist() == [4.0, 4.0]
    doubled = Twice.either(np.array([1.5, 2.0], dtype=np.float32))
    assert type(doubled) is np.ndarray and doubled.dtype == np.float32
    assert doubled.tolist() == [3.0, 4.0]
    with pytest.raises(ValueError, match="writes_its_input.forward tried to write into an input"):
        WritesItsInput.either(np.ones(2))


def test_a_changed_saved_value_still_raises_only_where_it_is_read():
    a = mg.tensor([1.0, 2.0], requires_grad=True)
    b = mg.tensor([3.0, 4.0], requires_grad=True)
    c = a * 1
    y = c * b
    with mg.no_grad():
        c.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    d = a * 1
    y = d * b.detach()   # only db would read d, and b needs no gradient
    with mg.no_grad():
        d.add_(1)
    a.grad = None
    y.sum().backward()
    assert a.grad.tolist() == [3.0, 4.0]


def test_hooks_see_tensors_and_give_the_same_gradients():
    x = mg.tensor(_values((3, 4), 0).astype("float32"), requires_grad=True)
    plain = mg.grad((x.tanh() * x).sum(), x)[0]
    seen = []
    h = x.tanh()
    h.register_hook(lambda g: seen.append(type(g)))
    hooked = mg.grad((h * x).sum(), x)[0]
    assert seen == [mg.Tensor]
    assert hooked.array.tobytes() == plain.array.tobytes()


class Seen(Twice):
    """2a, noting whether the gradient its backward gets is a tensor (or an array)."""

    types = []

    @staticmethod
    def backward(ctx, g):
        Seen.types.append(isinstance(g, mg.Tensor))
        return g * 2


def test_the_walk_is_back_on_arrays_once_no_hook_is_live():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    Seen.types.clear()
    for hooked in ("leaf", "value", "retained", "step", "none"):
        y = Seen.apply(x)
        if hooked == "leaf":
            handle = x.register_hook(lambda g: None)
        elif hooked == "value":
            handle = y.register_hook(lambda g: None)
        elif hooked == "step":
            handle = mg.hooks.register_backward_step_hook(lambda *args: None)
        elif hooked == "retained":
            y.retain_grad()
        y.sum().backward()
        if hooked not in ("retained", "none"):
            handle.remove()
    del y   # the retained value's graph goes
    Seen.apply(x).sum().backward()
    assert Seen.types == [True] * 4 + [False] * 2


def test_a_leaf_reached_twice_sums_its_gradients_on_arrays():
    x = mg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (x * x + 3 * x - x).sum().backward()
    assert x.grad.tolist() == [2 * 1.0 + 3 - 1, 2 * -2.0 + 3 - 1, 2 * 3.0 + 3 - 1]


def test_a_0d_value_reached_twice_stays_an_array():
    w = mg.tensor(2.0, requires_grad=True)
    (dw,) = mg.grad(w * 2 + w * 3, w)   # NumPy sums two 0-d arrays to a scalar
    assert type(dw.array) is np.ndarray and dw.item() == 5.0
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = x.max()   # a 0-d value with two consumers, then an unmarked op (max)
    (dx,) = mg.grad(y * y + y, x)
    assert type(dx.array) is np.ndarray and dx.tolist() == [0.0, 5.0]
