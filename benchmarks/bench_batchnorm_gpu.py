"""Fused batch norm on the GPU: minigrad's CUDA kernels, forward (training, running statistics
updated) + backward (dx, dgamma, dbeta), against PyTorch's CUDA batch norm (cuDNN where PyTorch
picks it, and PyTorch's own kernels with cuDNN disabled) and against the device's measured
device-to-device copy bandwidth.

    python benchmarks/bench_batchnorm_gpu.py [--reps 30] [--rounds 5] [--json rows.json]

Times are CUDA-event medians over `rounds` rounds of `reps` calls. "kernels" calls the kernel
object directly (batch_norm.cu through CuPy); "op" goes through mg.ops.fused_batch_norm and
mg.grad (the Python and autograd overhead on top). Bandwidth counts the bytes the kernels move:
forward reads x twice (statistics, then y = a*x + b) and writes y, backward reads g and x twice
(sums, then dx) and writes dx: 8 tensor-sized passes. Its ratio to the copy bandwidth (2 bytes
moved per byte copied) is the share of the memory system the fused pass uses. PyTorch is
optional: without a CUDA build of it the cuDNN columns say so (CuPy 14 has no cuDNN bindings).
"""
import argparse
import json
import statistics
import sys

import numpy as np

import minigrad as mg
from minigrad.backends import DeviceError
from minigrad.nn.batch_norm_core import update_running_stats

SHAPES = [(64, 6, 28, 28), (256, 64, 56, 56), (32, 256, 14, 14)]
DTYPES = ["float32", "float16"]
LAYOUTS = ["NCHW", "NHWC"]
PASSES = 8   # tensor-sized reads and writes of one fused forward + backward


def event_timer(cupy, reps, rounds):
    """time(fn) -> median milliseconds per call, measured with CUDA events on CuPy's stream."""
    def time(fn, synchronize=None):
        for _ in range(3):
            fn()
        per_call = []
        for _ in range(rounds):
            if synchronize:
                synchronize()
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            for _ in range(reps):
                fn()
            if synchronize:
                synchronize()
            stop.record()
            stop.synchronize()
            per_call.append(cupy.cuda.get_elapsed_time(start, stop) / reps)
        return statistics.median(per_call)
    return time


def copy_bandwidth(cupy, time, nbytes):
    """Device-to-device cudaMemcpy bandwidth in GB/s (bytes read + bytes written)."""
    src = cupy.ones(nbytes // 4, cupy.float32)
    dst = cupy.empty_like(src)
    ms = time(lambda: dst.array.copy_from_device_async(src.array, src.nbytes))
    return 2 * src.nbytes / (ms * 1e-3) / 1e9


def minigrad_cases(cupy, x, g, axis):
    """(kernels step, op step) for one input."""
    c = x.shape[axis]
    kernels = mg.get_backend("cuda").kernel("batch_norm")
    gamma = cupy.linspace(0.5, 2.0, c, dtype=cupy.float32)
    beta = cupy.linspace(-1.0, 1.0, c, dtype=cupy.float32)
    backend = mg.get_backend("cuda")
    running = [mg.Tensor.from_array(make(c, cupy.float32), backend)
               for make in (cupy.zeros, cupy.ones)]
    count = x.size // c

    def kernel_step():
        y, mean, var, rstd = kernels.forward_train(x, gamma, beta, axis, 1e-5)
        # the running-statistics update as the BatchNorm layers make it (nn/batch_norm_core.py)
        update_running_stats(*running, *(mg.Tensor.from_array(s, backend) for s in (mean, var)),
                             count, 0.1)
        kernels.backward(g, x, mean, rstd, gamma, axis, True, True, True)

    xt = mg.tensor(x, requires_grad=True)
    gt, bt = mg.tensor(gamma, requires_grad=True), mg.tensor(beta, requires_grad=True)
    upstream = mg.tensor(g)

    def op_step():
        y, _, _ = mg.ops.fused_batch_norm(xt, gt, bt, axis=axis)
        mg.grad(y, [xt, gt, bt], upstream)

    return kernel_step, op_step


def torch_case(torch, x, g, layout):
    """A PyTorch fwd+bwd step on the same memory (NHWC data seen as channels-last NCHW)."""
    xt, gt = torch.from_dlpack(x), torch.from_dlpack(g)
    if layout == "NHWC":
        xt, gt = xt.permute(0, 3, 1, 2), gt.permute(0, 3, 1, 2)
    xt = xt.detach().requires_grad_()
    c = xt.shape[1]
    weight = torch.linspace(0.5, 2.0, c, device="cuda").requires_grad_()
    bias = torch.linspace(-1.0, 1.0, c, device="cuda").requires_grad_()
    running_mean = torch.zeros(c, device="cuda")
    running_var = torch.ones(c, device="cuda")

    def step():
        y = torch.nn.functional.batch_norm(xt, running_mean, running_var, weight, bias,
                                           training=True, momentum=0.1, eps=1e-5)
        torch.autograd.grad(y, (xt, weight, bias), gt)

    return step


def load_torch_cuda():
    try:
        import torch
    except ImportError:
        return None, "PyTorch not installed"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} has no CUDA"
    return torch, None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the copy bandwidth and the rows to this file")
    args = parser.parse_args()
    try:
        backend = mg.get_backend("cuda")
    except DeviceError as error:
        sys.exit(f"bench_batchnorm_gpu: {error}")
    cupy = backend.xp
    time = event_timer(cupy, args.reps, args.rounds)
    torch, why_not = load_torch_cuda()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs; "
          f"CuPy {cupy.__version__}; "
          + (f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
             if torch else f"no cuDNN reference ({why_not})"))
    copy_gbs = copy_bandwidth(cupy, time, 1 << 30)
    print(f"device-to-device copy: {copy_gbs:.0f} GB/s (1 GiB cudaMemcpy, read + write)\n")
    header = (f"{'shape':>18} {'dtype':>8} {'layout':>6} | {'kernels':>8} {'op':>8} "
              f"{'cuDNN':>8} {'torch':>8} | {'vs cuDNN':>8} {'GB/s':>6} {'of copy':>7}")
    print(header + "\n" + "-" * len(header))
    rng = np.random.default_rng(0)
    rows = []
    for shape in SHAPES:
        for dtype in DTYPES:
            for layout in LAYOUTS:
                stored = shape if layout == "NCHW" else (shape[0], shape[2], shape[3], shape[1])
                axis = 1 if layout == "NCHW" else 3
                x = cupy.asarray(rng.standard_normal(stored, dtype=np.float32).astype(dtype))
                g = cupy.asarray(rng.standard_normal(stored, dtype=np.float32).astype(dtype))
                kernel_step, op_step = minigrad_cases(cupy, x, g, axis)
                ms_kernels, ms_op = time(kernel_step), time(op_step)
                cudnn_ms = torch_ms = None
                if torch:
                    step = torch_case(torch, x, g, layout)
                    sync = torch.cuda.synchronize
                    torch.backends.cudnn.enabled = True
                    cudnn_ms = time(step, sync)
                    torch.backends.cudnn.enabled = False
                    torch_ms = time(step, sync)
                    torch.backends.cudnn.enabled = True
                gbs = PASSES * x.nbytes / (ms_kernels * 1e-3) / 1e9
                show = lambda v: f"{v:8.3f}" if v is not None else f"{'-':>8}"  # noqa: E731
                ratio = f"{cudnn_ms / ms_kernels:7.2f}x" if cudnn_ms else f"{'-':>8}"
                print(f"{str(shape):>18} {dtype:>8} {layout:>6} | {show(ms_kernels)} "
                      f"{show(ms_op)} {show(cudnn_ms)} {show(torch_ms)} | {ratio} "
                      f"{gbs:6.0f} {100 * gbs / copy_gbs:6.0f}%")
                rows.append({"shape": list(shape), "dtype": dtype, "layout": layout,
                             "kernels_ms": ms_kernels, "op_ms": ms_op, "cudnn_ms": cudnn_ms,
                             "torch_ms": torch_ms, "gbs": gbs, "share_of_copy": gbs / copy_gbs})
                del x, g
                cupy.get_default_memory_pool().free_all_blocks()
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"copy_gbs": copy_gbs, "rows": rows}, out, indent=1)
    print("\nms per fused forward+backward; 'vs cuDNN' above 1 means minigrad is faster; GB/s "
          f"counts {PASSES} tensor-sized passes per step.")


if __name__ == "__main__":
    main()
