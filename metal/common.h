// Scalar types and helpers shared by every kernel family.
//
// Written in the C++14 subset of the Metal Shading Language. The CUDA and
// OpenCL preludes (prelude_cuda.h, prelude_opencl.h) give MSL's names a meaning
// there, so this file compiles unchanged on all three runtimes. See README.md.
#pragma once

// A complex number as one small aggregate: no constructors (OpenCL C++ rejects
// MSL's vector constructors, and an aggregate copies between address spaces
// without address-space-qualified constructors), free-function operators that
// take and return values.
template <typename R>
struct complex_t {
  R re;
  R im;
};

template <typename R>
METAL_FUNC complex_t<R> operator+(complex_t<R> a, complex_t<R> b) {
  return {a.re + b.re, a.im + b.im};
}

template <typename R>
METAL_FUNC complex_t<R> operator-(complex_t<R> a, complex_t<R> b) {
  return {a.re - b.re, a.im - b.im};
}

template <typename R>
METAL_FUNC complex_t<R> operator-(complex_t<R> a) {
  return {-a.re, -a.im};
}

template <typename R>
METAL_FUNC complex_t<R> operator*(complex_t<R> a, complex_t<R> b) {
  return {fma(a.re, b.re, -a.im * b.im), fma(a.re, b.im, a.im * b.re)};
}

template <typename R>
METAL_FUNC complex_t<R> operator*(R a, complex_t<R> b) {
  return {a * b.re, a * b.im};
}

// c - a * b in fused multiply-adds (four for complex, not six operations): the
// inner update of the factorizations.
template <typename R>
METAL_FUNC R multiply_subtract(R c, R a, R b) {
  return fma(-a, b, c);
}

template <typename R>
METAL_FUNC complex_t<R> multiply_subtract(complex_t<R> c, complex_t<R> a, complex_t<R> b) {
  return {fma(-a.re, b.re, fma(a.im, b.im, c.re)), fma(-a.re, b.im, fma(-a.im, b.re, c.im))};
}

// Smith's algorithm: no overflow or underflow of |b|^2 for |b| near the range
// limits. Division by an exact zero gives NaN + NaN i, as torch's complex
// division does, so singular solves leave torch's pattern.
template <typename R>
METAL_FUNC complex_t<R> operator/(complex_t<R> a, complex_t<R> b) {
  if (fabs(b.re) >= fabs(b.im)) {
    if (b.re == R(0)) {
      const R nan = R(0) / R(0);
      return {nan, nan};
    }
    const R r = b.im / b.re;
    const R d = fma(b.im, r, b.re);
    return {fma(a.im, r, a.re) / d, fma(-a.re, r, a.im) / d};
  }
  const R r = b.re / b.im;
  const R d = fma(b.re, r, b.im);
  return {fma(a.re, r, a.im) / d, fma(a.im, r, -a.re) / d};
}

// 1 / z by Smith's algorithm in two divisions (the quotient above takes three).
template <typename R>
METAL_FUNC R reciprocal(R x) {
  return R(1) / x;
}

template <typename R>
METAL_FUNC complex_t<R> reciprocal(complex_t<R> z) {
  if (fabs(z.re) >= fabs(z.im)) {
    if (z.re == R(0)) {
      const R nan = R(0) / R(0);
      return {nan, nan};
    }
    const R r = z.im / z.re;
    const R s = R(1) / fma(z.im, r, z.re);
    return {s, -r * s};
  }
  const R r = z.re / z.im;
  const R s = R(1) / fma(z.re, r, z.im);
  return {r * s, -s};
}

template <typename R>
METAL_FUNC bool operator==(complex_t<R> a, complex_t<R> b) {
  return a.re == b.re && a.im == b.im;
}

// What kernels need to know about a scalar type T (real R or complex_t<R>).
template <typename T>
struct scalar_traits {
  typedef T real;
  METAL_FUNC static T from_real(T x) { return x; }
};

template <typename R>
struct scalar_traits<complex_t<R>> {
  typedef R real;
  METAL_FUNC static complex_t<R> from_real(R x) { return {x, R(0)}; }
};

template <typename R>
METAL_FUNC R conj(R x) {
  return x;
}

template <typename R>
METAL_FUNC complex_t<R> conj(complex_t<R> z) {
  return {z.re, -z.im};
}

// The real part (a Hermitian matrix's diagonal is read as its real part).
template <typename R>
METAL_FUNC R real_part(R x) {
  return x;
}

template <typename R>
METAL_FUNC R real_part(complex_t<R> z) {
  return z.re;
}

// A complex value moves between lanes as its two parts.
template <typename R>
METAL_FUNC complex_t<R> simd_shuffle(complex_t<R> z, ushort lane) {
  return {simd_shuffle(z.re, lane), simd_shuffle(z.im, lane)};
}

// The sum and the maximum over aligned runs of LANES <= 32 lanes of a SIMD
// group, by a butterfly of shuffles: every lane of a run ends with the same
// value (each level adds the same two operands, in either order).
template <int LANES, typename R>
METAL_FUNC R lanes_sum(R x) {
  for (int offset = LANES / 2; offset > 0; offset /= 2) {
    x += simd_shuffle_xor(x, ushort(offset));
  }
  return x;
}

template <int LANES, typename R>
METAL_FUNC R lanes_max(R x) {
  for (int offset = LANES / 2; offset > 0; offset /= 2) {
    x = fmax(x, simd_shuffle_xor(x, ushort(offset)));
  }
  return x;
}

// x[b + jj] of a thread's array in registers, for a block start b that is static
// and jj that is not (an index unknown at compile time would put x in memory).
template <typename T, int N, int RB>
METAL_FUNC T element_of(thread const T (&x)[N], int b, int jj) {
  T value = x[b];
  #pragma unroll
  for (int kk = 1; kk < RB; ++kk) {
    if (kk == jj && b + kk < N) {
      value = x[b + kk];
    }
  }
  return value;
}

template <typename T, int N, int RB>
METAL_FUNC void set_element(thread T (&x)[N], int b, int jj, T value) {
  #pragma unroll
  for (int kk = 0; kk < RB; ++kk) {
    if (kk == jj && b + kk < N) {
      x[b + kk] = value;
    }
  }
}

// An element read from or written to device memory. A complex value moves as its
// two parts: the Metal check's clang (tests/metal_check.py) has no copy of a
// struct between address spaces.
template <typename T>
METAL_FUNC T load(const device T* p) {
  return *p;
}

template <typename R>
METAL_FUNC complex_t<R> load(const device complex_t<R>* p) {
  return {p->re, p->im};
}

template <typename T>
METAL_FUNC void store(device T* p, T value) {
  *p = value;
}

template <typename R>
METAL_FUNC void store(device complex_t<R>* p, complex_t<R> value) {
  p->re = value.re;
  p->im = value.im;
}

// |re| + |im|: the magnitude LAPACK's isamax/icamax compare when pivoting.
template <typename R>
METAL_FUNC R abs1(R x) {
  return fabs(x);
}

template <typename R>
METAL_FUNC R abs1(complex_t<R> z) {
  return fabs(z.re) + fabs(z.im);
}

// The largest |part| of x, for scaling: within a factor sqrt(2) of |x|.
template <typename R>
METAL_FUNC R largest_part(R x) {
  return fabs(x);
}

template <typename R>
METAL_FUNC R largest_part(complex_t<R> z) {
  return fmax(fabs(z.re), fabs(z.im));
}

// x 2^k, exactly where the result is normal.
template <typename R>
METAL_FUNC R scaled(R x, int k) {
  return ldexp(x, k);
}

template <typename R>
METAL_FUNC complex_t<R> scaled(complex_t<R> z, int k) {
  return {ldexp(z.re, k), ldexp(z.im, k)};
}

// |x| (|z| for complex z, by hypot's scaling).
template <typename R>
METAL_FUNC R magnitude(R x) {
  return fabs(x);
}

// |z| without squaring: the inner product of two columns near 1e-13 would
// underflow as |re|^2 + |im|^2 in float32.
template <typename R>
METAL_FUNC R magnitude(complex_t<R> z) {
  if (z.re == R(0) && z.im == R(0)) {
    return R(0);
  }
  // fmax ignores a NaN part; the quotients below then carry it.
  const R big = fmax(fabs(z.re), fabs(z.im));
  const R re = z.re / big;
  const R im = z.im / big;
  return big * sqrt(fma(re, re, im * im));
}

// The unit-modulus factor of z != 0 (its sign for real z).
template <typename R>
METAL_FUNC R phase(R x, R abs_x) {
  return x / abs_x;
}

template <typename R>
METAL_FUNC complex_t<R> phase(complex_t<R> z, R abs_z) {
  return {z.re / abs_z, z.im / abs_z};
}

// 1 / x without overflow: for |x| below the smallest normal float (LAPACK's
// sfmin) the reciprocal would overflow, so callers divide instead.
template <typename T>
METAL_FUNC bool has_safe_reciprocal(T x) {
  typedef typename scalar_traits<T>::real R;
  return !(abs1(x) < R(1.17549435e-38f));
}

// Where the calling thread is; filled in by each runtime's generated entry point.
struct thread_position {
  uint group_index;   // threadgroup index in the (1-D) grid
  uint thread_index;  // thread index in its threadgroup
  uint group_size;    // threads per threadgroup
  uint simd_lane;     // lane in its SIMD group (width 32 on every runtime)
  uint simd_group;    // SIMD group index in its threadgroup
};
