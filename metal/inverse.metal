// Fused batched inverse and determinant of matrices with n <= 4.
//
// One thread factors one matrix in registers; a threadgroup of GROUP threads
// stages GROUP consecutive matrices through threadgroup memory so that every
// global load and store is contiguous across the group (one matrix per thread
// read straight from memory would stride each SIMD-wide access by N*N
// elements). Matrices are row-major and contiguous; the batch is flat.
#include "common.h"

// sgetf2 / cgetf2 in registers: A[row] = L U with partial pivoting.
// The pivot is the first row of largest |re| + |im| (isamax / icamax). A zero
// pivot sets info to its 1-based index (the first one is kept), and the column
// is left unscaled, as LAPACK does. Row swaps are unrolled compare-and-selects
// so that `a` stays in registers: a runtime row index would spill it to memory.
template <typename T, int N>
METAL_FUNC void lu_small(thread T (&a)[N][N], thread int (&row)[N], thread int& info, thread bool& odd) {
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  info = 0;
  odd = false;
  #pragma unroll
  for (int i = 0; i < N; ++i) {
    row[i] = i;
  }
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    int p = k;
    R best = abs1(a[k][k]);
    #pragma unroll
    for (int i = k + 1; i < N; ++i) {
      const R v = abs1(a[i][k]);
      if (v > best) {
        best = v;
        p = i;
      }
    }
    #pragma unroll
    for (int i = k + 1; i < N; ++i) {
      if (i == p) {
        #pragma unroll
        for (int j = 0; j < N; ++j) {
          const T t = a[k][j];
          a[k][j] = a[i][j];
          a[i][j] = t;
        }
        const int r = row[k];
        row[k] = row[i];
        row[i] = r;
        odd = !odd;
      }
    }
    if (a[k][k] == zero) {
      if (info == 0) {
        info = k + 1;
      }
    } else if (has_safe_reciprocal(a[k][k])) {
      const T r = one / a[k][k];
      #pragma unroll
      for (int i = k + 1; i < N; ++i) {
        a[i][k] = a[i][k] * r;
      }
    } else {
      #pragma unroll
      for (int i = k + 1; i < N; ++i) {
        a[i][k] = a[i][k] / a[k][k];
      }
    }
    #pragma unroll
    for (int i = k + 1; i < N; ++i) {
      #pragma unroll
      for (int j = k + 1; j < N; ++j) {
        a[i][j] = a[i][j] - a[i][k] * a[k][j];
      }
    }
  }
}

// sgetrs on the identity, as torch.linalg.inv computes inv(A) = solve(A, I):
// column j solves L U x = P^T e_j. No entry is skipped when it is zero, so a
// singular U gives torch's inf/NaN pattern (e.g. [[nan, nan], [nan, inf]] for
// the zero 2 x 2). Multiplying by 1 / U[i][i] instead of dividing N times
// gives the same pattern (x * (1/0) = x / 0 for every x) at a fraction of the
// cost, which dominates the complex kernel. Each column goes to `out`
// (row-major) as soon as it is solved, so only one lives in registers.
template <typename T, int N>
METAL_FUNC void inverse_from_lu(thread const T (&lu)[N][N], thread const int (&row)[N], threadgroup T* out) {
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  T reciprocal[N];
  bool divide[N];
  #pragma unroll
  for (int i = 0; i < N; ++i) {
    divide[i] = !has_safe_reciprocal(lu[i][i]) && !(lu[i][i] == zero);
    reciprocal[i] = one / lu[i][i];
  }
  #pragma unroll
  for (int j = 0; j < N; ++j) {
    T x[N];
    #pragma unroll
    for (int i = 0; i < N; ++i) {
      x[i] = row[i] == j ? one : zero;
      #pragma unroll
      for (int k = 0; k < i; ++k) {
        x[i] = x[i] - lu[i][k] * x[k];
      }
    }
    #pragma unroll
    for (int i = N - 1; i >= 0; --i) {
      #pragma unroll
      for (int k = i + 1; k < N; ++k) {
        x[i] = x[i] - lu[i][k] * x[k];
      }
      x[i] = divide[i] ? x[i] / lu[i][i] : x[i] * reciprocal[i];
      out[i * N + j] = x[i];
    }
  }
}

// Copies `count` consecutive N x N matrices between global and threadgroup
// memory, matrix m at tile[m * STRIDE]; STRIDE is N*N rounded up to an odd
// number so that threads reading their own matrix hit distinct banks.
template <typename T, int N, int GROUP, int STRIDE>
METAL_FUNC void load_tile(const device T* src, threadgroup T* tile, int count, uint thread_index) {
  for (int e = int(thread_index); e < count * N * N; e += GROUP) {
    tile[(e / (N * N)) * STRIDE + e % (N * N)] = src[e];
  }
}

template <typename T, int N, int GROUP, int STRIDE>
METAL_FUNC void store_tile(const threadgroup T* tile, device T* dst, int count, uint thread_index) {
  for (int e = int(thread_index); e < count * N * N; e += GROUP) {
    dst[e] = tile[(e / (N * N)) * STRIDE + e % (N * N)];
  }
}

// inverse[b] = inv(a[b]) and info[b] = first zero pivot of a[b] (0 if none),
// for b < batch. LAPACK: sgetrf + sgetrs (cgetrf + cgetrs).
template <typename T, int N, int GROUP, int STRIDE>
METAL_FUNC void inverse_small(const device T* a, device T* inverse, device int* info, int batch,
                   threadgroup T* tile, thread_position pos) {
  const long first = long(pos.group_index) * GROUP;
  const int count = min(GROUP, int(batch - first));
  const bool active = int(pos.thread_index) < count;
  load_tile<T, N, GROUP, STRIDE>(a + first * N * N, tile, count, pos.thread_index);
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // Each thread reads its own matrix and overwrites it with the inverse: no
  // other thread touches that slot until the barrier before the store.
  if (active) {
    threadgroup T* slot = tile + pos.thread_index * STRIDE;
    T lu[N][N];
    int row[N];
    int zero_pivot = 0;
    bool odd = false;
    #pragma unroll
    for (int i = 0; i < N; ++i) {
      #pragma unroll
      for (int j = 0; j < N; ++j) {
        lu[i][j] = slot[i * N + j];
      }
    }
    lu_small<T, N>(lu, row, zero_pivot, odd);
    inverse_from_lu<T, N>(lu, row, slot);
    info[first + pos.thread_index] = zero_pivot;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  store_tile<T, N, GROUP, STRIDE>(tile, inverse + first * N * N, count, pos.thread_index);
}

// det[b] = det(a[b]) = (-1)^swaps * prod diag(U), for b < batch.
// LAPACK: sgetrf, then the product of U's diagonal with the pivot parity.
template <typename T, int N, int GROUP, int STRIDE>
METAL_FUNC void det_small(const device T* a, device T* det, int batch, threadgroup T* tile,
               thread_position pos) {
  const long first = long(pos.group_index) * GROUP;
  const int count = min(GROUP, int(batch - first));
  load_tile<T, N, GROUP, STRIDE>(a + first * N * N, tile, count, pos.thread_index);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (int(pos.thread_index) < count) {
    T lu[N][N];
    int row[N];
    int zero_pivot = 0;
    bool odd = false;
    #pragma unroll
    for (int i = 0; i < N; ++i) {
      #pragma unroll
      for (int j = 0; j < N; ++j) {
        lu[i][j] = tile[pos.thread_index * STRIDE + i * N + j];
      }
    }
    lu_small<T, N>(lu, row, zero_pivot, odd);
    T d = lu[0][0];
    #pragma unroll
    for (int i = 1; i < N; ++i) {
      d = d * lu[i][i];
    }
    if (odd) {
      d = -d;
    }
    det[first + pos.thread_index] = d;
  }
}
