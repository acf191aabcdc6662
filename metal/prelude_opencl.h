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

// MSL's ldexp. Intel's CPU runtime 2026.2 turns ldexp, vectorized across the 32
// lanes, into a call its library lacks (the build fails: "Symbols not found:
// _Z5ldexpDv32_fDv32_iS_"), so here x 2^k is formed by products with normal powers
// of two, built from their bits: exact, and rounded once (at the last product) where
// the result is subnormal, as ldexp rounds. At most two steps bring k into the normal
// exponents' range for any finite x; a step down stops DIGITS above the smallest normal
// exponent, so that only the last product can leave the normal range.
template <typename R>
struct exponent_range;

template <>
struct exponent_range<float> {
  enum : int { MAX = 127, MIN = -126, DIGITS = 24 };
};

template <>
struct exponent_range<double> {
  enum : int { MAX = 1023, MIN = -1022, DIGITS = 53 };
};

METAL_FUNC float power_of_two(float, int k) { return as_float((k + 127) << 23); }
METAL_FUNC double power_of_two(double, int k) { return as_double((long)(k + 1023) << 52); }

template <typename R>
METAL_FUNC R ldexp_by_products(R x, int k) {
  typedef exponent_range<R> E;
  const int down = E::MIN + E::DIGITS;  // a step down: to DIGITS above the smallest normal
  for (int step = 0; step < 2; ++step) {
    if (k > E::MAX) {
      x *= power_of_two(x, E::MAX);
      k -= E::MAX;
    } else if (k < E::MIN) {
      x *= power_of_two(x, down);
      k -= down;
    }
  }
  return x * power_of_two(x, k < E::MIN ? E::MIN : k > E::MAX ? E::MAX : k);
}
#define ldexp ldexp_by_products

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
