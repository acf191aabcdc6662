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
// GROUP right-hand sides): A's triangle is staged once in threadgroup memory,
// packed by rows (row i at i (i + 1) / 2: half the memory of the square), and
// every thread solves one column by forward substitution, dividing by the
// diagonal as the reference strsm does (a zero diagonal gives inf/NaN, no error).
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
      lower[i * (i + 1) / 2 + j] = lower_element<UPPER>(A, n, i, j);
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
      const threadgroup T* row = lower + i * (i + 1) / 2;
      T s = column[i * (GROUP + 1)];
      for (int j = 0; j < i; ++j) {
        s = s - row[j] * column[j * (GROUP + 1)];
      }
      if (!UNIT) {
        s = s / row[i];
      }
      column[i * (GROUP + 1)] = s;
    }
    for (int i = 0; i < n; ++i) {
      const int row = UPPER ? n - 1 - i : i;
      X[row * k + c] = column[i * (GROUP + 1)];
    }
  }
}

// strsm (Left, Lower, No transpose) with a thread per row: thread i holds row
// i of a block of KC right-hand sides in registers; at step j row j is final,
// goes to threadgroup memory, and every row below takes its update with its own
// L(i, j). One threadgroup of N threads per (system, block of KC columns), one
// barrier a step (the buffer of the final row alternates with the step's
// parity). The diagonal divides as strsm does, by its reciprocal where that
// cannot overflow (sgetf2's test); a zero diagonal gives inf/NaN, no error.
//   a: batch x n x n (a_stride apart: 0 broadcasts one A), b and x: batch x n x k.
template <typename T, int N, bool UPPER, bool UNIT, int KC>
METAL_FUNC void trsm_rows(const device T* a, const device T* b, device T* x, int n, int k, long a_stride,
                          threadgroup T* solved, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int blocks = (k + KC - 1) / KC;
  const long system = pos.group_index / blocks;
  const int c0 = int(pos.group_index % blocks) * KC;
  const device T* A = a + system * a_stride;
  const device T* B = b + system * n * k;
  device T* X = x + system * n * k;
  const int i = int(pos.thread_index);
  const int row = UPPER ? n - 1 - i : i;
  const bool active = i < n;
  T own[KC];
  #pragma unroll
  for (int c = 0; c < KC; ++c) {
    own[c] = scalar_traits<T>::from_real(R(0));
    if (active && c0 + c < k) {
      own[c] = B[row * k + c0 + c];
    }
  }
  for (int j = 0; j < n; ++j) {
    threadgroup T* final_row = solved + (j % 2) * KC;
    if (i == j) {
      if (!UNIT) {
        const T d = lower_element<UPPER>(A, n, j, j);
        if (has_safe_reciprocal(d)) {
          const T r = reciprocal(d);
          #pragma unroll
          for (int c = 0; c < KC; ++c) {
            own[c] = own[c] * r;
          }
        } else {
          #pragma unroll
          for (int c = 0; c < KC; ++c) {
            own[c] = own[c] / d;
          }
        }
      }
      #pragma unroll
      for (int c = 0; c < KC; ++c) {
        final_row[c] = own[c];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (active && i > j) {
      const T l = lower_element<UPPER>(A, n, i, j);
      #pragma unroll
      for (int c = 0; c < KC; ++c) {
        own[c] = multiply_subtract(own[c], l, final_row[c]);
      }
    }
  }
  if (active) {
    #pragma unroll
    for (int c = 0; c < KC; ++c) {
      if (c0 + c < k) {
        X[row * k + c0 + c] = own[c];
      }
    }
  }
}

// The lower triangle of an n x n matrix (n <= N) padded to N x N with the
// identity, into threadgroup memory (row stride N + 1), zeros above the
// diagonal. Row i of A is at a + i * row_stride; with `upper` the upper
// triangle is read reversed (J A J), and with STRICT only the strictly lower
// part is read and the diagonal is one. n = 0 gives the identity.
template <typename T, int N, bool STRICT, int TEAM>
METAL_FUNC void load_lower_padded(const device T* a, long row_stride, int n, bool upper, threadgroup T* l, int t) {
  typedef typename scalar_traits<T>::real R;
  for (int e = t; e < N * N; e += TEAM) {
    const int i = e / N;
    const int j = e % N;
    T v = scalar_traits<T>::from_real(R(i == j ? 1 : 0));
    if (i < n && (STRICT ? j < i : j <= i)) {
      v = upper ? a[(n - 1 - i) * row_stride + (n - 1 - j)] : a[i * row_stride + j];
    }
    l[i * (N + 1) + j] = v;
  }
}

// A thread's R x C register tile of a ROWS x COLS output: rows r0 .. r0 + R - 1
// and columns c0 .. c0 + C - 1. With ROWS_FIRST the threads of a SIMD group
// share rows, which suits a triangular left operand (their sums have about
// the same length); else they share columns, which suits a triangular right
// operand. COLS <= 32, so that a SIMD group's loads of one row of the right
// operand fall in distinct banks or are broadcasts. (Contiguous columns were
// faster on the H200 than interleaved ones: their loads can be vectorised.)
template <int R, int C>
struct tile_layout {
  int r0;
  int c0;
};

template <int R, int C, int ROWS, int COLS, bool ROWS_FIRST>
METAL_FUNC tile_layout<R, C> tile_of(int u) {
  constexpr int TR = ROWS / R;
  constexpr int TC = COLS / C;
  return ROWS_FIRST ? tile_layout<R, C>{(u / TC) * R, (u % TC) * C} : tile_layout<R, C>{(u % TR) * R, (u / TR) * C};
}

// Rows of a register tile for OUT outputs per thread: 4 x 8, 4 x 4, 2 x 4, ...
// The larger the tile, the fewer threadgroup loads per multiply-add.
METAL_FUNC constexpr int tile_rows(int out) { return out >= 16 ? 4 : out >= 4 ? 2 : 1; }

// acc[p][q] += sum_{k0 <= k < k1} a[p * a_stride + k] * b[k * b_stride + q]:
// a thread's share of a product of two matrices in threadgroup memory.
template <typename T, int R, int C>
METAL_FUNC void tile_multiply_add(thread T (&acc)[R][C], const threadgroup T* a, int a_stride,
                                  const threadgroup T* b, int b_stride, int k0, int k1) {
  for (int k = k0; k < k1; ++k) {
    T x[R];
    T y[C];
    #pragma unroll
    for (int p = 0; p < R; ++p) {
      x[p] = a[p * a_stride + k];
    }
    #pragma unroll
    for (int q = 0; q < C; ++q) {
      y[q] = b[k * b_stride + q];
    }
    #pragma unroll
    for (int p = 0; p < R; ++p) {
      #pragma unroll
      for (int q = 0; q < C; ++q) {
        acc[p][q] = acc[p][q] + x[p] * y[q];
      }
    }
  }
}

template <typename T, int R, int C>
METAL_FUNC void tile_clear(thread T (&acc)[R][C]) {
  typedef typename scalar_traits<T>::real Real;
  #pragma unroll
  for (int p = 0; p < R; ++p) {
    #pragma unroll
    for (int q = 0; q < C; ++q) {
      acc[p][q] = scalar_traits<T>::from_real(Real(0));
    }
  }
}

// strti2 on the 16 x 16 diagonal blocks of an N x N lower triangle held in
// threadgroup memory (row stride N + 1), in place: thread t < N computes
// column t % 16 of block t / 16 in registers by forward substitution,
// dividing by the diagonal (inf/NaN for a zero one, as strsm gives).
// Entries of a column above its diagonal are exact zeros. Every thread of the
// threadgroup must call this (it has barriers).
template <typename T, int N, int TEAM>
METAL_FUNC void invert_diagonal_blocks(threadgroup T* l, bool unit, int t) {
  typedef typename scalar_traits<T>::real R;
  constexpr int S = N + 1;
  constexpr int D = 16;
  const T zero = scalar_traits<T>::from_real(R(0));
  const int c = t % D;
  threadgroup T* block = l + (t / D) * D * (S + 1);
  T x[D];
  if (t < N) {
    #pragma unroll
    for (int i = 0; i < D; ++i) {
      x[i] = scalar_traits<T>::from_real(R(i == c ? 1 : 0));
    }
    #pragma unroll
    for (int j = 0; j < D; ++j) {
      if (j < c) {
        x[j] = zero;
      } else if (!unit) {
        x[j] = x[j] / block[j * S + j];
      }
      #pragma unroll
      for (int i = j + 1; i < D; ++i) {
        x[i] = x[i] - block[i * S + j] * x[j];
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t < N) {
    #pragma unroll
    for (int i = 0; i < D; ++i) {
      block[i * S + c] = x[i];
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}

// One doubling step of strtri: each pair of inverted H x H diagonal blocks
// T11, T22 of the N x N triangle in `l` gets T21 = -T22 (L21 T11) in place of
// L21, two products by register tiles; the pairs are done side by side.
// Called for H < N only (the clamps keep the other instantiations well-formed).
template <typename T, int N, int H, int TEAM>
METAL_FUNC void tril_double(threadgroup T* l, int t) {
  constexpr int S = N + 1;
  constexpr int PAIRS = 2 * H <= N ? N / (2 * H) : 1;
  constexpr int PAIR_TEAM = TEAM / PAIRS;
  constexpr int OUT = H * H >= PAIR_TEAM ? H * H / PAIR_TEAM : 1;
  constexpr int R = tile_rows(OUT);
  constexpr int C = OUT / R;
  const bool works = t < PAIRS * PAIR_TEAM;
  threadgroup T* t11 = l + (t / PAIR_TEAM % PAIRS) * 2 * H * (S + 1);
  threadgroup T* l21 = t11 + H * S;
  threadgroup T* t22 = l21 + H;
  T acc[R][C];
  // W = L21 T11; T11 is lower, so column c needs rows k >= c only.
  tile_layout<R, C> at = tile_of<R, C, H, H, false>(t % PAIR_TEAM);
  tile_clear(acc);
  if (works) {
    tile_multiply_add<T, R, C>(acc, l21 + at.r0 * S, S, t11 + at.c0, S, at.c0, H);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  #pragma unroll
  for (int p = 0; p < R; ++p) {
    #pragma unroll
    for (int q = 0; q < C; ++q) {
      if (works) {
        l21[(at.r0 + p) * S + at.c0 + q] = acc[p][q];
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // T21 = -T22 W. T22 is lower: the part k < r0 is a full product, the R x R
  // triangle after it is summed exactly, so that an inf in W (a zero on the
  // diagonal) never meets a zero of T22 and turns rows above it into NaN.
  at = tile_of<R, C, H, H, true>(t % PAIR_TEAM);
  tile_clear(acc);
  if (works) {
    tile_multiply_add<T, R, C>(acc, t22 + at.r0 * S, S, l21 + at.c0, S, 0, at.r0);
    #pragma unroll
    for (int kk = 0; kk < R; ++kk) {
      T y[C];
      #pragma unroll
      for (int q = 0; q < C; ++q) {
        y[q] = l21[(at.r0 + kk) * S + at.c0 + q];
      }
      #pragma unroll
      for (int p = kk; p < R; ++p) {
        #pragma unroll
        for (int q = 0; q < C; ++q) {
          acc[p][q] = acc[p][q] + t22[(at.r0 + p) * S + at.r0 + kk] * y[q];
        }
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  #pragma unroll
  for (int p = 0; p < R; ++p) {
    #pragma unroll
    for (int q = 0; q < C; ++q) {
      if (works) {
        l21[(at.r0 + p) * S + at.c0 + q] = -acc[p][q];
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}

// strtri (Lower) of the BLOCK x BLOCK diagonal blocks of an N x N lower
// triangle (16 <= BLOCK <= N <= 64, powers of two) in threadgroup memory, row
// stride N + 1, zeros above the diagonal, in place (BLOCK = N: its inverse),
// by a team of TEAM >= N threads (t is the thread's index in its team): the
// 16 x 16 diagonal blocks by substitution in registers, then doubling steps
// 16 -> 32 -> 64 whose work is small matrix products. Every thread of the
// threadgroup must call this (it has barriers).
template <typename T, int N, int TEAM, int BLOCK = N>
METAL_FUNC void tril_invert_in_place(threadgroup T* l, bool unit, int t) {
  static_assert(N % 16 == 0 && N <= 64 && TEAM >= N, "tril_invert_in_place: N in {16, 32, 64}, TEAM >= N");
  invert_diagonal_blocks<T, N, TEAM>(l, unit, t);
  if (BLOCK > 16) {
    tril_double<T, N, 16, TEAM>(l, t);
  }
  if (BLOCK > 32) {
    tril_double<T, N, 32, TEAM>(l, t);
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

// Row i < n of a block of X from a thread's tile (rows reversed for an upper solve).
template <typename T, int R, int C>
METAL_FUNC void store_tile(device T* X, thread const T (&acc)[R][C], int r0, int c0, int n, int k, int first,
                           int width, int upper) {
  #pragma unroll
  for (int p = 0; p < R; ++p) {
    const int i = r0 + p;
    #pragma unroll
    for (int q = 0; q < C; ++q) {
      if (i < n && c0 + q < width) {
        X[(upper ? n - 1 - i : i) * k + first + c0 + q] = acc[p][q];
      }
    }
  }
}

// The Gated DeltaNet fast path: strsm (Left, Lower or Upper) for n <= N in
// {16, 32, 64} and many right-hand sides. Each team inverts the diagonal
// blocks of its system's triangle in threadgroup memory (strtri, above) and
// applies them to a block of COLUMNS right-hand sides, KC at a time, as
// products by register tiles: with HALVES, the blocks are the two halves
// (X1 = inv(L11) B1, X2 = inv(L22) (B2 - L21 X1)), which skips the last
// doubling step of the inverse; else the block is the whole inverse, X =
// inv(L) B. team = system * blocks + block, so that a few systems with many
// right-hand sides still fill the device. An upper A is solved reversed
// (J A J is lower), with its right-hand sides' rows reversed.
template <typename T, int N, int KC, int COLUMNS, int TEAM, int TEAMS, bool HALVES>
METAL_FUNC void trsm_by_inverse(const device T* a, const device T* b, device T* x, int n, int k, long a_stride,
                                int upper, int unit, int teams, threadgroup T* l, threadgroup T* panel,
                                thread_position pos) {
  typedef typename scalar_traits<T>::real Real;
  constexpr int S = N + 1;
  constexpr int H = HALVES ? N / 2 : N;  // the rows of a diagonal block
  constexpr int OUT = H * KC / TEAM;
  constexpr int R = tile_rows(OUT);
  constexpr int C = OUT / R;
  static_assert(!HALVES || N >= 32, "trsm_by_inverse: halves of at least 16 rows");
  static_assert(OUT * TEAM == H * KC && R * C == OUT, "trsm_by_inverse: the tiles must cover H x KC");
  const team_position me = team_of<TEAM, TEAMS>(pos);
  const bool active = me.team < teams;
  const int blocks = (k + COLUMNS - 1) / COLUMNS;
  const long system = active ? me.team / blocks : 0;
  const int begin = (me.team % blocks) * COLUMNS;
  const int end = active ? min(k, begin + COLUMNS) : 0;
  l += me.slice * N * S;
  panel += me.slice * N * KC;
  const device T* B = b + system * n * k;
  device T* X = x + system * n * k;
  load_lower_padded<T, N, false, TEAM>(a + system * a_stride, n, active ? n : 0, upper != 0, l, me.t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, TEAM, H>(l, unit != 0, me.t);
  const tile_layout<R, C> at = tile_of<R, C, H, KC, true>(me.t);
  for (int first = begin; first < begin + COLUMNS; first += KC) {
    const int width = max(0, min(KC, end - first));
    // Rows n .. N - 1 of the panel must be finite: inv(L)'s zeros meet them.
    for (int e = me.t; e < N * KC; e += TEAM) {
      const int i = e / KC;
      const int c = e % KC;
      T v = scalar_traits<T>::from_real(Real(0));
      if (i < n && c < width) {
        v = B[(upper ? n - 1 - i : i) * k + first + c];
      }
      panel[e] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // X is stored from the tiles directly: staging it through the panel for whole-row
    // stores was slower on the H200. inv(L) is lower: row r sums k <= r only.
    T acc[R][C];
    tile_clear(acc);
    tile_multiply_add<T, R, C>(acc, l + at.r0 * S, S, panel + at.c0, KC, 0, min(n, at.r0 + R));
    store_tile(X, acc, at.r0, at.c0, n, k, first, width, upper);
    if (HALVES) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      #pragma unroll
      for (int p = 0; p < R; ++p) {
        #pragma unroll
        for (int q = 0; q < C; ++q) {
          panel[(at.r0 + p) * KC + at.c0 + q] = acc[p][q];  // X1
        }
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      // B2 - L21 X1 into the panel's second half, then X2 = inv(L22) of it.
      tile_clear(acc);
      tile_multiply_add<T, R, C>(acc, l + (H + at.r0) * S, S, panel + at.c0, KC, 0, H);
      #pragma unroll
      for (int p = 0; p < R; ++p) {
        #pragma unroll
        for (int q = 0; q < C; ++q) {
          acc[p][q] = panel[(H + at.r0 + p) * KC + at.c0 + q] - acc[p][q];
        }
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      #pragma unroll
      for (int p = 0; p < R; ++p) {
        #pragma unroll
        for (int q = 0; q < C; ++q) {
          panel[(H + at.r0 + p) * KC + at.c0 + q] = acc[p][q];
        }
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      tile_clear(acc);
      tile_multiply_add<T, R, C>(acc, l + (H + at.r0) * S + H, S, panel + H * KC + at.c0, KC, 0, at.r0 + R);
      store_tile(X, acc, H + at.r0, at.c0, n, k, first, width, upper);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

// strtri (Lower): inverse[m] = inv(tril(a[m])) for n <= N, one team per matrix.
template <typename T, int N, int TEAM, int TEAMS>
METAL_FUNC void tril_inverse_small(const device T* a, device T* inverse, int n, int count, int unit,
                                   threadgroup T* l, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const team_position me = team_of<TEAM, TEAMS>(pos);
  const bool active = me.team < count;
  const long offset = long(active ? me.team : 0) * n * n;
  l += me.slice * N * (N + 1);
  load_lower_padded<T, N, false, TEAM>(a + offset, n, active ? n : 0, false, l, me.t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, TEAM>(l, unit != 0, me.t);
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
// A in its [B, T, H, N] layout, A strictly lower within a chunk. Chunks cut
// each of B sequences of `sequence` rows from its start (the last may be
// shorter); if `sequence` is 0, `chunks` holds (first row, rows) per chunk
// instead, for variable-length sequences (cu_seqlens). Team m is head
// m % heads of chunk m / heads. Row r of a chunk is at ((first + r) * heads + h) * N.
template <typename T, int N, int TEAM, int TEAMS>
METAL_FUNC void solve_tril_chunks(const device T* a, device T* inverse, const device int* chunks, int heads,
                                  int count, int sequence, threadgroup T* l, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const team_position me = team_of<TEAM, TEAMS>(pos);
  const bool active = me.team < count;
  const int chunk = active ? me.team / heads : 0;
  const int h = me.team % heads;
  long first;
  int rows;
  if (sequence > 0) {
    const int per_sequence = (sequence + N - 1) / N;
    const int start = (chunk % per_sequence) * N;
    first = long(chunk / per_sequence) * sequence + start;
    rows = active ? min(N, sequence - start) : 0;
  } else {
    first = chunks[2 * chunk];
    rows = active ? chunks[2 * chunk + 1] : 0;
  }
  l += me.slice * N * (N + 1);
  load_lower_padded<T, N, true, TEAM>(a + (first * heads + h) * N, long(heads) * N, rows, false, l, me.t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  tril_invert_in_place<T, N, TEAM>(l, true, me.t);
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
