"""nn: Module registration, state_dict / load_state_dict, to(), train/eval, layers, init."""
import math
from collections import OrderedDict

import numpy as np
import pytest
import torch

import minigrad as mg
from minigrad import nn
from minigrad.nn import functional as F


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(mg.ones(2, 3))
        self.register_parameter("bias", None)
        self.register_buffer("running_mean", mg.zeros(3))
        self.register_buffer("num_batches_tracked", mg.tensor(0, dtype="int64"))
        self.register_buffer("scratch", mg.zeros(4), persistent=False)
        self.plain = 7


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Block()
        self.second = Block()
        self.head = nn.Linear(3, 2)


# ---------------------------------------------------------------------- registration
def test_attributes_register_parameters_buffers_and_children():
    net = Net()
    assert [name for name, _ in net.named_parameters()] == [
        "first.weight", "second.weight", "head.weight", "head.bias"]
    assert [name for name, _ in net.named_buffers()] == [
        "first.running_mean", "first.num_batches_tracked", "first.scratch",
        "second.running_mean", "second.num_batches_tracked", "second.scratch"]
    assert [name for name, _ in net.named_children()] == ["first", "second", "head"]
    assert [name for name, _ in net.named_modules()] == ["", "first", "second", "head"]
    assert list(net.children())[2] is net.head
    assert net.first.plain == 7 and "plain" not in net.first._parameters
    buffer_ids = {id(b) for b in net.buffers()}
    assert not buffer_ids & {id(p) for p in net.parameters()}
    assert all(isinstance(p, nn.Parameter) and p.requires_grad and p.is_leaf
               for p in net.parameters())


def test_reassigning_moves_a_name_between_registries():
    block = Block()
    block.weight = None                     # a parameter slot can be emptied
    assert "weight" in block._parameters and block.weight is None
    block.running_mean = mg.ones(3)         # a buffer slot takes a new tensor
    assert block._buffers["running_mean"].numpy().tolist() == [1, 1, 1]
    block.running_mean = nn.Linear(1, 1)    # ... or becomes a child
    assert "running_mean" not in block._buffers and "running_mean" in block._modules
    del block.running_mean
    assert not hasattr(block, "running_mean")


def test_assignment_errors():
    block = Block()
    with pytest.raises(TypeError, match="'weight' must be a Parameter"):
        block.weight = mg.ones(2, 3)        # a plain tensor is not a Parameter
    with pytest.raises(TypeError, match="'running_mean' must be a Tensor"):
        block.running_mean = np.zeros(3)
    with pytest.raises(TypeError, match="register_buffer"):
        block.register_buffer("x", np.zeros(3))

    class Forgetful(nn.Module):
        def __init__(self):
            self.weight = nn.Parameter(mg.ones(1))

    with pytest.raises(AttributeError, match="super"):
        Forgetful()
    with pytest.raises(AttributeError, match="nothing"):
        _ = Block().nothing
    with pytest.raises(NotImplementedError):
        nn.Module()(1)


def test_shared_parameters_come_once_but_state_dict_names_every_path():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    reference = torch.nn.Linear(2, 2)
    torch_model = torch.nn.Sequential(reference, torch.nn.ReLU(), reference)
    assert len(list(model.parameters())) == len(list(torch_model.parameters())) == 2
    assert list(model.state_dict()) == list(torch_model.state_dict())


def test_parameter_shares_memory_and_repr():
    base = mg.zeros(3)
    param = nn.Parameter(base)
    param.array[0] = 5
    assert base.numpy()[0] == 5
    assert repr(param).startswith("Parameter containing:\ntensor(")
    assert not nn.Parameter(mg.ones(1), requires_grad=False).requires_grad


def test_apply_and_zero_grad():
    net = Net()
    visited = []
    net.apply(lambda m: visited.append(type(m).__name__))
    assert visited == ["Block", "Block", "Linear", "Net"]
    out = net.head(mg.ones(1, 3)).sum()
    out.backward()
    assert net.head.weight.grad is not None
    net.zero_grad(set_to_none=False)
    assert np.all(net.head.weight.grad.numpy() == 0)
    net.zero_grad()
    assert net.head.weight.grad is None


# ---------------------------------------------------------------------- state dict
def _torch_cnn():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                               torch.nn.Linear(16, 3))


def _cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16, 3))


def test_state_dict_matches_pytorch_keys_shapes_and_loads_from_it():
    torch_model = _torch_cnn()
    model = _cnn()
    ours = model.state_dict()
    theirs = {k: v.numpy() for k, v in torch_model.state_dict().items()}
    assert isinstance(ours, OrderedDict)
    assert list(ours) == list(theirs)
    assert all(ours[k].shape == theirs[k].shape and ours[k].dtype == theirs[k].dtype
               for k in ours)
    result = model.load_state_dict(theirs)
    assert result == nn.IncompatibleKeys([], [])
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v, theirs[k])


def test_state_dict_shares_memory_detached_and_keeps_buffer_dtypes():
    block = Block()
    state = block.state_dict()
    assert list(state) == ["weight", "running_mean", "num_batches_tracked"]  # not "scratch"
    assert state["num_batches_tracked"].dtype == np.int64
    assert state["num_batches_tracked"].shape == ()
    assert all(type(v) is mg.Tensor and not v.requires_grad for v in state.values())
    state["weight"][...] = 42                      # as in PyTorch: the model's own memory
    assert np.all(block.weight.detach().numpy() == 42)


def test_load_state_dict_accepts_tensors_and_casts_float_widths_in_place():
    block = Block()
    weight_array = block.weight.array
    state = {"weight": mg.full((2, 3), 2.5, dtype="float64"),
             "running_mean": np.arange(3, dtype=np.float64),
             "num_batches_tracked": np.array(4, dtype=np.int32)}
    block.load_state_dict(state)
    assert block.weight.array is weight_array          # copied in place: same array object
    assert block.weight.dtype == np.float32 and np.all(block.weight.detach().numpy() == 2.5)
    assert block.running_mean.numpy().tolist() == [0, 1, 2]
    assert block.num_batches_tracked.dtype == np.int64 and block.num_batches_tracked.item() == 4


def test_strict_load_reports_every_problem_and_changes_nothing():
    net = Net()
    before = net.state_dict()
    bad = dict(before)
    del bad["first.weight"]                                   # missing
    bad["extra.weight"] = np.zeros(1)                         # unexpected
    bad["second.weight"] = np.zeros((3, 2), np.float32)       # wrong shape
    bad["head.bias"] = np.zeros(2, np.int64)                  # wrong kind
    bad["second.num_batches_tracked"] = np.array(1.5)         # float into int
    bad["first.running_mean"] = object()                      # not an array
    bad["head.weight"] = np.full((2, 3), 9, np.float32)       # fine on its own
    with pytest.raises(nn.StateDictError) as error:
        net.load_state_dict(bad)
    message = str(error.value)
    for fragment in ("missing key 'first.weight'", "unexpected key 'extra.weight'",
                     "'second.weight': shape (3, 2)", "'head.bias': dtype int64",
                     "'second.num_batches_tracked': dtype float64", "'first.running_mean'"):
        assert fragment in message
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v, before[k])           # nothing changed


def test_non_strict_load_returns_incompatible_keys_but_still_checks_shapes():
    net = Net()
    partial = {"head.weight": np.full((2, 3), 3, np.float32), "other": np.zeros(1)}
    missing, unexpected = net.load_state_dict(partial, strict=False)
    assert unexpected == ["other"] and "head.bias" in missing and "head.weight" not in missing
    assert np.all(net.head.weight.detach().numpy() == 3)
    with pytest.raises(nn.StateDictError, match="shape"):
        net.load_state_dict({"head.weight": np.zeros((3, 3), np.float32)}, strict=False)


# ---------------------------------------------------------------------- devices and dtypes
def test_to_keeps_parameter_objects_and_casts_only_floats():
    net = Net()
    params = list(net.parameters())
    net.head(mg.ones(1, 3)).sum().backward()
    assert net.to(dtype="float64") is net
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]
    assert all(p.dtype == np.float64 for p in net.parameters())
    assert net.head.weight.grad.dtype == np.float64
    assert net.first.running_mean.dtype == np.float64
    assert net.first.num_batches_tracked.dtype == np.int64
    assert net.to("cpu").head.weight.device == "cpu"


def test_to_cuda_without_a_gpu_is_a_clear_error():
    try:
        mg.get_backend("cuda")
    except mg.DeviceError:
        with pytest.raises(mg.DeviceError, match="cuda"):
            Net().to("cuda")
    else:
        pytest.skip("a GPU is present; see test_gpu_round_trip")


@pytest.mark.gpu
def test_gpu_round_trip_keeps_state_and_identity(cuda):
    model = _cnn()
    state = model.state_dict()
    weight = model[0].weight
    model.to("cuda")
    assert model[0].weight is weight and weight.device == "cuda"
    on_gpu = model.state_dict()
    assert all(v.device == "cuda" and np.array_equal(v.to("cpu").numpy(), state[k].numpy())
               for k, v in on_gpu.items())
    model.load_state_dict({k: v * 2 for k, v in state.items()})
    assert model[0].weight.device == "cuda"
    model.to("cpu")
    np.testing.assert_array_equal(model[0].weight.detach().numpy(),
                                  state["0.weight"].numpy() * 2)


# ---------------------------------------------------------------------- modes, dropout
def test_train_and_eval_are_recursive():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(), nn.ReLU()))
    assert all(m.training for m in model.modules())
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


def test_dropout_statistics_scaling_gradient_and_eval():
    p = 0.3
    x = mg.ones(200, 100, requires_grad=True)
    layer = nn.Dropout(p)
    y = layer(x)
    values = y.detach().numpy()
    kept = values != 0
    # Inverted dropout: survivors are scaled by 1/(1-p); the kept fraction is 1-p within 5 sigma.
    np.testing.assert_allclose(values[kept], 1 / (1 - p), rtol=1e-6)
    sigma = math.sqrt(p * (1 - p) / values.size)
    assert abs(kept.mean() - (1 - p)) < 5 * sigma
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), values)    # the gradient is the scaled mask
    layer.eval()
    assert layer(x) is x


def test_dropout_is_seeded_and_handles_the_edges():
    x = mg.ones(50)
    mg.manual_seed(3)
    first = F.dropout(x, 0.5).numpy()
    mg.manual_seed(3)
    np.testing.assert_array_equal(first, F.dropout(x, 0.5).numpy())
    assert F.dropout(x, 0.0) is x
    assert np.all(F.dropout(x, 1.0).numpy() == 0)
    with pytest.raises(ValueError, match="p must be"):
        nn.Dropout(1.5)


# ---------------------------------------------------------------------- layers
def test_linear_and_flatten_match_pytorch_forward_and_backward():
    layer, reference = nn.Linear(5, 3), torch.nn.Linear(5, 3)
    layer.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((2, 5, 1)).astype(np.float32)
    flat = nn.Flatten()(mg.tensor(x, requires_grad=True))
    out = layer(flat)
    torch_out = reference(torch.nn.Flatten()(torch.tensor(x)))
    np.testing.assert_allclose(out.detach().numpy(), torch_out.detach().numpy(), rtol=1e-5,
                               atol=1e-6)
    out.sum().backward()
    torch_out.sum().backward()
    np.testing.assert_allclose(layer.weight.grad.numpy(), reference.weight.grad.numpy(),
                               rtol=1e-5)
    np.testing.assert_allclose(layer.bias.grad.numpy(), reference.bias.grad.numpy(), rtol=1e-5)


def test_functional_linear_gradcheck():
    rng = np.random.default_rng(1)
    inputs = [mg.tensor(rng.standard_normal(s), dtype="float64", requires_grad=True)
              for s in ((3, 4), (2, 4), (2,))]
    assert mg.gradcheck(F.linear, inputs)


def test_flatten_dims_and_sequential_container():
    x = mg.zeros(2, 3, 4, 5)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 1)(x).shape == (6, 4, 5)
    assert nn.Flatten(1, 2)(x).shape == (2, 12, 5)
    relu, linear = nn.ReLU(), nn.Linear(2, 2)
    model = nn.Sequential(relu, linear)
    assert len(model) == 2 and model[0] is relu and model[-1] is linear
    assert list(model) == [relu, linear]
    assert isinstance(model[1:], nn.Sequential) and model[1:][0] is linear
    with pytest.raises(IndexError, match="out of range"):
        model[5]
    model.append(nn.Tanh())
    assert list(model.state_dict()) == ["1.weight", "1.bias"]
    named = nn.Sequential(OrderedDict(fc=nn.Linear(2, 2), act=nn.Sigmoid()))
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"]
    out = named(mg.ones(1, 2)).detach().numpy()
    assert np.all((out > 0) & (out < 1))
    assert nn.Identity()(x) is x


def test_repr_matches_pytorch():
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(16, 3), nn.Conv2d(2, 2, (1, 2), stride=2, bias=False))
    reference = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.Flatten(), torch.nn.Linear(16, 3),
                                    torch.nn.Conv2d(2, 2, (1, 2), stride=2, bias=False))
    assert repr(model) == repr(reference)


# ---------------------------------------------------------------------- initialisation
@pytest.mark.parametrize("make", [
    lambda lib: lib.Linear(30, 20),
    lambda lib: lib.Conv2d(3, 16, 3),
    lambda lib: lib.Conv2d(4, 2, (2, 5)),
])
def test_default_init_has_pytorchs_bounds(make):
    layer, reference = make(nn), make(torch.nn)
    fan_in = int(np.prod(layer.weight.shape[1:]))
    bound = 1 / math.sqrt(fan_in)
    for name in ("weight", "bias"):
        ours = getattr(layer, name).detach().numpy()
        theirs = getattr(reference, name).detach().numpy()
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        assert np.abs(ours).max() <= bound and np.abs(theirs).max() <= bound
    # Uniform on [-bound, bound]: the weights nearly reach the bound and spread evenly.
    weights = layer.weight.detach().numpy()
    assert np.abs(weights).max() > 0.8 * bound
    assert abs(weights.std() - bound / math.sqrt(3)) < 0.25 * bound


def test_init_is_reproducible_under_manual_seed():
    mg.manual_seed(11)
    first = _cnn().state_dict()
    mg.manual_seed(11)
    second = _cnn().state_dict()
    assert all(np.array_equal(first[k], second[k]) for k in first)
    assert not np.array_equal(first["0.weight"], _cnn().state_dict()["0.weight"])


def test_init_functions_match_pytorchs_formulas():
    for nonlinearity, param in [("relu", None), ("tanh", None), ("leaky_relu", 0.2),
                                ("sigmoid", None), ("conv2d", None)]:
        assert nn.init.calculate_gain(nonlinearity, param) == pytest.approx(
            torch.nn.init.calculate_gain(nonlinearity, param))
    with pytest.raises(ValueError, match="unknown nonlinearity"):
        nn.init.calculate_gain("swish")
    w = nn.Parameter(mg.zeros(200, 50))
    nn.init.kaiming_normal_(w, nonlinearity="relu")
    assert w.detach().numpy().std() == pytest.approx(math.sqrt(2 / 50), rel=0.05)
    nn.init.xavier_uniform_(w)
    assert np.abs(w.detach().numpy()).max() <= math.sqrt(6 / 250)
    nn.init.constant_(w, 0.5)
    assert np.all(w.detach().numpy() == 0.5)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        nn.init.kaiming_uniform_(nn.Parameter(mg.zeros(3)))


def test_conv2d_settings_are_checked_when_the_layer_is_built():
    with pytest.raises(ValueError, match="Conv2d: stride"):
        nn.Conv2d(1, 1, 3, stride=0)
    with pytest.raises(ValueError, match="Conv2d: kernel_size"):
        nn.Conv2d(1, 1, (3, 3, 3))
