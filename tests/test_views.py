"""In-place ops on views of tensors in a graph (minigrad/views.py, minigrad/inplace.py), against
PyTorch: the base's values, history and gradients, `_base`, `_version`, views taken again after
their base changed, higher derivatives, and the cases PyTorch refuses."""
import numpy as np
import pytest
import torch

import minigrad as mg

rng = np.random.default_rng(0)
A, Y = rng.standard_normal((4, 6)), rng.standard_normal(6)


def both(run):
    """run(lib, a, y) with minigrad and with torch, on the same leaves (float64)."""
    results = []
    for lib in (mg, torch):
        a = lib.tensor(A, dtype=lib.float64, requires_grad=True)
        y = lib.tensor(Y, dtype=lib.float64, requires_grad=True)
        results.append((run(lib, a, y), a, y))
    return results


def same(ours, theirs):
    if ours is None or theirs is None:
        assert ours is None and theirs is None
        return
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-12,
                               atol=1e-12)


def same_values_and_gradients(results):
    (ours, a, y), (theirs, ta, ty) = results
    same(ours, theirs)
    same(a.grad, ta.grad)
    same(y.grad, ty.grad)


# each takes a view of a (4, 6) tensor, and a vector of the view's size to change it with
VIEWS = {
    "slice": (lambda h: h[1:3], lambda y: y),
    "row": (lambda h: h[2], lambda y: y),
    "strided columns": (lambda h: h[:, ::2], lambda y: y[:3]),
    "element": (lambda h: h[1, 4], lambda y: y[0]),
    "reshape": (lambda h: h.reshape(2, 12), lambda y: y.repeat(2)),
    "view": (lambda h: h.view(24), lambda y: y.repeat(4)),
    "transpose": (lambda h: h.transpose(0, 1), lambda y: y[:4]),
    "T then slice": (lambda h: h.T[1:3], lambda y: y[:4]),
    "select": (lambda h: h.select(1, 2), lambda y: y[:4]),
    "narrow": (lambda h: h.narrow(0, 1, 2), lambda y: y),
    "permute and unsqueeze": (lambda h: h.permute(1, 0).unsqueeze(0), lambda y: y[:4]),
    "unflatten by view": (lambda h: h.view(4, 2, 3)[:, 1], lambda y: y[:3]),
}
CHANGES = {
    "mul_": lambda v, w: v.mul_(w),
    "add_(alpha=2)": lambda v, w: v.add_(w, alpha=2),
    "-=": lambda v, w: v.__isub__(w * w),
    "setitem": lambda v, w: v.__setitem__(..., w * 3),
    "copy_": lambda v, w: v.copy_(w.expand_as(v)),
    "zero_ then add_": lambda v, w: v.zero_().add_(w),
    "mul_ then exp_": lambda v, w: v.mul_(w).exp_(),
    "add_ then clamp_": lambda v, w: v.add_(w).clamp_(min=-0.5, max=0.5),
}


@pytest.mark.parametrize("view", VIEWS)
@pytest.mark.parametrize("change", CHANGES)
def test_an_in_place_op_on_a_view_moves_its_base_as_in_torch(view, change):
    take, sized = VIEWS[view]

    def run(lib, a, y):
        h = a * 1.5
        v = take(h)
        CHANGES[change](v, sized(y))
        assert v._base is h and h._base is None and v._is_view()
        assert h.requires_grad and not h.is_leaf and v.requires_grad
        assert h._version == v._version == change.count("_ ") + 1   # one per in-place op
        (h * h.exp()).sum().backward()
        return h
    same_values_and_gradients(both(run))


def test_the_view_itself_goes_on_from_its_new_value():
    def run(lib, a, y):
        h = a * 2
        v = h[1:3, 1:]
        v.mul_(y[1:])
        v.add_(y[:5])            # the second change starts from the first one's place
        return v.sin().sum() + h.sum()

    results = both(run)
    for loss, _, _ in results:
        loss.backward()
    same_values_and_gradients(results)


def test_a_view_taken_before_its_base_changed_is_differentiated_through_the_change():
    def run(lib, a, y):
        h = a * 2
        early, other = h[0], h[:, 1]
        h.mul_(y)                # the base changes: `early` reads the new value
        other.add_(y[:4])        # another view of h changes: `early` sees that too
        out = (early * early).sum() + (other * y[1:5]).sum()
        out.backward()
        return out
    same_values_and_gradients(both(run))


def test_a_constant_base_joins_the_graph_through_its_view():
    def run(lib, a, y):
        buffer = lib.zeros(4, 6, dtype=lib.float64)
        row, column = buffer[1], buffer[:, 2]     # views of a tensor outside the graph
        assert not row.requires_grad
        row.add_(y)
        assert buffer.requires_grad and row.requires_grad and column.requires_grad
        out = (buffer * a).sum() + column.pow(2).sum()
        out.backward()
        return buffer
    same_values_and_gradients(both(run))


def test_a_view_of_a_0d_base_replaces_all_of_it():
    def run(lib, a, y):
        total = a.sum() * 1
        total.reshape(1, 1).mul_(y[0])
        (total * total).backward()
        return total
    same_values_and_gradients(both(run))


def test_makemore_manual_backprop_lines_run_as_written():
    """makemore part 4, exercise 1: `dC[ix] += demb[k,j]` (ix a 0-d tensor, so dC[ix] is a
    view of dC) and `dlogits[range(n), Yb] -= 1`, with the hand gradients in the graph."""
    idx, targets = rng.integers(0, 4, (5, 3)), rng.integers(0, 6, 5)

    def run(lib, a, y):
        Xb, Yb = lib.tensor(idx), lib.tensor(targets)
        demb = a[Xb] * y           # (5, 3, 6), in the graph
        dC = lib.zeros_like(a)
        for k in range(Xb.shape[0]):
            for j in range(Xb.shape[1]):
                ix = Xb[k, j]
                dC[ix] += demb[k, j]
        logits = demb.sum(1)
        dlogits = lib.nn.functional.softmax(logits, 1)
        dlogits[range(5), Yb] -= 1
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            dlogits.sum().backward(retain_graph=True)   # softmax saved what -= changed
        (dC.tanh() * a).sum().backward()
        return lib.cat([dC, dlogits])
    same_values_and_gradients(both(run))


def test_a_piece_of_split_changed_in_place_moves_its_base():
    """PyTorch refuses this (one op's several views); minigrad rebases the base as for any
    view, which gives what torch gives for the same view taken by narrow."""
    def run(lib, a, y):
        h = a * 2
        first = h.split(2, 1)[1] if lib is mg else h.narrow(1, 2, 2)
        first.mul_(y[:2])
        (h * h).sum().backward()
        return h
    same_values_and_gradients(both(run))


def test_gradients_through_a_changed_view_check_to_second_order():
    a = mg.tensor(A[:2, :3], requires_grad=True)
    y = mg.tensor(Y[:3], requires_grad=True)

    def f(a, y):
        h = a * a
        h[1].mul_(y)
        h.T[0].add_(y[:2].sin())
        return h
    assert mg.gradcheck(f, (a, y))
    assert mg.gradgradcheck(f, (a, y))


def test_saved_values_changed_through_a_view_are_reported_as_in_torch():
    for lib in (mg, torch):
        a = lib.tensor(A, dtype=lib.float64, requires_grad=True)
        h = a * 2
        out = (h * h).sum()        # mul saves h
        h[0].zero_()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()


def test_the_cases_torch_refuses_are_refused():
    y = mg.tensor(Y, requires_grad=True)
    leaf = mg.tensor(A, requires_grad=True)
    with pytest.raises(RuntimeError, match="add_: a view of a leaf Variable that requires grad "
                                           r"is being used in an in-place operation \(a view of "
                                           r"shape \(6,\) of a leaf of shape \(4, 6\)\)"):
        leaf[0].add_(1)
    h = leaf * 1
    with mg.no_grad():
        quiet = h[0]
    with pytest.raises(RuntimeError, match=r"mul_: a view \(shape \(6,\)\) was created in "
                                           "no_grad mode and is being modified inplace with "
                                           "grad mode enabled"):
        quiet.mul_(y)
    with mg.no_grad():             # both in the block: allowed and counted, as in PyTorch
        quiet.mul_(y)
        leaf[0].add_(1)
    assert h._version == 1 and leaf._version == 1
    with pytest.raises(RuntimeError, match="broadcast view"):
        h[0].expand(3, 6).mul_(y)
    for lib in (mg, torch):        # detach_ refuses views, not their base
        base = lib.zeros(3) * 1
        view = base[1:]
        with pytest.raises(RuntimeError, match="(?i)can't detach views in-place"):
            view.detach_()
        assert base.detach_() is base and view._base is base
