"""Stateless layer functions (`import minigrad.nn.functional as F`), with PyTorch's names and
arguments. Each is a thin composition of primitives from `minigrad.ops`, so its gradient comes
from theirs."""

import math
import warnings

import numpy

from .. import creation, ops, tracing
from ..batched import wrapped
from ..dtypes import finfo, is_floating

# Primitives whose signature already is PyTorch's functional one are F's functions as they are.
from ..ops import (  # noqa: F401
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    avg_pool2d,
    conv1d,
    conv2d,
    conv_transpose2d,
    cosine_similarity,
    max_pool2d,
    pairwise_distance,
    sigmoid,
    tanh,
    window,
)
from ..ops import lp_normalize as normalize  # noqa: F401
from ..ops.errors import DTypeError, ShapeError
from ..ops.fused_batch_norm import affine_channels, channel_view_shape, check_batch_norm
from ..ops.opmath import in_float32
from ..random import device_generator
from ..tensor import Tensor, as_tensor
from ..vmap_levels import batch_sizes, random_levels
from . import batch_norm_core
from .batch_norm_core import update_running_stats, values_per_statistic
from .interpolation import interpolate  # noqa: F401
from .loss_functions import (  # noqa: F401
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    poisson_nll_loss,
    smooth_l1_loss,
)


def linear(input, weight, bias=None):
    """y = input @ weight^T + bias, with weight laid out (out_features, in_features): one node
    (`ops.Linear`), as in PyTorch."""
    return ops.linear(input, weight, bias)


def check_embedding_options(max_norm, scale_grad_by_freq, sparse):
    """A clear error for the embedding options minigrad does not implement."""
    for name, value, off in (("max_norm", max_norm, None),
                             ("scale_grad_by_freq", scale_grad_by_freq, False),
                             ("sparse", sparse, False)):
        if value != off:
            raise NotImplementedError(f"embedding: {name}={value!r} is not supported by minigrad "
                                      f"(leave it at {off!r})")


def embedding_padding_index(padding_idx, num_embeddings):
    """padding_idx as a row index in [0, num_embeddings) (negative counts from the end)."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"embedding: padding_idx {padding_idx} is outside the "
                         f"{num_embeddings} rows of the table")
    return padding_idx % num_embeddings


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """weight[input]: the rows of the (num_embeddings, dim) table at the integer indices
    `input`; the gradient is scattered back to those rows (summed over repeats), and the row
    `padding_idx` gets none."""
    check_embedding_options(max_norm, scale_grad_by_freq, sparse)
    if weight.ndim != 2:
        raise ValueError(f"embedding: weight must be a 2-D table (num_embeddings, dim), got "
                         f"shape {weight.shape}")
    indices = input if isinstance(input, Tensor) else as_tensor(input, device=weight.device)
    if indices.dtype.kind not in "iu":
        raise DTypeError(f"embedding: indices must be integers, got dtype {indices.dtype} "
                        f"(shape {indices.shape})")
    rows = weight.shape[0]
    if indices.numel() and (int(indices.array.min()) < -rows or int(indices.array.max()) >= rows):
        raise IndexError(f"embedding: an index is outside the {rows} rows of the table "
                         f"(indices in [{int(indices.array.min())}, {int(indices.array.max())}])")
    padding_idx = embedding_padding_index(padding_idx, rows)
    if padding_idx is not None:   # the padding row is read as a constant: no gradient
        keep = (indices.array % rows != padding_idx)[..., None]
        out = ops.getitem(weight, indices)
        return ops.where(keep, out, ops.getitem(weight.detach(), indices))
    return ops.getitem(weight, indices)


def flatten(input, start_dim=0, end_dim=-1):
    """`input` with dimensions start_dim..end_dim merged into one."""
    return input.flatten(start_dim, end_dim)


def dropout(input, p=0.5, training=True):
    """Inverted dropout: in training, zero each element with probability p and scale the rest
    by 1 / (1 - p), so the expected value is unchanged and evaluation is the identity.

    The mask is drawn on the input's device from the default generator for it
    (`minigrad.manual_seed`; `random.device_generator`).
    """
    return _dropout("dropout", input, p, training, input.shape)


def dropout2d(input, p=0.5, training=True):
    """Inverted dropout of whole channels of (N, C, H, W) input: one draw per channel, a mask
    of shape (N, C, 1, 1) broadcast over the positions. Other ranks warn as PyTorch 2.13 does
    and drop what it drops: the rows of each (N, C, L) sample (3-D), the rows of a 2-D input."""
    if input.ndim not in (3, 4):
        warnings.warn(
            f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is deprecated and "
            "will result in an error in a future release. To retain the behavior and silence "
            "this warning, please use dropout instead. Note that dropout2d exists to provide "
            "channel-wise dropout on inputs with 2 spatial dimensions, a channel dimension, and "
            "an optional batch dimension (i.e. 3D or 4D inputs).", stacklevel=2)
    if input.ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C is "
            "the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2)
    if input.ndim < 2:
        raise ValueError(f"dropout2d: expected input (N, C, H, W), got shape {input.shape}")
    kept = 2 if input.ndim > 2 else 1   # PyTorch: a 2-D input is one sample of C rows
    mask = input.shape[:kept] + (1,) * (input.ndim - kept)
    return _dropout("dropout2d", input, p, training, mask)


def _dropout(op, input, p, training, mask_shape):
    """input times a mask of `mask_shape` (broadcast to the input): 0 with probability p,
    1 / (1 - p) otherwise."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p must be between 0 and 1, not {p}")
    if not training or p == 0.0:
        return input
    at = random_levels(op, batchable=True)   # inside vmap with randomness='different'
    mask = tracing.run(_dropout_mask, input.backend, batch_sizes(at) + tuple(mask_shape), p,
                       input.dtype)
    return ops.mul(input, wrapped(Tensor.from_array(mask, input.backend), at))


def _dropout_mask(backend, shape, p, dtype):
    """0 with probability p, 1 / (1 - p) otherwise: a draw that mg.compile replays."""
    keep = device_generator(backend).random(shape, dtype=numpy.float32) >= p
    mask = keep.astype(dtype)
    if p < 1.0:
        mask *= 1.0 / (1.0 - p)
    return mask


def log_softmax(input, dim=-1):
    """log(softmax(input)) along `dim`, computed stably."""
    return ops.log_softmax(input, axis=dim)


# ---------------------------------------------------------------------------------------------
# Activations. `inplace=True` is accepted as in PyTorch, for the memory it saves there; minigrad
# always returns a new tensor and leaves `input` as it was (docs/coming-from-pytorch.md).

def softmax(input, dim=-1):
    """exp(input) / sum(exp(input)) along `dim`."""
    return ops.softmax(input, axis=dim)


def relu(input, inplace=False):
    return ops.relu(input)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return ops.leaky_relu(input, negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return ops.elu(input, alpha)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return ops.hardtanh(input, min_val, max_val)


def relu6(input, inplace=False):
    return ops.relu6(input)


def silu(input, inplace=False):
    return ops.silu(input)


def mish(input, inplace=False):
    return ops.mish(input)


def gelu(input, approximate="none"):
    return ops.gelu(input, approximate)


def softplus(input, beta=1.0, threshold=20.0):
    return ops.softplus(input, beta, threshold)


# ---------------------------------------------------------------------------------------------
# Normalization: every function below is `ops.normalize` plus an optional multiply and add.

def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5, *, fused="auto"):
    """Batch normalization over (N, C, *) input, per channel (axis 1), as in PyTorch:

        y = (x - mean) / sqrt(var + eps) * weight + bias

    training=True: mean/var are the batch's (biased) statistics, and the running buffers, when
    given, are updated in place (no gradient) with the unbiased batch variance:
        running = (1 - momentum) * running + momentum * batch.
    training=False: the running buffers are used. `weight` and `bias` are optional separately.
    `fused`: True runs `ops.fused_batch_norm` (one op), False `ops.composed_batch_norm`
    (normalize, mul, add), "auto" the fused op (CUDA kernels on the GPU, NumPy on the CPU);
    the numbers are the same either way. An empty input gives an empty output (buffers as
    they were), as in PyTorch.
    """
    count = _check_batch_norm(input, running_mean, running_var, weight, bias, training,
                              momentum, fused)
    return batch_norm_core.batch_norm(input, weight, bias, running_mean, running_var,
                                      training=training, factor=momentum, eps=eps, count=count,
                                      fused=fused is not False)


def _check_batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
                      fused):
    """batch_norm's one check of its arguments; in training, the number of values per
    statistic."""
    if fused not in ("auto", True, False):
        raise ValueError(f"batch_norm: fused must be 'auto', True or False, not {fused!r}")
    if input.ndim < 2:
        raise ValueError(f"batch_norm: expected input of shape (N, C, *), got shape "
                         f"{input.shape}")
    if (running_mean is None) != (running_var is None):
        raise ValueError("batch_norm: give both running_mean and running_var, or neither")
    check_batch_norm("batch_norm", input, 1, count_values=False, running_mean=running_mean,
                     running_var=running_var, weight=weight, bias=bias)
    if not training:
        if running_mean is None:
            raise ValueError("batch_norm: evaluation (training=False) normalizes with the running "
                             "statistics, but running_mean and running_var are None; pass them, "
                             "or training=True to use the batch's statistics")
        return None
    if running_mean is not None and momentum is None:
        raise ValueError("batch_norm: momentum=None (a cumulative average) needs the batch count "
                         "that the BatchNorm layers keep; pass the factor 1/n for batch n")
    if input.numel() == 0:
        return 0
    return values_per_statistic("batch_norm", input, input.shape[1])


@in_float32
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """Normalize over the last len(normalized_shape) axes of each sample, then scale by weight
    and shift by bias (both of shape normalized_shape, optional)."""
    normalized_shape = ((normalized_shape,) if isinstance(normalized_shape, int)
                        else tuple(normalized_shape))
    count = len(normalized_shape)
    if input.shape[input.ndim - count:] != normalized_shape or count == 0:
        raise ShapeError(f"layer_norm: the input's last axes {input.shape} do not match "
                         f"normalized_shape {normalized_shape}")
    y = ops.normalize(input, tuple(range(input.ndim - count, input.ndim)), eps)[0]
    if weight is not None:
        y = ops.mul(y, weight)
    return y if bias is None else ops.add(y, bias)


@in_float32
def rms_norm(input, normalized_shape, weight=None, eps=None):
    """y = input / sqrt(mean(input^2 over the last len(normalized_shape) axes) + eps) * weight,
    with eps=None the machine epsilon of the input's dtype (as PyTorch)."""
    normalized_shape = ((normalized_shape,) if isinstance(normalized_shape, int)
                        else tuple(normalized_shape))
    count = len(normalized_shape)
    if input.shape[input.ndim - count:] != normalized_shape or count == 0:
        raise ValueError(f"rms_norm: the input's last axes {input.shape} do not match "
                         f"normalized_shape {normalized_shape}")
    if eps is None:
        eps = float(finfo(input.dtype).eps)
    axes = tuple(range(input.ndim - count, input.ndim))
    y = input * ((input * input).mean(axis=axes, keepdims=True) + eps) ** -0.5
    return y if weight is None else ops.mul(y, weight)


@in_float32
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Split the C channels of (N, C, *) input into num_groups groups, normalize each sample's
    group over its channels and positions, then apply per-channel weight and bias:
    reshape to (N, G, C/G * ...), normalize over the last axis, reshape back."""
    if input.ndim < 2 or input.shape[1] % num_groups:
        raise ShapeError(f"group_norm: the {input.shape[1] if input.ndim > 1 else '?'} channels "
                         f"of an input of shape {input.shape} do not split into {num_groups} "
                         "equal groups")
    grouped = ops.reshape(input, (input.shape[0], num_groups, -1))
    y = ops.reshape(ops.normalize(grouped, (2,), eps)[0], input.shape)
    return affine_channels(y, weight, bias)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalize each channel of each sample over its positions ((N, C, *) input), as in
    PyTorch. With use_input_stats the sample's own statistics are used, and the running buffers,
    when given, move towards their mean over the batch (unbiased variance);
    otherwise the running buffers are used."""
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected input of shape (N, C, *spatial), got shape "
                         f"{input.shape}")
    axes = tuple(range(2, input.ndim))
    view = channel_view_shape(input.shape, 1)
    if not use_input_stats:
        y = ops.normalize(input, axes, eps, ops.reshape(running_mean, view),
                          ops.reshape(running_var, view))[0]
        return affine_channels(y, weight, bias)
    count = values_per_statistic("instance_norm", input, input.shape[0] * input.shape[1],
                                  "channel of a sample")
    y, mean, var = ops.normalize(input, axes, eps)
    if running_mean is not None:
        channels = (input.shape[0], input.shape[1])
        update_running_stats(running_mean, running_var, mean.reshape(channels).mean(axis=0),
                        var.reshape(channels).mean(axis=0), count, momentum)
    return affine_channels(y, weight, bias)


# ---------------------------------------------------------------------------------------------
# Encoding, padding, unpooling and sliding windows.

def one_hot(tensor, num_classes=-1):
    """An int64 tensor of shape tensor.shape + (num_classes,), 1 at each class index and 0
    elsewhere; num_classes=-1 takes the largest index + 1."""
    if not isinstance(tensor, Tensor) or tensor.dtype != numpy.int64:
        raise RuntimeError(f"one_hot is only applicable to index tensor of type int64 (Long), "
                           f"got {getattr(tensor, 'dtype', type(tensor).__name__)}")
    values = tensor.array
    if num_classes == -1:
        if not values.size:
            raise RuntimeError("one_hot: can not infer the number of classes from an empty "
                               "tensor; pass num_classes")
        num_classes = int(values.max()) + 1
    if values.size and int(values.min()) < 0:
        raise RuntimeError("one_hot: class values must be non-negative")
    if values.size and int(values.max()) >= num_classes:
        raise RuntimeError(f"one_hot: class values must be smaller than num_classes "
                           f"({num_classes}), got {int(values.max())}")
    xp = tensor.backend.xp
    return Tensor.from_array((values[..., None] == xp.arange(num_classes)).astype(numpy.int64),
                             tensor.backend)


PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}   # -> ops.pad's


def pad(input, pad, mode="constant", value=None):
    """PyTorch's padding: `pad` lists (before, after) widths from the LAST axis backwards,
    (left, right, top, bottom, ...). mode "constant" fills with `value` (0) and crops where a
    width is negative; "reflect", "replicate" and "circular" pad the last 1, 2 or 3 axes of a
    batched or unbatched input, copying its elements (so the gradient adds back onto them)."""
    pad = tuple(pad)
    if len(pad) % 2:
        raise RuntimeError(f"pad: padding length must be divisible by 2, got {pad}")
    count = len(pad) // 2
    if count > input.ndim:
        raise RuntimeError(f"pad: padding length should be at most twice the input dimension, "
                           f"got {pad} for an input of shape {input.shape}")
    pairs = [(0, 0)] * (input.ndim - count) + [tuple(pad[2 * i:2 * i + 2])
                                               for i in reversed(range(count))]
    if mode == "constant":
        if any(n < 0 for pair_ in pairs for n in pair_):   # a negative width crops
            input = input[tuple(slice(-min(b, 0), n + min(a, 0))
                                for (b, a), n in zip(pairs, input.shape))]
            pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
        return ops.pad(input, tuple(pairs), 0.0 if value is None else value)
    if mode not in PAD_MODES:
        raise NotImplementedError(f"pad: mode {mode!r} is not one of 'constant', "
                                  f"{', '.join(map(repr, PAD_MODES))}")
    if count not in (1, 2, 3) or input.ndim not in (count + 1, count + 2):
        raise NotImplementedError(f"pad: mode {mode!r} pads the last 1, 2 or 3 axes of a "
                                  f"(N, C, ...) or (C, ...) input; got padding {pad} for shape "
                                  f"{input.shape}")
    if any(n < 0 for n in pad):
        raise RuntimeError(f"pad: mode {mode!r} takes no negative widths, got {pad}")
    try:
        return ops.pad(input, tuple(pairs), mode=PAD_MODES[mode])
    except ValueError as error:   # a width too large for its axis
        raise RuntimeError(str(error)) from None


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    """The inverse of max_pool2d(return_indices=True): zeros of the unpooled size with each
    input value at the position its index names (h * W + w in its plane). The default size is
    (H - 1) * stride - 2 * padding + kernel_size; output_size (H, W), or ending with them,
    overrides it."""
    op = "max_unpool2d"
    kernel = window.pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None else window.pair(op, "stride", stride, 1)
    padding = window.pair(op, "padding", padding, 0)
    if input.ndim not in (3, 4) or indices.shape != input.shape:
        raise ValueError(f"{op}: expected (N, C, H, W) or (C, H, W) input and indices of one "
                         f"shape, got {input.shape} and {indices.shape}")
    if output_size is None:
        size = tuple((n - 1) * s - 2 * p + k for n, s, p, k
                     in zip(input.shape[-2:], stride, padding, kernel))
    else:
        size = tuple(output_size)[-2:]
    lead = input.shape[:-2]
    flat = ops.reshape(input, lead + (-1,))
    zeros = Tensor.from_array(input.backend.xp.zeros(lead + (size[0] * size[1],), input.dtype),
                              input.backend)
    out = ops.scatter(zeros, -1, ops.reshape(indices, lead + (-1,)), flat)
    return ops.reshape(out, lead + size)


def _window_settings(op, kernel_size, dilation, padding, stride):
    return dict(kernel=window.pair(op, "kernel_size", kernel_size, 1),
                dilation=window.pair(op, "dilation", dilation, 1),
                padding=window.pair(op, "padding", padding, 0),
                stride=window.pair(op, "stride", stride, 1))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: the sliding kh x kw windows of (N, C, H, W) input as (N, C * kh * kw, L)
    columns, L windows in row-major order ((C, H, W) input gives (C * kh * kw, L))."""
    if input.ndim == 3:
        return unfold(input.unsqueeze(0), kernel_size, dilation, padding, stride)[0]
    windows = ops.Unfold.apply(input, **_window_settings("unfold", kernel_size, dilation,
                                                         padding, stride))
    c, kh, kw, ho, wo, n = windows.shape
    return windows.permute(5, 0, 1, 2, 3, 4).reshape(n, c * kh * kw, ho * wo)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im, the adjoint of unfold: (N, C * kh * kw, L) columns summed back into an
    (N, C, H, W) tensor of `output_size` (H, W), overlapping entries added."""
    if input.ndim == 2:
        return fold(input.unsqueeze(0), output_size, kernel_size, dilation, padding, stride)[0]
    settings = _window_settings("fold", kernel_size, dilation, padding, stride)
    size = window.pair("fold", "output_size", output_size, 1)
    (kh, kw), n = settings["kernel"], input.shape[0]
    ho, wo = window.output_size("fold", (n, 1) + size, settings["kernel"], settings["stride"],
                         settings["padding"], settings["dilation"])
    if input.ndim != 3 or input.shape[1] % (kh * kw) or input.shape[2] != ho * wo:
        raise RuntimeError(f"fold: expected input (N, C * {kh * kw}, {ho * wo}) for kernel "
                           f"{(kh, kw)} and output size {size}, got shape {input.shape}")
    c = input.shape[1] // (kh * kw)
    windows = input.reshape(n, c, kh, kw, ho, wo).permute(1, 2, 3, 4, 5, 0)
    return ops.Fold.apply(windows, in_shape=(n, c) + size, stride=settings["stride"],
                          padding=settings["padding"], dilation=settings["dilation"])


# ---------------------------------------------------------------------------------------------
# Attention, composed from matmul, softmax, where and dropout; nn.MultiheadAttention uses it too.
#
# A mask is either boolean or floating. A floating mask is added to the scores. A boolean mask
# says which keys take part, but PyTorch's two entry points read it the opposite way round: in
# scaled_dot_product_attention True means "attend", in MultiheadAttention (attn_mask,
# key_padding_mask) True means "masked out". Both become an additive mask of 0 and -inf here.

def additive_mask(op, name, mask, dtype, true_means_masked):
    """`mask` as a floating tensor to add to the scores: a float mask as it is, a boolean one
    as -inf where it masks out and 0 elsewhere."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(mask).__name__}")
    if is_floating(mask.dtype):
        return mask
    if mask.dtype.kind != "b":
        raise AssertionError(f"{op}: only bool and floating types of {name} are supported, got "
                             f"dtype {mask.dtype}")
    masked = mask.array if true_means_masked else ~mask.array
    xp = mask.backend.xp
    return Tensor.from_array(xp.where(masked, xp.asarray(-numpy.inf, dtype), xp.asarray(0, dtype)),
                             mask.backend)


def attend(query, key, value, mask, dropout_p, scale, empty_rows_to_zero):
    """softmax(query @ key^T * scale + mask) @ value and the attention weights (after dropout).
    A row whose keys are all masked out (-inf) is NaN, as softmax makes it, unless
    `empty_rows_to_zero`: then its weights are 0, as PyTorch's scaled_dot_product_attention
    gives."""
    scores = ops.matmul(query, key.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores + mask
    if empty_rows_to_zero and mask is not None:
        empty = (scores.array == -numpy.inf).all(axis=-1, keepdims=True)
        if empty.any():   # softmax of a row of 0s instead, so no NaN reaches its gradient
            weights = ops.where(empty, 0.0, ops.softmax(ops.where(empty, 0.0, scores), -1))
        else:
            weights = ops.softmax(scores, -1)
    else:
        weights = ops.softmax(scores, -1)
    weights = dropout(weights, dropout_p, True)
    return ops.matmul(weights, value), weights


def causal_mask(length, source_length, dtype=None, device=None):
    """The float mask that lets position i attend to keys 0..i only: -inf above the diagonal."""
    upper = numpy.triu(numpy.ones((length, source_length), dtype=bool), 1)
    return ops.masked_fill(creation.zeros(length, source_length, dtype=dtype, device=device),
                           upper, -numpy.inf)


@in_float32
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(query @ key^T * scale + mask) @ value, over query (..., L, E), key (..., S, E)
    and value (..., S, Ev); scale defaults to 1 / sqrt(E). `attn_mask` (broadcast to
    (..., L, S)) is boolean (True: this key takes part) or added to the scores; `is_causal`
    masks the keys after each query instead. The weights are dropped out with probability
    `dropout_p` (always: there is no training flag, as in PyTorch). A query whose keys are all
    masked out gets 0. `enable_gqa` lets key and value have fewer heads (dim -3) than query,
    each shared by a group of query heads."""
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.ndim < 2:
            raise ValueError(f"{op}: {name} must be a Tensor of at least 2 dimensions (..., L, E), "
                             f"got {getattr(t, 'shape', type(t).__name__)}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"{op}: expected query (..., L, E), key (..., S, E) and value "
                           f"(..., S, Ev), got shapes {query.shape}, {key.shape}, {value.shape}")
    if enable_gqa and key.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        if query.shape[-3] % key.shape[-3]:
            raise RuntimeError(f"{op}: enable_gqa needs the query's {query.shape[-3]} heads to "
                               f"be a multiple of the key's {key.shape[-3]}")
        group = query.shape[-3] // key.shape[-3]
        key, value = (_repeat_heads(t, group) for t in (key, value))
    length, source_length = query.shape[-2], key.shape[-2]
    if is_causal:
        if attn_mask is not None:
            raise RuntimeError(f"{op}: give attn_mask or is_causal=True, not both")
        mask = causal_mask(length, source_length, query.dtype, query.device)
    elif attn_mask is not None:
        mask = additive_mask(op, "attn_mask", attn_mask, query.dtype, true_means_masked=False)
        if not _broadcasts(mask.shape, query.shape[:-2] + (length, source_length)):
            raise RuntimeError(f"{op}: attn_mask of shape {mask.shape} does not broadcast to "
                               f"the scores' shape {query.shape[:-2] + (length, source_length)}")
    else:
        mask = None
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    return attend(query, key, value, mask, dropout_p, scale, empty_rows_to_zero=True)[0]


def _repeat_heads(t, group):
    """(..., H, S, E) -> (..., H * group, S, E), each head repeated `group` times in a row."""
    lead, heads = t.shape[:-3], t.shape[-3]
    t = ops.unsqueeze(t, -3).expand(*lead, heads, group, *t.shape[-2:])
    return t.reshape(*lead, heads * group, *t.shape[-2:])


def _broadcasts(shape, target):
    return len(shape) <= len(target) and all(
        m in (1, n) for m, n in zip(shape[::-1], target[::-1]))
