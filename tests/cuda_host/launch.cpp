// The host-emulation library: a .cu compiled by g++ with cuda_host.h, and one C entry point that
// launches a kernel instance by its name expression ("bn_apply<float, 4>").
//
// build.py compiles this file with -include cuda_host.h, -I include (stand-in CUDA headers) and
// -I <build dir>, which holds two generated files: sources.inc includes the unmodified .cu and,
// each in a namespace of its own, any altered copies a test wants in the same library;
// kernels.inc has one line BN_KERNEL("name", name) per template instance to register
// ("bn_apply<float, 4>", "altered::bn_apply<float, 4>").
#include <cstddef>
#include <cstring>
#include <string>

#include "sources.inc"

namespace {

using Launcher = int (*)(dim3, dim3, void**, std::string*);

struct Entry {
  const char* name;
  Launcher launch;
};

#define BN_KERNEL(NAME, ...)                                                  \
  Entry{NAME, [](dim3 grid, dim3 block, void** args, std::string* message) { \
          return cuda_host::launch(&__VA_ARGS__, grid, block, args, message); \
        }},

const Entry kEntries[] = {
#include "kernels.inc"
};

}  // namespace

// Launch kernel `name` with grid (gx, gy, gz) and block (bx, by, bz); `args` points at the
// argument values in order. Returns 0, 1 for an unknown name, or a cuda_host::Status, with the
// reason copied into `message`.
extern "C" int cuda_host_launch(const char* name, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, void** args,
                                char* message, std::size_t capacity) {
  std::string error = std::string("no kernel instance named ") + name;
  int status = 1;
  for (const Entry& entry : kEntries) {
    if (std::strcmp(entry.name, name) == 0) {
      status = entry.launch(dim3(gx, gy, gz), dim3(bx, by, bz), args, &error);
      break;
    }
  }
  if (capacity > 0) {
    std::strncpy(message, error.c_str(), capacity - 1);
    message[capacity - 1] = '\0';
  }
  return status;
}

// The block size the kernels were compiled for (BN_BLOCK).
extern "C" int cuda_host_block_size() { return BN_BLOCK; }
