"""The fused batch-norm kernels of batch_norm.cu, planned and launched from Python.

`CudaBatchNorm` is what `CupyBackend.kernels["batch_norm"]` holds: the object the
`fused_batch_norm` op calls on `cuda` tensors (`ArrayBatchNorm` in array_batch_norm.py is its
CPU counterpart, with the same methods):

    forward_train(x, gamma, beta, axis, eps) -> (y, mean, var, rstd)
                                     mean/var: the biased batch statistics
    forward_infer(x, gamma, beta, mean, var, axis, eps) -> y
    backward(g, x, mean, rstd, gamma, axis, need_dx, need_dgamma, need_dbeta)
        -> (dx, dgamma, dbeta)       None for each gradient not asked for
    moments(x, axes), standardize(x, mean, rstd, axes), accumulation_dtype(dtype),
    merge_moments(counts, means, squares, count)
                                     for `normalize` and `sync_normalize`: `ArrayBatchNorm`'s
                                     array code on whole CuPy arrays (no CUDA kernel of its own)

It is also `kernels["batch_norm_act"]`, the `fused_batch_norm_act` op's kernel
(`ArrayBatchNormAct` in array_batch_norm_act.py on the CPU): forward_train and forward_infer take
an `activation` (backends.array_batch_norm_act.Activation), applied by bn_apply, and

    backward_from_output(g, z, rstd, gamma, beta, axis, activation, training, eps, need_dx,
                         need_dgamma, need_dbeta) -> (dx, dgamma, dbeta)
    normalized_from_output(z, gamma, beta, axis, activation, eps) -> xhat   (array code)

run the same three backward launches on (g, z): the kernels recover dy = g * act'(y) and
xhat / rstd = (act^-1(z) - beta) / (gamma~ * rstd) from z, with the per-channel
[beta; 1 / (gamma~ * rstd)] in place of the mean, so the finalize step is batch norm's.

The backward's dx is k1 * g + k2 * (x - mean) + k3 per channel, with k1 = gamma * rstd,
k2 = -k1 * rstd * dgamma / M and k3 = -k1 * dbeta / M (M values per channel): bn_bwd_finalize
computes k1, k2, k3 and bn_bwd_dx applies them.

x is float32, float16 or bfloat16 (statistics, parameters and gradients of parameters are
float32, accumulation float32) or float64 (all float64). gamma/beta may be None. `axis` is the
channel axis: 1 for NCHW, (N, C) and (N, C, L); the last for channels-last (N, H, W, C).

The class only plans launches (grids, splits, vector widths) and passes arguments; `launch` does
the launching. On the GPU that is a cupy.RawModule function call; the CPU test harness in
tests/cuda_host passes a launcher that runs the same kernels, compiled by g++, on host threads, so
every line here is exercised on machines without a GPU too.
"""
import math
import pathlib
import typing

import numpy

from .array_batch_norm_act import ArrayBatchNormAct, invertible_gamma

SOURCE = pathlib.Path(__file__).with_name("batch_norm.cu")
BLOCK = 256   # threads per block; batch_norm.cu is compiled with BN_BLOCK equal to this
MAX_ELEMENTS = 2 ** 31 - 1   # the kernels index elements with 32-bit unsigned arithmetic
LOAD_BYTES = 16   # the widest load a thread issues: a Pack of VEC elements
WARP = 32   # threads per warp: the rows reductions set at most this many packs side by side
MAX_GRID_Y = 65535   # CUDA's limit on gridDim.y, where the splits of a channel go
BLOCKS_PER_MULTIPROCESSOR = 4   # reductions aim for this many blocks per multiprocessor ...
MIN_WORK = 4   # ... each with at least this many loads per thread
ELEMENTWISE_WAVES = 8   # elementwise grids: at most this many times the reductions' target

# Storage dtype name -> (C++ type, accumulation dtype name).
STORAGE = {
    "float32": ("float", "float32"),
    "float16": ("__half", "float32"),
    "bfloat16": ("__nv_bfloat16", "float32"),
    "float64": ("double", "float64"),
}
_ACC_CTYPE = {"float32": "float", "float64": "double"}
_STORAGE_KERNELS = ("bn_stats_planar", "bn_stats_rows", "bn_apply", "bn_bwd_reduce_planar",
                    "bn_bwd_reduce_rows", "bn_bwd_dx")
_CHANNEL_KERNELS = ("bn_finalize_stats", "bn_infer_coeffs", "bn_bwd_finalize")
_NULL = numpy.uint64(0)   # a null pointer argument
# batch_norm.cu's activation codes (BN_ACT_*): 0 is plain batch norm, whose backward reads x
_ACT_CODES = {None: 0, "identity": 1, "leaky_relu": 2, "elu": 3}


class _Reduction(typing.NamedTuple):
    """A per-channel reduction of batch_norm.cu: its kernels `kernel`_planar / `kernel`_rows
    write `planes` planes of S x C partials, then `extras` values per channel."""
    kernel: str
    planes: int
    extras: int


_STATS = _Reduction("bn_stats", planes=3, extras=1)   # Welford triples, then each shift
_BACKWARD_SUMS = _Reduction("bn_bwd_reduce", planes=2, extras=0)   # sum(g), sum(g * (x - mean))


def _vector_width(ctype):
    return LOAD_BYTES // {"float": 4, "__half": 2, "__nv_bfloat16": 2, "double": 8}[ctype]


def kernel_names(ctype=None):
    """The template instances to compile, as NVRTC name expressions ("bn_apply<float, 4>"), for
    one storage C++ type or for all of them."""
    acc_of = dict(STORAGE.values())   # C++ storage type -> accumulation dtype name
    names = []
    for c in [ctype] if ctype else list(acc_of):
        for vec in (1, _vector_width(c)):
            names += [f"{kernel}<{c}, {vec}>" for kernel in _STORAGE_KERNELS]
        names += [f"{kernel}<{_ACC_CTYPE[acc_of[c]]}>" for kernel in _CHANNEL_KERNELS]
    return list(dict.fromkeys(names))   # the float32-accumulating types share channel kernels


def _address(array):
    """Device (CuPy) or host (NumPy) address of an array's first element."""
    pointer = getattr(array.data, "ptr", None)
    return array.ctypes.data if pointer is None else pointer


def _ceil_div(a, b):
    return -(-a // b)


class _Plan:
    """How one call maps x onto the kernels: the (outer, C, inner) view, the element types and
    the vector width (16 bytes per load where every array is aligned and runs divide evenly)."""

    def __init__(self, op, storage, x, axis, arrays):
        shape = x.shape
        if not -len(shape) <= axis < len(shape):
            raise ValueError(f"{op}: channel axis {axis} is out of range for an input of shape "
                             f"{shape}")
        axis %= len(shape)
        if x.dtype.name not in storage:
            raise TypeError(f"{op}: the CUDA kernel takes {', '.join(storage)} input, not "
                            f"{x.dtype} (shape {shape})")
        self.ctype, acc = storage[x.dtype.name]
        self.acc = numpy.dtype(acc)
        self.outer = math.prod(shape[:axis])
        self.channels = shape[axis]
        self.inner = math.prod(shape[axis + 1:])
        self.count = self.outer * self.inner
        self.total = x.size
        if self.count == 0:
            raise ValueError(f"{op}: the input of shape {shape} has no values per channel")
        if self.total > MAX_ELEMENTS:
            raise ValueError(f"{op}: the input of shape {shape} has {self.total} elements; the "
                             f"CUDA kernel handles at most {MAX_ELEMENTS}")
        width = _vector_width(self.ctype)
        runs = self.inner if self.inner > 1 else self.channels
        aligned = all(_address(a) % LOAD_BYTES == 0 for a in arrays)
        self.vec = width if aligned and runs % width == 0 else 1
        self.planar = self.inner > 1

    def name(self, kernel):
        return f"{kernel}<{self.ctype}, {self.vec}>"

    def acc_name(self, kernel):
        return f"{kernel}<{_ACC_CTYPE[self.acc.name]}>"

    def scalar(self, value):
        return self.acc.type(value)


class CudaBatchNorm:
    """Batch norm through the kernels of batch_norm.cu (see the module docstring).

    launch(ctype, name, grid, block, args) runs the kernel instance `name` of the module for
    input type `ctype` ("float", "__half", ...); `xp` allocates arrays (cupy on the GPU).
    `target_blocks` is how many blocks a reduction aims for (a few per multiprocessor): a
    channel's values are split over several blocks when there are fewer channels than that,
    each block getting at least `min_work` loads per thread (0: no such floor, so a small
    channel may leave blocks empty, which tests use). `block` must be the BN_BLOCK the kernels
    were compiled with.
    """

    storage = STORAGE

    def __init__(self, xp, launch, target_blocks, block=BLOCK, min_work=MIN_WORK):
        self.xp = xp
        self._launch = launch
        self.block = block
        self.target_blocks = target_blocks
        self.min_work = min_work
        self._arrays = ArrayBatchNormAct(xp, block_elements=None)   # normalize; xhat from z

    @classmethod
    def for_cupy(cls, cupy):
        """The kernels compiled by NVRTC for the current device: one module per input type,
        compiled on its first use (CuPy caches it on disk)."""
        modules = {}

        def launch(ctype, name, grid, block, args):
            module = modules.get(ctype)
            if module is None:
                module = modules[ctype] = cupy.RawModule(
                    code=SOURCE.read_text(), options=("-std=c++17", f"-DBN_BLOCK={BLOCK}"),
                    name_expressions=kernel_names(ctype))
            module.get_function(name)(grid, block, args)

        multiprocessors = cupy.cuda.Device().attributes["MultiProcessorCount"]
        return cls(cupy, launch, target_blocks=BLOCKS_PER_MULTIPROCESSOR * multiprocessors,
                   block=BLOCK)

    # ------------------------------------------------------------------ argument helpers
    def _input(self, op, name, array, dtype, channels):
        """A (C,) parameter or statistic as a contiguous array of the accumulation dtype."""
        if array is None:
            return None
        if tuple(array.shape) != (channels,):
            raise ValueError(f"{op}: {name} has shape {tuple(array.shape)}; expected "
                             f"({channels},) for {channels} channels")
        return self.xp.ascontiguousarray(array, dtype=dtype)

    def _run(self, plan, name, grid, args):
        self._launch(plan.ctype, name, grid, (self.block,), args)

    def _channel_grid(self, plan):
        return (_ceil_div(plan.channels, self.block),)

    def _elementwise_grid(self, plan):
        packs = plan.total // plan.vec
        return (max(1, min(_ceil_div(packs, self.block),
                           ELEMENTWISE_WAVES * self.target_blocks)),)

    def _splits(self, channel_blocks, units, per_pass):
        """Blocks per channel: enough to reach target_blocks, each with at least min_work
        passes of `per_pass` units (packs or rows)."""
        wanted = _ceil_div(self.target_blocks, channel_blocks)
        affordable = (_ceil_div(units, per_pass * self.min_work) if self.min_work
                      else MAX_GRID_Y)
        return max(1, min(wanted, affordable, MAX_GRID_Y))

    def _reduce(self, reduction, plan, arrays):
        """Launch a per-channel `_Reduction`; returns its partials (S x C values per plane, then
        the reduction's per-channel extras) and the number of splits S."""
        xp, c, kernel = self.xp, plan.channels, reduction.kernel
        if plan.planar:
            inner_packs, channel_packs = plan.inner // plan.vec, plan.count // plan.vec
            splits = self._splits(c, channel_packs, self.block)
            chunk = _ceil_div(channel_packs, splits)
            grid, layout = (c, splits), (inner_packs, channel_packs, chunk)
            name = plan.name(kernel + "_planar")
        else:
            row_packs = c // plan.vec
            lanes = min(WARP, 1 << (row_packs - 1).bit_length())
            blocks = _ceil_div(row_packs, lanes)
            splits = self._splits(blocks, plan.outer, self.block // lanes)
            chunk = _ceil_div(plan.outer, splits)
            grid, layout = (blocks, splits), (plan.outer, lanes, chunk)
            name = plan.name(kernel + "_rows")
        partials = xp.empty((reduction.planes * splits + reduction.extras) * c, plan.acc)
        self._run(plan, name, grid,
                  (*arrays, numpy.uint32(c), *map(numpy.uint32, layout), partials))
        return partials, splits

    # ------------------------------------------------------------------ the kernel contract
    def forward_train(self, x, gamma, beta, axis, eps, activation=None):
        op, xp = "fused_batch_norm", self.xp
        x = xp.ascontiguousarray(x)
        y = xp.empty_like(x)
        plan = _Plan(op, self.storage, x, axis, (x, y))
        c, acc = plan.channels, plan.acc
        gamma = self._input(op, "gamma", gamma, acc, c)
        beta = self._input(op, "beta", beta, acc, c)
        partials, splits = self._reduce(_STATS, plan, (x,))
        stats = xp.empty((3, c), acc)
        mean, var, rstd = stats
        coef = xp.empty((3, c), acc)      # a, b, p of y = a*(x - p) + b
        self._run(plan, plan.acc_name("bn_finalize_stats"), self._channel_grid(plan), (
            partials, numpy.uint32(splits), numpy.uint32(c), plan.scalar(plan.count),
            plan.scalar(eps), _or_null(gamma), _or_null(beta), mean, var, rstd, coef))
        self._apply(plan, x, y, coef, activation)
        return y, mean, var, rstd

    def forward_infer(self, x, gamma, beta, mean, var, axis, eps, activation=None):
        op, xp = "fused_batch_norm", self.xp
        x = xp.ascontiguousarray(x)
        y = xp.empty_like(x)
        plan = _Plan(op, self.storage, x, axis, (x, y))
        c, acc = plan.channels, plan.acc
        params = [self._input(op, name, a, acc, c)
                  for name, a in (("mean", mean), ("var", var), ("gamma", gamma), ("beta", beta))]
        if params[0] is None or params[1] is None:
            raise ValueError(f"{op}: the inference form needs both mean and var")
        coef = xp.empty((3, c), acc)      # a, b, p of y = a*(x - p) + b
        self._run(plan, plan.acc_name("bn_infer_coeffs"), self._channel_grid(plan), (
            *map(_or_null, params), numpy.uint32(c), plan.scalar(eps), coef))
        self._apply(plan, x, y, coef, activation)
        return y

    def _apply(self, plan, x, y, coef, activation):
        self._run(plan, plan.name("bn_apply"), self._elementwise_grid(plan), (
            x, y, coef, numpy.uint32(plan.total // plan.vec), numpy.uint32(plan.inner),
            numpy.uint32(plan.channels), *_act_args(plan, activation)))

    def backward(self, g, x, mean, rstd, gamma, axis, need_dx, need_dgamma, need_dbeta):
        op = "fused_batch_norm backward"
        return self._backward(op, g, x, rstd, gamma, axis, need_dx, need_dgamma, need_dbeta,
                              lambda acc, c: self._input(op, "mean", mean, acc, c))

    def backward_from_output(self, g, z, rstd, gamma, beta, axis, activation, training, eps,
                             need_dx, need_dgamma, need_dbeta):
        op, xp = "fused_batch_norm_act backward", self.xp

        def shift_and_scale(acc, c):   # [beta; 1 / (gamma~ * rstd)]: see the module docstring
            chan = xp.zeros((2, c), acc)
            if beta is not None:
                chan[0] = self._input(op, "beta", beta, acc, c)
            r = self._input(op, "rstd", rstd, acc, c)
            chan[1] = 1 / r if gamma is None else 1 / (
                invertible_gamma(xp, self._input(op, "gamma", gamma, acc, c), eps) * r)
            return chan

        return self._backward(op, g, z, rstd, gamma, axis, need_dx, need_dgamma, need_dbeta,
                              shift_and_scale, activation, training)

    def normalized_from_output(self, z, gamma, beta, axis, activation, eps):
        return self._arrays.normalized_from_output(z, gamma, beta, axis, activation, eps)

    def _backward(self, op, g, x, rstd, gamma, axis, need_dx, need_dgamma, need_dbeta,
                  channel_values, activation=None, training=True):
        """The three backward launches on (g, x), or on (g, z) with an activation;
        channel_values(acc, C) gives their per-channel `chan` (see bwd_pair in the .cu)."""
        xp = self.xp
        if not (need_dx or need_dgamma or need_dbeta):
            return None, None, None
        x = xp.ascontiguousarray(x)
        g = xp.ascontiguousarray(g, dtype=x.dtype)
        if g.shape != x.shape:
            raise ValueError(f"{op}: the gradient has shape {g.shape}, the input {x.shape}")
        dx = xp.empty_like(x) if need_dx else None
        plan = _Plan(op, self.storage, x, axis, (x, g) if dx is None else (x, g, dx))
        c, acc = plan.channels, plan.acc
        chan = channel_values(acc, c)
        rstd = self._input(op, "rstd", rstd, acc, c)
        gamma = self._input(op, "gamma", gamma, acc, c)
        act = _act_args(plan, activation)
        partials, splits = self._reduce(_BACKWARD_SUMS, plan, (g, x, chan, *act))
        dgamma = xp.empty(c, acc) if need_dgamma else None
        dbeta = xp.empty(c, acc) if need_dbeta else None
        coef = xp.empty((3, c), acc) if need_dx else None   # k1, k2, k3
        self._run(plan, plan.acc_name("bn_bwd_finalize"), self._channel_grid(plan), (
            partials, numpy.uint32(splits), numpy.uint32(c), plan.scalar(plan.count), rstd,
            _or_null(gamma), _or_null(dgamma), _or_null(dbeta), _or_null(coef)))
        if need_dx:
            if not training:   # inference: dx = k1 * dy, the statistics being constants
                coef[1:] = 0
            self._run(plan, plan.name("bn_bwd_dx"), self._elementwise_grid(plan), (
                g, x, dx, coef, chan, *act, numpy.uint32(plan.total // plan.vec),
                numpy.uint32(plan.inner), numpy.uint32(c)))
        return dx, dgamma, dbeta


    # ------------------------------------------------------------------ normalize
    def accumulation_dtype(self, dtype):
        return self._arrays.accumulation_dtype(dtype)

    merge_moments = staticmethod(ArrayBatchNormAct.merge_moments)

    def moments(self, x, axes):
        return self._arrays.moments(x, axes)

    def standardize(self, x, mean, rstd, axes):
        return self._arrays.standardize(x, mean, rstd, axes)

    def input_grad(self, g, x, mean, rstd, gamma, axis, sum_g, sum_gxhat, count):
        return self._arrays.input_grad(g, x, mean, rstd, gamma, axis, sum_g, sum_gxhat, count)


def _or_null(array):
    return _NULL if array is None else array


def _act_args(plan, activation):
    """The (act, param) kernel arguments for an Activation (None: plain batch norm)."""
    if activation is None:
        return numpy.uint32(0), plan.scalar(0)
    param = activation.alpha if activation.name == "elu" else activation.negative_slope
    return numpy.uint32(_ACT_CODES[activation.name]), plan.scalar(param)
