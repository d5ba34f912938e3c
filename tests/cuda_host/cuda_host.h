// cuda_host.h: just enough CUDA, on host threads, to run minigrad's .cu kernels with g++.
//
// Compile the unmodified .cu as C++20 with this header force-included (or included first) and
// tests/cuda_host/include on the include path (empty cuda_fp16.h / cuda_bf16.h stand-ins).
//
// The model:
//   * A launch runs the grid's blocks one after another. Each block is run by a team of host
//     threads, one std::thread per CUDA thread, which the launch creates once and reuses.
//   * threadIdx / blockIdx / blockDim / gridDim are thread_local.
//   * __shared__ is `static`: one copy per kernel (or device function) instance. Since blocks
//     run one at a time and a team barrier separates them, that copy is exactly the block's
//     shared memory.
//   * __syncthreads() is a std::barrier over the block's threads.
//   * __shfl_down_sync / __shfl_xor_sync go through a per-warp exchange buffer: every lane
//     writes its value, a per-warp std::barrier, every lane reads its source lane, a second
//     barrier (so the next exchange cannot overwrite a value still being read).
//   * A thread that returns from the kernel leaves both barriers (arrive_and_drop), as an exited
//     GPU thread no longer holds up bar.sync. A shuffle that reads an exited lane, or a lane
//     outside `mask`, is reported as an error; so is a launch that deadlocks (a barrier some
//     threads never reach), found by a watchdog.
// Because every barrier is a real synchronisation, ThreadSanitizer sees exactly the
// happens-before edges the kernel's barriers give: a missing __syncthreads is a data race.
// __half and __nv_bfloat16 are 16-bit storage types with round-to-nearest-even conversions.
#pragma once

#include <math.h>

#include <atomic>
#include <barrier>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ---------------------------------------------------------------- qualifiers and built-ins

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

// ---------------------------------------------------------------- 16-bit floating types

struct __half {
  std::uint16_t bits;
};

struct __nv_bfloat16 {
  std::uint16_t bits;
};

inline float __half2float(__half h) {
  return static_cast<float>(std::bit_cast<_Float16>(h.bits));
}

inline __half __float2half_rn(float v) {
  return __half{std::bit_cast<std::uint16_t>(static_cast<_Float16>(v))};
}

inline float __bfloat162float(__nv_bfloat16 b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b.bits) << 16);
}

inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it a (quiet) NaN
    return __nv_bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return __nv_bfloat16{static_cast<std::uint16_t>(u >> 16)};
}

// ---------------------------------------------------------------- the emulation

namespace cuda_host {

constexpr unsigned kWarp = 32;

enum Status : int { kOk = 0, kBadLaunch = 2, kBadShuffle = 3, kDeadlock = 4 };

struct Warp {
  explicit Warp(std::ptrdiff_t lanes) : size(static_cast<unsigned>(lanes)), barrier(lanes) {}
  unsigned size;
  std::barrier<> barrier;
  std::uint64_t slot[kWarp] = {};
  std::atomic<bool> exited[kWarp] = {};
};

struct Block {
  explicit Block(unsigned threads) : barrier(threads) {
    for (unsigned first = 0; first < threads; first += kWarp) {
      warps.push_back(std::make_unique<Warp>(std::min(kWarp, threads - first)));
    }
  }
  std::barrier<> barrier;
  std::vector<std::unique_ptr<Warp>> warps;
};

// One launch: the team of threads, the current block, the first error.
struct Team {
  Team(dim3 grid_, dim3 block_, std::function<void()> body_)
      : grid(grid_), block(block_), threads(block_.x * block_.y * block_.z),
        body(std::move(body_)), between_blocks(threads) {}

  void fail(Status code, const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex);
    if (status == kOk) {
      status = code;
      error = message;
    }
  }

  dim3 grid, block;
  unsigned threads;
  std::function<void()> body;
  std::barrier<> between_blocks;
  std::optional<Block> current;
  std::mutex mutex;
  std::condition_variable done;
  unsigned finished = 0;
  Status status = kOk;
  std::string error;
};

inline thread_local Team* tl_team = nullptr;
inline thread_local unsigned tl_thread = 0;  // linear thread index in the block

inline uint3 unflatten(unsigned i, dim3 d) {
  return uint3{i % d.x, (i / d.x) % d.y, i / (d.x * d.y)};
}

// The body of team member `t`: every block of the grid in turn.
inline void member(std::shared_ptr<Team> team, unsigned t) {
  tl_team = team.get();
  tl_thread = t;
  blockDim = team->block;
  gridDim = team->grid;
  threadIdx = unflatten(t, team->block);
  const unsigned blocks = team->grid.x * team->grid.y * team->grid.z;
  for (unsigned b = 0; b < blocks; ++b) {
    if (t == 0) team->current.emplace(team->threads);  // fresh barriers for this block
    team->between_blocks.arrive_and_wait();
    blockIdx = unflatten(b, team->grid);
    team->body();
    // The thread has left the kernel: it no longer takes part in its block's barriers.
    Warp& warp = *team->current->warps[t / kWarp];
    warp.exited[t % kWarp].store(true);
    warp.barrier.arrive_and_drop();
    team->current->barrier.arrive_and_drop();
    team->between_blocks.arrive_and_wait();
  }
  std::lock_guard<std::mutex> lock(team->mutex);
  ++team->finished;
  team->done.notify_all();
}

inline double watchdog_seconds() {
  const char* text = std::getenv("CUDA_HOST_TIMEOUT");
  return text ? std::atof(text) : 120.0;
}

// Run `body` as a kernel over `grid` x `block`; returns a Status and fills `message`.
inline int run(dim3 grid, dim3 block, std::function<void()> body, std::string* message) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x * grid.y * grid.z == 0) {
    *message = "invalid launch: grid (" + std::to_string(grid.x) + ", " +
               std::to_string(grid.y) + ", " + std::to_string(grid.z) + "), block of " +
               std::to_string(threads) + " threads";
    return kBadLaunch;
  }
  auto team = std::make_shared<Team>(grid, block, std::move(body));
  std::vector<std::thread> members;
  members.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) members.emplace_back(member, team, t);
  bool finished;
  {
    std::unique_lock<std::mutex> lock(team->mutex);
    finished = team->done.wait_for(lock, std::chrono::duration<double>(watchdog_seconds()),
                                   [&] { return team->finished == threads; });
  }
  if (!finished) {
    // Threads stuck at a barrier cannot be woken: leave them (the team is kept alive by them).
    for (auto& m : members) m.detach();
    *message = "deadlock: some threads wait at a barrier (__syncthreads or __shfl_*_sync) that "
               "others never reach";
    return kDeadlock;
  }
  for (auto& m : members) m.join();
  *message = team->error;
  return team->status;
}

// Kernel parameters arrive as cudaLaunchKernel's do: an array of pointers to the values.
template <typename... P, std::size_t... I>
std::tuple<std::decay_t<P>...> read_args(void** args, std::index_sequence<I...>) {
  return std::tuple<std::decay_t<P>...>(*static_cast<std::decay_t<P>*>(args[I])...);
}

template <typename... P>
int launch(void (*kernel)(P...), dim3 grid, dim3 block, void** args, std::string* message) {
  auto values = read_args<P...>(args, std::index_sequence_for<P...>{});
  return run(grid, block, [kernel, values] { std::apply(kernel, values); }, message);
}

// One warp-wide exchange: lane reads `source(lane)`'s value.
template <typename T, typename Source>
T exchange(unsigned mask, T value, Source source) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t) && std::is_trivially_copyable_v<T>);
  Team& team = *tl_team;
  Warp& warp = *team.current->warps[tl_thread / kWarp];
  const unsigned lane = tl_thread % kWarp;
  if (!((mask >> lane) & 1u)) {
    team.fail(kBadShuffle, "lane " + std::to_string(lane) + " shuffles with a mask that leaves "
                           "it out");
  }
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  warp.slot[lane] = bits;
  warp.barrier.arrive_and_wait();
  const unsigned from = source(lane);
  T out = value;
  if (from >= warp.size || warp.exited[from].load() || !((mask >> from) & 1u)) {
    team.fail(kBadShuffle, "lane " + std::to_string(lane) + " of block thread " +
                           std::to_string(tl_thread) + " reads lane " + std::to_string(from) +
                           ", which has exited, does not exist or is outside the mask");
  } else {
    std::memcpy(&out, &warp.slot[from], sizeof(T));
  }
  warp.barrier.arrive_and_wait();
  return out;
}

}  // namespace cuda_host

inline void __syncthreads() { cuda_host::tl_team->current->barrier.arrive_and_wait(); }

// Source lanes outside the caller's segment of `width` lanes give the caller's own value.
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  const unsigned w = static_cast<unsigned>(width);
  return cuda_host::exchange(mask, var, [&](unsigned lane) {
    const unsigned end = (lane / w + 1) * w;
    return lane + delta < end ? lane + delta : lane;
  });
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  const unsigned w = static_cast<unsigned>(width);
  return cuda_host::exchange(mask, var, [&](unsigned lane) {
    const unsigned other = lane ^ static_cast<unsigned>(lane_mask);
    return other / w == lane / w ? other : lane;
  });
}
