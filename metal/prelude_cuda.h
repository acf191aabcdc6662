// CUDA prelude: MSL's names for NVRTC. The program is compiled with
// -default-device, so functions without an execution-space annotation are
// device functions, as every function in an MSL source is (and `device`, a
// macro here, would break an explicit __device__).
#define device
#define threadgroup
#define constant
#define thread

typedef unsigned int uint;

// Inlined, so that arrays passed by reference stay in registers.
#define METAL_FUNC __forceinline__

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };

// __syncthreads orders both shared and global memory within the block.
METAL_FUNC void threadgroup_barrier(mem_flags) { __syncthreads(); }

typedef unsigned short ushort;

// SIMD-group shuffles over the whole warp, as MSL's: every lane takes part (the
// kernels call them in control flow that is uniform across the SIMD group).
template <typename T>
METAL_FUNC T simd_shuffle(T x, ushort lane) {
  return __shfl_sync(0xffffffffu, x, lane);
}

template <typename T>
METAL_FUNC T simd_shuffle_xor(T x, ushort mask) {
  return __shfl_xor_sync(0xffffffffu, x, mask);
}
