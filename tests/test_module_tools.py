"""nn: ModuleList, ModuleDict, Identity; Module.requires_grad_, float/double/half,
named_modules, apply, zero_grad, forward hooks, the order of re-assigned attributes; nn.utils
clipping and flat parameter vectors. Each against the same thing done in torch.nn."""
import math
from collections import OrderedDict

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn


def build(lib):
    """The same tree in minigrad.nn or torch.nn: lists, dicts, a module shared twice."""
    shared = lib.Linear(3, 3)
    return lib.Sequential(
        lib.Linear(4, 3),
        lib.ModuleList([lib.ReLU(), shared, lib.ModuleList([lib.Tanh()])]),
        lib.ModuleDict({"enc": lib.BatchNorm1d(3), "shared": shared, "id": lib.Identity(7)}),
    )


def copy_weights(ours, theirs):
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})


# --------------------------------------------------------------------------- containers
@pytest.mark.parametrize("remove_duplicate", [True, False])
def test_named_modules_and_state_dict_keys_match_torch(remove_duplicate):
    ours, theirs = build(nn), build(torch.nn)

    def names(model):
        return [(name, type(m).__name__)
                for name, m in model.named_modules(remove_duplicate=remove_duplicate)]

    assert names(ours) == names(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [type(m).__name__ for m in ours.modules()] == \
        [type(m).__name__ for m in theirs.modules()]
    visited = {lib: [] for lib in ("ours", "theirs")}
    ours.apply(lambda m: visited["ours"].append(type(m).__name__))
    theirs.apply(lambda m: visited["theirs"].append(type(m).__name__))
    assert visited["ours"] == visited["theirs"]


def test_module_list_edits_like_torch():
    def edited(lib):
        layers = lib.ModuleList([lib.Linear(1, 1), lib.ReLU()])
        layers.append(lib.Tanh())
        layers.extend([lib.Sigmoid(), lib.Linear(1, 2)])
        layers.insert(1, lib.Identity())
        layers += [lib.ReLU()]
        del layers[0]
        del layers[-2]
        layers[1] = lib.Linear(1, 3)
        layers[-1] = lib.Tanh()
        return layers

    ours, theirs = edited(nn), edited(torch.nn)
    assert [(n, type(m).__name__) for n, m in ours.named_children()] == \
        [(n, type(m).__name__) for n, m in theirs.named_children()]
    assert len(ours) == len(theirs) == 5
    assert type(ours[-1]).__name__ == "Tanh" and isinstance(ours[1:3], nn.ModuleList)
    assert [type(m).__name__ for m in ours[1:3]] == [type(m).__name__ for m in theirs[1:3]]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with pytest.raises(IndexError, match="out of range for 5"):
        ours[5]
    with pytest.raises(NotImplementedError, match="forward"):
        ours(mg.ones(1))


def test_module_dict_edits_like_torch():
    def edited(lib):
        blocks = lib.ModuleDict({"b": lib.Linear(1, 1), "a": lib.ReLU()})
        blocks.update([("c", lib.Tanh()), ("d", lib.Linear(1, 2))])
        blocks["e"] = lib.Sigmoid()
        popped = blocks.pop("a")
        del blocks["c"]
        return blocks, popped

    (ours, popped), (theirs, reference) = edited(nn), edited(torch.nn)
    assert list(ours) == list(theirs) == list(ours.keys()) == ["b", "d", "e"]
    assert [type(m).__name__ for m in ours.values()] == [type(m).__name__ for m in theirs.values()]
    assert type(popped).__name__ == type(reference).__name__ == "ReLU"
    assert "d" in ours and "a" not in ours and len(ours) == 3
    assert list(ours.state_dict()) == list(theirs.state_dict())
    with pytest.raises(KeyError, match=r"no module 'z'; it has \['b', 'd', 'e'\]"):
        ours["z"]
    with pytest.raises(TypeError, match="keys must be strings"):
        ours[3] = nn.ReLU()
    ours.clear()
    assert len(ours) == 0 and list(ours.parameters()) == []


# --------------------------------------------------------------------------- module methods
def test_reassigned_submodules_parameters_and_buffers_keep_their_place_like_torch():
    orders = []
    for lib in (nn, torch.nn):
        model = lib.Module()
        model.first, model.second = lib.Linear(2, 2), lib.ReLU()
        model.first = lib.Linear(2, 3)   # re-assigned: stays first
        model.w, model.v = lib.Parameter(lib.Linear(1, 1).weight), lib.Parameter(
            lib.Linear(1, 1).weight)
        model.w = lib.Parameter(lib.Linear(1, 2).weight)
        model.register_buffer("m", lib.Linear(1, 1).weight.detach())
        model.register_buffer("n", lib.Linear(1, 1).weight.detach())
        model.register_buffer("m", lib.Linear(1, 3).weight.detach(), persistent=False)
        orders.append(([name for name, _ in model.named_children()],
                       [name for name, _ in model.named_parameters(recurse=False)],
                       [name for name, _ in model.named_buffers(recurse=False)],
                       list(model.state_dict())))
    assert orders[0] == orders[1]


def test_requires_grad_freezes_parameters():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    assert model[0].requires_grad_(False) is model[0]
    model(mg.ones(2, 3)).sum().backward()
    assert model[0].weight.grad is None and model[1].weight.grad is not None
    assert all(not p.requires_grad for p in model[0].parameters())
    model.requires_grad_()
    assert all(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("cast", ["double", "half", "float"])
def test_dtype_casts_like_torch(cast):
    ours, theirs = build(nn), build(torch.nn)
    getattr(ours.double() if cast == "float" else ours, cast)()
    getattr(theirs.double() if cast == "float" else theirs, cast)()
    ours_dtypes = {k: str(v.dtype) for k, v in ours.state_dict().items()}
    torch_dtypes = {k: str(v.dtype).removeprefix("torch.") for k, v in
                    theirs.state_dict().items()}
    assert ours_dtypes == torch_dtypes
    assert ours_dtypes["2.enc.num_batches_tracked"] == "int64"     # integers are left alone


def test_zero_grad_set_to_none_or_zeros():
    model = nn.Linear(2, 2)
    model(mg.ones(1, 2)).sum().backward()
    grad = model.weight.grad
    model.zero_grad(set_to_none=False)
    assert model.weight.grad is grad and not grad.numpy().any()
    model.zero_grad()
    assert model.weight.grad is None and model.bias.grad is None


def test_forward_hooks_match_torch():
    """A pre-hook that rewrites the input, forward hooks that rewrite or only watch the
    output, `prepend`, removal by handle and by `with`: outputs and call order as in torch."""
    ours, theirs = nn.Linear(3, 2), torch.nn.Linear(3, 2)
    copy_weights(ours, theirs)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    calls = {"ours": [], "theirs": []}

    def hooks(module, log):
        handles = [module.register_forward_pre_hook(lambda m, args: (args[0] * 2,)),
                   module.register_forward_hook(lambda m, args, out: log.append("watch")),
                   module.register_forward_hook(lambda m, args, out: out + 1),
                   module.register_forward_hook(lambda m, args, out: log.append("first"),
                                                prepend=True)]
        return handles

    mine, reference = hooks(ours, calls["ours"]), hooks(theirs, calls["theirs"])
    out, expected = ours(mg.tensor(x)), theirs(torch.tensor(x))
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-6,
                               atol=1e-6)
    assert calls["ours"] == calls["theirs"] == ["first", "watch"]
    for handles in (mine, reference):
        handles[0].remove()
        handles[2].remove()
    np.testing.assert_allclose(ours(mg.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6, atol=1e-6)
    seen = []
    with ours.register_forward_pre_hook(lambda m, args: seen.append(args[0].shape)):
        ours(mg.tensor(x))
    ours(mg.tensor(x))
    assert seen == [(4, 3)]
    with pytest.raises(TypeError, match="hook must be callable"):
        ours.register_forward_hook("print")


def test_identity_ignores_constructor_arguments():
    x = mg.ones(2)
    assert nn.Identity(54, unused="yes")(x) is x


# --------------------------------------------------------------------------- nn.utils
def twin_parameters(seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s).astype(np.float32) * scale for s in ((3, 4), (5,), (2,))]
    grads = [rng.standard_normal(a.shape).astype(np.float32) * scale for a in arrays]
    ours = [nn.Parameter(mg.tensor(a)) for a in arrays]
    theirs = [torch.nn.Parameter(torch.tensor(a)) for a in arrays]
    for p, q, g in zip(ours, theirs, grads, strict=True):
        p.grad, q.grad = mg.tensor(g), torch.tensor(g)
    ours[2].grad = theirs[2].grad = None          # a parameter without a gradient is skipped
    return ours, theirs


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, 0.5, math.inf, -math.inf, "inf"])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    ours, theirs = twin_parameters()
    total = nn.utils.clip_grad_norm_(ours, max_norm, norm_type=norm_type, foreach=True)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert isinstance(total, mg.Tensor) and total.shape == () and total.dtype == np.float32
    np.testing.assert_allclose(total.numpy(), expected.numpy(), rtol=1e-6)
    for p, q in zip(ours[:2], theirs[:2], strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_clip_grad_norm_with_non_finite_gradients():
    ours, theirs = twin_parameters()
    ours[0].grad.array[0, 0] = np.inf
    theirs[0].grad[0, 0] = np.inf
    with pytest.raises(RuntimeError, match="norm of order 2.0 .* is inf"):
        nn.utils.clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    with np.errstate(invalid="ignore"):             # inf * 0 = nan, as in torch
        total = nn.utils.clip_grad_norm_(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert float(total) == float(expected) == math.inf
    np.testing.assert_array_equal(np.isnan(ours[1].grad.numpy()), np.isnan(theirs[1].grad.numpy()))
    assert float(nn.utils.clip_grad_norm_([nn.Parameter(mg.ones(2))], 1.0)) == 0.0   # no grads


def test_clipping_counts_as_one_in_place_change_of_each_gradient():
    ours, theirs = twin_parameters(scale=3.0)
    before = [p.grad._version for p in ours[:2]]
    nn.utils.clip_grad_norm_(ours, 1.0)
    torch_before = [q.grad._version for q in theirs[:2]]
    torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert [p.grad._version - v for p, v in zip(ours[:2], before, strict=True)] == \
        [q.grad._version - v for q, v in zip(theirs[:2], torch_before, strict=True)] == [1, 1]
    nn.utils.clip_grad_value_(ours, 0.1)
    assert [p.grad._version - v for p, v in zip(ours[:2], before, strict=True)] == [2, 2]
    assert [p._version for p in ours] == [0, 0, 0]          # the parameters are untouched


def test_clip_grad_value_matches_torch():
    ours, theirs = twin_parameters(scale=3.0)
    assert nn.utils.clip_grad_value_(ours, 1.5) is None
    torch.nn.utils.clip_grad_value_(theirs, 1.5)
    for p, q in zip(ours[:2], theirs[:2], strict=True):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
    assert np.abs(ours[0].grad.numpy()).max() == 1.5


def test_parameters_to_vector_and_back_match_torch():
    ours, theirs = twin_parameters()
    vec = nn.utils.parameters_to_vector(ours)
    expected = torch.nn.utils.parameters_to_vector(theirs)
    np.testing.assert_array_equal(vec.detach().numpy(), expected.detach().numpy())
    weights = mg.tensor(np.arange(vec.shape[0], dtype=np.float32))
    for p in ours:
        p.grad = None
    (vec * weights).sum().backward()                # differentiable, as in torch
    np.testing.assert_array_equal(ours[1].grad.numpy(), np.arange(12, 17))
    new = np.linspace(-1, 1, vec.shape[0]).astype(np.float32)
    arrays = [p.array for p in ours]
    nn.utils.vector_to_parameters(mg.tensor(new), ours)
    torch.nn.utils.vector_to_parameters(torch.tensor(new), theirs)
    for p, q, a in zip(ours, theirs, arrays, strict=True):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
        assert p.array is a and p._version == 1      # written in place, counted once
    with pytest.raises(ValueError, match=r"hold 19 values, so vec must have shape \(19,\)"):
        nn.utils.vector_to_parameters(mg.ones(18), ours)
    with pytest.raises(TypeError, match="expected a Tensor"):
        nn.utils.vector_to_parameters(new, ours)


# --------------------------------------------------------------------------- torch.nn's rules
def _children(model):
    return [(name, type(m).__name__) for name, m in model.named_children()]


def test_sequential_edits_like_torch():
    def edited(lib):
        model = lib.Sequential(lib.Linear(2, 3), lib.ReLU(), lib.Linear(3, 3), lib.Tanh())
        model[1] = lib.Sigmoid()
        model[-1] = lib.ReLU()
        model.append(lib.Linear(3, 4))
        model.insert(2, lib.Identity())
        model.insert(-1, lib.Tanh())
        model.extend([lib.ReLU(), lib.Linear(4, 1)])
        del model[0]
        del model[1:3]
        popped = [type(model.pop(-2)).__name__, type(model.pop(0)).__name__]
        joined = model + lib.Sequential(lib.Linear(1, 2))
        model += lib.Sequential(lib.Tanh())
        named = lib.Sequential(OrderedDict(a=lib.ReLU(), b=lib.Linear(1, 1), c=lib.Tanh()))
        del named[0]
        return model, joined, named, popped

    ours, theirs = edited(nn), edited(torch.nn)
    for mine, reference in zip(ours[:3], theirs[:3], strict=True):
        assert _children(mine) == _children(reference)
        assert list(mine.state_dict()) == list(reference.state_dict())
    assert ours[3] == theirs[3]
    assert isinstance(ours[0][1:], nn.Sequential)


def test_module_list_add_and_pop_like_torch():
    def edited(lib):
        layers = lib.ModuleList([lib.Linear(1, 1), lib.ReLU()])
        joined = layers + lib.ModuleList([lib.Tanh()]) + [lib.Linear(1, 2)]
        popped = type(joined.pop(1)).__name__
        return layers, joined, popped

    (ours, ours_joined, ours_popped), (theirs, joined, popped) = edited(nn), edited(torch.nn)
    assert _children(ours) == _children(theirs) and ours_popped == popped
    assert _children(ours_joined) == _children(joined)
    assert list(ours_joined.state_dict()) == list(joined.state_dict())


def _raised(build):
    try:
        build()
    except Exception as error:  # the type is what is compared
        return type(error)
    return None


class _Plain:
    """A module with a plain attribute, a parameter and a buffer, in minigrad or torch."""

    def __init__(self, lib):
        self.lib = lib
        self.model = lib.Sequential(lib.Linear(2, 2), lib.BatchNorm1d(2))
        self.model.note = 5
        self.tensor = mg.zeros(2) if lib is nn else torch.zeros(2)
        self.param = lib.Parameter(self.tensor.clone() if lib is torch.nn else mg.zeros(2))


REFUSALS = {
    'add_module("")': lambda s: s.model.add_module("", s.lib.ReLU()),
    'add_module("a.b")': lambda s: s.model.add_module("a.b", s.lib.ReLU()),
    "add_module(3, m)": lambda s: s.model.add_module(3, s.lib.ReLU()),
    "add_module(name, 3)": lambda s: s.model.add_module("x", 3),
    "add_module over a plain attribute": lambda s: s.model.add_module("note", s.lib.ReLU()),
    "add_module over a method": lambda s: s.model.add_module("forward", s.lib.ReLU()),
    "register_module over a plain attribute": lambda s: s.model.register_module(
        "note", s.lib.ReLU()),
    "register_module": lambda s: s.model.register_module("extra", s.lib.ReLU()),
    'register_buffer("")': lambda s: s.model.register_buffer("", s.tensor),
    'register_buffer("a.b")': lambda s: s.model.register_buffer("a.b", s.tensor),
    "register_buffer(3, t)": lambda s: s.model.register_buffer(3, s.tensor),
    "register_buffer(name, 3)": lambda s: s.model.register_buffer("x", 3),
    "register_buffer over a plain attribute": lambda s: s.model.register_buffer("note", s.tensor),
    "register_buffer over a child": lambda s: s.model.register_buffer("0", s.tensor),
    "register_buffer over a parameter": lambda s: s.model[0].register_buffer("bias", s.tensor),
    "register_buffer again": lambda s: s.model[1].register_buffer("running_mean", s.tensor),
    'register_parameter("")': lambda s: s.model.register_parameter("", s.param),
    'register_parameter("a.b")': lambda s: s.model.register_parameter("a.b", s.param),
    "register_parameter(3, p)": lambda s: s.model.register_parameter(3, s.param),
    "register_parameter(name, tensor)": lambda s: s.model.register_parameter("x", s.tensor),
    "register_parameter over a plain attribute": lambda s: s.model.register_parameter(
        "note", s.param),
    "register_parameter over a buffer": lambda s: s.model[1].register_parameter(
        "running_mean", s.param),
    "register_parameter again": lambda s: s.model[0].register_parameter("bias", None),
    "assigning a parameter over a plain attribute": lambda s: setattr(s.model, "note", s.param),
    "assigning a module over a buffer": lambda s: setattr(s.model[1], "running_mean",
                                                          s.lib.ReLU()),
    'train("x")': lambda s: s.model.train("x"),
    "train(1)": lambda s: s.model.train(1),
    "train(False)": lambda s: s.model.train(False),
    'load_state_dict("")': lambda s: s.model.load_state_dict(""),
    "load_state_dict([])": lambda s: s.model.load_state_dict([]),
    "load_state_dict with a number": lambda s: s.model.load_state_dict(
        dict(s.model.state_dict(), **{"1.num_batches_tracked": 3})),
    "load_state_dict with a list": lambda s: s.model.load_state_dict(
        dict(s.model.state_dict(), **{"0.bias": [1.0, 2.0]})),
    "load_state_dict with a string": lambda s: s.model.load_state_dict(
        dict(s.model.state_dict(), **{"0.bias": "ab"})),
    "load_state_dict with a missing key": lambda s: s.model.load_state_dict(
        {k: v for k, v in s.model.state_dict().items() if k != "0.bias"}),
    "Sequential + a list": lambda s: s.model + [s.lib.ReLU()],
    "Sequential += a list": lambda s: s.model.__iadd__([s.lib.ReLU()]),
    'Sequential["a"]': lambda s: s.model["a"],
    "Sequential[5]": lambda s: s.model[5],
    "Sequential[-3] = m": lambda s: s.model.__setitem__(-3, s.lib.ReLU()),
    "del Sequential[2]": lambda s: s.model.__delitem__(2),
    "Sequential.insert(3, m)": lambda s: s.model.insert(3, s.lib.ReLU()),
    "Sequential.pop(2)": lambda s: s.model.pop(2),
    "ModuleList[2.0]": lambda s: s.lib.ModuleList([s.lib.ReLU()])[2.0],
    "ModuleList + a number": lambda s: s.lib.ModuleList([s.lib.ReLU()]) + 3,
}


@pytest.mark.parametrize("case", REFUSALS)
def test_registration_and_container_refusals_raise_torchs_exception_types(case):
    """Each case raises the exception type torch.nn raises (TypeError, KeyError, ValueError,
    IndexError, RuntimeError; StateDictError is a RuntimeError), or succeeds where torch does,
    and a refused call changes nothing."""
    ours, theirs = _Plain(nn), _Plain(torch.nn)
    before = (list(ours.model.state_dict()), _children(ours.model), ours.model.note)
    expected = _raised(lambda: REFUSALS[case](theirs))
    got = _raised(lambda: REFUSALS[case](ours))
    assert got is expected or (expected and got and issubclass(got, expected)), (got, expected)
    if expected is not None:
        assert (list(ours.model.state_dict()), _children(ours.model), ours.model.note) == before
        assert ours.model.training


def test_refusals_name_the_call_and_the_problem():
    model = nn.Sequential(nn.Linear(2, 2))
    model.note = 5
    with pytest.raises(KeyError, match=r"add_module: the name must be non-empty and without"):
        model.add_module("a.b", nn.ReLU())
    with pytest.raises(KeyError, match=r"register_buffer: attribute 'note' already exists"):
        model.register_buffer("note", mg.zeros(1))
    with pytest.raises(TypeError, match="register_parameter: the name must be a string, not int"):
        model.register_parameter(3, None)
    with pytest.raises(ValueError, match="train: mode must be True or False, not 'x'"):
        model.train("x")
    with pytest.raises(TypeError, match="expected a dict-like state dict, got str"):
        model.load_state_dict("")
    with pytest.raises(RuntimeError, match="'0.bias': expected a Tensor or an array .* list"):
        model.load_state_dict(dict(model.state_dict(), **{"0.bias": [1.0, 2.0]}))
    with pytest.raises(ValueError, match="take a Sequential, not list"):
        model + [nn.ReLU()]
    with pytest.raises(TypeError, match="index must be an integer or a slice, not str"):
        model["a"]
    model.register_module("head", nn.ReLU())
    assert _children(model) == [("0", "Linear"), ("head", "ReLU")]


@pytest.mark.parametrize("remove_duplicate", [True, False])
def test_named_parameters_and_buffers_remove_duplicate_like_torch(remove_duplicate):
    """A module reached twice and a tensor held by two modules: once each by default, under
    every name with remove_duplicate=False, in torch's order."""
    def model(lib):
        tree = build(lib)
        tree[0].register_buffer("shared", tree[2]["enc"].running_mean)
        return tree

    ours, theirs = model(nn), model(torch.nn)
    for method in ("named_parameters", "named_buffers"):
        def names(m, method=method):
            return [name for name, _ in getattr(m, method)(remove_duplicate=remove_duplicate)]
        assert names(ours) == names(theirs)
        assert len(names(ours)) == len(set(names(ours)))
    shared = [p for name, p in ours.named_parameters(remove_duplicate=remove_duplicate)
              if name.startswith(("1.1.", "2.shared."))]
    assert len(shared) == (4 if not remove_duplicate else 2)


def test_a_3000_deep_sequential_prints_and_saves():
    """repr is built with a stack, not by recursion; state_dict already walks iteratively."""
    model = mg.nn.Linear(2, 2)
    for _ in range(3000):
        model = mg.nn.Sequential(model)
    text = repr(model)
    assert text.count("Sequential(") == 3000 and text.count("Linear(in_features=2") == 1
    assert list(model.state_dict()) == ["0." * 3000 + "weight", "0." * 3000 + "bias"]
    small = mg.nn.Sequential(mg.nn.Linear(2, 3), mg.nn.Sequential(mg.nn.ReLU()))
    torch_small = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Sequential(torch.nn.ReLU()))
    assert repr(small) == repr(torch_small)
