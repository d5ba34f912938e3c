"""A whole minigrad model to and from a .caffemodel: `load_caffe` and `save_caffe`.

What maps to what (Caffe layer <-> minigrad module, blobs <-> state):

    Convolution   [weight (O, I, kh, kw), bias (O,)]      <-> Conv2d   weight, bias
    InnerProduct  [weight (O, I), bias (O,)]              <-> Linear   weight, bias
    BatchNorm [mean*s, var*s, s] (+ the Scale after it)    <-> BatchNorm1d/2d/3d (BVLC, blobs.py)
    BatchNorm [mean, var, correction, scale, bias]         <-> the same (NVIDIA Caffe)

A Scale layer belongs to the BatchNorm it follows (its bottom is the BatchNorm's top, or, where
the file names no blobs, it comes right after it). Blobs whose shape differs from the module's
only by axes of size 1 ((1, C, 1, 1) for (C,), the legacy (1, 1, O, I) for (O, I)) hold the
same numbers in the same order and are accepted.

Which module gets which layer: by default the modules with Caffe counterparts, in model order,
take the weighted Caffe layers in file order, and each pair must agree in type. `mapping`
({module name: Caffe layer name}) says it instead and leaves every other module alone. With a
`prototxt`, its layer list is the network (Caffe's own rule: blobs are looked up by layer name
in the caffemodel), and its settings are checked against the modules: kernel, stride and
padding of convolutions, eps of batch norms; an InnerProduct with `transpose: true` is
transposed.
"""
import itertools
import math
import os
from collections import OrderedDict

import numpy

from ...formats.caffe import CaffeLayer, read_caffemodel, read_prototxt, write_caffemodel
from ..batchnorm import _BatchNorm
from ..conv import Conv2d
from ..linear import Linear
from ..module import StateDictError
from . import blobs

_CAFFE_TYPES = ((Conv2d, "Convolution"), (Linear, "InnerProduct"), (_BatchNorm, "BatchNorm"))
_WEIGHTED = {"Convolution", "InnerProduct", "BatchNorm"}


def _caffe_type(module):
    return next((name for kind, name in _CAFFE_TYPES if isinstance(module, kind)), None)


def _named(name, module):
    return f"{type(module).__name__} {name!r}"


def _has_own_state(module):
    own = itertools.chain(module.parameters(recurse=False), module.buffers(recurse=False))
    return next(own, None) is not None


def _key(module_name, key):
    """The state-dict key of a module's tensor (the model itself has the name "")."""
    return f"{module_name}.{key}" if module_name else key


# ------------------------------------------------------------------------------------ loading
class _Unit:
    """One Caffe layer to load, with the Scale layer paired with it (BatchNorm only)."""

    def __init__(self, name, layer, params):
        self.name, self.layer, self.params = name, layer, params
        self.scale = None          # (name, CaffeLayer) of the paired Scale

    def describe(self):
        scale = f" + Scale {self.scale[0]!r}" if self.scale else ""
        return f"{self.layer.type} {self.name!r}{scale}"


def _units(caffemodel, prototxt):
    """The Caffe layers that carry weights, in network order, Scale layers folded into their
    BatchNorm. From the prototxt when given (blobs from the caffemodel by name), else from the
    caffemodel alone."""
    if prototxt is None:
        listed = [(name, layer, {}) for name, layer in caffemodel.items()]
    else:
        listed = [(entry.name, CaffeLayer(entry.type, caffemodel[entry.name].blobs
                                          if entry.name in caffemodel else [],
                                          entry.bottom, entry.top), entry.params)
                  for entry in prototxt]
    units, open_batch_norm = [], None
    for name, layer, params in listed:
        if layer.type == "Scale" and open_batch_norm is not None and _feeds(
                open_batch_norm.layer, layer):
            open_batch_norm.scale, open_batch_norm = (name, layer), None
            continue
        if layer.type not in _WEIGHTED and not layer.blobs:
            continue                          # ReLU, Pooling, data layers...
        units.append(_Unit(name, layer, params))
        open_batch_norm = units[-1] if layer.type == "BatchNorm" else None
    return units


def _feeds(batch_norm, scale):
    if batch_norm.top and scale.bottom:
        return scale.bottom[0] == batch_norm.top[0]
    return True                              # no blob names in the file: adjacency decides


def _pairs(model, units, mapping, problems):
    """[(module name, module, unit)] to load."""
    if mapping is not None:
        modules, by_name = dict(model.named_modules()), {unit.name: unit for unit in units}
        pairs = []
        for module_name, layer_name in mapping.items():
            if module_name not in modules:
                problems.append(f"mapping: the model has no module {module_name!r}")
            elif layer_name not in by_name:
                problems.append(f"mapping: no weighted Caffe layer is named {layer_name!r} "
                                f"(there are: {', '.join(repr(n) for n in by_name)})")
            else:
                pairs.append((module_name, modules[module_name], by_name[layer_name]))
        return pairs
    targets = [(name, module) for name, module in model.named_modules()
               if _caffe_type(module) is not None or _has_own_state(module)]
    if len(targets) != len(units):
        problems.append(
            f"the model has {len(targets)} modules to fill ("
            + ", ".join(_named(name, module) for name, module in targets)
            + f") but the Caffe file has {len(units)} weighted layers ("
            + ", ".join(unit.describe() for unit in units) + "): pass mapping={module name: "
            "Caffe layer name}")
        return []
    return [(name, module, unit) for (name, module), unit in zip(targets, units, strict=True)]


def _fits(blob, shape):
    """Same numbers in the same order: equal shapes once axes of size 1 are dropped."""
    return [n for n in blob.shape if n != 1] == [n for n in shape if n != 1]


def _weights_state(module_name, module, unit, problems):
    """{key: array} for a Conv2d or Linear from [weight] or [weight, bias]."""
    layer, wanted = unit.layer, 1 + (module.bias is not None)
    if len(layer.blobs) != wanted:
        problems.append(f"{unit.describe()} has {len(layer.blobs)} blobs, but "
                        f"{_named(module_name, module)} (bias={module.bias is not None}) takes "
                        f"{wanted}")
        return {}
    weight = layer.blobs[0]
    transposed = unit.params.get("inner_product_param", {}).get("transpose")
    if transposed and weight.size == math.prod(module.weight.shape):
        weight = weight.reshape(-1, module.out_features).T      # stored (I, O)
    state = {}
    for key, blob in zip(("weight", "bias")[:wanted], (weight, *layer.blobs[1:]), strict=True):
        target = getattr(module, key).shape
        if _fits(blob, target):
            state[_key(module_name, key)] = blob.reshape(target)
        else:
            problems.append(f"{unit.describe()}: blob {key} has shape {blob.shape}, but "
                            f"{_named(module_name, module)} has {key} of shape {target}")
    return state


def _batch_norm_state(module_name, module, unit, problems):
    """{key: array} for a BatchNorm from BVLC's BatchNorm (+ Scale) or NVIDIA's fused blobs."""
    prefix = _key(module_name, "")
    try:
        if len(unit.layer.blobs) == 5:
            if unit.scale:
                raise ValueError("a 5-blob (NVIDIA Caffe) BatchNorm has its own scale and bias; "
                                 f"the Scale layer {unit.scale[0]!r} after it would apply twice")
            state = blobs.from_nvcaffe(unit.layer.blobs, prefix)
        else:
            state = blobs.from_bvlc(unit.layer.blobs, unit.scale[1].blobs if unit.scale else None,
                                    prefix)
    except ValueError as error:
        problems.append(f"{unit.describe()}: {str(error).removeprefix('caffe: ')}")
        return {}
    own, named = dict(module.state_dict()), _named(module_name, module)
    given = {key.removeprefix(prefix): array for key, array in state.items()}
    for key in [k for k in own if k not in given]:
        problems.append(f"{unit.describe()}: no {key} in the Caffe blobs, but {named} has one "
                        "(check its affine / scale / center / track_running_stats)")
    for key in [k for k in given if k not in own]:
        problems.append(f"{unit.describe()}: a {key} in the Caffe blobs, but {named} has none "
                        "(check its affine / scale / center / track_running_stats)")
    wrong = [key for key in given if key in own and given[key].shape != own[key].shape]
    if wrong:
        problems.append(f"{unit.describe()}: {given[wrong[0]].size} channels, but {named} "
                        f"has {', '.join(wrong)} of shape {own[wrong[0]].shape}")
    return state


def _check_settings(module_name, module, unit, problems):
    """The prototxt's settings that change the numbers must be the module's."""
    checks = []
    if "convolution_param" in unit.params:
        conv = unit.params["convolution_param"]

        def pair(values, h, w, default):
            if conv[h] or conv[w]:
                return (conv[h], conv[w])
            return (values[0], values[-1]) if values else (default, default)

        checks += [("kernel_size", pair(conv["kernel_size"], "kernel_h", "kernel_w", 0),
                    module.kernel_size),
                   ("stride", pair(conv["stride"], "stride_h", "stride_w", 1), module.stride),
                   ("padding", pair(conv["pad"], "pad_h", "pad_w", 0), module.padding),
                   ("group", conv["group"], 1), ("dilation", max(conv["dilation"] or [1]), 1)]
    for what, caffe_value, ours in checks:
        if tuple(numpy.atleast_1d(caffe_value)) != tuple(numpy.atleast_1d(ours)):
            problems.append(f"{unit.describe()}: {what} is {caffe_value} in the prototxt, but "
                            f"{ours} in {_named(module_name, module)}")
    eps = unit.params.get("batch_norm_param", {}).get("eps")
    if eps is not None and numpy.float32(eps) != numpy.float32(module.eps):   # Caffe's float
        problems.append(f"{unit.describe()}: eps is {eps} in the prototxt, but {module.eps} in "
                        f"{_named(module_name, module)}")


def load_caffe(model, caffemodel, prototxt=None, mapping=None):
    """Fill `model`'s Conv2d, Linear and BatchNorm modules from a .caffemodel (a path, or the
    mapping read_caffemodel returns), in place. `prototxt`: the network definition (a path),
    see the module docstring; `mapping`: {module name: Caffe layer name}.

    Everything is checked first (layer types, blob counts and shapes, batch-norm layouts,
    prototxt settings); if anything is wrong a StateDictError lists every problem and nothing
    is changed. Returns {module name: Caffe layer name} of what was loaded."""
    source = caffemodel
    if not hasattr(caffemodel, "items"):
        caffemodel = read_caffemodel(caffemodel)
    units = _units(caffemodel, None if prototxt is None else read_prototxt(prototxt))
    problems, state, loaded = [], {}, {}
    for module_name, module, unit in _pairs(model, units, mapping, problems):
        wanted = _caffe_type(module)
        if wanted != unit.layer.type:
            why = "" if wanted else " (no Caffe layer fills it: pass a mapping without it)"
            problems.append(f"{_named(module_name, module)} cannot take {unit.describe()}{why}")
            continue
        fill = _batch_norm_state if wanted == "BatchNorm" else _weights_state
        state.update(fill(module_name, module, unit, problems))
        _check_settings(module_name, module, unit, problems)
        loaded[module_name] = unit.name
    if problems:
        where = "layers" if hasattr(source, "items") else os.fspath(source)
        raise StateDictError(f"error(s) loading Caffe {where} into {type(model).__name__} "
                             "(nothing was changed):\n  " + "\n  ".join(problems))
    model.load_state_dict(state, strict=False)     # checks dtypes, copies all or nothing
    return loaded


# ------------------------------------------------------------------------------------- saving
def caffe_layers(model, layout="bvlc"):
    """The Caffe layers of `model`'s Conv2d, Linear and BatchNorm modules, in model order,
    named by module name: {name: CaffeLayer}. `layout` "bvlc": each BatchNorm becomes a
    BatchNorm layer [mean, var, 1] and, when affine, a Scale layer "<name>/scale"
    [gamma(, beta)]; "nvcaffe": one BatchNorm layer [mean, var, 1, scale, bias]."""
    if layout not in ("bvlc", "nvcaffe"):
        raise ValueError(f"save_caffe: layout must be 'bvlc' or 'nvcaffe', not {layout!r}")
    layers = OrderedDict()
    for name, module in model.named_modules():
        kind = _caffe_type(module)
        state = _numpy_state(module) if kind is not None else None
        if kind == "BatchNorm" and layout == "bvlc":
            batch_norm, scale = blobs.to_bvlc(state)
            layers[name] = CaffeLayer("BatchNorm", batch_norm, [], [])
            if scale is not None:
                layers[name + "/scale"] = CaffeLayer("Scale", scale, [], [])
        elif kind == "BatchNorm":
            layers[name] = CaffeLayer("BatchNorm", blobs.to_nvcaffe(state), [], [])
        elif kind is not None:
            layers[name] = CaffeLayer(kind, [state[key] for key in ("weight", "bias")
                                             if key in state], [], [])
        elif _has_own_state(module):
            raise ValueError(f"save_caffe: {_named(name, module)} has state but no Caffe "
                             "counterpart (Conv2d, Linear and BatchNorm layers have one)")
    return layers


def _numpy_state(module):
    """`module.state_dict()` as NumPy copies (its tensors share the module's memory)."""
    return {key: value.numpy().copy() for key, value in module.state_dict().items()}


def save_caffe(model, path, layout="bvlc"):
    """Write `model`'s weights as a .caffemodel (see caffe_layers for what is written);
    `load_caffe` gives them back bit for bit (num_batches_tracked excepted: Caffe keeps none)."""
    write_caffemodel(path, caffe_layers(model, layout))
