// Prelude of the kernel sources when NVRTC compiles them for the GPU. host.h is the same
// prelude for the host C++ build that runs the kernels' exact source in the parity tests.
#define KERNEL extern "C" __global__ void
#define DEVICE __device__ __forceinline__
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
