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

// __syncwarp orders memory among the warp's threads, as simdgroup_barrier the
// SIMD group's.
METAL_FUNC void simdgroup_barrier(mem_flags) { __syncwarp(); }

// MSL's frexp returns the exponent through a reference, C's through a pointer.
template <typename R>
METAL_FUNC R frexp(R x, thread int& exponent) {
  return frexp(x, &exponent);
}

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

// simd_max and simd_min over the whole warp. For float and int they are one REDUX
// (sm_80 and later): floats go through the integer order that matches theirs
// (NaN excepted, which MSL leaves unspecified too); other types, and older GPUs,
// take a butterfly of shuffles.
template <typename T>
METAL_FUNC T simd_max(T x) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, x, offset);
    x = other > x ? other : x;
  }
  return x;
}

template <typename T>
METAL_FUNC T simd_min(T x) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const T other = __shfl_xor_sync(0xffffffffu, x, offset);
    x = other < x ? other : x;
  }
  return x;
}

#if __CUDA_ARCH__ >= 800
METAL_FUNC int simd_max(int x) { return __reduce_max_sync(0xffffffffu, x); }
METAL_FUNC int simd_min(int x) { return __reduce_min_sync(0xffffffffu, x); }

// The float's bits as an int whose order is the float's: negative floats' bits
// count down, so all but the sign bit flip.
METAL_FUNC int ordered_bits(float x) {
  const int bits = __float_as_int(x);
  return bits ^ ((bits >> 31) & 0x7fffffff);
}

METAL_FUNC float from_ordered_bits(int bits) { return __int_as_float(bits ^ ((bits >> 31) & 0x7fffffff)); }

METAL_FUNC float simd_max(float x) { return from_ordered_bits(__reduce_max_sync(0xffffffffu, ordered_bits(x))); }
METAL_FUNC float simd_min(float x) { return from_ordered_bits(__reduce_min_sync(0xffffffffu, ordered_bits(x))); }
#endif
