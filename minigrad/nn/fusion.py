"""Folding batch norm into the convolution before it, for inference.

In evaluation a BatchNorm2d after a Conv2d is a per-channel affine map of the conv's output,

    bn(conv(x)) = (W * x + b - mean) * s + beta,    s = gamma / sqrt(running_var + eps),

which is itself a convolution with weight W' = W * s (per output channel) and bias
b' = (b - mean) * s + beta. `fuse_conv_bn` rewrites the model that way: one conv instead of a
conv and a batch norm, the same outputs up to rounding (as torch.nn.utils.fusion.fuse_conv_bn_eval
and torch.fx.experimental.optimization.fuse).
"""
import copy

from ..tensor import as_tensor
from .batchnorm import BatchNorm2d
from .container import Sequential
from .conv import Conv2d
from .linear import Identity
from .module import Parameter


def fuse_conv_bn_eval(conv, bn):
    """A new Conv2d computing bn(conv(x)) with bn in evaluation (its running statistics)."""
    if not isinstance(conv, Conv2d) or not isinstance(bn, BatchNorm2d):
        raise TypeError(f"fuse_conv_bn: expected a Conv2d and a BatchNorm2d, got "
                        f"{type(conv).__name__} and {type(bn).__name__}")
    if conv.training or bn.training:
        raise ValueError("fuse_conv_bn: folds running statistics, so it is for evaluation only: "
                         "call model.eval() first (in training batch norm uses batch statistics)")
    if not bn.track_running_stats:
        raise ValueError(f"fuse_conv_bn: {bn!r} has no running statistics to fold")
    if bn.num_features != conv.out_channels:
        raise ValueError(f"fuse_conv_bn: BatchNorm2d({bn.num_features}) cannot follow a conv "
                         f"with {conv.out_channels} output channels")
    xp, weight = conv.weight.backend.xp, conv.weight.array
    wide = "float64"   # fold in float64, store in the conv's dtype
    scale = 1.0 / xp.sqrt(bn.running_var.array.astype(wide) + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight.array
    shift = -bn.running_mean.array.astype(wide)
    if conv.bias is not None:
        shift = shift + conv.bias.array
    shift = shift * scale
    if bn.bias is not None:
        shift = shift + bn.bias.array
    fused = copy.deepcopy(conv)
    # weight and bias assigned in place (a conv without bias holds a plain `bias = None`,
    # which the assignment replaces); either way the bias comes after the weight
    fused.weight = Parameter(as_tensor((weight * scale[:, None, None, None]).astype(weight.dtype)))
    fused.bias = Parameter(as_tensor(shift.astype(weight.dtype)))
    return fused


def _fuse_pair(parent, conv_name, bn_name):
    """Put the folded conv in place of `conv_name` and an Identity in place of `bn_name`
    (in the registry, so both keep their places in the module order)."""
    children = parent._modules
    children[conv_name] = fuse_conv_bn_eval(children[conv_name], children[bn_name])
    children[bn_name] = Identity()


def _submodule(model, name):
    module = model
    for part in name.split("."):
        if part not in module._modules:
            raise KeyError(f"fuse_conv_bn: {type(model).__name__} has no submodule {name!r}")
        module = module._modules[part]
    return module


def fuse_conv_bn(model, pairs=None):
    """A copy of `model` (in evaluation mode) with every Conv2d -> BatchNorm2d folded into one
    Conv2d; the BatchNorm2d becomes an Identity, so the other modules keep their names.

    Without `pairs`, the pairs are a Conv2d followed directly by a BatchNorm2d inside a
    Sequential (anywhere in the model). Convs and batch norms called in other ways (attributes
    of a module's own forward) are named as pairs of dotted names, as in
    torch.ao.quantization.fuse_modules: pairs=[("conv1", "bn1"), ("layer1.0.conv", "layer1.0.bn")].
    The original model is left unchanged."""
    if model.training:
        raise ValueError("fuse_conv_bn: folds running statistics, so it is for evaluation only: "
                         "call model.eval() first")
    fused = copy.deepcopy(model)
    if pairs is not None:
        for conv_name, bn_name in pairs:
            parent_name, _, conv_leaf = conv_name.rpartition(".")
            bn_parent, _, bn_leaf = bn_name.rpartition(".")
            if parent_name != bn_parent:
                raise ValueError(f"fuse_conv_bn: {conv_name!r} and {bn_name!r} must be children "
                                 "of the same module")
            parent = _submodule(fused, parent_name) if parent_name else fused
            _submodule(parent, conv_leaf)   # a clear error for a wrong name
            _submodule(parent, bn_leaf)
            _fuse_pair(parent, conv_leaf, bn_leaf)
        return fused
    for module in list(fused.modules()):
        if isinstance(module, Sequential):
            names = list(module._modules)
            for conv_name, bn_name in zip(names[:-1], names[1:], strict=True):
                if (isinstance(module._modules[conv_name], Conv2d)
                        and isinstance(module._modules[bn_name], BatchNorm2d)):
                    _fuse_pair(module, conv_name, bn_name)
    return fused
