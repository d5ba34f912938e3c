"""Run minigrad's CUDA kernels on CPU machines (batch_norm.cu compiled by g++ with cuda_host.h)
and, through CuPy, on a GPU (on_device.py), against the same float64 reference cases."""
