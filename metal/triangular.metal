// Triangular solves and inverses of small batched matrices.
//
// Every kernel here works on lower triangles: an upper triangle is read with
// its row and column order reversed (J A J is lower for the exchange matrix J),
// and so are its right-hand sides. Only the referenced triangle is ever read.
#include "common.h"

// Element (i, j) of the lower triangle of A (n x n, row-major), or of the
// reversed upper triangle when UPPER.
template <bool UPPER, typename T>
METAL_FUNC T lower_element(const device T* a, int n, int i, int j) {
  return UPPER ? a[(n - 1 - i) * n + (n - 1 - j)] : a[i * n + j];
}

// strsm (Left, Lower, No transpose), one threadgroup per (system, block of
// GROUP right-hand sides): A is staged once in threadgroup memory and every
// thread solves one column by forward substitution, dividing by the diagonal
// as the reference strsm does (a zero diagonal gives inf/NaN, no error).
//   a: batch x n x n (a_stride apart: 0 broadcasts one A), b and x: batch x n x k.
template <typename T, int N, bool UPPER, bool UNIT, int GROUP>
METAL_FUNC void trsm_small(const device T* a, const device T* b, device T* x, int n, int k, long a_stride,
                           threadgroup T* lower, threadgroup T* columns, thread_position pos) {
  const int blocks = (k + GROUP - 1) / GROUP;
  const long system = pos.group_index / blocks;
  const int first = int(pos.group_index % blocks) * GROUP;
  const device T* A = a + system * a_stride;
  const device T* B = b + system * n * k;
  device T* X = x + system * n * k;
  for (int e = int(pos.thread_index); e < n * n; e += GROUP) {
    const int i = e / n;
    const int j = e % n;
    if (j <= i) {
      lower[i * (N + 1) + j] = lower_element<UPPER>(A, n, i, j);
    }
  }
  const int c = first + int(pos.thread_index);
  for (int i = 0; i < n; ++i) {
    const int row = UPPER ? n - 1 - i : i;
    if (c < k) {
      columns[i * (GROUP + 1) + pos.thread_index] = B[row * k + c];
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (c < k) {
    threadgroup T* column = columns + pos.thread_index;
    for (int i = 0; i < n; ++i) {
      T s = column[i * (GROUP + 1)];
      for (int j = 0; j < i; ++j) {
        s = s - lower[i * (N + 1) + j] * column[j * (GROUP + 1)];
      }
      if (!UNIT) {
        s = s / lower[i * (N + 1) + i];
      }
      column[i * (GROUP + 1)] = s;
    }
    for (int i = 0; i < n; ++i) {
      const int row = UPPER ? n - 1 - i : i;
      X[row * k + c] = column[i * (GROUP + 1)];
    }
  }
}

// strtri (Lower) of an N x N lower triangle held in threadgroup memory
// (row stride N + 1), in place, by blocks of D: the diagonal blocks are
// inverted by substitution (one thread a column, into `scratch`), then each
// block row i below them is T_ij = -T_ii (sum_{j <= k < i} L_ik T_kj), two
// small matrix products per block row, so that the threadgroup works in
// parallel and only N / D block rows are sequential.
// `scratch` holds N x (D + 1) elements; GROUP >= N threads.
template <typename T, int N, int D, bool UNIT, int GROUP>
METAL_FUNC void tril_invert_in_place(threadgroup T* l, threadgroup T* scratch, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  constexpr int S = N + 1;
  constexpr int P = N / D;
  const int t = int(pos.thread_index);
  // Diagonal blocks: thread t inverts column t % D of block t / D.
  if (t < N) {
    const int p = t / D;
    const int c = t % D;
    threadgroup T* block = l + p * D * S + p * D;
    threadgroup T* column = scratch + p * D * (D + 1) + c;
    for (int i = 0; i < D; ++i) {
      T s = i == c ? one : zero;
      for (int j = c; j < i; ++j) {
        s = s - block[i * S + j] * column[j * (D + 1)];
      }
      if (i < c) {
        s = zero;
      } else if (!UNIT) {
        s = s / block[i * S + i];
      }
      column[i * (D + 1)] = s;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int e = t; e < N * D; e += GROUP) {
    const int p = e / (D * D);
    const int i = (e / D) % D;
    const int j = e % D;
    if (j <= i) {
      l[(p * D + i) * S + p * D + j] = scratch[(p * D + i) * (D + 1) + j];
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // Block rows below: W_ij = sum_{j <= k < i} L_ik T_kj into scratch, then T_ij = -T_ii W_ij.
  for (int bi = 1; bi < P; ++bi) {
    for (int e = t; e < bi * D * D; e += GROUP) {
      const int bj = e / (D * D);
      const int r = (e / D) % D;
      const int c = e % D;
      T s = zero;
      for (int kk = bj * D; kk < bi * D; ++kk) {
        s = s + l[(bi * D + r) * S + kk] * l[kk * S + bj * D + c];
      }
      scratch[(bj * D + r) * (D + 1) + c] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int e = t; e < bi * D * D; e += GROUP) {
      const int bj = e / (D * D);
      const int r = (e / D) % D;
      const int c = e % D;
      T s = zero;
      for (int kk = 0; kk <= r; ++kk) {
        s = s + l[(bi * D + r) * S + bi * D + kk] * scratch[(bj * D + kk) * (D + 1) + c];
      }
      l[(bi * D + r) * S + bj * D + c] = -s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

// Loads the lower triangle of an n x n matrix (n <= N) into threadgroup memory
// and pads it to N x N with the identity, so that the inversion runs at size N.
template <typename T, int N, bool UPPER, int GROUP>
METAL_FUNC void load_lower_padded(const device T* a, int n, threadgroup T* l, uint thread_index) {
  typedef typename scalar_traits<T>::real R;
  for (int e = int(thread_index); e < N * N; e += GROUP) {
    const int i = e / N;
    const int j = e % N;
    T v = scalar_traits<T>::from_real(R(i == j ? 1 : 0));
    if (i < n && j <= i) {
      v = lower_element<UPPER>(a, n, i, j);
    }
    l[i * (N + 1) + j] = v;
  }
}

// The Gated DeltaNet fast path: strsm (Left, Lower) for n <= N in {16, 32, 64}
// and many right-hand sides, as X = inv(L) B. The inverse is formed once per
// system by blocks (strtri) in threadgroup memory and applied to the
// right-hand sides KC columns at a time as a small matrix product.
template <typename T, int N, bool UNIT, int D, int KC, int GROUP>
METAL_FUNC void trsm_by_inverse(const device T* a, const device T* b, device T* x, int n, int k, long a_stride,
                                threadgroup T* l, threadgroup T* scratch, threadgroup T* panel,
                                thread_position pos) {
  const long system = pos.group_index;
  const device T* B = b + system * n * k;
  device T* X = x + system * n * k;
  load_lower_padded<T, N, false, GROUP>(a + system * a_stride, n, l, pos.thread_index);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, D, UNIT, GROUP>(l, scratch, pos);
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  for (int first = 0; first < k; first += KC) {
    for (int e = int(pos.thread_index); e < n * KC; e += GROUP) {
      const int i = e / KC;
      const int c = e % KC;
      T v = zero;
      if (first + c < k) {
        v = B[i * k + first + c];
      }
      panel[i * (KC + 1) + c] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int e = int(pos.thread_index); e < n * KC; e += GROUP) {
      const int i = e / KC;
      const int c = e % KC;
      T s = zero;
      for (int j = 0; j <= i; ++j) {
        s = s + l[i * (N + 1) + j] * panel[j * (KC + 1) + c];
      }
      if (first + c < k) {
        X[i * k + first + c] = s;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

// strtri (Lower): inverse[b] = inv(tril(a[b])) for n <= N, one threadgroup per matrix.
template <typename T, int N, bool UNIT, int D, int GROUP>
METAL_FUNC void tril_inverse_small(const device T* a, device T* inverse, int n, threadgroup T* l,
                                   threadgroup T* scratch, thread_position pos) {
  const long system = pos.group_index;
  load_lower_padded<T, N, false, GROUP>(a + system * n * n, n, l, pos.thread_index);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, D, UNIT, GROUP>(l, scratch, pos);
  typedef typename scalar_traits<T>::real R;
  for (int e = int(pos.thread_index); e < n * n; e += GROUP) {
    const int i = e / n;
    const int j = e % n;
    T v = scalar_traits<T>::from_real(R(0));
    if (j <= i) {
      v = l[i * (N + 1) + j];
    }
    inverse[system * n * n + e] = v;
  }
}

// flash-linear-attention's solve_tril: (I + A)^-1 for each chunk of N rows of
// A in its [B, T, H, N] layout, A strictly lower within a chunk. `chunks`
// holds (first row, rows) per chunk, so that chunks of variable-length
// sequences (cu_seqlens) may be shorter than N; group g is head g % heads of
// chunk g / heads. Row r of a chunk is at ((first + r) * heads + h) * N.
template <typename T, int N, int D, int GROUP>
METAL_FUNC void solve_tril_chunks(const device T* a, device T* inverse, const device int* chunks, int heads,
                                  threadgroup T* l, threadgroup T* scratch, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int chunk = int(pos.group_index) / heads;
  const int h = int(pos.group_index) % heads;
  const long first = chunks[2 * chunk];
  const int rows = chunks[2 * chunk + 1];
  for (int e = int(pos.thread_index); e < N * N; e += GROUP) {
    const int i = e / N;
    const int j = e % N;
    T v = scalar_traits<T>::from_real(R(i == j ? 1 : 0));
    if (i < rows && j < i) {
      v = a[((first + i) * heads + h) * N + j];
    }
    l[i * (N + 1) + j] = v;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, D, true, GROUP>(l, scratch, pos);
  for (int e = int(pos.thread_index); e < rows * N; e += GROUP) {
    const int i = e / N;
    const int j = e % N;
    T v = scalar_traits<T>::from_real(R(0));
    if (j <= i) {
      v = l[i * (N + 1) + j];
    }
    inverse[((first + i) * heads + h) * N + j] = v;
  }
}
