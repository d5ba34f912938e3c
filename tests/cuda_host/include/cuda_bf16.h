// Stand-in for CUDA's cuda_bf16.h in host-emulation builds: __nv_bfloat16 comes from cuda_host.h.
#pragma once
#include "../cuda_host.h"
