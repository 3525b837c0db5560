// The kernel sources built for the host: `ocelli_host_launch` runs a kernel, by name, over a
// grid of loops (host.h). Only the parity tests link this.
#include <cstring>

#include "host.h"
#include "dot.cu"
#include "compare.cu"

#define OCELLI_KERNELS(X) \
    X(combine)            \
    X(chacha12)           \
    X(add_u16)            \
    X(cross_term)         \
    X(x_part)             \
    X(to_planes)          \
    X(and_gate)           \
    X(xor_words)          \
    X(and_words)          \
    X(copy_words)         \
    X(gather_bits)

// Returns 0, or -1 for an unknown kernel name.
extern "C" int ocelli_host_launch(const char* name, unsigned int grid_x, unsigned int grid_y,
                                  unsigned int block_x, void** params)
{
    dim3 grid = {grid_x, grid_y, 1};
    dim3 block = {block_x, 1, 1};
#define RUN_IF_NAMED(k)                               \
    if (std::strcmp(name, #k) == 0) {                 \
        launch_on_host(k, grid, block, params);       \
        return 0;                                     \
    }
    OCELLI_KERNELS(RUN_IF_NAMED)
#undef RUN_IF_NAMED
    return -1;
}
