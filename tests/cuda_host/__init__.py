"""Run minigrad's CUDA kernels on CPU machines: batch_norm.cu compiled by g++ with cuda_host.h."""
