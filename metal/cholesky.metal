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

// One step of LAPACK's blocked spotrf / cpotrf (uplo = 'L') on n x n matrices in
// place, columns [k, k + nb) with nb = min(N, n - k): spotf2 on the diagonal block
// A11 in threadgroup memory, then strsm (side 'R', trans 'C') on ROWS = LANES *
// RPT rows of the panel below it, L21 = A21 L11^-H, by substitution (as LAPACK,
// not by L11's inverse: the panel rounds as strsm's). The host's product takes the
// trailing update. Every threadgroup of a matrix factors A11 (some microseconds at
// N = 64, and no launch between the factor and its panel), so no threadgroup may
// write A11 in W, which all of them read: the first writes L11 to blocks[step]
// (strict upper triangle zero) and the block's info (cholesky_small's), and the
// host places the blocks at the end.
// Thread t owns column c = t % N of the block and, of its rows, those congruent
// to t / N modulo LANES: in the factor, the rows of the triangle; in the panel,
// RPT rows of the threadgroup's, in registers. Every thread runs every step, so
// the barriers are uniform.
//   w: count x n x n; blocks: steps x count x N x N; info: steps x count.
template <typename T, int N, int LANES, int RPT>
METAL_FUNC void potrf_step(device T* w, device T* blocks, device int* info, int n, int k, int step, int count,
                           int parts, threadgroup T* triangle, threadgroup T* solved, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int ROWS = LANES * RPT;
  const long matrix = long(pos.group_index / uint(parts));
  const int part = int(pos.group_index % uint(parts));
  const int c = int(pos.thread_index) % N;
  const int lane = int(pos.thread_index) / N;
  const int nb = min(N, n - k);
  const T zero = scalar_traits<T>::from_real(R(0));
  device T* W = w + matrix * n * n;
  // Consecutive threads read consecutive elements of a row.
  for (int i = lane; i < nb; i += LANES) {
    if (c <= i) {
      triangle[packed_row(i) + c] = load(W + long(k + i) * n + k + c);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int failed = 0;
  for (int j = 0; j < nb; ++j) {
    const R d = real_part(triangle[packed_row(j) + j]);
    if (failed == 0 && !(d > R(0))) {
      failed = j + 1;
    }
    const bool working = failed == 0;
    if (working && c == j) {
      const R scale = R(1) / sqrt(d);
      for (int i = lane; i < nb; i += LANES) {
        if (i > j) {
          triangle[packed_row(i) + j] = scale * triangle[packed_row(i) + j];
        }
      }
    }
    // Every thread has read a_jj and column j is L's.
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (working && c == j && lane == j % LANES) {
      triangle[packed_row(j) + j] = scalar_traits<T>::from_real(sqrt(d));
    }
    if (working && c > j && c < nb) {
      const T l = conj(triangle[packed_row(c) + j]);
      for (int i = lane; i < nb; i += LANES) {
        if (i >= c) {
          triangle[packed_row(i) + c] = multiply_subtract(triangle[packed_row(i) + c], triangle[packed_row(i) + j], l);
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (part == 0) {
    device T* L11 = blocks + (long(step) * count + matrix) * N * N;
    for (int i = lane; i < N; i += LANES) {
      T x = zero;
      if (i < nb && c <= i) {
        x = triangle[packed_row(i) + c];
      }
      store(L11 + i * N + c, x);
    }
    if (pos.thread_index == 0) {
      info[long(step) * count + matrix] = failed;
    }
  }
  const int first_row = k + nb + part * ROWS;
  T own[RPT];
  #pragma unroll
  for (int m = 0; m < RPT; ++m) {
    const int r = first_row + lane + LANES * m;
    own[m] = zero;
    if (r < n && c < nb) {
      own[m] = load(W + long(r) * n + k + c);
    }
  }
  for (int j = 0; j < nb; ++j) {
    // Double-buffered: the next step's column may be written while this one is read.
    threadgroup T* final_rows = solved + (j % 2) * ROWS;
    if (c == j) {
      const R scale = R(1) / real_part(triangle[packed_row(j) + j]);
      #pragma unroll
      for (int m = 0; m < RPT; ++m) {
        own[m] = scale * own[m];
        final_rows[lane + LANES * m] = own[m];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (c > j && c < nb) {
      const T l = conj(triangle[packed_row(c) + j]);
      #pragma unroll
      for (int m = 0; m < RPT; ++m) {
        own[m] = multiply_subtract(own[m], final_rows[lane + LANES * m], l);
      }
    }
  }
  #pragma unroll
  for (int m = 0; m < RPT; ++m) {
    const int r = first_row + lane + LANES * m;
    if (r < n && c < nb) {
      store(W + long(r) * n + k + c, own[m]);
    }
  }
}
