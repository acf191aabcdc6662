// Cholesky factorization A = L L^H of Hermitian positive-definite matrices, as
// LAPACK's spotrf / cpotrf with uplo = 'L': only the lower triangle of A is read,
// and of its diagonal only the real part (cpotrf's convention). Callers factor
// the upper triangle as the lower one of A^H. Large matrices are blocked by the
// host (cholesky_family.py): this kernel factors the diagonal blocks.
#include "common.h"

// Row i of a packed lower triangle starts at i (i + 1) / 2. Threads that read or
// write the same column of their own rows hit 32 distinct banks: the triangular
// numbers are distinct modulo every power of two.
METAL_FUNC int packed_row(int i) {
  return i * (i + 1) / 2;
}

// spotf2 / cpotf2 (right-looking) on n x n matrices, n <= N, a team of N threads
// per matrix and TEAMS teams per threadgroup. The lower triangle lies in
// threadgroup memory, packed by rows, and thread t owns row t. Step j takes the
// pivot d = a_jj; if it is not positive (or NaN, spotf2's test) info records
// j + 1 and, as spotf2, a_jj keeps d and the factorization stops: the columns
// before j are L's, the rest is partly updated. Else column j is scaled by
// 1 / sqrt(d) (as spotf2, by the reciprocal) and the trailing triangle takes its
// rank-1 update, each thread on its own row. Every thread runs every step (the steps are the batch's n), so the
// barriers are uniform.
//   a, l: count x n x n; l's strictly upper triangle is zero. info: count.
template <typename T, int N, int TEAMS>
METAL_FUNC void cholesky_small(const device T* a, device T* l, device int* info, int n, int count,
                               threadgroup T* triangles, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  const T zero = scalar_traits<T>::from_real(R(0));
  threadgroup T* triangle = triangles + team * packed_row(N);
  const device T* A = a + matrix * n * n;
  // Consecutive threads read consecutive elements of the matrix.
  for (int e = t; e < n * n; e += N) {
    const int i = e / n;
    const int k = e % n;
    if (present && k <= i) {
      triangle[packed_row(i) + k] = A[e];
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup T* row = triangle + packed_row(t);
  int failed = 0;  // info: the first non-positive pivot's order
  for (int j = 0; j < n; ++j) {
    const R d = real_part(triangle[packed_row(j) + j]);
    if (failed == 0 && !(d > R(0))) {
      failed = j + 1;
    }
    const bool working = failed == 0 && t < n;
    if (working && t > j) {
      row[j] = (R(1) / sqrt(d)) * row[j];
    }
    // Every thread has read a_jj: it may take its final value.
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == j && (working || failed == j + 1)) {
      row[j] = scalar_traits<T>::from_real(working ? sqrt(d) : d);
    }
    if (working && t > j) {
      const T x = row[j];
      for (int k = j + 1; k <= t; ++k) {
        row[k] = multiply_subtract(row[k], x, conj(triangle[packed_row(k) + j]));
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  device T* L = l + matrix * n * n;
  for (int e = t; e < n * n; e += N) {
    const int i = e / n;
    const int k = e % n;
    T x = zero;
    if (k <= i) {
      x = triangle[packed_row(i) + k];
    }
    if (present) {
      L[e] = x;
    }
  }
  if (present && t == 0) {
    info[matrix] = failed;
  }
}
