// Stand-in for CUDA's cuda_fp16.h in host-emulation builds: __half comes from cuda_host.h.
#pragma once
#include "../cuda_host.h"
