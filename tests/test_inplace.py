"""In-place operations, the version counter, read-only forward inputs and `.grad` assignment,
against PyTorch: values, gradients, and the same cases refused."""
import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad.ops import Op


def pair(values, requires_grad=False, dtype="float64"):
    """The same leaf in minigrad and in torch."""
    array = np.asarray(values, dtype=dtype)
    return (mg.tensor(array, requires_grad=requires_grad),
            torch.tensor(array, requires_grad=requires_grad))


def same(ours, theirs, **tolerance):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **tolerance)


# ---------------------------------------------------------------------- the training loop
def test_the_learners_sgd_loop_keeps_w_the_same_leaf():
    (w, tw), (x, tx) = pair([0.5, -1.0, 2.0], True), pair([1.0, 2.0, 3.0])
    lr = 0.1
    for _ in range(3):
        ((w * x).sum() ** 2).backward()
        ((tw * tx).sum() ** 2).backward()
        leaf = w
        with mg.no_grad():
            w -= lr * w.grad
            w.grad.zero_()
        with torch.no_grad():
            tw -= lr * tw.grad
            tw.grad.zero_()
        assert w is leaf and w.is_leaf and w.requires_grad and w.grad_fn is None
    same(w, tw, rtol=1e-12)
    assert w._version == tw._version == 3


@pytest.mark.parametrize("name", ["add_", "sub_", "mul_", "div_"])
@pytest.mark.parametrize("other", [2.5, [[1.5, -2.0, 4.0]], [[3.0], [0.5]]])
def test_in_place_arithmetic_matches_torch(name, other):
    (x, tx) = pair(np.arange(1.0, 7.0).reshape(2, 3))
    o, to = (other, other) if isinstance(other, float) else pair(other)
    data = x.array
    assert getattr(x, name)(o) is x
    getattr(tx, name)(to)
    same(x, tx)
    assert x.array is data and x._version == tx._version == 1


def test_operators_and_alpha():
    (x, tx), (y, ty) = pair([1.0, 2.0, 3.0]), pair([0.5, 0.25, 4.0])
    x += y
    x -= 1
    x *= y
    x /= 2
    x.add_(y, alpha=3).sub_(y, alpha=0.5)
    tx += ty
    tx -= 1
    tx *= ty
    tx /= 2
    tx.add_(ty, alpha=3).sub_(ty, alpha=0.5)
    same(x, tx)
    assert x._version == tx._version == 6


def test_copy_fill_zero_clamp_match_torch():
    (x, tx) = pair([[-2.0, 0.5, 3.0], [1.0, -0.5, 9.0]])
    x.clamp_(min=-1.0, max=2.0)
    tx.clamp_(min=-1.0, max=2.0)
    same(x, tx)
    x.clamp_(max=1.0)
    tx.clamp_(max=1.0)
    same(x, tx)
    source, tsource = pair([7.0, 8.0, 9.0], dtype="float32")   # broadcast and cast, as torch
    x.copy_(source)
    tx.copy_(tsource)
    same(x, tx)
    assert x.dtype == np.float64
    x.fill_(mg.tensor(4.0))
    tx.fill_(torch.tensor(4.0))
    same(x, tx)
    x.zero_()
    tx.zero_()
    same(x, tx)
    assert x._version == tx._version == 5


@pytest.mark.parametrize("index", [
    1, (0, slice(1, 3)), (Ellipsis, 0), slice(None, None, 2),          # basic
    [0, 2], (np.array([0, 2]), np.array([1, 1])),                       # integer arrays
    "mask",                                                              # a boolean mask
])
@pytest.mark.parametrize("value", ["number", "tensor"])
def test_setitem_matches_torch(index, value):
    x, tx = pair(np.arange(12.0).reshape(3, 4))
    if isinstance(index, str):
        index = x.numpy() > 4.5
    tindex = tuple(torch.tensor(i) if isinstance(i, np.ndarray) else i for i in index) \
        if isinstance(index, tuple) else torch.tensor(index) if isinstance(index, np.ndarray) \
        else index
    shape = tx[tindex].shape
    v, tv = (-1.5, -1.5) if value == "number" else pair(np.linspace(-1, 1, int(np.prod(shape)))
                                                         .reshape(shape))
    x[index] = v
    tx[tindex] = tv
    same(x, tx)
    assert x._version == 1


def test_setitem_with_index_and_value_tensors_and_broadcasting():
    x, tx = pair(np.zeros((3, 4)))
    x[mg.tensor([2, 0])] = mg.tensor([1.0, 2.0, 3.0, 4.0], dtype=mg.float64)  # dtypes match
    tx[torch.tensor([2, 0])] = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    x[x > 2.5] = 0.0
    tx[tx > 2.5] = 0.0
    same(x, tx)


def test_in_place_changes_are_seen_through_shared_memory():
    x = mg.tensor([1.0, 2.0, 3.0, 4.0])
    detached, view = x.detach(), x.reshape(2, 2)
    x.mul_(10)
    np.testing.assert_array_equal(detached.numpy(), [10, 20, 30, 40])
    view[0] = 0.0                                   # a view handed out by an op is writable
    np.testing.assert_array_equal(x.numpy(), [0, 0, 30, 40])
    assert x._version == detached._version == view._version == 2
    assert mg.tensor([1.0])._version == 0


# ---------------------------------------------------------------------- refused, as in torch
def test_in_place_on_a_leaf_that_requires_grad_is_an_error_with_grad_mode_on():
    w, tw = pair([1.0, 2.0], True)
    for change in (lambda t: t.add_(1), lambda t: t.__setitem__(0, 5.0), lambda t: t.zero_(),
                   lambda t: t.clamp_(min=0), lambda t: t.copy_(t.detach())):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being "
                                               "used in an in-place operation"):
            change(tw)
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad.*shape \\(2,\\)"
                                               ".*no_grad"):
            change(w)
    assert w._version == 0 and w.detach().numpy().tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="leaf Variable"):
        w += 1


def test_bad_values_are_clear_errors_like_torch():
    i, ti = mg.tensor([1, 2, 3]), torch.tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        ti += 1.5
    with pytest.raises(RuntimeError, match="add_: result type float64 can't be cast to the "
                                           "tensor's dtype int64"):
        i += 1.5
    with pytest.raises(RuntimeError, match="div_: result type float64 can't be cast"):
        i /= 2
    x, tx = pair([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError):
        tx.add_(torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"add_: a value of shape \(2, 3\) does not broadcast "
                                           r"to the tensor's shape \(3,\)"):
        x.add_(mg.ones(2, 3))
    with pytest.raises(ValueError, match=r"setitem: cannot assign a value of shape \(2,\) to a "
                                         r"tensor of shape \(3,\)"):
        x[:] = mg.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="clamp_: at least one of min and max"):
        x.clamp_()
    with pytest.raises(RuntimeError, match="fill_: the value must be a number or a 0-d tensor"):
        x.fill_(mg.ones(3))
    with pytest.raises(RuntimeError, match="broadcast view"):
        mg.tensor([1.0, 2.0]).expand(3, 2).mul_(2)
    assert x._version == 0 and i._version == 0


# ---------------------------------------------------------------------- rebased history
def test_in_place_ops_on_a_non_leaf_are_differentiated_as_in_torch():
    (x, tx), (y, ty), (v, tv) = pair([0.5, -1.0, 2.0], True), pair([3.0, 1.5, -2.0], True), \
        pair(0.75, True)
    results = []
    for a, b, value in ((x, y, v), (tx, ty, tv)):
        h = a * 2
        h += b
        h.mul_(b)
        h.div_(a + 3)
        h.sub_(b, alpha=0.5)
        h.clamp_(min=-4.0, max=6.0)
        h[1] = value * 3
        h[h > 5.0] = 0.0
        (h * h).sum().backward()
        results.append(h)
    same(results[0], results[1], rtol=1e-12)
    for ours, theirs in ((x, tx), (y, ty), (v, tv)):
        same(ours.grad, theirs.grad, rtol=1e-12)
    assert results[0].grad_fn.name == "index_put"


def test_a_constant_that_takes_a_value_requiring_grad_joins_the_graph():
    (w, tw) = pair([1.0, -2.0], True)
    buffer, tbuffer = mg.zeros(2, dtype="float64"), torch.zeros(2, dtype=torch.float64)
    buffer.add_(w * 3)
    tbuffer.add_(tw * 3)
    buffer.mul_(w)
    tbuffer.mul_(tw)
    assert buffer.requires_grad and not buffer.is_leaf
    buffer.sum().backward()
    tbuffer.sum().backward()
    same(w.grad, tw.grad)
    for b, weight in ((mg.ones(2, dtype="float64"), w), (torch.ones(2, dtype=torch.float64), tw)):
        b.add_(weight)
        b.copy_(b * weight)                           # b * w saves b; copy_ changes it
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            b.sum().backward()


def test_ops_recorded_before_the_change_keep_the_value_they_read():
    (x, tx) = pair([1.0, 2.0], True)
    for a in (x, tx):
        y = a * 2
        z = y + 1          # add saves nothing: it may go on after y changes
        y.mul_(5)
        (z.sum() + y.sum()).backward()
    same(x.grad, tx.grad)  # 2 from z, 10 from y


# ---------------------------------------------------------------------- the version counter
def test_an_optimizer_step_between_backwards_is_reported_as_in_torch():
    (w, tw) = pair([0.5, -1.5, 2.0], True)
    torch_opt, opt = torch.optim.SGD([tw], lr=0.1), mg.optim.SGD([w], lr=0.1)
    th = tw * tw
    th.sum().backward(retain_graph=True)
    torch_opt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (th * 2).sum().backward()
    h = w * w
    h.sum().backward(retain_graph=True)
    opt.step()
    assert w._version == tw._version == 1
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: input 0 of mul "
                                           r"\(node \d+\), a tensor of shape \(3,\), is at "
                                           r"version 1; expected version 0"):
        (h * 2).sum().backward()


class SavesView(Op):
    """Saves a view of its input (x[1:]), which is neither an input nor an output."""

    @staticmethod
    def forward(ctx, x):
        ctx.save(x[1:])
        return x * 2

    @staticmethod
    def backward(ctx, g):
        (view,) = ctx.saved
        return g * 2 + view.sum() * 0


def test_changing_a_saved_view_of_an_input_is_reported_with_what_it_is():
    y = mg.tensor([1.0, 2.0, 3.0], requires_grad=True) * 1
    z = SavesView.apply(y)
    with mg.no_grad():
        y.add_(1)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: a view of input 0 "
                                           r"of saves_view \(node \d+\), a tensor of shape "
                                           r"\(2,\), is at version 1; expected version 0"):
        z.sum().backward()


def test_changing_a_saved_output_or_a_saved_input_is_reported():
    for library in (mg, torch):
        x = library.tensor([0.5, 1.0], requires_grad=True)
        y = x.exp()        # exp saves its output
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
    x = mg.tensor([0.5, 1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="output 0 of exp"):
        y = x.exp()
        y.add_(1)
        y.sum().backward()
    h = x * 1
    z = h * h
    with mg.no_grad():
        h.detach().zero_()  # detach() shares the counter, as in torch
    with pytest.raises(RuntimeError, match="input 0 of mul.*version 1; expected version 0"):
        z.sum().backward()


def test_zero_grad_and_optimizer_steps_count_as_changes():
    w = mg.tensor([1.0, 2.0], requires_grad=True)
    opt = mg.optim.Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
    assert w._version == 1 and w.grad._version == 1


# ---------------------------------------------------------------------- read-only inputs
class AddsOneInPlace(Op):
    @staticmethod
    def forward(ctx, x):
        x += 1             # the bug: it would change the caller's tensor
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def test_a_forward_that_writes_into_its_input_fails_loudly():
    x = mg.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"adds_one_in_place.forward tried to write into an input "
                                         r"array .*read-only.*y = x \+ 1, not x \+= 1"):
        AddsOneInPlace.apply(x)
    assert x.numpy().tolist() == [1.0, 2.0]


def test_minigrads_own_ops_never_write_into_their_inputs(monkeypatch):
    ops = []
    pending = list(Op.__subclasses__())
    while pending:
        op = pending.pop()
        pending.extend(op.__subclasses__())
        ops.append(op)
    for op in ops:
        monkeypatch.setattr(op, "read_only_inputs", True)
    examples = __import__("examples.mnist_lenet_bn", fromlist=["lenet5"])
    for bn in ("fused", "composed"):
        mg.manual_seed(0)
        model = examples.lenet5(bn=bn)
        x = mg.randn(4, 1, 28, 28)
        loss = mg.nn.functional.cross_entropy(model(x), mg.tensor([1, 2, 3, 4]))
        (d,) = mg.grad(loss, model[0].weight, create_graph=True)
        (d * d).sum().backward()
    x = mg.randn(3, 4, requires_grad=True)
    parts = [x[1:, ::2], x[mg.tensor([0, 0])], x.max(axis=0).values, x.var(axis=1), x.mean(),
             x.T @ x, mg.ops.concatenate([x, x]), mg.ops.pad(x, ((1, 0), (0, 1))),
             mg.ops.where(x > 0, x, 0.0), x.reshape(12).relu().sigmoid().tanh().exp().log()]
    sum(p.sum() for p in parts).backward()


# ---------------------------------------------------------------------- .grad assignment
def test_assigned_gradients_are_checked_like_torchs():
    (p, tp) = pair([1.0, 2.0, 3.0], True, dtype="float32")
    with pytest.raises(RuntimeError, match="attempting to assign a gradient of size"):
        tp.grad = torch.ones(1)
    with pytest.raises(RuntimeError, match=r"assigned grad has data of a different shape: the "
                                           r"tensor's shape is \(3,\), the gradient's is \(1,\)"):
        p.grad = mg.ones(1)
    with pytest.raises(RuntimeError, match="attempting to assign a gradient with dtype"):
        tp.grad = torch.ones(3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="different dtype: the tensor's dtype is float32"):
        p.grad = mg.ones(3, dtype="float64")
    with pytest.raises(TypeError, match="expected to be a Tensor or None"):
        p.grad = np.ones(3)
    p.grad = mg.ones(3)
    mg.optim.SGD([p], lr=1.0).step()
    np.testing.assert_array_equal(p.detach().numpy(), [0.0, 1.0, 2.0])
    p.grad = None
    assert p.grad is None


# ---------------------------------------------------------------------- new-op pitfalls
def test_reading_ctx_saved_when_forward_saved_nothing_names_the_op():
    class ForgetsToSave(Op):
        @staticmethod
        def forward(ctx, x):
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved
            return 2 * g * x

    with pytest.raises(RuntimeError, match=r"forgets_to_save: ctx.saved .*saved nothing.*"
                                           r"ctx.save\(a, b\)"):
        ForgetsToSave.apply(mg.tensor([1.0], requires_grad=True)).sum().backward()


def test_an_output_dtype_other_than_the_inputs_gets_gradients_in_each_inputs_dtype():
    class Widens(Op):
        @staticmethod
        def forward(ctx, x):
            return x.astype("float64") * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = mg.tensor([1.0, 2.0], requires_grad=True)
    y = Widens.apply(x)
    assert y.dtype == np.float64
    y.sum().backward()
    assert x.grad.dtype == np.float32 and x.grad.numpy().tolist() == [2.0, 2.0]


def test_a_training_step_changes_the_running_statistics_an_eval_graph_read():
    """PyTorch runs this backward with the moved statistics and no word; minigrad refuses."""
    layer = mg.nn.BatchNorm2d(3)
    x = np.random.default_rng(0).standard_normal((4, 3, 2, 2)).astype(np.float32)
    layer.eval()
    evaluated = layer(mg.tensor(x, requires_grad=True)).sum()   # reads the running statistics
    layer.train()
    layer(mg.tensor(x))                                          # moves them in place
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: input 3 of "
                                           r"fused_batch_norm"):
        evaluated.backward()
