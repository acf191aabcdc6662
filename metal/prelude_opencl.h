// OpenCL prelude: MSL's names for C++ for OpenCL 2021 (-cl-std=CLC++2021).
// `constant` is already OpenCL's name for the constant address space.
#define device __global
#define threadgroup __local
#define thread __private

// Inlined, so that arrays passed by reference stay in registers.
#define METAL_FUNC inline __attribute__((always_inline))

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };

METAL_FUNC void threadgroup_barrier(mem_flags flags) {
  barrier(flags == mem_flags::mem_device ? CLK_GLOBAL_MEM_FENCE : CLK_LOCAL_MEM_FENCE);
}

METAL_FUNC void simdgroup_barrier(mem_flags flags) {
  sub_group_barrier(flags == mem_flags::mem_device ? CLK_GLOBAL_MEM_FENCE : CLK_LOCAL_MEM_FENCE);
}

// MSL's frexp returns the exponent through a reference, C's through a pointer.
template <typename R>
METAL_FUNC R frexp(R x, thread int& exponent) {
  return frexp(x, &exponent);
}

// SIMD-group shuffles: a SIMD group is a sub-group of 32 (every entry point
// requires that size).
template <typename T>
METAL_FUNC T simd_shuffle(T x, ushort lane) {
  return sub_group_shuffle(x, (uint)lane);
}

template <typename T>
METAL_FUNC T simd_shuffle_xor(T x, ushort mask) {
  return sub_group_shuffle_xor(x, (uint)mask);
}

template <typename T>
METAL_FUNC T simd_max(T x) {
  return sub_group_reduce_max(x);
}

template <typename T>
METAL_FUNC T simd_min(T x) {
  return sub_group_reduce_min(x);
}
