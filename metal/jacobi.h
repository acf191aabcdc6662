// One-sided and two-sided Jacobi rotations, shared by the SVD (svd.metal,
// LAPACK's sgesvj) and the Hermitian eigensolver (eigh.metal): the rotation of a
// pair p, q that zeroes the off-diagonal entry gamma = g_pq of a Hermitian 2 x 2
// [[alpha, gamma], [conj(gamma), beta]] (a Gram matrix's for sgesvj), and the
// round-robin ordering of the pairs across the lanes of a team.
#pragma once
#include "common.h"

// Sweeps before giving up, as sgesvj's NSWEEP; convergence usually takes 5-10.
#define JACOBI_SWEEPS 30

template <typename R>
METAL_FUNC R unit_roundoff() {
  return sizeof(R) == 4 ? R(5.96046448e-08f) : R(1.11022302e-16f);
}

template <typename R>
METAL_FUNC R abs2(R x) {
  return x * x;
}

template <typename R>
METAL_FUNC R abs2(complex_t<R> z) {
  return fma(z.re, z.re, z.im * z.im);
}

template <typename R>
METAL_FUNC complex_t<R> lanes_sum_of(complex_t<R> z) {
  return {lanes_sum<32>(z.re), lanes_sum<32>(z.im)};
}

template <typename R>
METAL_FUNC R lanes_sum_of(R x) {
  return lanes_sum<32>(x);
}

// The rotation J = [[c, s g], [-s conj(g), c]], g = gamma / |gamma|, that zeroes
// the off-diagonal entry of J^H [[alpha, gamma], [conj(gamma), beta]] J, the real
// rotation acting on |gamma| as sgesvj's. For the SVD the 2 x 2 is the Gram matrix
// of columns p and q (alpha = |a_p|^2, beta = |a_q|^2, gamma = a_p^H a_q), and
// [a_p a_q] J are orthogonal; for the Hermitian eigensolver it is the pair's block
// of the matrix itself, whose diagonal becomes alpha - shift and beta + shift
// (Rutishauser's update, more accurate than the rotated entries). Null (c = 1,
// s = 0) unless |gamma| > tolerance sqrt(|alpha| |beta|), which fails on NaN:
// sgesvj's test, and the one under which two-sided Jacobi keeps the relative
// accuracy of a positive definite matrix's eigenvalues (Demmel and Veselic).
template <typename T>
struct jacobi_rotation {
  typename scalar_traits<T>::real c;
  T sg;  // s g
  typename scalar_traits<T>::real shift;  // t |gamma|, t = s / c
  bool rotates;
};

template <typename T, typename R>
METAL_FUNC jacobi_rotation<T> rotation_for(R alpha, R beta, T gamma, R tolerance) {
  const R abs_gamma = magnitude(gamma);
  jacobi_rotation<T> j = {R(1), scalar_traits<T>::from_real(R(0)), R(0), false};
  if (abs_gamma > tolerance * sqrt(fabs(alpha)) * sqrt(fabs(beta))) {
    const R zeta = (beta - alpha) / (R(2) * abs_gamma);
    const R abs_zeta = fabs(zeta);
    // t = tan(theta), the root of t^2 + 2 zeta t - 1 of smaller magnitude.
    R t = abs_zeta > R(1) / sqrt(unit_roundoff<R>()) ? R(0.5) / abs_zeta : R(1) / (abs_zeta + sqrt(fma(zeta, zeta, R(1))));
    t = zeta < R(0) ? -t : t;
    j.c = R(1) / sqrt(fma(t, t, R(1)));
    j.sg = (j.c * t) * phase(gamma, abs_gamma);
    j.shift = t * abs_gamma;
    j.rotates = true;
  }
  return j;
}

// Columns p and q of M J: x <- c x - s conj(g) y, y <- s g x + c y.
template <typename T>
METAL_FUNC void rotate(thread T& x, thread T& y, jacobi_rotation<T> j) {
  const T x0 = x;
  x = j.c * x - conj(j.sg) * y;
  y = j.sg * x0 + j.c * y;
}

// Rows p and q of J^H M: x <- c x - s g y, y <- s conj(g) x + c y.
template <typename T>
METAL_FUNC void rotate_rows(thread T& x, thread T& y, jacobi_rotation<T> j) {
  const T x0 = x;
  x = j.c * x - j.sg * y;
  y = conj(j.sg) * x0 + j.c * y;
}

// Step of the round-robin ordering for a team of H lanes, each holding two
// columns (top, bottom) of N elements: lane 0's top stays, every other column
// moves one place around the circle t1 .. t_{H-1}, b_{H-1} .. b0.
template <typename T, int N, int H>
METAL_FUNC void next_round(thread T (&top)[N], thread T (&bottom)[N], int member, int lane) {
  const ushort left = ushort(member == 0 ? lane : lane - 1);
  const ushort right = ushort(member == H - 1 ? lane : lane + 1);
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    const T old_top = top[r];
    T send = top[r];
    if (member == 0) {
      send = bottom[r];
    }
    const T from_left = simd_shuffle(send, left);
    const T from_right = simd_shuffle(bottom[r], right);
    if (member != 0) {
      top[r] = from_left;
    }
    bottom[r] = from_right;
    if (member == H - 1) {
      bottom[r] = old_top;
    }
  }
}
