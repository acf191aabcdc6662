// The squaring phase of the matrix exponential by scaling and squaring, as
// scipy.linalg.expm and Higham's algorithm ("The scaling and squaring method for
// the matrix exponential revisited", SIAM J. Matrix Anal. Appl. 26(4), 2005,
// Algorithm 2.3; MATLAB's expm): exp(A) = r(A / 2^s)^(2^s), the Pade approximant r
// formed by the host (matrix_exp.py), which also chooses s for each matrix from
// its 1-norm. Here each matrix X = r(A / 2^s) is squared in place s times, s read
// from a buffer: the number of squarings differs between matrices, which batched
// products would serve only by squaring every matrix max(s) times.
#include "common.h"

// c + a * b in fused multiply-adds (four for complex): the inner product of a squaring.
template <typename R>
METAL_FUNC R multiply_add(R c, R a, R b) {
  return fma(a, b, c);
}

template <typename R>
METAL_FUNC complex_t<R> multiply_add(complex_t<R> c, complex_t<R> a, complex_t<R> b) {
  return {fma(a.re, b.re, fma(-a.im, b.im, c.re)), fma(a.re, b.im, fma(a.im, b.re, c.im))};
}

// X <- X X, squarings[m] times, for each n x n matrix m of x, n <= N. A team of TEAM
// threads works on one matrix, TEAMS teams a threadgroup, the matrix in threadgroup
// memory (packed n x n). Each thread owns the elements t, t + TEAM, ... of the
// matrix in row-major order, ELEMENTS of them: consecutive threads take consecutive
// columns of a row, so that at step k of the inner product they read one element of
// their row (a broadcast) and consecutive elements of row k (distinct banks). A step
// forms the thread's new elements in registers, waits until every thread has read
// the old matrix, writes them, and waits again. Every thread runs the group's most
// squarings (read alike by all its threads from device memory), so the barriers are
// uniform; a team whose own count is done idles through the rest.
//   x: count x n x n, in place. squarings: count, each >= 0 (the host bounds them).
template <typename T, int N, int TEAM, int TEAMS>
METAL_FUNC void expm_square(device T* x, const device int* squarings, int n, int count,
                            threadgroup T* tiles, thread_position pos) {
  enum : int { ELEMENTS = (N * N + TEAM - 1) / TEAM };
  const int team = int(pos.thread_index) / TEAM;
  const int t = int(pos.thread_index) % TEAM;
  const long first = long(pos.group_index) * TEAMS;
  const long matrix = first + team;
  int steps = 0;  // the group's most squarings
  int own = 0;    // this team's matrix's
  for (int k = 0; k < TEAMS; ++k) {
    if (first + k < count) {
      const int s = squarings[first + k];
      steps = max(steps, s);
      if (k == team) {
        own = s;
      }
    }
  }
  threadgroup T* tile = tiles + team * (N * N);
  device T* X = x + matrix * n * n;
  const int size = n * n;
  if (own > 0) {  // a matrix that is not squared is neither read nor written
    for (int e = t; e < size; e += TEAM) {
      tile[e] = load(X + e);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const T zero = scalar_traits<T>::from_real(typename scalar_traits<T>::real(0));
  for (int step = 0; step < steps; ++step) {
    const bool working = step < own;
    T product[ELEMENTS];
    #pragma unroll
    for (int r = 0; r < ELEMENTS; ++r) {
      const int e = t + r * TEAM;
      T sum = zero;
      if (working && e < size) {
        const int i = e / n;
        const int j = e - i * n;
        threadgroup const T* row = tile + i * n;
        for (int k = 0; k < n; ++k) {
          sum = multiply_add(sum, row[k], tile[k * n + j]);
        }
      }
      product[r] = sum;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // every thread has read X
    #pragma unroll
    for (int r = 0; r < ELEMENTS; ++r) {
      const int e = t + r * TEAM;
      if (working && e < size) {
        tile[e] = product[r];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);  // X X is whole
  }
  if (own > 0) {
    for (int e = t; e < size; e += TEAM) {
      store(X + e, tile[e]);
    }
  }
}
