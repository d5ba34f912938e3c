"""The engine: reverse-tape walk, accumulation, retain_graph, needs_input_grad, mg.grad,
higher-order gradients, grad mode, tape recording and the errors backward promises."""
import gc
import sys
import threading

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad.ops import Op


def leaf(array, dtype="float64"):
    return mg.tensor(np.asarray(array, dtype=dtype), requires_grad=True)


def torch_leaf(array):
    return torch.tensor(np.asarray(array, dtype=np.float64), requires_grad=True)


class Logged(Op):
    """y = 2 x, logging each backward call (its node's sequence number) into `calls`."""

    calls = []

    @staticmethod
    def forward(ctx, x, tag):
        ctx.tag = tag
        return x * 2

    @staticmethod
    def backward(ctx, g):
        Logged.calls.append(ctx.tag)
        return g * 2


class Recorder(Op):
    """a * b that records needs_input_grad and the gradients it actually computed."""

    seen = []

    @staticmethod
    def forward(ctx, a, b):
        ctx.save(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved
        computed = [ctx.needs_input_grad[0], ctx.needs_input_grad[1]]
        Recorder.seen.append((ctx.needs_input_grad, computed))
        return (g * b if computed[0] else None, g * a if computed[1] else None)


# ---------------------------------------------------------------------- the walk
def test_backward_visits_each_node_once_from_the_highest_sequence_number():
    Logged.calls.clear()
    x = leaf([1.0, 2.0])
    a = Logged.apply(x, tag="a")
    b = Logged.apply(a, tag="b")            # a diamond: a feeds b and c, both feed d
    c = Logged.apply(a, tag="c")
    d = Logged.apply(b + c, tag="d")
    nodes = (a.grad_fn, b.grad_fn, c.grad_fn, d.grad_fn)
    seqs = {t: n.seq for t, n in zip("abcd", nodes, strict=True)}
    d.sum().backward()
    assert sorted(Logged.calls) == ["a", "b", "c", "d"]
    assert [seqs[t] for t in Logged.calls] == sorted(seqs.values(), reverse=True)
    np.testing.assert_allclose(x.grad.numpy(), [16.0, 16.0])   # 2 * (2*2 + 2*2)


def test_a_chain_deeper_than_the_recursion_limit_backpropagates_and_drops():
    depth = max(10_000, 3 * sys.getrecursionlimit())
    x = leaf([1.0, -2.0], dtype="float32")
    y = x
    for _ in range(depth):
        y = y * 1.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])
    deep = x
    for _ in range(depth):
        deep = deep + 1.0
    del y, deep            # dropping the graph must not recurse once per node either
    gc.collect()


def test_a_tensor_used_twice_gets_both_contributions():
    values = [0.5, -1.5, 2.0]
    x, tx = leaf(values), torch_leaf(values)
    (x * x).sum().backward()
    (tx * tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())

    x, tx = leaf(values), torch_leaf(values)
    out = (x * 3.0 + x.exp() * x).sum()       # x in two branches, one of them uses it twice
    tout = (tx * 3.0 + tx.exp() * tx).sum()
    out.backward()
    tout.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


def test_grad_accumulates_across_backward_calls():
    x = leaf([1.0, 2.0, 3.0])
    (x * x).sum().backward()
    first = x.grad.numpy().copy()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first)


def test_leaf_gradients_are_arrays_of_their_own():
    # sum's gradient is a broadcast view and add hands g to both inputs: neither may leak into .grad
    x = leaf(np.ones((2, 3)))
    x.sum().backward()
    assert x.grad.array.flags.writeable and x.grad.array.flags.c_contiguous
    x.grad.zero_()
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    seed = mg.tensor([1.0, 1.0], dtype="float64")
    (a + b).backward(seed)
    assert a.grad is not b.grad and not np.shares_memory(a.grad.array, b.grad.array)
    assert not np.shares_memory(a.grad.array, seed.array)
    a.grad.array[0] = 100.0
    assert b.grad.array[0] == 1.0 and seed.array[0] == 1.0


def test_each_input_gets_its_gradient_in_its_own_dtype():
    x32 = mg.randn(3, requires_grad=True)
    x64 = mg.randn(3, dtype="float64", requires_grad=True)
    out = (x32 * x64).sum()
    assert out.dtype == np.float64
    out.backward()
    assert x32.grad.dtype == np.float32 and x64.grad.dtype == np.float64
    np.testing.assert_allclose(x32.grad.detach().numpy(), x64.detach().numpy(), rtol=1e-6)


# ---------------------------------------------------------------------- retain_graph
def test_a_second_backward_through_a_freed_graph_is_a_clear_error():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()   # sum saved nothing: the walk gets to mul, whose saved x was freed
    y.backward()
    with pytest.raises(RuntimeError, match=r"second time.*mul \(node \d+\).*retain_graph=True"):
        y.backward()


def test_a_shared_subgraph_freed_by_one_backward_is_reported_by_the_next():
    x = leaf([1.0, 2.0])
    h = x.exp()
    h.sum().backward()
    with pytest.raises(RuntimeError, match="exp"):
        (h * 2).sum().backward()


def test_a_walked_node_keeps_data_free_stand_ins_shared_per_shape_and_dtype():
    x = leaf(np.ones((3, 4)))
    h, k = x.exp(), x.sin()
    loss = (h * k).sum() + h.sum()
    loss.backward()
    stand_ins = [t for node in (loss.grad_fn, *[i.grad_fn for i in loss.grad_fn.inputs])
                 for t in node.inputs if t is not None and t._node is not None]
    assert len(stand_ins) >= 3
    for t in stand_ins:   # the graph position stays, the memory goes
        assert t.shape in ((3, 4), ()) and t.array.strides == (0,) * t.ndim
        assert not t.array.flags.writeable and not t.array.any()
    same = [t.array for t in stand_ins if t.shape == (3, 4) and t.dtype == np.float64]
    assert len(same) >= 2 and all(a is same[0] for a in same)   # one shared broadcast zero


class KeptMask(Op):
    """relu that keeps its mask as a ctx attribute (not with ctx.save); `ctx.label`, a plain
    value, is kept too."""

    @staticmethod
    def forward(ctx, x):
        ctx.mask, ctx.label = x > 0, "relu"
        return x * ctx.mask

    @staticmethod
    def backward(ctx, g):
        return g * mg.tensor(ctx.mask)


class KeptLabel(Op):
    """y = 3 x, keeping only a plain value on ctx."""

    @staticmethod
    def forward(ctx, x):
        ctx.label = "triple"
        return 3 * x

    @staticmethod
    def backward(ctx, g):
        return 3 * g


def test_a_node_that_kept_an_array_on_ctx_is_freed_and_one_with_plain_values_is_not():
    """As in PyTorch: an array forward left on ctx (a mask) is freed with the graph, so a second
    walk is an error; a node that kept only plain values (no arrays) can be walked again."""
    x = leaf([-1.0, 2.0])
    y = KeptMask.apply(x * 1.0).sum()
    y.backward()
    with pytest.raises(RuntimeError, match=r"second time.*kept_mask \(node \d+\)"):
        y.backward()
    z = KeptLabel.apply(x).sum()
    z.backward()
    z.backward()   # nothing saved: walked twice, as c = b + 1 is in PyTorch
    np.testing.assert_array_equal(x.grad.detach().numpy(), [0.0 + 6.0, 1.0 + 6.0])


def test_retain_graph_allows_a_second_backward():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.detach().numpy(), 2 * 2 * x.detach().numpy())


# ---------------------------------------------------------------------- needs_input_grad
def test_needs_input_grad_tells_which_gradients_to_compute():
    Recorder.seen.clear()
    a, c = leaf([1.0, 2.0]), mg.tensor([3.0, 4.0], dtype="float64")
    Recorder.apply(a, c).sum().backward()
    assert Recorder.seen == [((True, False), [True, False])]
    np.testing.assert_allclose(a.grad.numpy(), c.numpy())
    assert c.grad is None


def test_a_gradient_returned_for_an_input_that_needs_none_is_dropped():
    class Wasteful(Recorder):
        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved
            return g * b, g * a

    a, c = leaf([1.0, 2.0]), mg.tensor([3.0, 4.0], dtype="float64")
    Wasteful.apply(a, c).sum().backward()
    assert c.grad is None and a.grad is not None


def test_nothing_is_recorded_without_an_input_that_requires_grad():
    Recorder.seen.clear()
    out = Recorder.apply(mg.tensor([1.0]), mg.tensor([2.0]))
    assert out.grad_fn is None and not out.requires_grad


def test_integer_and_boolean_results_are_constants():
    x = leaf([1.5, -2.5])
    rounded = x.astype("int64")
    assert not rounded.requires_grad and rounded.grad_fn is None
    (rounded.astype("float64") * x).sum().backward()        # the int path carries no gradient
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, -2.0])


def test_non_differentiable_outputs_do_not_require_grad_and_receive_none():
    received = []

    class WithStatistic(Op):
        @staticmethod
        def forward(ctx, x):
            mean = x.mean(keepdims=True)
            ctx.mark_non_differentiable(mean)
            return x - mean, mean

        @staticmethod
        def backward(ctx, g, g_mean):
            received.append(g_mean)
            return g - g.mean(keepdims=True)

    x = leaf([1.0, 2.0, 6.0])
    y, mean = WithStatistic.apply(x)
    assert y.requires_grad and not mean.requires_grad and mean.grad_fn is None
    (y * y).sum().backward()
    assert received == [None]
    tx = torch_leaf([1.0, 2.0, 6.0])
    ((tx - tx.mean()) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-12)


class ScaleShift(Op):
    """y = x * scale + shift, scale and shift optional (None when absent)."""

    @staticmethod
    def forward(ctx, x, scale, shift):
        ctx.seen = (scale is None, shift is None)
        ctx.save(x, scale)
        y = x if scale is None else x * scale
        return y if shift is None else y + shift

    @staticmethod
    def backward(ctx, g):
        x, scale = ctx.saved
        need_x, need_scale, need_shift = ctx.needs_input_grad
        return (g if scale is None else g * scale) if need_x else None, \
            (g * x).sum() if need_scale else None, g.sum() if need_shift else None


def test_an_absent_optional_input_is_none_in_forward_and_needs_no_gradient():
    x, shift = leaf([1.0, -2.0]), leaf(0.5)
    with mg.autograd.record() as tape:
        y = ScaleShift.apply(x, None, shift)
    node = y.grad_fn
    assert node.ctx.seen == (True, False) and node.ctx.needs_input_grad == (True, False, True)
    assert node.inputs[1] is None and node.present_inputs == [x, shift]
    assert "scale_shift(%0, None, %1)" in str(tape)
    (y * y).sum().backward()
    tx, tshift = torch_leaf([1.0, -2.0]), torch_leaf(0.5)
    ((tx + tshift) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_allclose(shift.grad.numpy(), tshift.grad.numpy())
    assert "->" in mg.viz.to_dot(ScaleShift.apply(x, None, shift))   # the graph still draws


def test_an_op_whose_inputs_are_all_absent_but_one_runs_on_that_inputs_device():
    y = ScaleShift.apply(mg.tensor([1.0, 2.0]), None, None)
    assert not y.requires_grad and y.device == "cpu"
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])


# ---------------------------------------------------------------------- mg.grad
def test_grad_returns_gradients_and_leaves_dot_grad_alone():
    values = [0.3, -0.7, 1.1]
    x, w = leaf(values), leaf([2.0, 3.0, 4.0])
    tx, tw = torch_leaf(values), torch_leaf([2.0, 3.0, 4.0])
    gx, gw = mg.grad((x * w).tanh().sum(), [x, w])
    tgx, tgw = torch.autograd.grad((tx * tw).tanh().sum(), [tx, tw])
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), tgw.numpy(), rtol=1e-12)
    assert x.grad is None and w.grad is None


def test_grad_of_an_unused_input_is_an_error_or_none():
    x, unused = leaf([1.0]), leaf([2.0])
    with pytest.raises(RuntimeError, match="input 1.*not used.*allow_unused=True"):
        mg.grad((x * 2).sum(), [x, unused])
    gx, gu = mg.grad((x * 2).sum(), [x, unused], allow_unused=True)
    assert gu is None and gx.numpy().tolist() == [2.0]


def test_grad_with_respect_to_intermediate_tensors():
    x = leaf([2.0, -1.0])
    h = x * 3.0
    y = (h * h).sum()
    gh, gx = mg.grad(y, [h, x])
    np.testing.assert_allclose(gh.detach().numpy(), 2 * h.detach().numpy())
    np.testing.assert_allclose(gx.detach().numpy(), 18 * x.detach().numpy())


def test_grad_only_runs_the_backward_that_leads_to_the_inputs():
    Logged.calls.clear()
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    y = (Logged.apply(w, tag="w-branch") * x).sum()
    (gx,) = mg.grad(y, x)
    np.testing.assert_allclose(gx.detach().numpy(), 2 * w.detach().numpy())
    assert Logged.calls == []        # the branch leading only to w was never differentiated


def test_grad_outputs_weight_each_output():
    values = [0.5, 1.5]
    x, tx = leaf(values), torch_leaf(values)
    y1, y2 = x * x, x.exp()
    g1, g2 = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    (gx,) = mg.grad([y1, y2], x, grad_outputs=[mg.tensor(g1), mg.tensor(g2)])
    (tgx,) = torch.autograd.grad([tx * tx, tx.exp()], tx,
                                 grad_outputs=[torch.tensor(g1), torch.tensor(g2)])
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="1 grad_outputs for 2 outputs"):
        mg.grad([y1, y2], x, grad_outputs=[mg.tensor(g1)])


def test_grad_of_inputs_that_do_not_require_grad_is_an_error():
    with pytest.raises(RuntimeError, match="input 0.*does not require grad"):
        mg.grad(leaf([1.0]).sum(), [mg.tensor([1.0])])


# ---------------------------------------------------------------------- higher order
@pytest.mark.parametrize("value", [-1.5, 0.5, 2.0])
def test_second_and_third_derivatives_of_a_cube(value):
    x = leaf(value)
    y = x ** 3
    (d1,) = mg.grad(y, x, create_graph=True)
    (d2,) = mg.grad(d1, x, create_graph=True)
    (d3,) = mg.grad(d2, x)
    assert d1.item() == pytest.approx(3 * value ** 2)
    assert d2.item() == pytest.approx(6 * value)
    assert d3.item() == pytest.approx(6.0)


def test_mixed_second_derivatives_match_torch():
    xv, yv = [0.4, -1.2], [1.5, 0.7]
    x, y, tx, ty = leaf(xv), leaf(yv), torch_leaf(xv), torch_leaf(yv)
    (gx,) = mg.grad((x * y * y).tanh().sum(), x, create_graph=True)
    (tgx,) = torch.autograd.grad((tx * ty * ty).tanh().sum(), tx, create_graph=True)
    hy, hx = mg.grad(gx.sum(), [y, x])
    thy, thx = torch.autograd.grad(tgx.sum(), [ty, tx])
    np.testing.assert_allclose(hy.numpy(), thy.numpy(), rtol=1e-10)
    np.testing.assert_allclose(hx.numpy(), thx.numpy(), rtol=1e-10)


def test_backward_with_create_graph_leaves_a_differentiable_grad():
    x = leaf([1.0, 2.0])
    (x ** 3).sum().backward(create_graph=True)
    first = x.grad
    assert first.grad_fn is not None
    np.testing.assert_allclose(first.detach().numpy(), 3 * x.detach().numpy() ** 2)
    x.grad = None
    first.sum().backward()
    np.testing.assert_allclose(x.grad.detach().numpy(), 6 * x.detach().numpy())


# ---------------------------------------------------------------------- grad mode
def test_no_grad_and_enable_grad_nest():
    x = leaf([1.0])
    with mg.no_grad():
        assert not mg.is_grad_enabled() and not (x * 2).requires_grad
        with mg.enable_grad():
            assert (x * 2).requires_grad
        assert not (x * 2).requires_grad
    assert mg.is_grad_enabled() and (x * 2).requires_grad


def test_grad_modes_as_decorators():
    x = leaf([1.0])

    @mg.no_grad()
    def without(t):
        return t * 2

    @mg.enable_grad()
    def with_grad(t):
        return t * 2

    assert not without(x).requires_grad and mg.is_grad_enabled()
    with mg.no_grad():
        assert with_grad(x).requires_grad
    assert without.__name__ == "without"


def test_set_grad_enabled_as_call_and_as_context():
    x = leaf([1.0])
    try:
        mg.set_grad_enabled(False)
        assert not mg.is_grad_enabled() and not (x * 2).requires_grad
    finally:
        mg.set_grad_enabled(True)
    with mg.set_grad_enabled(False):
        assert not mg.is_grad_enabled()
        with mg.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not mg.is_grad_enabled()
    assert mg.is_grad_enabled()

    @mg.set_grad_enabled(False)
    def without(t):
        return t * 2

    assert mg.is_grad_enabled() and not without(x).requires_grad


def test_no_grad_switches_on_entering_not_when_made_and_can_be_entered_again():
    block = mg.no_grad()
    assert mg.is_grad_enabled()                 # made, not entered: nothing changes yet
    for _ in range(2):
        with block:
            assert not mg.is_grad_enabled()
        assert mg.is_grad_enabled()
    with pytest.raises(KeyError):               # an exception inside still restores the mode
        with mg.no_grad():
            raise KeyError("inside")
    assert mg.is_grad_enabled()


def test_grad_mode_is_thread_local():
    x = leaf([1.0])
    inside_no_grad, worker_done, seen = threading.Event(), threading.Event(), {}

    def worker():
        with mg.no_grad():
            inside_no_grad.set()
            worker_done.wait(5)
            seen["worker"] = (x * 2).requires_grad

    thread = threading.Thread(target=worker)
    thread.start()
    inside_no_grad.wait(5)
    seen["main"] = (x * 2).requires_grad       # while the worker sits in no_grad
    worker_done.set()
    thread.join()
    assert seen == {"main": True, "worker": False}

    def fresh():
        seen["fresh"] = mg.is_grad_enabled()

    with mg.no_grad():                          # a new thread starts with recording on
        thread = threading.Thread(target=fresh)
        thread.start()
        thread.join()
    assert seen["fresh"] is True


# ---------------------------------------------------------------------- tape recording
def test_record_prints_the_wengert_list():
    a = mg.randn(3, 4, requires_grad=True)
    b = mg.randn(3, 4)
    with mg.autograd.record() as tape:
        c = a * b
        d = c.sum(axis=1)
        e = d.mean()
    assert str(tape).splitlines() == [
        "%0 = input  shape (3, 4)  requires_grad",
        "%1 = input  shape (3, 4)",
        "%2 = mul(%0, %1)  shape (3, 4)",
        "%3 = sum(%2, axis=1)  shape (3,)",        # keepdims=False is the default: not shown
        "%4 = mean(%3)  shape ()",
    ]
    assert len(tape) == 3
    assert list(tape) == [c.grad_fn, d.grad_fn, e.grad_fn]


def test_record_shows_non_default_attributes_and_several_outputs():
    class Split(Op):
        @staticmethod
        def forward(ctx, x, at=1, scale=1.0):
            return x[:at] * scale, x[at:] * scale

        @staticmethod
        def backward(ctx, g0, g1):
            raise AssertionError("not needed here")

    x = mg.randn(4, requires_grad=True)
    with mg.autograd.record() as tape:
        first, second = Split.apply(x, at=3, scale=1.0)
        out = (first.sum(keepdims=True) * second) ** 2
        out.astype("float64")
    assert str(tape).splitlines() == [
        "%0 = input  shape (4,)  requires_grad",
        "%1, %2 = split(%0, at=3)  shape (3,), (1,)",
        "%3 = sum(%1, keepdims=True)  shape (1,)",
        "%4 = mul(%3, %2)  shape (1,)",
        "%5 = pow(%4, exponent=2)  shape (1,)",
        "%6 = cast(%5, dtype='float64')  shape (1,)",
    ]


def test_record_only_keeps_what_ran_inside_and_restores_the_outer_tape():
    x = mg.randn(2, requires_grad=True)
    before = x * 2
    with mg.autograd.record() as outer:
        with mg.autograd.record() as inner:
            y = before + 1
        z = y * 3
    assert list(inner) == [y.grad_fn] and list(outer) == [z.grad_fn]
    assert str(inner).splitlines()[0] == "%0 = input  shape (2,)  requires_grad"
    assert mg.autograd.active_tape() is None


# ---------------------------------------------------------------------- errors
def test_backward_errors_say_what_is_wrong():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match=r"one-element output.*shape \(2,\).*gradient="):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        mg.tensor([1.0]).sum().backward()
    with pytest.raises(RuntimeError, match=r"gradient has shape \(3,\).*output has shape \(2,\)"):
        (x * 2).backward(mg.ones(3))
    (x * 2).backward(np.array([1.0, 1.0]))          # an array is fine, in the output's dtype
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_a_bad_backward_is_named_in_the_error():
    class TooMany(Op):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g, g

    class WrongShape(TooMany):
        @staticmethod
        def backward(ctx, g):
            return g.sum()

    class RawArray(TooMany):
        @staticmethod
        def backward(ctx, g):
            return g.array

    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="too_many.backward returned 2 gradients for 1 inputs"):
        TooMany.apply(x).sum().backward()
    with pytest.raises(RuntimeError, match=r"wrong_shape.*shape \(\) for an input of shape \(2,\)"):
        WrongShape.apply(x).sum().backward()
    with pytest.raises(TypeError, match="raw_array.backward returned a gradient of type ndarray"):
        RawArray.apply(x).sum().backward()


def test_the_implied_gradient_error_names_each_functions_keyword():
    x = mg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError,
                       match=r"pass a gradient of that shape \(grad_outputs=\.\.\.\)"):
        mg.grad(x * 2, x)
    with pytest.raises(RuntimeError, match=r"pass a gradient of that shape \(gradient=\.\.\.\)"):
        (x * 2).backward()


def test_the_engines_light_switch_puts_back_what_it_found_and_touches_only_grad_mode():
    from minigrad.grad_mode import switched_to
    with mg.inference_mode():
        with switched_to(True):
            assert mg.is_grad_enabled() and mg.is_inference_mode_enabled()
        assert not mg.is_grad_enabled() and mg.is_inference_mode_enabled()
    with pytest.raises(ZeroDivisionError), switched_to(False):
        assert not mg.is_grad_enabled()
        raise ZeroDivisionError
    assert mg.is_grad_enabled()
    seen = []
    with switched_to(False):   # another thread keeps its own mode
        worker = threading.Thread(target=lambda: seen.append(mg.is_grad_enabled()))
        worker.start()
        worker.join()
    assert seen == [True] and mg.is_grad_enabled()
