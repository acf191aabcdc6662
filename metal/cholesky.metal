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

// The diagonal block of one step of LAPACK's blocked spotrf / cpotrf (uplo = 'L',
// cholesky_family._factor): spotf2 on A11, columns [k, k + nb) of w's n x n
// matrices with nb = min(N, n - k), into l. One threadgroup per matrix.
// Thread t owns row i = t / LANES of the block, columns c = t % LANES + LANES m,
// in registers. spotf2 is right-looking, one barrier a column: step j publishes
// column j (as updated by the steps before) to the packed triangle in threadgroup
// memory, and every row takes its rank-1 update from it,
// a_ic -= a_ij conj(a_cj) / a_jj, which writes only registers of columns > j;
// the triangle, complete, is scaled into L11 at the end. A failing pivot (not
// positive, or NaN) is cholesky_small's: info, and spotf2's leftovers.
//   w: count x n x n (read); l: count x n x n, L11 written at (k, k) (its
//   strict upper triangle is not written); info: steps x count, the block's
//   order of failure at [step].
template <typename T, int N, int LANES>
METAL_FUNC void potf2_block(const device T* w, device T* l, device int* info, int n, int k, int step, int count,
                            threadgroup T* triangle, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int COLUMNS = N / LANES;
  const long matrix = long(pos.group_index);
  const int i = int(pos.thread_index) / LANES;
  const int lane = int(pos.thread_index) % LANES;
  const int nb = min(N, n - k);
  const T zero = scalar_traits<T>::from_real(R(0));
  const device T* A11 = w + matrix * n * n + long(k) * n + k;
  T own[COLUMNS];
  #pragma unroll
  for (int m = 0; m < COLUMNS; ++m) {
    const int c = lane + LANES * m;
    own[m] = zero;
    if (i < nb && c <= i) {
      own[m] = load(A11 + long(i) * n + c);
    }
  }
  int failed = 0;
  for (int j = 0; j < nb; ++j) {
    if (lane == j % LANES && i >= j && i < nb) {
      T x = zero;
      #pragma unroll
      for (int m = 0; m < COLUMNS; ++m) {
        if (lane + LANES * m == j) {
          x = own[m];
        }
      }
      triangle[packed_row(i) + j] = x;
    }
    // Column j is complete; the next step writes column j + 1, which this one
    // does not read.
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const R d = real_part(triangle[packed_row(j) + j]);
    if (failed == 0 && !(d > R(0))) {
      failed = j + 1;
    }
    if (failed == 0 && i > j && i < nb) {
      const T x = (R(1) / d) * triangle[packed_row(i) + j];
      #pragma unroll
      for (int m = 0; m < COLUMNS; ++m) {
        const int c = lane + LANES * m;
        if (c > j && c <= i) {
          own[m] = multiply_subtract(own[m], x, conj(triangle[packed_row(c) + j]));
        }
      }
    }
  }
  // L11 from the complete triangle: column c scaled by 1 / sqrt(a_cc), its
  // diagonal sqrt(a_cc); from a failing pivot on, spotf2's leftovers.
  #pragma unroll
  for (int m = 0; m < COLUMNS; ++m) {
    const int c = lane + LANES * m;
    if (i < nb && c <= i && (failed == 0 || c < failed - 1)) {
      const R root = sqrt(real_part(triangle[packed_row(c) + c]));
      if (c == i) {
        own[m] = scalar_traits<T>::from_real(root);
      } else {
        own[m] = (R(1) / root) * own[m];
      }
    }
  }
  device T* L11 = l + matrix * n * n + long(k) * n + k;
  #pragma unroll
  for (int m = 0; m < COLUMNS; ++m) {
    const int c = lane + LANES * m;
    if (i < nb && c <= i) {
      store(L11 + long(i) * n + c, own[m]);
    }
  }
  if (pos.thread_index == 0) {
    info[long(step) * count + matrix] = failed;
  }
}

// The panel of that step, LAPACK's strsm (side 'R', uplo 'L', trans 'C',
// non-unit): L21 = A21 L11^-H on rows [k + N, n) of w's matrices, by
// substitution as the reference strsm (column j of L21 is final once divided
// by l_jj, then every later column takes its update), so that the panel rounds
// as LAPACK's whatever L11's condition. A thread per row, its N entries in
// registers, ROWS rows a threadgroup and parts threadgroups a matrix; L11 (from
// l, written by potf2_block) is staged once per threadgroup in a packed
// triangle, whose entries every thread reads at the same address.
//   w: count x n x n (read), l: count x n x n, L21 written; k + N < n.
template <typename T, int N, int ROWS>
METAL_FUNC void trsm_panel(const device T* w, device T* l, int n, int k, int parts, threadgroup T* triangle,
                           thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const long matrix = long(pos.group_index / uint(parts));
  const int part = int(pos.group_index % uint(parts));
  const int t = int(pos.thread_index);
  const device T* L11 = l + matrix * n * n + long(k) * n + k;
  for (int e = t; e < N * N; e += ROWS) {
    const int i = e / N;
    const int c = e % N;
    if (c <= i) {
      triangle[packed_row(i) + c] = load(L11 + long(i) * n + c);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const int r = k + N + part * ROWS + t;
  if (r >= n) {
    return;
  }
  const device T* a = w + matrix * n * n + long(r) * n + k;
  T own[N];
  #pragma unroll
  for (int c = 0; c < N; ++c) {
    own[c] = load(a + c);
  }
  #pragma unroll
  for (int j = 0; j < N; ++j) {
    own[j] = (R(1) / real_part(triangle[packed_row(j) + j])) * own[j];
    #pragma unroll
    for (int c = j + 1; c < N; ++c) {
      own[c] = multiply_subtract(own[c], own[j], conj(triangle[packed_row(c) + j]));
    }
  }
  device T* out = l + matrix * n * n + long(r) * n + k;
  #pragma unroll
  for (int c = 0; c < N; ++c) {
    store(out + c, own[c]);
  }
}
