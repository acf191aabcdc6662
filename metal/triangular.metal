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
// (row stride N + 1), in place, by a team of TEAM >= N threads (t is the
// thread's index in its team), by blocks of D: the diagonal blocks are
// inverted by substitution (one thread a column, into `scratch`), then each
// block row i below them is T_ij = -T_ii (sum_{j <= k < i} L_ik T_kj), two
// small matrix products per block row, so that the team works in parallel and
// only N / D block rows are sequential. `scratch` holds N x (D + 1) elements.
// Every thread of the threadgroup must call this (it has barriers).
template <typename T, int N, int D, bool UNIT, int TEAM>
METAL_FUNC void tril_invert_in_place(threadgroup T* l, threadgroup T* scratch, int t) {
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  constexpr int S = N + 1;
  constexpr int P = N / D;
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
  for (int e = t; e < N * D; e += TEAM) {
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
    for (int e = t; e < bi * D * D; e += TEAM) {
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
    for (int e = t; e < bi * D * D; e += TEAM) {
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

// The lower triangle of an n x n matrix (n <= N, row i at a + i * row_stride,
// strictly lower only if STRICT, which then takes a unit diagonal) padded to
// N x N with the identity, into threadgroup memory; n = 0 gives the identity.
template <typename T, int N, bool STRICT, int TEAM>
METAL_FUNC void load_lower_padded(const device T* a, long row_stride, int n, threadgroup T* l, int t) {
  typedef typename scalar_traits<T>::real R;
  for (int e = t; e < N * N; e += TEAM) {
    const int i = e / N;
    const int j = e % N;
    T v = scalar_traits<T>::from_real(R(i == j ? 1 : 0));
    if (i < n && (STRICT ? j < i : j <= i)) {
      v = a[i * row_stride + j];
    }
    l[i * (N + 1) + j] = v;
  }
}

// The threadgroups of the inverse-based kernels hold TEAMS teams of TEAM
// threads, each with its own slice of threadgroup memory: small matrices
// (N = 16, 32) are several to a threadgroup, so that its threads are busy.
struct team_position {
  int team;   // this team's index in the grid
  int t;      // the thread's index in its team
  int slice;  // this team's index in its threadgroup
};

template <int TEAM, int TEAMS>
METAL_FUNC team_position team_of(thread_position pos) {
  const int slice = int(pos.thread_index) / TEAM;
  return {int(pos.group_index) * TEAMS + slice, int(pos.thread_index) % TEAM, slice};
}

// The Gated DeltaNet fast path: strsm (Left, Lower) for n <= N in {16, 32, 64}
// and many right-hand sides, as X = inv(L) B. Each team forms inv(L) of its
// system by blocks (strtri) in threadgroup memory and applies it, as a small
// matrix product KC columns at a time, to one block of COLUMNS right-hand
// sides: team = system * blocks + block, so that a few systems with many
// right-hand sides still fill the device.
template <typename T, int N, bool UNIT, int D, int KC, int COLUMNS, int TEAM, int TEAMS>
METAL_FUNC void trsm_by_inverse(const device T* a, const device T* b, device T* x, int n, int k, long a_stride,
                                int teams, threadgroup T* l, threadgroup T* scratch, threadgroup T* panel,
                                thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  const team_position me = team_of<TEAM, TEAMS>(pos);
  const bool active = me.team < teams;
  const int blocks = (k + COLUMNS - 1) / COLUMNS;
  const long system = active ? me.team / blocks : 0;
  const int last = active ? min(k, (me.team % blocks + 1) * COLUMNS) : 0;
  l += me.slice * N * (N + 1);
  scratch += me.slice * N * (D + 1);
  panel += me.slice * N * (KC + 1);
  const device T* B = b + system * n * k;
  device T* X = x + system * n * k;
  load_lower_padded<T, N, false, TEAM>(a + system * a_stride, n, active ? n : 0, l, me.t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, D, UNIT, TEAM>(l, scratch, me.t);
  for (int first = (me.team % blocks) * COLUMNS; first < (me.team % blocks + 1) * COLUMNS; first += KC) {
    const int width = max(0, min(KC, last - first));
    for (int e = me.t; e < n * width; e += TEAM) {
      panel[(e / width) * (KC + 1) + e % width] = B[(e / width) * k + first + e % width];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int e = me.t; e < n * width; e += TEAM) {
      const int i = e / width;
      const int c = e % width;
      T s = zero;
      for (int j = 0; j <= i; ++j) {
        s = s + l[i * (N + 1) + j] * panel[j * (KC + 1) + c];
      }
      X[i * k + first + c] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

// strtri (Lower): inverse[m] = inv(tril(a[m])) for n <= N, one team per matrix.
template <typename T, int N, bool UNIT, int D, int TEAM, int TEAMS>
METAL_FUNC void tril_inverse_small(const device T* a, device T* inverse, int n, int count, threadgroup T* l,
                                   threadgroup T* scratch, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const team_position me = team_of<TEAM, TEAMS>(pos);
  const bool active = me.team < count;
  const long offset = long(active ? me.team : 0) * n * n;
  l += me.slice * N * (N + 1);
  scratch += me.slice * N * (D + 1);
  load_lower_padded<T, N, false, TEAM>(a + offset, n, active ? n : 0, l, me.t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, D, UNIT, TEAM>(l, scratch, me.t);
  for (int e = me.t; active && e < n * n; e += TEAM) {
    const int i = e / n;
    const int j = e % n;
    T v = scalar_traits<T>::from_real(R(0));
    if (j <= i) {
      v = l[i * (N + 1) + j];
    }
    inverse[offset + e] = v;
  }
}

// flash-linear-attention's solve_tril: (I + A)^-1 for each chunk of N rows of
// A in its [B, T, H, N] layout, A strictly lower within a chunk. `chunks`
// holds (first row, rows) per chunk, so that chunks of variable-length
// sequences (cu_seqlens) may be shorter than N; team m is head m % heads of
// chunk m / heads. Row r of a chunk is at ((first + r) * heads + h) * N.
template <typename T, int N, int D, int TEAM, int TEAMS>
METAL_FUNC void solve_tril_chunks(const device T* a, device T* inverse, const device int* chunks, int heads,
                                  int count, threadgroup T* l, threadgroup T* scratch, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const team_position me = team_of<TEAM, TEAMS>(pos);
  const bool active = me.team < count;
  const int chunk = active ? me.team / heads : 0;
  const int h = me.team % heads;
  const long first = chunks[2 * chunk];
  const int rows = active ? chunks[2 * chunk + 1] : 0;
  l += me.slice * N * (N + 1);
  scratch += me.slice * N * (D + 1);
  load_lower_padded<T, N, true, TEAM>(a + (first * heads + h) * N, long(heads) * N, rows, l, me.t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, D, true, TEAM>(l, scratch, me.t);
  for (int e = me.t; e < rows * N; e += TEAM) {
    const int i = e / N;
    const int j = e % N;
    T v = scalar_traits<T>::from_real(R(0));
    if (j <= i) {
      v = l[i * (N + 1) + j];
    }
    inverse[((first + i) * heads + h) * N + j] = v;
  }
}
