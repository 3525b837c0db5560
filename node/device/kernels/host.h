// The CUDA grid mapped onto loops, so the kernel sources compile as host C++ and the parity
// tests run exactly the code the GPU runs. Kernels written against it keep to what loops can
// emulate: no shared memory, no barriers, no warp intrinsics; each thread's work depends only
// on its indices and its arguments.
#pragma once
#include <cstddef>
#include <utility>

struct dim3 {
    unsigned int x, y, z;
};

// One launch runs on one host thread, so each test thread has its own grid position.
static thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

#define KERNEL static void
#define DEVICE static inline
#define __restrict__ __restrict
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

// Calls kernel `k` once per thread of the grid, with its arguments read from `params` as
// cuLaunchKernel reads them: params[i] points at the value of argument i.
template <typename... A, std::size_t... I>
static void call_with(void (*k)(A...), void** params, std::index_sequence<I...>)
{
    k(*static_cast<A*>(params[I])...);
}

template <typename... A>
static void launch_on_host(void (*k)(A...), dim3 grid, dim3 block, void** params)
{
    gridDim = grid;
    blockDim = block;
    for (blockIdx.z = 0; blockIdx.z < grid.z; ++blockIdx.z)
        for (blockIdx.y = 0; blockIdx.y < grid.y; ++blockIdx.y)
            for (blockIdx.x = 0; blockIdx.x < grid.x; ++blockIdx.x)
                for (threadIdx.z = 0; threadIdx.z < block.z; ++threadIdx.z)
                    for (threadIdx.y = 0; threadIdx.y < block.y; ++threadIdx.y)
                        for (threadIdx.x = 0; threadIdx.x < block.x; ++threadIdx.x)
                            call_with(k, params, std::index_sequence_for<A...>{});
}
