"""PyTorch's contracts at the seams (issue 19), against PyTorch 2.13 on the same inputs: the
legacy constructors, what a parameter and a state dict are, the autograd contract (in-place
.grad accumulation, retain_grad, the grad-mode switches as decorators, inference tensors,
in-place errors, version checks, autograd.backward, norm at 0, makemore's manual backprop) and
the two concurrency guarantees of issue 24 (.grad accumulation and grad mode across threads)."""
import asyncio
import copy
import sys
import threading

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn


def same(ours, theirs, **tolerance):
    assert ours.dtype == np.dtype(str(theirs.dtype).removeprefix("torch.")), (ours.dtype,
                                                                               theirs.dtype)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **tolerance)


# ---------------------------------------------------------------------- legacy constructors
@pytest.mark.parametrize("args", [(), (4,), (3, 4), (2, 0), (np.int64(3),)])
def test_sizes_make_an_uninitialised_tensor_of_the_default_float_dtype(args):
    ours, theirs = mg.Tensor(*args), torch.Tensor(*args)
    assert ours.shape == tuple(theirs.shape) and str(ours.dtype) == "float32"
    assert not ours.requires_grad


@pytest.mark.parametrize("data", [[1, 2], (3, 4), [[1, 2], [3, 4]], [True, False], [],
                                  np.arange(3), np.arange(3.0), np.array(3.0)])
def test_data_is_converted_to_the_default_float_dtype(data):
    same(mg.Tensor(data), torch.Tensor(data))


def test_the_default_dtype_is_followed():
    mg.set_default_dtype("float64")
    torch.set_default_dtype(torch.float64)
    try:
        for args in [(2,), ([1, 2],)]:
            assert str(mg.Tensor(*args).dtype) == str(torch.Tensor(*args).dtype)[6:]
        assert str(nn.Parameter().dtype) == str(torch.nn.Parameter().dtype)[6:]
    finally:
        mg.set_default_dtype("float32")
        torch.set_default_dtype(torch.float32)


def test_an_array_of_the_dtype_and_a_tensor_share_memory():
    source = np.ones(3, dtype=np.float32)
    wrapped, theirs = mg.Tensor(source), torch.Tensor(source)
    source[0] = 7
    assert wrapped.numpy()[0] == theirs[0].item() == 7
    t = mg.arange(3)
    alias = mg.Tensor(t)            # as torch.Tensor(t): same memory, the dtype kept
    assert alias.dtype == t.dtype == np.int64 and torch.Tensor(torch.arange(3)).dtype == torch.int64
    alias[0] = 5
    assert t[0].item() == 5 and t._version == alias._version == 1


@pytest.mark.parametrize("args, error", [((3.5,), TypeError), ((True,), TypeError),
                                         (("a",), TypeError), ((None,), TypeError),
                                         ((2.0, 3), TypeError), ((2, [3]), TypeError),
                                         ((-1,), RuntimeError)])
def test_bad_arguments_raise_what_pytorch_raises(args, error):
    with pytest.raises(error):
        torch.Tensor(*args)
    with pytest.raises(error):
        mg.Tensor(*args)


TYPED = ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "ShortTensor",
         "CharTensor", "ByteTensor", "BoolTensor"]


@pytest.mark.parametrize("name", TYPED)
def test_typed_constructors_make_their_dtype(name):
    ours, theirs = getattr(mg, name), getattr(torch, name)
    same(ours([1.5, 2, 0]), theirs([1.5, 2, 0]))   # LongTensor truncates 1.5, as PyTorch
    assert str(ours(2, 3).dtype) == str(theirs(2, 3).dtype)[6:] and ours(2, 3).shape == (2, 3)
    for value in (mg.zeros(2), mg.zeros(2, dtype="int64"), mg.zeros(2, dtype="bool")):
        assert isinstance(value, ours) == isinstance(torch.from_numpy(value.numpy()), theirs)
    assert isinstance(mg.zeros(2), mg.Tensor)


def test_a_typed_constructor_refuses_a_tensor_of_another_dtype():
    with pytest.raises(TypeError):
        torch.LongTensor(torch.ones(2))
    with pytest.raises(TypeError, match="LongTensor: expected a int64"):
        mg.LongTensor(mg.ones(2))
    assert mg.FloatTensor(mg.ones(2)).dtype == np.float32


def test_parameters_are_made_as_in_pytorch():
    empty, theirs = nn.Parameter(), torch.nn.Parameter()
    assert empty.shape == tuple(theirs.shape) and empty.requires_grad and theirs.requires_grad
    assert empty.dtype == np.float32
    weight = nn.Parameter(mg.Tensor(5, 3))       # the custom-layer idiom, then an init
    nn.init.kaiming_uniform_(weight, a=5 ** 0.5)
    bound = 1 / 3 ** 0.5
    assert weight.shape == (5, 3) and weight.is_leaf and weight.requires_grad
    assert np.all(np.abs(weight.detach().numpy()) <= bound) and np.isfinite(weight.sum().item())
    x = mg.ones(2, 3)
    (x @ weight.T).sum().backward()
    np.testing.assert_allclose(weight.grad.numpy(), np.full((5, 3), 2.0))


def test_a_parameter_shares_its_data_and_refuses_integers_and_arrays():
    t = mg.ones(2)
    p = nn.Parameter(t)
    t.add_(1)
    tt = torch.ones(2)
    pt = torch.nn.Parameter(tt)
    tt.add_(1)
    same(p, pt)
    assert p._version == pt._version == 1
    with pytest.raises(RuntimeError):
        torch.nn.Parameter(torch.arange(3))
    with pytest.raises(TypeError, match="only floating-point"):
        nn.Parameter(mg.arange(3))
    assert nn.Parameter(mg.arange(3), requires_grad=False).dtype == np.int64
    with pytest.raises(TypeError, match="Parameter: data must be a Tensor, got ndarray"):
        nn.Parameter(np.ones(2))


def test_as_tensor_shares_memory_where_it_can():
    a = np.ones(3)
    t, theirs = mg.as_tensor(a), torch.as_tensor(a)
    a[0] = 4
    assert t[0].item() == theirs[0].item() == 4
    same(mg.as_tensor([1, 2]), torch.as_tensor([1, 2]))
    x = mg.ones(2, requires_grad=True)
    assert mg.as_tensor(x) is x
    mg.as_tensor(x, dtype="float64").sum().backward()   # a conversion autograd follows
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1])


# ---------------------------------------------------------------------- state_dict
def twins():
    ours, theirs = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    theirs.load_state_dict({k: torch.from_numpy(v.numpy()) for k, v in
                            ours.state_dict().items()})
    return ours, theirs


def test_state_dict_tensors_share_the_modules_memory_detached():
    ours, theirs = twins()
    sd, sdt = ours.state_dict(), theirs.state_dict()
    assert not sd["weight"].requires_grad and not sdt["weight"].requires_grad
    sd["bias"].fill_(42)
    sdt["bias"].fill_(42)
    same(ours.bias, theirs.bias)
    assert ours.bias.detach().numpy().tolist() == [42, 42]
    for (name, param), (_, param_t) in zip(ours.named_parameters(), theirs.named_parameters(),
                                           strict=True):   # PyTorch's load-by-hand idiom
        sd[name].copy_(param * 0 + 1)
        sdt[name].copy_(param_t * 0 + 1)
    same(ours.weight, theirs.weight)
    assert ours.state_dict(keep_vars=True)["weight"] is ours.weight


def test_state_dict_follows_later_in_place_changes():
    ours, theirs = twins()
    sd, sdt = ours.state_dict(), theirs.state_dict()
    for model, opt, x in ((ours, mg.optim.SGD(ours.parameters(), lr=0.5), mg.ones(4, 3)),
                          (theirs, torch.optim.SGD(theirs.parameters(), lr=0.5),
                           torch.ones(4, 3))):
        model(x).sum().backward()
        opt.step()
    same(sd["weight"], sdt["weight"], rtol=1e-6)
    same(sd["weight"], ours.weight.detach())


def test_save_writes_the_state_dict_and_a_bad_load_changes_nothing(tmp_path):
    ours, _ = twins()
    mg.save(ours.state_dict(), tmp_path / "m.safetensors")
    loaded = mg.load(tmp_path / "m.safetensors")
    for key, value in ours.state_dict().items():
        np.testing.assert_array_equal(loaded[key], value.numpy())
    snapshot = copy.deepcopy(ours.state_dict())
    with pytest.raises(nn.StateDictError, match="nothing was changed"):
        ours.load_state_dict({"weight": np.zeros((2, 3)), "bias": np.zeros(5)})
    for key, value in ours.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), snapshot[key].numpy())


# ---------------------------------------------------------------------- .grad
def both(fn):
    """Run fn(lib) with minigrad and with PyTorch; returns the two results."""
    return fn(mg), fn(torch)


def test_grad_is_accumulated_in_place_and_an_assigned_grad_is_kept():
    def kept(lib):
        x = lib.ones(2, requires_grad=True)
        (x * 2).sum().backward()
        first = x.grad
        (x * 3).sum().backward()
        return first, first is x.grad

    (ours, ours_same), (theirs, theirs_same) = both(kept)
    same(ours, theirs)
    assert ours_same and theirs_same

    def assigned(lib):
        x = lib.ones(2, requires_grad=True)
        x.grad = lib.zeros(2)
        given = x.grad
        (x * 3).sum().backward()
        return given, given is x.grad

    (ours, ours_same), (theirs, theirs_same) = both(assigned)
    same(ours, theirs)
    assert ours_same and theirs_same


@pytest.mark.parametrize("leaf", ["transposed", "every other column", "broadcast", "contiguous"])
def test_a_first_grad_is_laid_out_as_its_leaf(leaf):
    """PyTorch's layout contract: a dense leaf's .grad has the leaf's strides (a transposed
    weight's grad is transposed too), any other leaf's (with gaps or overlaps) is contiguous."""
    def run(lib):
        x = lib.arange(12.0).reshape(3, 4)
        x = {"transposed": x.T, "every other column": x[:, ::2], "contiguous": x,
             "broadcast": x[0].expand(3, 4)}[leaf]
        x = x.detach().requires_grad_()
        (x * x).sum().backward()
        (x * 3).sum().backward()   # accumulated into the first one
        if lib is mg:
            return x.grad, x.array.strides, x.grad.array.strides
        size = x.element_size()   # torch counts strides in elements, NumPy in bytes
        return x.grad, tuple(s * size for s in x.stride()), tuple(s * size for s in x.grad.stride())

    (ours, our_leaf, our_grad), (theirs, their_leaf, their_grad) = both(run)
    same(ours, theirs)
    assert our_leaf == their_leaf and our_grad == their_grad


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_with_create_graph_the_grad_is_a_new_tensor():
    def run(lib):
        x = lib.ones(2, requires_grad=True)
        (x * x).sum().backward(create_graph=True)
        first = x.grad
        (x * x).sum().backward(create_graph=True)
        return first, x.grad, first is x.grad

    (a, b, ours_same), (at, bt, theirs_same) = both(run)
    same(a, at)
    same(b, bt)
    assert not ours_same and not theirs_same and b.requires_grad and bt.requires_grad


def test_grad_cannot_be_the_tensor_itself_and_can_be_deleted():
    for lib in (mg, torch):
        x = lib.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError):
            x.grad = x
        (x * 2).sum().backward()
        del x.grad
        assert x.grad is None


@pytest.mark.parametrize("extra_use", [False, True])
def test_retain_grad_follows_in_place_ops(extra_use):
    def run(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        y.retain_grad()
        z = y * 1
        y.add_(1)
        ((y * y).sum() + (z.sum() if extra_use else 0)).backward()
        return y.grad, x.grad

    (yg, xg), (ygt, xgt) = both(run)
    same(yg, ygt)
    same(xg, xgt)


# ---------------------------------------------------------------------- grad-mode switches
SWITCHES = [("no_grad", False), ("enable_grad", True), ("inference_mode", False)]


def record_of(x):
    return (x * 2).requires_grad


@pytest.mark.parametrize("name, records", SWITCHES)
@pytest.mark.parametrize("form", ["bare", "called"])
def test_switches_decorate_functions(name, records, form):
    for lib in (mg, torch):
        switch = getattr(lib, name)

        def f(x, lib=lib):
            return record_of(x), lib.is_grad_enabled()

        decorated = switch(f) if form == "bare" else switch()(f)   # @switch, @switch()
        x = lib.ones(2, requires_grad=True)
        outer = lib.no_grad() if records else lib.enable_grad()
        with outer:
            before = lib.is_grad_enabled()
            assert decorated(x) == (records, records)
            assert lib.is_grad_enabled() == before


@pytest.mark.parametrize("name, records", SWITCHES)
def test_switches_decorate_generators_step_by_step(name, records):
    results = []
    for lib in (mg, torch):
        @getattr(lib, name)()
        def steps(x):
            sent = yield record_of(x)
            yield record_of(x) and sent

        x = lib.ones(2, requires_grad=True)
        with lib.set_grad_enabled(not records):
            gen = steps(x)
            first = next(gen)
            between = lib.is_grad_enabled()   # the caller's mode between steps
            second = gen.send(True)
        results.append((first, between, second))
    assert results[0] == results[1] == (records, not records, records)


@pytest.mark.parametrize("name, records", SWITCHES)
def test_switches_decorate_coroutines_step_by_step(name, records):
    @getattr(mg, name)
    async def work(x, seen):
        seen.append(record_of(x))
        await asyncio.sleep(0)
        seen.append(record_of(x))
        return mg.is_grad_enabled()

    async def other(seen):
        seen.append(mg.is_grad_enabled())   # runs while work is suspended

    async def main():
        seen, others = [], []
        result = await asyncio.gather(work(mg.ones(2, requires_grad=True), seen), other(others))
        return seen, others, result[0]

    mg.set_grad_enabled(not records)
    try:
        seen, others, inside = asyncio.run(main())
    finally:
        mg.set_grad_enabled(True)
    assert seen == [records, records] and inside == records and others == [not records]


def test_set_grad_enabled_switches_at_once_and_as_a_block():
    for lib in (mg, torch):
        lib.set_grad_enabled(False)
        assert not lib.is_grad_enabled()
        lib.set_grad_enabled(True)
        with lib.set_grad_enabled(False):
            assert not lib.is_grad_enabled()
        assert lib.is_grad_enabled()

        @lib.set_grad_enabled(False)
        def f(lib=lib):
            return lib.is_grad_enabled()

        assert lib.is_grad_enabled() and f() is False and lib.is_grad_enabled()


def test_one_no_grad_object_reentered_restores_what_each_block_found():
    switch = mg.no_grad()
    with switch:
        with mg.enable_grad():
            with switch:
                assert not mg.is_grad_enabled()
            assert mg.is_grad_enabled()
        assert not mg.is_grad_enabled()
    assert mg.is_grad_enabled()


def test_one_no_grad_object_in_two_threads_restores_each_threads_mode():
    """Both threads are inside the same block at once (a barrier holds them there); each finds
    its own mode again at the end."""
    switch, inside, found = mg.no_grad(), threading.Barrier(2), {}

    def run(name, mode):
        mg.set_grad_enabled(mode)
        with switch:
            inside.wait()
            found[name + " inside"] = mg.is_grad_enabled()
            inside.wait()
        found[name] = mg.is_grad_enabled()

    for _ in range(20):
        threads = [threading.Thread(target=run, args=("a", True)),
                   threading.Thread(target=run, args=("b", False))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert found == {"a inside": False, "b inside": False, "a": True, "b": False}
    assert mg.is_grad_enabled()   # this thread's mode is its own


def test_two_threads_running_backward_into_one_parameter_lose_no_gradient():
    """Every trial checks the exact sum. The parameter is large (NumPy lets go of the GIL while
    it adds) and threads switch often, so an unlocked read-add-write loses gradients at once."""
    w = nn.Parameter(mg.zeros(200_000))
    start = threading.Barrier(2)
    trials, per_thread = 50, 5

    def run():
        start.wait()
        for _ in range(per_thread):
            (w * 1.0).sum().backward()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for trial in range(1, trials + 1):
            threads = [threading.Thread(target=run) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert np.all(w.grad.numpy() == 2 * per_thread * trial), trial
    finally:
        sys.setswitchinterval(interval)


# ---------------------------------------------------------------------- inference tensors
def test_inference_tensors_as_in_pytorch():
    results = []
    for lib in (mg, torch):
        normal = lib.ones(2)
        with lib.inference_mode():
            made, view, mode = lib.ones(2), normal[0:1], lib.is_inference_mode_enabled()
            made.add_(1)                          # in place inside the mode is fine
            with lib.inference_mode(False):
                inner = (lib.is_grad_enabled(), lib.is_inference_mode_enabled())
        with pytest.raises(RuntimeError, match="(?i)inference"):
            made.add_(1)
        with pytest.raises(RuntimeError, match="(?i)inference"):
            made[0] = 3
        with pytest.raises(RuntimeError, match="(?i)inference"):
            made.requires_grad_()
        with lib.no_grad(), pytest.raises(RuntimeError, match="(?i)inference"):
            made.zero_()
        results.append((made.is_inference(), view.is_inference(), normal.is_inference(), mode,
                        inner, lib.is_inference_mode_enabled(), made.clone().is_inference()))
        if lib is mg:   # minigrad changes nothing when it refuses (PyTorch zeroed it)
            assert made.tolist() == [2, 2]
    assert results[0] == results[1]


# ---------------------------------------------------------------------- in-place errors
@pytest.mark.parametrize("view", [lambda x: x[1:], lambda x: x.reshape(3), lambda x: x[0]])
def test_in_place_on_a_view_of_a_leaf_that_requires_grad_raises(view):
    for lib in (mg, torch):
        x = lib.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
            view(x).add_(1)
        with lib.no_grad():   # as optimizers do: allowed, and the leaf changes
            view(x).mul_(2)
        assert x.sum().item() > 3


def test_version_checks_fire_only_for_values_a_derivative_uses():
    def uses_constant(lib):
        x = lib.ones(3, requires_grad=True)
        h = x * 2
        y = h * 3             # d/dh needs the 3, not h
        h.add_(1)
        y.sum().backward()
        return x.grad

    same(*both(uses_constant))
    for lib in (mg, torch):
        x = lib.ones(3, requires_grad=True)
        h = x * 2
        y = h * h             # d/dh needs h, which changed
        h.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_micrograds_more_ops_in_torch_form_with_in_place_updates():
    def run(lib):   # karpathy/micrograd test/test_engine.py::test_more_ops, with += as there
        a = lib.tensor([-4.0], dtype=lib.float64, requires_grad=True)
        b = lib.tensor([2.0], dtype=lib.float64, requires_grad=True)
        c = a + b
        d = a * b + b ** 3
        c += c + 1
        c += 1 + c + (-a)
        d += d * 2 + (b + a).relu()
        d += 3 * d + (b - a).relu()
        e = c - d
        f = e ** 2
        g = f / 2.0
        g += 10.0 / f
        g.backward()
        return g, a.grad, b.grad

    for ours, theirs in zip(*both(run), strict=True):
        same(ours, theirs, rtol=1e-12)


def test_a_second_backward_through_nodes_that_saved_nothing_works():
    def run(lib):
        b = lib.ones(2, requires_grad=True)
        c = (b + 1).sum()
        c.backward()
        c.backward()
        return b.grad

    same(*both(run))
    for lib in (mg, torch):   # a node that saved values is freed: an error, as in PyTorch
        a = lib.ones(2, requires_grad=True)
        y = a.exp().sum()
        y.backward()
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()


def test_autograd_backward_takes_sequences():
    def run(lib):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        lib.autograd.backward([a * 2, (a * 3).sum()], [lib.tensor([1.0, 0.5]), None])
        return a.grad

    same(*both(run))


@pytest.mark.parametrize("p", [1, 2, 3, 0.5, 1.5, float("inf"), float("-inf")])
def test_the_gradient_of_a_norm_at_zero_is_zero(p):
    def run(lib):
        x = lib.zeros(2, 3, dtype=lib.float64, requires_grad=True)
        y = lib.tensor([[0.0, 1.0, -2.0], [0.0, 0.0, 0.0]], dtype=lib.float64,
                       requires_grad=True)
        x.norm(p).backward()
        y.norm(p, dim=1).sum().backward()
        return x.grad, y.grad

    for ours, theirs in zip(*both(run), strict=True):
        same(ours, theirs)
    x = mg.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    assert mg.gradcheck(lambda v: v.norm(p, dim=1), (x,))


