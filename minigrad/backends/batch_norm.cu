// Fused batch normalization for minigrad's CuPy backend.
//
// Loaded with cupy.RawModule (cuda_batch_norm.py names the template instances and plans the
// launches). The same file is compiled unmodified by g++ on machines without a GPU, through
// tests/cuda_host/cuda_host.h, which runs every CUDA thread as a host thread.
//
// Layout. x is contiguous and viewed as (outer, C, inner) around the channel axis:
//   NCHW (N, C, H, W), (N, C, L): inner = H*W or L > 1  -> "planar" reductions: a channel's
//                                    values come in contiguous runs of `inner`
//   channels-last (N, H, W, C), (N, C): inner = 1       -> "rows" reductions: each row of C
//                                    channels is contiguous and threads walk across channels
// M = outer * inner values per channel. T is the storage type (float, __half, __nv_bfloat16,
// double); Acc the accumulation type (float, or double for double): statistics, parameters and
// coefficients are Acc vectors of length C.
//
// Training forward, three launches:
//   bn_stats_{planar,rows}    each block folds a slice of its channel(s) into Welford triples
//                             (count, mean, M2) -> partials[3][S][C] (S slices per channel),
//                             of x - shift with shift = the channel's first value, written to
//                             partials[3*S*C + c]: the mean then carries no large offset, so a
//                             large mean next to a small spread costs no digits
//   bn_finalize_stats         per channel: Chan-merge the S triples; mean = shift + merged mean,
//                             var = M2 / M, rstd = 1 / sqrt(var + eps); coefficients
//                             a = gamma*rstd, b = beta - (merged mean)*a, p = shift (the
//                             running statistics are updated by the caller, from mean and var)
//   bn_apply                  y = a*(x - p) + b: x - p is exact and b small, where a*x +
//                             (beta - mean*a) would cancel the digits of a large mean
// Inference forward: bn_infer_coeffs (a, b = beta, p = mean from the given statistics), then
// bn_apply.
// Backward, three launches:
//   bn_bwd_reduce_{planar,rows}  partial sum(g) and sum(g*(x - mean)) in one pass -> [2][S][C]
//   bn_bwd_finalize           dbeta = sum(g), dgamma = rstd*sum(g*(x - mean)) (each only when
//                             asked for); dx coefficients k1 = gamma*rstd,
//                             k2 = -k1*rstd*dgamma/M, k3 = -k1*dbeta/M
//   bn_bwd_dx                 dx = k1*g + k2*(x - mean) + k3
//   which is FusedBatchNorm's dx (ops/fused_batch_norm.py, where the derivatives are written):
//   dx = gamma*rstd*(g - mean(g) - xhat*mean(g*xhat)) with xhat = (x - mean)*rstd.
//
// Batch norm + activation (fused_batch_norm_act) uses the same kernels: bn_apply applies the
// activation after a*(x - p) + b (`act`), and the three backward launches read, in place of
// (g, x), the output z and recover what they need from it (`act`, see bwd_pair below).
//
// Every kernel is launched with BN_BLOCK threads in x (the planner in cuda_batch_norm.py reads
// the same constant). VEC is the number of elements moved per load: 16 bytes' worth where the
// planner found the data aligned and the channel runs divisible, else 1. The loops over memory
// are unrolled four times so each thread keeps several loads in flight.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#ifndef BN_BLOCK
#define BN_BLOCK 256
#endif
#define BN_WARP_SIZE 32
#define BN_WARPS (BN_BLOCK / BN_WARP_SIZE)
#define BN_FULL_MASK 0xffffffffu

typedef unsigned long long bn_offset;  // element offsets; per-channel counts stay 32-bit

// ------------------------------------------------------------------ types and conversions

template <typename T> struct AccOf { typedef float type; };
template <> struct AccOf<double> { typedef double type; };

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_acc(typename AccOf<T>::type v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) {
  return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float bn_fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double bn_fma(double a, double b, double c) { return fma(a, b, c); }
__device__ __forceinline__ float bn_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double bn_sqrt(double v) { return sqrt(v); }

__device__ __forceinline__ unsigned bn_min(unsigned a, unsigned b) { return a < b ? a : b; }
__device__ __forceinline__ float bn_expm1(float v) { return expm1f(v); }
__device__ __forceinline__ double bn_expm1(double v) { return expm1(v); }
__device__ __forceinline__ float bn_log1p(float v) { return log1pf(v); }
__device__ __forceinline__ double bn_log1p(double v) { return log1p(v); }
// The largest value below -1 + 1 (1 - 2^-24, 1 - 2^-53): where ELU's inversion stops.
__device__ __forceinline__ float bn_below_one(float) { return 1.0f - 5.9604645e-8f; }
__device__ __forceinline__ double bn_below_one(double) { return 1.0 - 1.1102230246251565e-16; }

// ------------------------------------------------------------------ activations

// What an activation code means: BN_ACT_NONE (plain batch norm: backward reads g and x),
// or batch norm + activation, whose backward reads g and the output z.
#define BN_ACT_NONE 0u
#define BN_ACT_IDENTITY 1u
#define BN_ACT_LEAKY_RELU 2u  // param: the negative slope (> 0)
#define BN_ACT_ELU 3u         // param: alpha (> 0)

// z = act(y).
template <typename Acc>
__device__ __forceinline__ Acc bn_activate(Acc y, unsigned act, Acc param) {
  if (y > Acc(0)) return y;
  if (act == BN_ACT_LEAKY_RELU) return y * param;
  if (act == BN_ACT_ELU) return param * bn_expm1(y);
  return y;
}

// The pair the backward sums and combines, per element: (d, e) = (g, x - shift) for batch norm
// (shift = mean). With an activation, v is the output z and the pair is recovered from it
// (InPlace-ABN): d = dy = g * act'(y), e = xhat / rstd = (y - shift) * scale with y = act^-1(z),
// shift = beta and scale = 1 / (gamma~ * rstd), so the sums and coefficients are batch norm's.
// ELU's inversion stops just above -alpha, where z has saturated.
template <typename Acc>
__device__ __forceinline__ void bwd_pair(unsigned act, Acc param, Acc g, Acc v, Acc shift,
                                         Acc scale, Acc& d, Acc& e) {
  if (act == BN_ACT_NONE) {
    d = g;
    e = v - shift;
    return;
  }
  Acc y = v;
  d = g;
  if (!(v > Acc(0))) {
    if (act == BN_ACT_LEAKY_RELU) {
      d = g * param;
      y = v / param;
    } else if (act == BN_ACT_ELU) {
      d = g * (v + param);
      const Acc ratio = v / param, floor = -bn_below_one(v);
      y = bn_log1p(ratio > floor ? ratio : floor);
    }
  }
  e = (y - shift) * scale;
}

// VEC consecutive elements, aligned so that one load or store moves them all.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// ------------------------------------------------------------------ Welford / Chan merging

template <typename Acc>
struct Welford {
  Acc n, mean, m2;  // count, mean, sum of squared deviations from the mean
};

// Chan et al.: the triple of the union of two disjoint sets.
template <typename Acc>
__device__ __forceinline__ Welford<Acc> welford_merge(Welford<Acc> a, Welford<Acc> b) {
  const Acc n = a.n + b.n;
  if (n == Acc(0)) return a;
  const Acc weight = b.n / n, delta = b.mean - a.mean;
  Welford<Acc> r;
  r.n = n;
  r.mean = a.mean + delta * weight;
  r.m2 = a.m2 + b.m2 + delta * delta * a.n * weight;
  return r;
}

// The triple of one pack minus `shift`, by two passes over its registers.
template <typename T, int VEC>
__device__ __forceinline__ Welford<typename AccOf<T>::type> pack_welford(
    const Pack<T, VEC>& p, typename AccOf<T>::type shift) {
  typedef typename AccOf<T>::type Acc;
  Acc value[VEC], sum = Acc(0);
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    value[v] = to_acc(p.v[v]) - shift;
    sum += value[v];
  }
  const Acc mean = sum * (Acc(1) / Acc(VEC));  // VEC is a power of two: exact
  Acc m2 = Acc(0);
#pragma unroll
  for (int v = 0; v < VEC; ++v) {
    const Acc d = value[v] - mean;
    m2 += d * d;
  }
  Welford<Acc> w;
  w.n = Acc(VEC);
  w.mean = mean;
  w.m2 = m2;
  return w;
}

template <typename Acc>
__device__ __forceinline__ Welford<Acc> shfl_down_welford(Welford<Acc> a, unsigned offset) {
  Welford<Acc> b;
  b.n = __shfl_down_sync(BN_FULL_MASK, a.n, offset);
  b.mean = __shfl_down_sync(BN_FULL_MASK, a.mean, offset);
  b.m2 = __shfl_down_sync(BN_FULL_MASK, a.m2, offset);
  return b;
}

// The merged triple of the whole block, valid in thread 0. Uses its shared scratch once, so a
// kernel calls it at most once.
template <typename Acc>
__device__ __forceinline__ Welford<Acc> block_welford(Welford<Acc> a) {
  __shared__ Acc shared_n[BN_WARPS], shared_mean[BN_WARPS], shared_m2[BN_WARPS];
  const unsigned lane = threadIdx.x % BN_WARP_SIZE, warp = threadIdx.x / BN_WARP_SIZE;
#pragma unroll
  for (unsigned offset = BN_WARP_SIZE / 2; offset > 0; offset /= 2) {
    a = welford_merge(a, shfl_down_welford(a, offset));
  }
  if (lane == 0) {
    shared_n[warp] = a.n;
    shared_mean[warp] = a.mean;
    shared_m2[warp] = a.m2;
  }
  __syncthreads();
  if (warp == 0) {
    Welford<Acc> w = {Acc(0), Acc(0), Acc(0)};
    if (lane < BN_WARPS) {
      w.n = shared_n[lane];
      w.mean = shared_mean[lane];
      w.m2 = shared_m2[lane];
    }
#pragma unroll
    for (unsigned offset = BN_WARP_SIZE / 2; offset > 0; offset /= 2) {
      w = welford_merge(w, shfl_down_welford(w, offset));
    }
    a = w;
  }
  return a;
}

// Sums of (a, b) over the block, valid in thread 0 (butterfly within warps). Shared scratch
// used once, as above.
template <typename Acc>
__device__ __forceinline__ void block_sum2(Acc& a, Acc& b) {
  __shared__ Acc shared_a[BN_WARPS], shared_b[BN_WARPS];
  const unsigned lane = threadIdx.x % BN_WARP_SIZE, warp = threadIdx.x / BN_WARP_SIZE;
#pragma unroll
  for (int mask = BN_WARP_SIZE / 2; mask > 0; mask /= 2) {
    a += __shfl_xor_sync(BN_FULL_MASK, a, mask);
    b += __shfl_xor_sync(BN_FULL_MASK, b, mask);
  }
  if (lane == 0) {
    shared_a[warp] = a;
    shared_b[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < BN_WARPS ? shared_a[lane] : Acc(0);
    b = lane < BN_WARPS ? shared_b[lane] : Acc(0);
#pragma unroll
    for (int mask = BN_WARP_SIZE / 2; mask > 0; mask /= 2) {
      a += __shfl_xor_sync(BN_FULL_MASK, a, mask);
      b += __shfl_xor_sync(BN_FULL_MASK, b, mask);
    }
  }
}

// ------------------------------------------------------------------ training statistics

// Planar layout. grid = (C, S): block (c, s) folds packs [s*chunk, (s+1)*chunk) of channel c,
// numbered row by row (row = outer index, inner_packs packs per row). The channel's first value
// x[c * inner] is its shift.
template <typename T, int VEC>
__global__ void __launch_bounds__(BN_BLOCK)
bn_stats_planar(const T* __restrict__ x, unsigned channels, unsigned inner_packs,
                unsigned channel_packs, unsigned chunk,
                typename AccOf<T>::type* __restrict__ partials) {
  typedef typename AccOf<T>::type Acc;
  const Pack<T, VEC>* packs = reinterpret_cast<const Pack<T, VEC>*>(x);
  const unsigned c = blockIdx.x, split = blockIdx.y;
  const unsigned begin = split * chunk, end = bn_min(begin + chunk, channel_packs);
  const Acc shift = to_acc(x[(bn_offset)c * inner_packs * VEC]);
  Welford<Acc> acc = {Acc(0), Acc(0), Acc(0)};
  #pragma unroll 4
  for (unsigned j = begin + threadIdx.x; j < end; j += BN_BLOCK) {
    const unsigned row = j / inner_packs, col = j - row * inner_packs;
    const Pack<T, VEC> p = packs[((bn_offset)row * channels + c) * inner_packs + col];
    acc = welford_merge(acc, pack_welford(p, shift));
  }
  acc = block_welford(acc);
  if (threadIdx.x == 0) {
    const unsigned at = split * channels + c, plane = gridDim.y * channels;
    partials[at] = acc.n;
    partials[plane + at] = acc.mean;
    partials[2 * plane + at] = acc.m2;
    if (split == 0) partials[3 * plane + c] = shift;
  }
}

// Rows layout. The block is lanes_c (a power of two <= BN_WARP_SIZE) channel packs wide and
// BN_BLOCK / lanes_c rows tall; grid = (ceil(C / VEC / lanes_c), S), block (b, s) covers rows
// [s*chunk, (s+1)*chunk). Rows that share a warp merge by shuffles, warps through shared memory.
// A channel's shift is its value in row 0. (Asking for two resident blocks per multiprocessor
// lets ptxas use the registers the 16-bit, 8-wide instances need instead of spilling.)
template <typename T, int VEC>
__global__ void __launch_bounds__(BN_BLOCK, 2)
bn_stats_rows(const T* __restrict__ x, unsigned channels, unsigned rows, unsigned lanes_c,
              unsigned chunk, typename AccOf<T>::type* __restrict__ partials) {
  typedef typename AccOf<T>::type Acc;
  __shared__ Acc shared_n[BN_WARPS][BN_WARP_SIZE];
  __shared__ Acc shared_mean[BN_WARPS][BN_WARP_SIZE * VEC];
  __shared__ Acc shared_m2[BN_WARPS][BN_WARP_SIZE * VEC];
  const Pack<T, VEC>* packs = reinterpret_cast<const Pack<T, VEC>*>(x);
  const unsigned row_packs = channels / VEC, row_step = BN_BLOCK / lanes_c;
  const unsigned tx = threadIdx.x % lanes_c, ty = threadIdx.x / lanes_c;
  const unsigned pack = blockIdx.x * lanes_c + tx;
  const unsigned begin = blockIdx.y * chunk, end = bn_min(begin + chunk, rows);

  // Welford per channel of the pack; the count is shared by the VEC channels. The shifts stay
  // packed in T (fewer registers) until used.
  Acc n = Acc(0), mean[VEC], m2[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) mean[v] = m2[v] = Acc(0);
  Pack<T, VEC> shift = {};
  if (pack < row_packs) {
    shift = packs[pack];
    #pragma unroll 4
    for (unsigned r = begin + ty; r < end; r += row_step) {
      const Pack<T, VEC> p = packs[(bn_offset)r * row_packs + pack];
      n += Acc(1);
      const Acc inv_n = Acc(1) / n;
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        const Acc value = to_acc(p.v[v]) - to_acc(shift.v[v]), delta = value - mean[v];
        mean[v] += delta * inv_n;
        m2[v] += delta * (value - mean[v]);
      }
    }
  }
  // Lanes tx, tx + lanes_c, ... of a warp hold the same channels: merge them into lane tx.
  for (unsigned offset = BN_WARP_SIZE / 2; offset >= lanes_c; offset /= 2) {
    const Acc other_n = __shfl_down_sync(BN_FULL_MASK, n, offset), total = n + other_n;
    const Acc weight = total > Acc(0) ? other_n / total : Acc(0);
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      const Acc other_mean = __shfl_down_sync(BN_FULL_MASK, mean[v], offset);
      const Acc other_m2 = __shfl_down_sync(BN_FULL_MASK, m2[v], offset);
      const Acc delta = other_mean - mean[v];
      mean[v] += delta * weight;
      m2[v] += other_m2 + delta * delta * n * weight;
    }
    n = total;
  }
  const unsigned lane = threadIdx.x % BN_WARP_SIZE, warp = threadIdx.x / BN_WARP_SIZE;
  if (lane < lanes_c) {
    shared_n[warp][lane] = n;
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      shared_mean[warp][lane * VEC + v] = mean[v];
      shared_m2[warp][lane * VEC + v] = m2[v];
    }
  }
  if (blockIdx.y == 0 && ty == 0 && pack < row_packs) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      partials[3 * gridDim.y * channels + pack * VEC + v] = to_acc(shift.v[v]);
    }
  }
  __syncthreads();
  // One thread per channel of the block merges the warps in order.
  for (unsigned t = threadIdx.x; t < lanes_c * VEC; t += BN_BLOCK) {
    const unsigned c = blockIdx.x * lanes_c * VEC + t;
    Welford<Acc> w = {Acc(0), Acc(0), Acc(0)};
    for (unsigned k = 0; k < BN_WARPS; ++k) {
      Welford<Acc> part;
      part.n = shared_n[k][t / VEC];
      part.mean = shared_mean[k][t];
      part.m2 = shared_m2[k][t];
      w = welford_merge(w, part);
    }
    if (c < channels) {
      const unsigned at = blockIdx.y * channels + c, plane = gridDim.y * channels;
      partials[at] = w.n;
      partials[plane + at] = w.mean;
      partials[2 * plane + at] = w.m2;
    }
  }
}

// One thread per channel: merge the S partial triples in order (deterministic), add back the
// shift, then the statistics and the coefficients [a; b; p] of y = a*(x - p) + b. gamma and
// beta may be null.
template <typename Acc>
__global__ void __launch_bounds__(BN_BLOCK)
bn_finalize_stats(const Acc* __restrict__ partials, unsigned splits, unsigned channels, Acc count,
                  Acc eps, const Acc* __restrict__ gamma, const Acc* __restrict__ beta,
                  Acc* __restrict__ mean, Acc* __restrict__ var, Acc* __restrict__ rstd,
                  Acc* __restrict__ coef) {
  const unsigned c = blockIdx.x * BN_BLOCK + threadIdx.x;
  if (c >= channels) return;
  const unsigned plane = splits * channels;
  Welford<Acc> w = {Acc(0), Acc(0), Acc(0)};
  for (unsigned s = 0; s < splits; ++s) {
    Welford<Acc> part;
    part.n = partials[s * channels + c];
    part.mean = partials[plane + s * channels + c];
    part.m2 = partials[2 * plane + s * channels + c];
    w = welford_merge(w, part);
  }
  const Acc m = partials[3 * plane + c] + w.mean;
  const Acc biased = w.m2 / count, r = Acc(1) / bn_sqrt(biased + eps);
  mean[c] = m;
  var[c] = biased;
  rstd[c] = r;
  const Acc a = gamma ? gamma[c] * r : r;
  coef[c] = a;
  coef[channels + c] = (beta ? beta[c] : Acc(0)) - w.mean * a;
  coef[2 * channels + c] = partials[3 * plane + c];
}

// ------------------------------------------------------------------ inference

// Coefficients [a; b; p] of y = a*(x - p) + b from given statistics: a = gamma / sqrt(var +
// eps), b = beta, p = mean. gamma and beta may be null.
template <typename Acc>
__global__ void __launch_bounds__(BN_BLOCK)
bn_infer_coeffs(const Acc* __restrict__ mean, const Acc* __restrict__ var,
                const Acc* __restrict__ gamma, const Acc* __restrict__ beta, unsigned channels,
                Acc eps, Acc* __restrict__ coef) {
  const unsigned c = blockIdx.x * BN_BLOCK + threadIdx.x;
  if (c >= channels) return;
  const Acc r = Acc(1) / bn_sqrt(var[c] + eps), a = gamma ? gamma[c] * r : r;
  coef[c] = a;
  coef[channels + c] = beta ? beta[c] : Acc(0);
  coef[2 * channels + c] = mean[c];
}

// ------------------------------------------------------------------ elementwise passes

// The channel of lane v of the pack that starts at element `first`: packs lie inside one run
// of `inner` (inner > 1) or, channels-last (inner == 1), cover VEC consecutive channels.
__device__ __forceinline__ unsigned pack_channel(unsigned first, unsigned inner, unsigned channels,
                                                 unsigned v) {
  return (first / inner) % channels + (inner == 1 ? v : 0u);
}

// y = act(a*(x - p) + b) per channel, coef = [a; b; p]; grid-stride over the packs of x.
template <typename T, int VEC>
__global__ void __launch_bounds__(BN_BLOCK)
bn_apply(const T* __restrict__ x, T* __restrict__ y,
         const typename AccOf<T>::type* __restrict__ coef, unsigned total_packs, unsigned inner,
         unsigned channels, unsigned act, typename AccOf<T>::type param) {
  const Pack<T, VEC>* in = reinterpret_cast<const Pack<T, VEC>*>(x);
  Pack<T, VEC>* out = reinterpret_cast<Pack<T, VEC>*>(y);
  #pragma unroll 4
  for (unsigned j = blockIdx.x * BN_BLOCK + threadIdx.x; j < total_packs;
       j += gridDim.x * BN_BLOCK) {
    const Pack<T, VEC> p = in[j];
    Pack<T, VEC> q;
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      const unsigned c = pack_channel(j * VEC, inner, channels, v);
      q.v[v] = from_acc<T>(bn_activate(
          bn_fma(coef[c], to_acc(p.v[v]) - coef[2 * channels + c], coef[channels + c]), act,
          param));
    }
    out[j] = q;
  }
}

// ------------------------------------------------------------------ backward

// Planar layout, grid = (C, S) as bn_stats_planar: partial sum(d) and sum(d*e) of bwd_pair,
// i.e. sum(g) and sum(g*(x - mean)) for batch norm. chan = [shift] (act BN_ACT_NONE: the mean)
// or [shift; scale] (an activation: x is the output z).
template <typename T, int VEC>
__global__ void __launch_bounds__(BN_BLOCK)
bn_bwd_reduce_planar(const T* __restrict__ g, const T* __restrict__ x,
                     const typename AccOf<T>::type* __restrict__ chan, unsigned act,
                     typename AccOf<T>::type param, unsigned channels, unsigned inner_packs,
                     unsigned channel_packs, unsigned chunk,
                     typename AccOf<T>::type* __restrict__ partials) {
  typedef typename AccOf<T>::type Acc;
  const Pack<T, VEC>* gp = reinterpret_cast<const Pack<T, VEC>*>(g);
  const Pack<T, VEC>* xp = reinterpret_cast<const Pack<T, VEC>*>(x);
  const unsigned c = blockIdx.x, split = blockIdx.y;
  const unsigned begin = split * chunk, end = bn_min(begin + chunk, channel_packs);
  const Acc m = chan[c], scale = act == BN_ACT_NONE ? Acc(1) : chan[channels + c];
  Acc sum_g = Acc(0), sum_gx = Acc(0);
  #pragma unroll 4
  for (unsigned j = begin + threadIdx.x; j < end; j += BN_BLOCK) {
    const unsigned row = j / inner_packs, col = j - row * inner_packs;
    const bn_offset at = ((bn_offset)row * channels + c) * inner_packs + col;
    const Pack<T, VEC> pg = gp[at], px = xp[at];
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      Acc d, e;
      bwd_pair(act, param, to_acc(pg.v[v]), to_acc(px.v[v]), m, scale, d, e);
      sum_g += d;
      sum_gx = bn_fma(d, e, sum_gx);
    }
  }
  block_sum2(sum_g, sum_gx);
  if (threadIdx.x == 0) {
    const unsigned at = split * channels + c, plane = gridDim.y * channels;
    partials[at] = sum_g;
    partials[plane + at] = sum_gx;
  }
}

// Rows layout, block and grid as bn_stats_rows; chan, act and param as above.
template <typename T, int VEC>
__global__ void __launch_bounds__(BN_BLOCK)
bn_bwd_reduce_rows(const T* __restrict__ g, const T* __restrict__ x,
                   const typename AccOf<T>::type* __restrict__ chan, unsigned act,
                   typename AccOf<T>::type param, unsigned channels, unsigned rows,
                   unsigned lanes_c, unsigned chunk,
                   typename AccOf<T>::type* __restrict__ partials) {
  typedef typename AccOf<T>::type Acc;
  __shared__ Acc shared_g[BN_WARPS][BN_WARP_SIZE * VEC];
  __shared__ Acc shared_gx[BN_WARPS][BN_WARP_SIZE * VEC];
  const Pack<T, VEC>* gp = reinterpret_cast<const Pack<T, VEC>*>(g);
  const Pack<T, VEC>* xp = reinterpret_cast<const Pack<T, VEC>*>(x);
  const unsigned row_packs = channels / VEC, row_step = BN_BLOCK / lanes_c;
  const unsigned tx = threadIdx.x % lanes_c, ty = threadIdx.x / lanes_c;
  const unsigned pack = blockIdx.x * lanes_c + tx;
  const unsigned begin = blockIdx.y * chunk, end = bn_min(begin + chunk, rows);

  Acc sum_g[VEC], sum_gx[VEC], m[VEC], scale[VEC];
#pragma unroll
  for (int v = 0; v < VEC; ++v) sum_g[v] = sum_gx[v] = m[v] = scale[v] = Acc(0);
  if (pack < row_packs) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      m[v] = chan[pack * VEC + v];
      scale[v] = act == BN_ACT_NONE ? Acc(1) : chan[channels + pack * VEC + v];
    }
    #pragma unroll 4
    for (unsigned r = begin + ty; r < end; r += row_step) {
      const bn_offset at = (bn_offset)r * row_packs + pack;
      const Pack<T, VEC> pg = gp[at], px = xp[at];
#pragma unroll
      for (int v = 0; v < VEC; ++v) {
        Acc d, e;
        bwd_pair(act, param, to_acc(pg.v[v]), to_acc(px.v[v]), m[v], scale[v], d, e);
        sum_g[v] += d;
        sum_gx[v] = bn_fma(d, e, sum_gx[v]);
      }
    }
  }
  // Butterfly over the rows that share a warp: every lane ends with its warp's sums.
  for (unsigned mask = BN_WARP_SIZE / 2; mask >= lanes_c; mask /= 2) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      sum_g[v] += __shfl_xor_sync(BN_FULL_MASK, sum_g[v], mask);
      sum_gx[v] += __shfl_xor_sync(BN_FULL_MASK, sum_gx[v], mask);
    }
  }
  const unsigned lane = threadIdx.x % BN_WARP_SIZE, warp = threadIdx.x / BN_WARP_SIZE;
  if (lane < lanes_c) {
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      shared_g[warp][lane * VEC + v] = sum_g[v];
      shared_gx[warp][lane * VEC + v] = sum_gx[v];
    }
  }
  __syncthreads();
  for (unsigned t = threadIdx.x; t < lanes_c * VEC; t += BN_BLOCK) {
    const unsigned c = blockIdx.x * lanes_c * VEC + t;
    Acc total_g = Acc(0), total_gx = Acc(0);
    for (unsigned k = 0; k < BN_WARPS; ++k) {
      total_g += shared_g[k][t];
      total_gx += shared_gx[k][t];
    }
    if (c < channels) {
      const unsigned at = blockIdx.y * channels + c, plane = gridDim.y * channels;
      partials[at] = total_g;
      partials[plane + at] = total_gx;
    }
  }
}

// One thread per channel: sum the S partials in order; write dgamma / dbeta only where the
// pointer is given, and the dx coefficients coef = [k1; k2; k3] only when coef is given.
template <typename Acc>
__global__ void __launch_bounds__(BN_BLOCK)
bn_bwd_finalize(const Acc* __restrict__ partials, unsigned splits, unsigned channels, Acc count,
                const Acc* __restrict__ rstd, const Acc* __restrict__ gamma,
                Acc* __restrict__ dgamma, Acc* __restrict__ dbeta, Acc* __restrict__ coef) {
  const unsigned c = blockIdx.x * BN_BLOCK + threadIdx.x;
  if (c >= channels) return;
  const unsigned plane = splits * channels;
  Acc sum_g = Acc(0), sum_gx = Acc(0);
  for (unsigned s = 0; s < splits; ++s) {
    sum_g += partials[s * channels + c];
    sum_gx += partials[plane + s * channels + c];
  }
  const Acc r = rstd[c], sum_gxhat = sum_gx * r;
  if (dgamma) dgamma[c] = sum_gxhat;
  if (dbeta) dbeta[c] = sum_g;
  if (coef) {
    const Acc k1 = gamma ? gamma[c] * r : r;
    coef[c] = k1;
    coef[channels + c] = -k1 * r * sum_gxhat / count;
    coef[2 * channels + c] = -k1 * sum_g / count;
  }
}

// dx = k1*d + k2*e + k3 per channel with (d, e) of bwd_pair, i.e. k1*g + k2*(x - mean) + k3
// for batch norm; coef = [k1; k2; k3], chan, act and param as in the reductions; grid-stride
// like bn_apply.
template <typename T, int VEC>
__global__ void __launch_bounds__(BN_BLOCK)
bn_bwd_dx(const T* __restrict__ g, const T* __restrict__ x, T* __restrict__ dx,
          const typename AccOf<T>::type* __restrict__ coef,
          const typename AccOf<T>::type* __restrict__ chan, unsigned act,
          typename AccOf<T>::type param, unsigned total_packs, unsigned inner,
          unsigned channels) {
  typedef typename AccOf<T>::type Acc;
  const Pack<T, VEC>* gp = reinterpret_cast<const Pack<T, VEC>*>(g);
  const Pack<T, VEC>* xp = reinterpret_cast<const Pack<T, VEC>*>(x);
  Pack<T, VEC>* out = reinterpret_cast<Pack<T, VEC>*>(dx);
  #pragma unroll 4
  for (unsigned j = blockIdx.x * BN_BLOCK + threadIdx.x; j < total_packs;
       j += gridDim.x * BN_BLOCK) {
    const Pack<T, VEC> pg = gp[j], px = xp[j];
    Pack<T, VEC> q;
#pragma unroll
    for (int v = 0; v < VEC; ++v) {
      const unsigned c = pack_channel(j * VEC, inner, channels, v);
      Acc d, e;
      bwd_pair(act, param, to_acc(pg.v[v]), to_acc(px.v[v]), chan[c],
               act == BN_ACT_NONE ? Acc(1) : chan[channels + c], d, e);
      q.v[v] = from_acc<T>(bn_fma(coef[c], d, bn_fma(coef[channels + c], e,
                                                     coef[2 * channels + c])));
    }
    out[j] = q;
  }
}
