"""mg.nn.utils.fuse_conv_bn (minigrad/nn/fusion.py): conv + batch norm folded for inference,
against the unfused model and against PyTorch's own folding."""
import numpy as np
import pytest
import torch
from torch.ao.quantization import fuse_modules
from torch.fx.experimental.optimization import fuse as torch_fx_fuse

import minigrad as mg
from minigrad import nn

pytestmark = pytest.mark.usefixtures("torch_single_thread")


def _net(nn=nn, dtype=None):
    """Two conv -> BN pairs (one conv with a bias, one BN without affine parameters), a ReLU
    between and a conv with no BN after it."""
    extra = {} if nn is not mg.nn else {"dtype": dtype}
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False, **extra), nn.BatchNorm2d(8, **extra),
        nn.ReLU(),
        nn.Conv2d(8, 6, 3, stride=2, **extra), nn.BatchNorm2d(6, affine=False, **extra),
        nn.Conv2d(6, 4, 1, **extra))


def _trained(model, dtype="float32", steps=3):
    """`model` after a few training-mode passes (so the running statistics are not 0 and 1) and
    random BN parameters, in eval mode."""
    rng = np.random.default_rng(1)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d) and module.weight is not None:
            module.weight.array[...] = rng.uniform(0.5, 2.0, module.weight.shape)
            module.bias.array[...] = rng.standard_normal(module.bias.shape)
    with mg.no_grad():
        for _ in range(steps):
            model(mg.tensor(rng.standard_normal((4, 3, 9, 9)).astype(dtype) * 3 + 1))
    return model.eval()


def _input(dtype="float32"):
    return mg.tensor(np.random.default_rng(2).standard_normal((2, 3, 9, 9)).astype(dtype))


@pytest.mark.parametrize("dtype, tol", [("float64", 1e-12), ("float32", 2e-5)])
def test_fused_model_gives_the_unfused_outputs(dtype, tol):
    model = _trained(_net(dtype=dtype), dtype)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    fused = mg.nn.utils.fuse_conv_bn(model)
    kinds = [type(m).__name__ for m in fused]
    assert kinds == ["Conv2d", "Identity", "ReLU", "Conv2d", "Identity", "Conv2d"]
    assert all(p.dtype == dtype for p in fused.parameters())
    x = _input(dtype)
    with mg.no_grad():
        expected, got = model(x).numpy(), fused(x).numpy()
    assert np.abs(expected).max() > 0.1   # not a trivially small output
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)
    after = model.state_dict()   # the original is untouched
    assert before.keys() == after.keys()
    for key in before:
        np.testing.assert_array_equal(after[key], before[key])
    assert [type(m).__name__ for m in model][1] == "BatchNorm2d"


def _torch_twin(model):
    twin = _net(nn=torch.nn).double()
    twin.load_state_dict({k: torch.from_numpy(np.asarray(v).copy())
                          for k, v in model.state_dict().items()})
    return twin.eval()


def test_folded_weights_match_pytorch():
    model = _trained(_net(dtype="float64"), "float64")
    fused = mg.nn.utils.fuse_conv_bn(model)
    twin = _torch_twin(model)
    reference = fuse_modules(twin, [["0", "1"], ["3", "4"]])   # eval: conv + BN folding
    ours, theirs = fused.state_dict(), reference.state_dict()
    assert list(ours) == list(theirs) == ["0.weight", "0.bias", "3.weight", "3.bias",
                                          "5.weight", "5.bias"]
    for key in ours:
        np.testing.assert_allclose(np.asarray(ours[key]), theirs[key].numpy(), rtol=1e-12,
                                   atol=1e-12, err_msg=key)
    x = _input("float64")
    with torch.no_grad():
        traced = torch_fx_fuse(twin)(torch.from_numpy(x.numpy())).numpy()
    with mg.no_grad():
        np.testing.assert_allclose(fused(x).numpy(), traced, rtol=1e-10, atol=1e-10)


class _Block(nn.Module):
    """A residual block whose convs and BNs are attributes called in forward (no Sequential)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 3, 3, padding=1, bias=False), nn.BatchNorm2d(3)
        self.inner = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.BatchNorm2d(3))

    def forward(self, x):
        return (self.inner(self.bn1(self.conv1(x)).relu()) + x).relu()


def test_named_pairs_fold_attributes_of_a_custom_module():
    block = _trained(_Block())
    fused = mg.nn.utils.fuse_conv_bn(block, pairs=[("conv1", "bn1"), ("inner.0", "inner.1")])
    assert type(fused.bn1).__name__ == "Identity" and type(fused.inner[1]).__name__ == "Identity"
    assert list(fused.state_dict()) == ["conv1.weight", "conv1.bias", "inner.0.weight",
                                        "inner.0.bias"]
    x = _input()
    with mg.no_grad():
        np.testing.assert_allclose(fused(x).numpy(), block(x).numpy(), rtol=2e-5, atol=2e-5)
    automatic = mg.nn.utils.fuse_conv_bn(block)   # only the pair inside the Sequential
    assert type(automatic.bn1).__name__ == "BatchNorm2d"
    assert type(automatic.inner[1]).__name__ == "Identity"


def test_bad_uses_raise_clear_errors():
    model = _net()
    with pytest.raises(ValueError, match="for evaluation only: call model.eval"):
        mg.nn.utils.fuse_conv_bn(model)
    model.eval()
    model[1].train()
    with pytest.raises(ValueError, match="for evaluation only"):
        mg.nn.utils.fuse_conv_bn(model)
    block = _Block().eval()
    with pytest.raises(KeyError, match="no submodule 'conv9'"):
        mg.nn.utils.fuse_conv_bn(block, pairs=[("conv9", "bn1")])
    with pytest.raises(ValueError, match="children of the same module"):
        mg.nn.utils.fuse_conv_bn(block, pairs=[("conv1", "inner.1")])
    with pytest.raises(TypeError, match="expected a Conv2d and a BatchNorm2d, got BatchNorm2d"):
        mg.nn.utils.fuse_conv_bn(block, pairs=[("bn1", "conv1")])
    wide = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(5)).eval()
    with pytest.raises(ValueError, match=r"BatchNorm2d\(5\) cannot follow a conv with 4 output"):
        mg.nn.utils.fuse_conv_bn(wide)
    untracked = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4, track_running_stats=False))
    with pytest.raises(ValueError, match="no running statistics"):
        mg.nn.utils.fuse_conv_bn(untracked.eval())
