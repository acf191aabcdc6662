// OpenCL prelude: MSL's names for C++ for OpenCL 2021 (-cl-std=CLC++2021).
// `constant` is already OpenCL's name for the constant address space.
#define device __global
#define threadgroup __local
#define thread __private

enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };

inline void threadgroup_barrier(mem_flags flags) {
  barrier(flags == mem_flags::mem_device ? CLK_GLOBAL_MEM_FENCE : CLK_LOCAL_MEM_FENCE);
}
