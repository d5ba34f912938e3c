"""The seams fresh PyTorch scripts stopped on (issue 40), each against torch: a tensor as a Python
index, the dtype names, torch.backends' switches and torch.utils.data under the rename,
destroy_process_group, dropout2d's warnings, add/sub with alpha, norm with p = 0 and negative p,
roll with one-element tuples, the padding layers, and the in-place errors on views."""
import importlib
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import minigrad as mg
import minigrad.nn.functional as F
from minigrad import nn

from ops_oracle import rng


def test_one_element_integer_tensors_are_python_indices():
    names = ["a", "b", "c"]
    for make in (lambda m: m.tensor(2), lambda m: m.tensor([1]),
                 lambda m: m.tensor(1, dtype=m.uint8)):
        assert names[make(mg)] == names[make(torch)]
    assert list(range(mg.tensor(3))) == [0, 1, 2]
    for bad in (mg.tensor(1.0), mg.tensor([1, 2])):
        with pytest.raises(TypeError, match="only integer tensors of a single element"):
            names[bad]


def test_dtype_names_and_device_questions():
    for name in ("short", "cfloat", "cdouble", "uint16", "uint32", "uint64", "half", "long",
                 "bfloat16"):
        assert str(getattr(mg, name)) == str(getattr(torch, name)).removeprefix("torch.")
    for made in (mg.zeros(2, dtype=mg.bfloat16), mg.ones(2).to(mg.bfloat16),
                 mg.zeros(2, dtype="bfloat16"), mg.ones(2).bfloat16()):
        assert made.dtype == mg.bfloat16 and made.is_floating_point()
    x = mg.ones(2)
    assert (x.is_xpu, x.is_mps, x.is_cuda) == (False, False, False)


def test_backend_switches_and_utils_data_under_the_rename():
    for name in ("benchmark", "deterministic", "enabled", "allow_tf32"):
        assert getattr(mg.backends.cudnn, name) == getattr(torch.backends.cudnn, name), name
    assert mg.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
    mg.backends.cudnn.benchmark = True   # a script's first lines: kept, and change nothing
    mg.backends.cuda.matmul.allow_tf32 = True
    assert mg.backends.cudnn.benchmark and not mg.backends.cudnn.is_available()
    assert not mg.backends.mps.is_available()
    mg.backends.cudnn.benchmark = mg.backends.cuda.matmul.allow_tf32 = False
    data = importlib.import_module("minigrad.utils.data")
    from minigrad.utils.data import DataLoader, TensorDataset
    assert data is mg.data and mg.utils.data is mg.data and DataLoader is mg.data.DataLoader
    batch, = DataLoader(TensorDataset(mg.arange(4)), batch_size=4)
    assert batch[0].tolist() == [0, 1, 2, 3]


def test_destroy_process_group():
    pytest.importorskip("mpi4py")
    dist = mg.distributed
    with pytest.raises(ValueError, match="has not been initialized"):
        dist.destroy_process_group()
    dist.init_process_group()
    dist.destroy_process_group()
    assert not dist.is_initialized()


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (2, 3, 4, 5)])
def test_dropout2d_warns_and_drops_as_torch(shape):
    x = mg.ones(*shape)
    with warnings.catch_warnings(record=True) as ours:
        warnings.simplefilter("always")
        y = nn.Dropout2d(0.5)(x)
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        torch.nn.Dropout2d(0.5)(torch.ones(*shape))
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    # whole rows dropped as PyTorch does: (C, L) per row for 2-D, per (n, c) from 3-D on
    kept = 1 if len(shape) == 2 else 2
    values = y.numpy().reshape(int(np.prod(shape[:kept])), -1)
    assert all(len(set(row)) == 1 for row in values.tolist())


def test_add_sub_alpha_and_norms_match_torch():
    a, b = rng(0).standard_normal(5), rng(1).standard_normal(5)

    def results(m):
        x, y = m.tensor(a), m.tensor(b)
        return [m.add(x, y, alpha=2), x.add(y, alpha=-0.5), x.sub(y, alpha=3),
                m.sub(x, 2, alpha=2), x.mul(y), x.div(y), x.matmul(y)]
    for got, want in zip(results(mg), results(torch), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy())
    for values in ([1.0, 0.5, -2.0], [1.0, 0.0, 2.0], [0.0, 0.0]):
        for p in (0, -1, -1.5, 3):
            x, t = mg.tensor(values, requires_grad=True), torch.tensor(values, requires_grad=True)
            got, want = x.norm(p=p), t.norm(p=p)
            np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
            if p != 0:   # p = 0 counts: a constant in minigrad (PyTorch: a zero gradient)
                got.backward()
                want.backward()
                np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_roll_with_one_element_tuples():
    for shifts, dims in (((1,), (0,)), ((-2,), None), (1, (1,))):
        got = mg.arange(6).reshape(2, 3).roll(shifts, dims)
        want = torch.arange(6).reshape(2, 3).roll(shifts, dims)
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("kind", ["Zero", "Constant", "Reflection", "Replication", "Circular"])
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_padding_layers_match_torch(kind, dims):
    padding = (2, 1, 0, 1, 1, 2)[:2 * dims]
    args = (padding, 0.5) if kind == "Constant" else (padding,)
    shape = (2, 3) + (4,) * dims
    x = rng(2).standard_normal(shape)
    name = f"{kind}Pad{dims}d"
    ours, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    xm, xt = mg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got, want = ours(xm), theirs(xt)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy())
    weights = rng(3).standard_normal(want.shape)
    (got * mg.tensor(weights)).sum().backward()
    (want * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(xm.grad.numpy(), xt.grad.numpy())
    assert repr(ours) == repr(theirs)
    with pytest.raises(ValueError, match=f"{name}: padding must be"):
        getattr(nn, name)((1,) * (2 * dims + 1))


def test_replicate_and_circular_from_every_entry_point():
    x = rng(4).standard_normal((1, 2, 5, 5))
    for mode in ("replicate", "circular"):
        want = TF.pad(torch.tensor(x), (1, 2, 2, 1), mode=mode)
        assert np.allclose(F.pad(mg.tensor(x), (1, 2, 2, 1), mode=mode).numpy(), want.numpy())
        conv, reference = nn.Conv2d(2, 3, 3, padding=1, padding_mode=mode), \
            torch.nn.Conv2d(2, 3, 3, padding=1, padding_mode=mode).double()
        reference.load_state_dict({k: torch.tensor(v.numpy()).double()
                                   for k, v in conv.state_dict().items()})
        np.testing.assert_allclose(conv(mg.tensor(x, dtype=mg.float32)).detach().numpy(),
                                   reference(torch.tensor(x)).detach().numpy(), rtol=1e-4,
                                   atol=1e-5)


def test_makemore4_softmax_gradient_lines_run_unchanged():
    logits = rng(5).standard_normal((4, 5))
    labels = [0, 3, 1, 4]
    for m, f in ((mg, F), (torch, TF)):
        w = m.tensor(logits, requires_grad=True)
        dlogits = f.softmax(w * 1.0, 1)
        dlogits[range(4), labels] -= 1
        dlogits /= 4
        if m is mg:
            ours = dlogits.detach().numpy()
    np.testing.assert_allclose(ours, dlogits.detach().numpy())


def test_in_place_on_a_view_of_a_leaf_that_requires_grad_raises_as_torch():
    for m in (mg, torch):
        leaf = m.ones(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad is "
                                               "being used in an in-place operation"):
            leaf[0:2].mul_(2)
