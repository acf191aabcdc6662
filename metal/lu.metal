// LU factorization with partial pivoting, P^T A = L U, of batched matrices.
//
// Pivoting follows LAPACK exactly: at step j the pivot is the row, among
// positions j..m-1, of the largest |a_ij| (|re| + |im| for complex, as isamax /
// icamax), the lowest position among equal ones; a zero pivot is recorded in
// info (the first, 1-based) and its column is left unscaled; the multipliers
// are scaled by 1/pivot unless that would overflow (sgetf2's sfmin test).
// NaN never wins a comparison, so a NaN is chosen as pivot only when its column
// holds nothing else; it propagates either way.
#include "common.h"

// A candidate pivot: its magnitude and its row's current position.
template <typename R>
struct pivot_key {
  R value;
  int position;
};

// What a row that may not be chosen (already a pivot row, or padding) offers.
#define NO_PIVOT_POSITION 0x7fffffff

template <typename T>
METAL_FUNC pivot_key<typename scalar_traits<T>::real> candidate(T x, int position, bool eligible) {
  typedef typename scalar_traits<T>::real R;
  const R magnitude = abs1(x);
  // NaN sorts below every number and above the rows that may not be chosen.
  // (Tested by isnan: CUDA 13's ptxas folds `magnitude >= 0 ? magnitude : c` to
  // magnitude, as if |NaN| >= 0, and the NaN then wins the pivot search.)
  const R value = isnan(magnitude) ? R(-0.5f) : magnitude;
  return {eligible ? value : R(-1), eligible ? position : NO_PIVOT_POSITION};
}

template <typename R>
METAL_FUNC bool better(pivot_key<R> a, pivot_key<R> b) {
  return a.value > b.value || (a.value == b.value && a.position < b.position);
}

// The best key among aligned runs of LANES <= 32 lanes of a SIMD group: every
// lane of a run ends with the same key, with no barrier. (better is a total
// order on keys, so the result is the maximum.) Runs shorter than a SIMD group
// take a butterfly of shuffles.
template <typename R, int LANES>
METAL_FUNC pivot_key<R> simd_best(pivot_key<R> mine) {
  if (LANES == 32) {
    // Over a whole SIMD group: two reductions (one instruction each on CUDA),
    // the largest value, then the lowest position among the lanes that hold it.
    const R top = simd_max(mine.value);
    return {top, simd_min(mine.value == top ? mine.position : int(NO_PIVOT_POSITION))};
  }
  #pragma unroll
  for (int offset = LANES / 2; offset > 0; offset /= 2) {
    const pivot_key<R> other = {simd_shuffle_xor(mine.value, ushort(offset)),
                                simd_shuffle_xor(mine.position, ushort(offset))};
    if (better(other, mine)) {
      mine = other;
    }
  }
  return mine;
}

// The best key of a threadgroup of GROUP threads: each SIMD group's best, then
// theirs through threadgroup memory (GROUP / 32 entries). One barrier; callers
// put another barrier between two calls.
template <typename R, int GROUP>
METAL_FUNC pivot_key<R> group_best(pivot_key<R> mine, thread_position pos, threadgroup R* values,
                                   threadgroup int* positions) {
  const int SIMDS = GROUP / 32;
  mine = simd_best<R, 32>(mine);
  if (pos.simd_lane == 0) {
    values[pos.simd_group] = mine.value;
    positions[pos.simd_group] = mine.position;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  pivot_key<R> best = {values[0], positions[0]};
  for (int s = 1; s < SIMDS; ++s) {
    const pivot_key<R> other = {values[s], positions[s]};
    if (better(other, best)) {
      best = other;
    }
  }
  return best;
}

// The multiplier x / pivot, as sgetf2 forms it: by the reciprocal unless that
// overflows; a zero pivot leaves its column as it is.
template <typename T>
struct pivot_divisor {
  T pivot;
  T reciprocal;
  bool by_reciprocal;
  bool zero;
};

template <typename T>
METAL_FUNC pivot_divisor<T> divisor(T pivot) {
  typedef typename scalar_traits<T>::real R;
  return {pivot, reciprocal(pivot), has_safe_reciprocal(pivot), pivot == scalar_traits<T>::from_real(R(0))};
}

template <typename T>
METAL_FUNC T multiplier(T x, pivot_divisor<T> d) {
  if (d.zero) {
    return x;
  }
  return d.by_reciprocal ? x * d.reciprocal : x / d.pivot;
}

// Element k of the pivot row: from its lane (the team in one SIMD group), or
// from the slot its SIMD group offered it in.
template <typename T, int SIMDS>
METAL_FUNC T pivot_row_element(T mine, int source_lane, threadgroup T* source_row, int k) {
  if (SIMDS == 1) {
    return simd_shuffle(mine, ushort(source_lane));
  }
  const T offered = source_row[k];
  return offered;
}

// The small kernels give each matrix a team of N threads (TEAMS teams a
// threadgroup); thread t of a team holds row t in registers. A team's matrix
// moves between device memory and registers through its staging tile, WIDTH
// columns at a time: a team reads and writes runs of its matrix's rows with
// consecutive threads (one row per thread would touch a cache sector per thread
// and access).
template <int N>
struct team_shape {
  // Staged columns at a time, and a staged row's length, padded against bank conflicts.
  enum : int { WIDTH = N < 32 ? N : 32, STRIDE = WIDTH + 1 };
};

// Rows 0..m-1 of A (m x n) into row[] of threads 0..m-1 of a team; zeros
// elsewhere. Every thread takes part in the barriers; only a team with a matrix
// (present) reads.
template <typename T, int N>
METAL_FUNC void load_rows(const device T* A, int m, int n, bool present, int t, threadgroup T* tile,
                          thread T (&row)[N]) {
  typedef typename scalar_traits<T>::real R;
  const int WIDTH = team_shape<N>::WIDTH;
  const int STRIDE = team_shape<N>::STRIDE;
  #pragma unroll
  for (int c0 = 0; c0 < N; c0 += WIDTH) {
    #pragma unroll
    for (int q = 0; q < WIDTH; ++q) {  // unrolled: a thread's loads are in flight together
      const int e = q * N + t;
      const int i = e / WIDTH;
      const int k = c0 + e % WIDTH;
      if (present && i < m && k < n) {
        tile[i * STRIDE + k - c0] = load(A + i * n + k);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    #pragma unroll
    for (int k = c0; k < c0 + WIDTH; ++k) {
      row[k] = scalar_traits<T>::from_real(R(0));
      if (present && t < m && k < n) {
        row[k] = tile[t * STRIDE + k - c0];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

// sgetf2 / cgetf2 on a team's rows, m, n <= N: row[] as load_rows leaves it,
// factored in place. Blocks of CB columns (the block loop is unrolled, so every
// index is static, and the step loop inside a block is not). Rows never move:
// each thread tracks its row's position (position: t on entry, the row's
// position in P^T A = L U on return), and pivot_rows[j] (the team's, N ints) is
// the position step j's pivot row came from (sgetrf's ipiv - 1). Returns
// the first j + 1 with u_jj == 0, else 0 (info).
// A team of N <= 32 lies in one SIMD group: the pivot is found by a butterfly and
// the pivot row read from its lane by shuffles, with no barrier. A team of 64 is
// two SIMD groups: each offers its best row through threadgroup memory, double
// buffered by step parity, so that one barrier a step suffices.
//   pivoting = 0 factors without row interchanges (pivots are then 1..k).
template <typename T, int N, int TEAMS>
METAL_FUNC int factor_rows(thread T (&row)[N], thread int& position, int m, int n, bool active, int pivoting,
                           threadgroup int* pivot_rows, threadgroup typename scalar_traits<T>::real* offered_values,
                           threadgroup int* offered_positions, threadgroup T* offered_rows, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  // Blocks of 4 columns waste the least on columns left of the step; a team of
  // 64 takes blocks of 8, which Intel's OpenCL compiler still builds (at 4 it
  // crashes in its pass that moves values across barriers).
  const int CB = N < 4 ? N : (N == 64 ? 8 : 4);
  const int LANES = N < 32 ? N : 32;  // a team's lanes in one SIMD group
  const int SIMDS = N / LANES;        // SIMD groups per team: 1, or 2 when N = 64
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const int lane = int(pos.simd_lane);
  const int steps = min(m, n);
  const T zero = scalar_traits<T>::from_real(R(0));
  int first_zero = 0;
  #pragma unroll
  for (int c = 0; c < N / CB; ++c) {
    const int block = c * CB;
    // Every lane of a SIMD group runs the same steps (m and n are the batch's),
    // so the shuffles below are never in divergent control flow.
    const int block_steps = min(CB, steps - block);
    for (int jj = 0; jj < block_steps; ++jj) {
      const int j = block + jj;
      T x = row[block];
      #pragma unroll
      for (int kk = 1; kk < CB; ++kk) {
        x = kk == jj ? row[block + kk] : x;
      }
      const bool eligible = active && (pivoting ? position >= j : position == j);
      pivot_key<R> best = candidate(x, position, eligible);
      // The lane rides in the key's low bits; positions are distinct, so the order is kept.
      if (eligible) {
        best.position = best.position * 32 + lane;
      }
      best = simd_best<R, LANES>(best);
      // Where the pivot row is read from: its lane (one SIMD group), or the slot
      // its SIMD group offered it in (two).
      int source_lane = best.position % 32;
      threadgroup T* source_row = offered_rows;
      if (SIMDS == 2) {
        const int slot = team * 4 + (j % 2) * 2;
        const int simd = t / 32;  // which of the team's two SIMD groups
        if (lane == 0) {
          offered_values[slot + simd] = best.value;
          offered_positions[slot + simd] = best.position;
        }
        if (eligible && lane == source_lane && position == best.position / 32) {
          #pragma unroll
          for (int k = block; k < N; ++k) {
            offered_rows[(slot + simd) * N + k] = row[k];
          }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const pivot_key<R> first = {offered_values[slot], offered_positions[slot]};
        const pivot_key<R> second = {offered_values[slot + 1], offered_positions[slot + 1]};
        const bool from_second = better(second, first);
        best = from_second ? second : first;
        source_row = offered_rows + (slot + (from_second ? 1 : 0)) * N;
      }
      const int p = best.position / 32;
      const T pivot = pivot_row_element<T, SIMDS>(x, source_lane, source_row, j);
      if (t == 0) {
        pivot_rows[j] = p;
      }
      const bool winner = active && position == p;
      if (position == j) {
        position = p;
      }
      if (winner) {
        position = j;
      }
      if (first_zero == 0 && pivot == zero) {
        first_zero = j + 1;
      }
      // The pivot row is not updated (its position is now j), so every read of
      // it below sees its values from before this step. Columns left of j in
      // this block take no update; the shuffles for them keep control flow uniform.
      const bool update = active && position > j;
      const T l = multiplier(x, divisor(pivot));
      #pragma unroll
      for (int kk = 0; kk < CB; ++kk) {
        const T u = pivot_row_element<T, SIMDS>(row[block + kk], source_lane, source_row, block + kk);
        T updated = multiply_subtract(row[block + kk], l, u);
        if (kk == jj) {
          updated = l;
        }
        if (update && kk >= jj) {
          row[block + kk] = updated;
        }
      }
      #pragma unroll
      for (int k = block + CB; k < N; ++k) {
        const T u = pivot_row_element<T, SIMDS>(row[k], source_lane, source_row, k);
        if (update) {
          row[k] = multiply_subtract(row[k], l, u);
        }
      }
    }
  }
  return first_zero;
}

// sgetf2 / cgetf2 for m x n matrices with m, n <= N: load_rows, factor_rows,
// and each row to its final position.
//   a, lu: count x m x n; pivots: count x min(m, n) (1-based); info: count.
template <typename T, int N, int TEAMS>
METAL_FUNC void lu_factor_small(const device T* a, device T* lu, device int* pivots, device int* info, int m, int n,
                                int count, int pivoting, threadgroup typename scalar_traits<T>::real* offered_values,
                                threadgroup int* offered_positions, threadgroup T* offered_rows,
                                threadgroup int* pivot_rows, threadgroup T* staging, thread_position pos) {
  const int WIDTH = team_shape<N>::WIDTH;
  const int STRIDE = team_shape<N>::STRIDE;
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  // Threads of a matrix past the batch end take part in every shuffle and barrier.
  const bool present = matrix < count;
  const int steps = min(m, n);
  threadgroup T* tile = staging + team * N * STRIDE;
  T row[N];
  load_rows<T, N>(a + matrix * m * n, m, n, present, t, tile, row);
  int position = t;
  const int first_zero = factor_rows<T, N, TEAMS>(row, position, m, n, present && t < m, pivoting,
                                                  pivot_rows + team * N, offered_values, offered_positions,
                                                  offered_rows, pos);
  device T* LU = lu + matrix * m * n;
  #pragma unroll
  for (int c0 = 0; c0 < N; c0 += WIDTH) {
    if (present && t < m) {
      #pragma unroll
      for (int k = c0; k < c0 + WIDTH; ++k) {
        tile[position * STRIDE + k - c0] = row[k];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    #pragma unroll
    for (int q = 0; q < WIDTH; ++q) {  // unrolled: a thread's loads are in flight together
      const int e = q * N + t;
      const int i = e / WIDTH;
      const int k = c0 + e % WIDTH;
      if (present && i < m && k < n) {
        store(LU + i * n + k, tile[i * STRIDE + k - c0]);
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (present && t < steps) {
    pivots[matrix * steps + t] = pivot_rows[team * N + t] + 1;
  }
  if (present && t == 0) {
    info[matrix] = first_zero;
  }
}

// x, or conj(x): the factors of a solve with A^H (or of X A^H = B).
template <bool CONJUGATED, typename T>
METAL_FUNC T conjugate_if(T x) {
  if (CONJUGATED) {
    x = conj(x);
  }
  return x;
}

// sgetrs on a team's factors in threadgroup memory, by rows: thread t of the
// team holds element t of VECTORS right-hand sides at a time, and each step of a
// triangle takes one final element from its thread by a shuffle (the team lies
// in one SIMD group, lanes lane0 .. lane0 + N - 1) and subtracts its multiple,
// as strsm's column form does. (A thread per right-hand side with the whole
// vector in registers ran 5-8x slower at n = 32 than at 16 on an H100.)
// lu (the team's tile, row i at i * STRIDE, zeros past n) holds P^T A = L U of
// an n x n A, order[i] the row of A at position i. A right-hand side is a vector
// v of n elements of b, element i of vector c at b[i * k + c] (left: the columns
// of an n x k B) or b[c * n + i] (right: the rows of a k x n B); x is laid out
// as b.
//   TRANSPOSED = false: v <- U^-1 L^-1 P^T v  (A X = B; with CONJUGATED, the
//     factors conjugated: X A^H = B, as A X^H = B^H is conj(A) X^T = B^T);
//   TRANSPOSED = true:  v <- P L^-T U^-T v    (X A = B, as A^T X^T = B^T; with
//     CONJUGATED, A^H X = B).
// A zero u_ii gives inf/NaN, no error. identity: b is not read, B = I
// (inverses). Every lane of the SIMD group calls this (present: the team has a
// matrix; only such a team reads and writes), with the batch's n and k, so the
// shuffles are in uniform control flow. (CONJUGATED is a template argument: as
// a runtime flag on complex factors, Intel's OpenCL compiler takes minutes over
// n = 32.)
template <typename T, int N, bool TRANSPOSED, bool CONJUGATED>
METAL_FUNC void solve_from_factors(threadgroup T* lu, const threadgroup int* order, const device T* b,
                                   device T* x, int n, int k, int left, int identity, bool present, int t,
                                   int lane0) {
  typedef typename scalar_traits<T>::real R;
  const int STRIDE = team_shape<N>::STRIDE;
  const int VECTORS = 4;  // right-hand sides a pass: independent shuffles in flight
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  const int step = left ? k : 1;     // between consecutive elements of a vector
  const int spacing = left ? 1 : n;  // between consecutive vectors
  const bool mine = present && t < n;
  // Non-transposed solves take P^T v (element t is row order[t] of B);
  // transposed ones end with P v (element t goes to row order[t]).
  const int row = mine ? order[t] : 0;
  const int source = TRANSPOSED ? t : row;
  const int target = TRANSPOSED ? row : t;
  threadgroup T* own = lu + t * STRIDE;  // row t of the factors
  // U = D U1 (U1 unit upper: thread t divides row t right of the diagonal by
  // u_tt), so both triangles are unit and each element is divided by its own
  // u_tt once (U x = y as U1 x = D^-1 y; U^T w = b as U1^T z = b, w = D^-1 z),
  // by every thread at once rather than in one thread's branch of every step.
  T diagonal = one;
  if (mine) {
    const T u_tt = own[t];
    diagonal = conjugate_if<CONJUGATED>(u_tt);
    #pragma unroll
    for (int j = 1; j < N; ++j) {
      if (j > t && j < n) {
        const T u_tj = own[j];
        own[j] = u_tj / u_tt;
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int c0 = 0; c0 < k; c0 += VECTORS) {
    T v[VECTORS];
    #pragma unroll
    for (int r = 0; r < VECTORS; ++r) {
      v[r] = zero;
      if (mine && c0 + r < k) {
        if (identity) {
          if (source == c0 + r) {
            v[r] = one;
          }
        } else {
          v[r] = load(b + source * step + (c0 + r) * spacing);
        }
      }
    }
    // Column j of the first triangle (L, or U1^T: row j of U1) below the
    // diagonal, then of the second (U1, or L^T) above it. (The guards on j and
    // c0 + r are uniform.)
    #pragma unroll
    for (int j = 0; j < N - 1; ++j) {
      if (j < n) {
        const T f = conjugate_if<CONJUGATED>(TRANSPOSED ? lu[j * STRIDE + t] : own[j]);
        #pragma unroll
        for (int r = 0; r < VECTORS; ++r) {
          if (c0 + r < k) {
            const T element = simd_shuffle(v[r], ushort(lane0 + j));
            if (t > j) {
              v[r] = multiply_subtract(v[r], f, element);
            }
          }
        }
      }
    }
    #pragma unroll
    for (int r = 0; r < VECTORS; ++r) {
      v[r] = v[r] / diagonal;
    }
    #pragma unroll
    for (int j = N - 1; j > 0; --j) {
      if (j < n) {
        const T f = conjugate_if<CONJUGATED>(TRANSPOSED ? lu[j * STRIDE + t] : own[j]);
        #pragma unroll
        for (int r = 0; r < VECTORS; ++r) {
          if (c0 + r < k) {
            const T element = simd_shuffle(v[r], ushort(lane0 + j));
            if (t < j) {
              v[r] = multiply_subtract(v[r], f, element);
            }
          }
        }
      }
    }
    #pragma unroll
    for (int r = 0; r < VECTORS; ++r) {
      if (mine && c0 + r < k) {
        store(x + target * step + (c0 + r) * spacing, v[r]);
      }
    }
  }
}

// sgesv for n x n A, n <= N <= 32: a team factors A in registers (factor_rows),
// leaves L U in its tile and solves from it (solve_from_factors); neither the
// factors nor the pivots go to device memory.
//   a: count x n x n; b, x: count x n x k (left) or count x k x n (right), b
//   b_stride apart (0: one B for every A); info: count, as sgetrf's.
//   TRANSPOSED = !left (X A = B is A^T X^T = B^T); identity: B = I, b unread.
template <typename T, int N, int TEAMS, bool TRANSPOSED>
METAL_FUNC void solve_small(const device T* a, const device T* b, device T* x, device int* info, int n, int k,
                            int count, int b_stride, int identity,
                            threadgroup typename scalar_traits<T>::real* offered_values,
                            threadgroup int* offered_positions, threadgroup T* offered_rows, threadgroup int* order,
                            threadgroup T* staging, thread_position pos) {
  const int STRIDE = team_shape<N>::STRIDE;
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  threadgroup T* tile = staging + team * N * STRIDE;
  threadgroup int* team_order = order + team * N;
  T row[N];
  load_rows<T, N>(a + matrix * n * n, n, n, present, t, tile, row);
  int position = t;
  // The pivots go to team_order, which takes the row order once they are spent.
  const int first_zero = factor_rows<T, N, TEAMS>(row, position, n, n, present && t < n, 1, team_order,
                                                  offered_values, offered_positions, offered_rows, pos);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // Every row, padding (zeros) included, to its position; the row at position i
  // is A's row order[i]. (Only a team with a matrix: with no condition, or with
  // t < n as the condition, Intel's OpenCL compiler crashes.)
  if (present) {
    #pragma unroll
    for (int j = 0; j < N; ++j) {
      tile[position * STRIDE + j] = row[j];
    }
    team_order[position] = t;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  solve_from_factors<T, N, TRANSPOSED, false>(tile, team_order, b + matrix * b_stride, x + matrix * n * k, n, k,
                                              TRANSPOSED ? 0 : 1, identity, present, t, int(pos.simd_lane) - t);
  if (present && t == 0) {
    info[matrix] = first_zero;
  }
}

// sgetrs for n x n factors, n <= N <= 32, as lu_factor_small leaves them: a
// team stages its LU in threadgroup memory and turns the pivots into a row
// order (slaswp on 0..n-1), then solves (solve_from_factors).
//   lu: count x n x n, lu_stride apart (0: one factorization for every B), by
//   rows (lu_by_columns = 0) or by columns (1: LAPACK's layout, as torch's
//   lu_factor leaves it); pivots: count x n (1-based), n apart (0 where
//   lu_stride is); b, x: count x n x k (left) or count x k x n (right),
//   b_stride apart (0: one B for all).
//   TRANSPOSED = (left == adjoint): A X = B and X A^H = B are not, A^H X = B
//   and X A = B are; CONJUGATED = adjoint.
template <typename T, int N, int TEAMS, bool TRANSPOSED, bool CONJUGATED>
METAL_FUNC void lu_solve_small(const device T* lu, const device int* pivots, const device T* b, device T* x, int n,
                               int k, int count, int lu_stride, int lu_by_columns, int b_stride, int left,
                               threadgroup int* order, threadgroup T* staging, thread_position pos) {
  const int STRIDE = team_shape<N>::STRIDE;
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  threadgroup T* tile = staging + team * N * STRIDE;
  threadgroup int* team_order = order + team * N;
  const device T* LU = lu + matrix * lu_stride;
  // Consecutive threads read consecutive elements: along a row, or along a
  // column when the factors lie by columns.
  #pragma unroll
  for (int q = 0; q < N; ++q) {  // unrolled: a thread's loads are in flight together
    const int e = q * N + t;
    const int i = lu_by_columns ? e % N : e / N;
    const int j = lu_by_columns ? e / N : e % N;
    if (present) {
      tile[i * STRIDE + j] = scalar_traits<T>::from_real(typename scalar_traits<T>::real(0));
      if (i < n && j < n) {
        tile[i * STRIDE + j] = load(LU + (lu_by_columns ? j * n + i : i * n + j));
      }
    }
  }
  // slaswp on 0..n-1 across the team: lane t holds order[t] and pivot t, and
  // each interchange trades two lanes' entries by shuffles (uniform control
  // flow: every lane of the SIMD group runs the batch's n steps).
  const int lane0 = int(pos.simd_lane) - t;
  const device int* ipiv = pivots + matrix * (lu_stride ? n : 0);
  // Out-of-range pivots clamped, as lu_permutation's.
  const int pivot = present && t < n ? min(max(ipiv[t] - 1, 0), n - 1) : t;
  int row = t;
  for (int j = 0; j < n; ++j) {
    const int p = simd_shuffle(pivot, ushort(lane0 + j));
    const int at_j = simd_shuffle(row, ushort(lane0 + j));
    const int at_p = simd_shuffle(row, ushort(lane0 + p));
    row = t == j ? at_p : (t == p ? at_j : row);
  }
  if (present) {
    team_order[t] = row;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  solve_from_factors<T, N, TRANSPOSED, CONJUGATED>(tile, team_order, b + matrix * b_stride, x + matrix * n * k, n, k,
                                                   left, 0, present, t, lane0);
}

// Step j of sgetf2 on the rows first, first + SIMDS, ... (< m) of one panel
// column, the lane's own (column points at its row 0; n is the row stride):
// the pivot column takes the multipliers, columns right of it the rank-1
// update. The multipliers come from the pivot column's lane by shuffles, formed
// as MODE says: 0 by the reciprocal, 1 by division (a pivot below sfmin), 2 not
// at all (a zero pivot). ROWS rows are loaded before any is stored, so that
// their loads are in flight together; every lane takes part in the shuffles
// (rows past m included: control flow stays uniform, with no per-row branch),
// but only those of columns j and right of it load and store.
template <typename T, int ROWS, int SIMDS, int MODE, bool TAIL>
METAL_FUNC void panel_rows(device T* rows, int stride, int count, bool updates, bool pivot_column, ushort pivot_lane,
                           T u, pivot_divisor<T> d) {
  typedef typename scalar_traits<T>::real R;
  T own[ROWS];
  device T* at = rows;
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    own[r] = scalar_traits<T>::from_real(R(0));
    if (updates && (!TAIL || r < count)) {
      own[r] = *at;
    }
    at += stride;
  }
  at = rows;
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    T l = simd_shuffle(own[r], pivot_lane);
    if (MODE == 0) {
      l = l * d.reciprocal;
    } else if (MODE == 1) {
      l = l / d.pivot;
    }
    T updated = multiply_subtract(own[r], l, u);
    if (pivot_column) {
      updated = l;
    }
    if (updates && (!TAIL || r < count)) {
      *at = updated;
    }
    at += stride;
  }
}

// Step j of sgetf2 on the rows first, first + SIMDS, ... (< m) of one panel
// column, the lane's own (column points at its row 0; n is the row stride):
// the pivot column takes the multipliers, columns right of it the rank-1
// update. The multipliers come from the pivot column's lane by shuffles, formed
// as MODE says: 0 by the reciprocal, 1 by division (a pivot below sfmin), 2 not
// at all (a zero pivot). Rows go ROWS at a time, loaded before any is stored so
// that their loads are in flight together; only the last run checks rows
// against m. Every lane takes part in the shuffles, so control flow stays
// uniform; only lanes of columns j and right of it load and store.
template <typename T, int ROWS, int SIMDS, int MODE>
METAL_FUNC void panel_step(device T* column, int n, int first, int m, bool updates, bool pivot_column,
                           ushort pivot_lane, T u, pivot_divisor<T> d) {
  // Offsets within a run are ints (ROWS * SIMDS rows of n); a run's start is not.
  const int stride = SIMDS * n;
  int i0 = first;
  for (; i0 + (ROWS - 1) * SIMDS < m; i0 += ROWS * SIMDS) {
    panel_rows<T, ROWS, SIMDS, MODE, false>(column + long(i0) * n, stride, ROWS, updates, pivot_column, pivot_lane,
                                            u, d);
  }
  if (i0 < m) {
    const int count = (m - i0 + SIMDS - 1) / SIMDS;
    panel_rows<T, ROWS, SIMDS, MODE, true>(column + long(i0) * n, stride, count, updates, pivot_column, pivot_lane,
                                           u, d);
  }
}

// sgetf2 on the panel of columns [j0, j0 + w), w <= 32, of each m x n matrix (its
// rows j0..m-1), in place in device memory, one threadgroup of GROUP threads per
// matrix: the blocked sgetrf's panel where it is too tall for lu_factor_panel's
// registers. Lane c of each SIMD group owns column j0 + c in the update, and SIMD
// group g rows g, g + GROUP / 32, ..., so that every access to a row of the panel
// is one contiguous run; the pivot search gives each thread rows of its own.
// Every step reads and writes the whole panel. Interchanges swap the panel's part
// of the rows only; lu_block_row applies them to the other columns (slaswp). info
// must hold 0 or an earlier panel's first zero pivot.
//   a: count x m x n; pivots: count x min(m, n); info: count.
template <typename T, int GROUP>
METAL_FUNC void lu_factor_tall_panel(device T* a, device int* pivots, device int* info, int m, int n, int j0,
                                     int w, int pivoting, threadgroup typename scalar_traits<T>::real* values,
                                     threadgroup int* positions, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int SIMDS = GROUP / 32;
  const int ROWS = 8;
  const int lane = int(pos.simd_lane);
  const int steps = min(m, n);
  device T* A = a + long(pos.group_index) * m * n;
  device int* ipiv = pivots + long(pos.group_index) * steps;
  const int last = min(j0 + w, steps);
  const int k = j0 + lane;  // this lane's column
  const bool owns_column = lane < w && k < n;
  const T zero = scalar_traits<T>::from_real(R(0));

  for (int j = j0; j < last; ++j) {
    pivot_key<R> mine = {R(-1), NO_PIVOT_POSITION};
    for (int i = j + int(pos.thread_index); i < (pivoting ? m : j + 1); i += GROUP) {
      const pivot_key<R> other = candidate(A[long(i) * n + j], i, true);
      if (better(other, mine)) {
        mine = other;
      }
    }
    const int p = group_best<R, GROUP>(mine, pos, values, positions).position;
    if (p != j && int(pos.simd_group) == 0 && owns_column) {
      const T swapped = A[long(j) * n + k];
      A[long(j) * n + k] = A[long(p) * n + k];
      A[long(p) * n + k] = swapped;
    }
    if (pos.thread_index == 0) {
      ipiv[j] = p + 1;
    }
    threadgroup_barrier(mem_flags::mem_device);
    const T pivot = A[long(j) * n + j];
    if (pos.thread_index == 0 && info[pos.group_index] == 0 && pivot == zero) {
      info[pos.group_index] = j + 1;
    }
    const pivot_divisor<T> d = divisor(pivot);
    T u = zero;
    if (owns_column) {
      u = A[long(j) * n + k];
    }
    const bool updates = owns_column && k >= j;
    const int first = j + 1 + int(pos.simd_group);
    const ushort pivot_lane = ushort(j - j0);
    // The mode is uniform: one branch a step, none a row.
    if (d.zero) {
      panel_step<T, ROWS, SIMDS, 2>(A + k, n, first, m, updates, k == j, pivot_lane, u, d);
    } else if (d.by_reciprocal) {
      panel_step<T, ROWS, SIMDS, 0>(A + k, n, first, m, updates, k == j, pivot_lane, u, d);
    } else {
      panel_step<T, ROWS, SIMDS, 1>(A + k, n, first, m, updates, k == j, pivot_lane, u, d);
    }
    threadgroup_barrier(mem_flags::mem_device);
  }
}

// The widest panel of the blocked sgetrf: a SIMD group's lanes.
#define PANEL_WIDTH 32

// sgetrf2's panel in registers: columns [j0, j0 + w), w <= PANEL_WIDTH, rows
// j0..m-1, of each m x n matrix, one threadgroup of GROUP threads per matrix,
// thread t holding rows j0 + t + GROUP r (r < ROWS), so m - j0 <= GROUP * ROWS.
// Element (i, c) is at i row_stride + c column_stride: stored by columns,
// consecutive threads' rows are consecutive addresses, which a single large
// matrix needs; stored by rows, the rest of the blocked sgetrf is coalesced,
// which batches need. The panel goes SB columns at a time, 32 bytes of each row
// (8 float, 4 complex64 or double, 2 complex128). Each such sub-panel is read
// once, factored in registers by sgetf2 (its steps unrolled, so that every index
// is static) and written once, its rows at their final positions: rows never move
// between threads, each tracks its position, as in lu_factor_small. A step's pivot
// is each SIMD group's best row (two reductions), offered with its row through
// threadgroup memory (double buffered, so one barrier a step), then the best
// offer (two more). Then, as sgetrf2 after its left half, in device memory: the
// sub-panel's interchanges reach the panel's other columns (the moved rows, at
// most 2 SB, listed in threadgroup memory; an element a thread), and the columns
// right of it take U12 = L11^-1 A12 and A22 -= L21 U12, each row by the thread
// that holds its multipliers. Interchanges outside the panel are left to
// lu_block_row; pivots and info as lu_factor_tall_panel's.
//   a: count x m x n; pivots: count x min(m, n); info: count.
template <typename T, int GROUP, int ROWS>
METAL_FUNC void lu_factor_panel(device T* a, device int* pivots, device int* info, int m, int n, int j0, int w,
                                int pivoting, int row_stride, int column_stride,
                                threadgroup typename scalar_traits<T>::real* offered_values,
                                threadgroup int* offered_positions, threadgroup T* offered_rows,
                                threadgroup T* triangle, threadgroup T* block_row, threadgroup int* moved_from,
                                threadgroup int* moved_to, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int SB = 32 / int(sizeof(T));
  // (moved row, other column) pairs a thread carries: 2 SB rows by PANEL_WIDTH columns.
  const int MOVES = (2 * SB * PANEL_WIDTH + GROUP - 1) / GROUP;
  // Columns of A22 loaded together: 16 bytes of each row.
  const int CW = SB / 2 > 0 ? SB / 2 : 1;
  const int SIMDS = GROUP / 32;
  const int t = int(pos.thread_index);
  const int lane = int(pos.simd_lane);
  const int steps = min(m, n);
  device T* A = a + long(pos.group_index) * m * n;
  device int* ipiv = pivots + long(pos.group_index) * steps;
  const long rs = row_stride;
  const long cs = column_stride;
  const int last = j0 + w;
  const T zero = scalar_traits<T>::from_real(R(0));
  int first_zero = 0;
  int parity = 0;
  T row[ROWS][SB];
  int position[ROWS];  // -1: no row of this sub-panel
  if (t < 2 * SB) {
    moved_from[t] = -1;
  }
  for (int c0 = j0; c0 < last; c0 += SB) {
    const int sw = min(SB, last - c0);
    const int c1 = c0 + sw;
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int i = j0 + t + GROUP * r;
      position[r] = i >= c0 && i < m ? i : -1;
      #pragma unroll
      for (int kk = 0; kk < SB; ++kk) {
        row[r][kk] = zero;
        if (position[r] >= 0 && kk < sw) {
          row[r][kk] = A[long(i) * rs + long(c0 + kk) * cs];
        }
      }
    }
    #pragma unroll
    for (int jj = 0; jj < SB; ++jj) {
      if (jj < sw) {
        const int j = c0 + jj;
        pivot_key<R> mine = {R(-1), NO_PIVOT_POSITION};
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          const bool eligible = position[r] >= 0 && (pivoting ? position[r] >= j : position[r] == j);
          const pivot_key<R> other = candidate(row[r][jj], position[r], eligible);
          if (better(other, mine)) {
            mine = other;
          }
        }
        const pivot_key<R> simd = simd_best<R, 32>(mine);
        const int slot = parity * SIMDS + int(pos.simd_group);
        if (lane == 0) {
          offered_values[slot] = simd.value;
          offered_positions[slot] = simd.position;
        }
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if (position[r] >= 0 && position[r] == simd.position) {
            #pragma unroll
            for (int kk = 0; kk < SB; ++kk) {
              if (kk >= jj) {
                offered_rows[slot * SB + kk] = row[r][kk];
              }
            }
          }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // The best offer; its slot rides in the position's low bits.
        pivot_key<R> offer = {R(-1), NO_PIVOT_POSITION};
        if (lane < SIMDS) {
          offer.value = offered_values[parity * SIMDS + lane];
          const int offered = offered_positions[parity * SIMDS + lane];
          offer.position = offered == NO_PIVOT_POSITION ? offered : offered * 32 + lane;
        }
        const pivot_key<R> best = simd_best<R, 32>(offer);
        const int p = best.position / 32;
        const threadgroup T* source = offered_rows + (parity * SIMDS + best.position % 32) * SB;
        T u[SB];
        #pragma unroll
        for (int kk = 0; kk < SB; ++kk) {
          u[kk] = zero;
          if (kk >= jj) {
            u[kk] = source[kk];
          }
        }
        if (t == 0) {
          ipiv[j] = p + 1;
          if (first_zero == 0 && u[jj] == zero) {
            first_zero = j + 1;
          }
        }
        const pivot_divisor<T> d = divisor(u[jj]);
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          if (position[r] == p) {
            position[r] = j;
          } else if (position[r] == j) {
            position[r] = p;
          }
          if (position[r] > j) {
            const T l = multiplier(row[r][jj], d);
            row[r][jj] = l;
            #pragma unroll
            for (int kk = 0; kk < SB; ++kk) {
              if (kk > jj) {
                row[r][kk] = multiply_subtract(row[r][kk], l, u[kk]);
              }
            }
          }
        }
        parity ^= 1;
      }
    }
    // The sub-panel at its rows' final positions, and L11 for the solve below.
    // The moved rows (at most 2 SB) are listed by slot: by final position in
    // [c0, c1), else (a row that left [c0, c1)) by first position.
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int i = j0 + t + GROUP * r;
      if (position[r] >= 0) {
        #pragma unroll
        for (int kk = 0; kk < SB; ++kk) {
          if (kk < sw) {
            A[long(position[r]) * rs + long(c0 + kk) * cs] = row[r][kk];
          }
          if (position[r] < c1) {
            triangle[(position[r] - c0) * SB + kk] = row[r][kk];
          }
        }
      }
      if (position[r] >= 0 && position[r] != i) {
        const int s = position[r] < c1 ? position[r] - c0 : sw + i - c0;
        moved_from[s] = i;
        moved_to[s] = position[r];
      }
    }
    threadgroup_barrier(mem_flags::mem_device);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // The moved rows' other panel columns, an element a thread: every one is read
    // before any is written.
    const int others = w - sw;
    T carried[MOVES];
    #pragma unroll
    for (int q = 0; q < MOVES; ++q) {
      const int pair = t + GROUP * q;
      const int s = pair / PANEL_WIDTH;
      const int e = pair % PANEL_WIDTH;
      const int column = e < c0 - j0 ? j0 + e : c1 + e - (c0 - j0);
      if (s < 2 * SB && e < others && moved_from[s] >= 0) {
        carried[q] = A[long(moved_from[s]) * rs + long(column) * cs];
      }
    }
    threadgroup_barrier(mem_flags::mem_device);
    #pragma unroll
    for (int q = 0; q < MOVES; ++q) {
      const int pair = t + GROUP * q;
      const int s = pair / PANEL_WIDTH;
      const int e = pair % PANEL_WIDTH;
      const int column = e < c0 - j0 ? j0 + e : c1 + e - (c0 - j0);
      if (s < 2 * SB && e < others && moved_from[s] >= 0) {
        A[long(moved_to[s]) * rs + long(column) * cs] = carried[q];
      }
    }
    threadgroup_barrier(mem_flags::mem_device);
    if (t < 2 * SB) {
      moved_from[t] = -1;  // for the next sub-panel; read again after its barriers
    }
    // U12 = L11^-1 A12 (strsm), a thread per column right of the sub-panel.
    const int right = last - c1;
    if (t < right) {
      device T* column = A + long(c0) * rs + long(c1 + t) * cs;
      T b[SB];
      #pragma unroll
      for (int q = 0; q < SB; ++q) {
        b[q] = zero;
        if (q < sw) {
          b[q] = column[long(q) * rs];
        }
      }
      #pragma unroll
      for (int q = 0; q < SB; ++q) {
        #pragma unroll
        for (int s = 0; s < q; ++s) {
          b[q] = multiply_subtract(b[q], triangle[q * SB + s], b[s]);
        }
        if (q < sw) {
          column[long(q) * rs] = b[q];
        }
        block_row[q * PANEL_WIDTH + t] = b[q];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // A22 -= L21 U12 (sgemm), each row by its thread, CW columns loaded together.
    for (int e0 = 0; e0 < right; e0 += CW) {
      T v[ROWS][CW];
      #pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        #pragma unroll
        for (int e = 0; e < CW; ++e) {
          v[r][e] = zero;
          if (position[r] >= c1 && e0 + e < right) {
            v[r][e] = A[long(position[r]) * rs + long(c1 + e0 + e) * cs];
          }
        }
      }
      #pragma unroll
      for (int e = 0; e < CW; ++e) {
        #pragma unroll
        for (int kk = 0; kk < SB; ++kk) {
          const T u = block_row[kk * PANEL_WIDTH + e0 + e];
          #pragma unroll
          for (int r = 0; r < ROWS; ++r) {
            if (kk < sw) {
              v[r][e] = multiply_subtract(v[r][e], row[r][kk], u);
            }
          }
        }
      }
      #pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        #pragma unroll
        for (int e = 0; e < CW; ++e) {
          if (position[r] >= c1 && e0 + e < right) {
            A[long(position[r]) * rs + long(c1 + e0 + e) * cs] = v[r][e];
          }
        }
      }
    }
    threadgroup_barrier(mem_flags::mem_device);
  }
  if (t == 0 && first_zero != 0 && info[pos.group_index] == 0) {
    info[pos.group_index] = first_zero;
  }
}

// sgetrf's block row after a panel: the panel's interchanges pivots[j0 .. j0 + w)
// applied, in order, to the columns outside the panel (slaswp), and for the
// columns right of it U12 = L11^-1 A12 (strsm, L11 the panel's unit lower
// triangle, read once into threadgroup memory), a thread per column, GROUP
// columns per threadgroup, a matrix's threadgroups consecutive. Element (i, c)
// is at i row_stride + c column_stride. The panel's w rows stay in registers
// throughout, so that each row below them is read and written once per
// interchange and no read waits for another's write.
//   a: count x m x n; pivots: count x k (1-based).
template <typename T, int GROUP>
METAL_FUNC void lu_block_row(device T* a, const device int* pivots, int m, int n, int k, int j0, int w, int row_stride,
                             int column_stride, int groups_per_matrix, threadgroup T* triangle, thread_position pos) {
  const long matrix = pos.group_index / groups_per_matrix;
  device T* A = a + matrix * m * n;
  for (int e = int(pos.thread_index); e < PANEL_WIDTH * PANEL_WIDTH; e += GROUP) {
    const int i = e / PANEL_WIDTH;
    const int c = e % PANEL_WIDTH;
    if (c < i && i < w) {
      triangle[e] = A[long(j0 + i) * row_stride + long(j0 + c) * column_stride];
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int column = int(pos.group_index % groups_per_matrix) * GROUP + int(pos.thread_index);
  // The grid covers the n - w columns outside the panel.
  column = column < j0 ? column : column + w;
  if (column >= n) {
    return;
  }
  device T* line = A + long(column) * column_stride;
  const device int* ipiv = pivots + matrix * k;
  T top[PANEL_WIDTH];
  #pragma unroll
  for (int e = 0; e < PANEL_WIDTH; ++e) {
    if (e < w) {
      top[e] = line[long(j0 + e) * row_stride];
    }
  }
  #pragma unroll
  for (int e = 0; e < PANEL_WIDTH; ++e) {
    const int p = e < w ? ipiv[j0 + e] - 1 - j0 : e;  // relative to j0; p >= e
    // (No break for e >= w: Intel's OpenCL compiler miscompiles one here.)
    if (e < w && p >= w) {
      const T below = line[long(j0 + p) * row_stride];
      line[long(j0 + p) * row_stride] = top[e];
      top[e] = below;
    } else if (p != e) {
      #pragma unroll
      for (int f = e + 1; f < PANEL_WIDTH; ++f) {
        if (f == p) {
          const T swapped = top[e];
          top[e] = top[f];
          top[f] = swapped;
        }
      }
    }
  }
  if (column > j0) {
    #pragma unroll
    for (int e = 1; e < PANEL_WIDTH; ++e) {
      #pragma unroll
      for (int f = 0; f < e; ++f) {
        if (e < w) {
          top[e] = multiply_subtract(top[e], triangle[e * PANEL_WIDTH + f], top[f]);
        }
      }
    }
  }
  #pragma unroll
  for (int e = 0; e < PANEL_WIDTH; ++e) {
    if (e < w) {
      line[long(j0 + e) * row_stride] = top[e];
    }
  }
}

// sgetrf's block row as lu_block_row forms it, for matrices stored by columns:
// a SIMD group per column outside the panel, lane e holding the column's
// element of panel row j0 + e, so that the panel's rows of a column are one
// contiguous read and write. The panel's interchanges are first composed into
// where each touched row ends (by shuffles, once per SIMD group): no
// interchange then waits on another, each touched element is read once and
// written once. U12 = L11^-1 A12 is forward substitution across the lanes,
// lane e holding row e of L11 in registers.
//   a: count x m x n; pivots: count x k (1-based).
template <typename T, int GROUP>
METAL_FUNC void lu_block_row_by_columns(device T* a, const device int* pivots, int m, int n, int k, int j0, int w,
                                        int row_stride, int column_stride, int groups_per_matrix,
                                        thread_position pos) {
  const int SIMDS = GROUP / 32;
  const long matrix = pos.group_index / groups_per_matrix;
  int column = int(pos.group_index % groups_per_matrix) * SIMDS + int(pos.simd_group);
  // The grid covers the n - w columns outside the panel; the test is uniform per SIMD group.
  column = column < j0 ? column : column + w;
  if (column >= n) {
    return;
  }
  const int e = int(pos.simd_lane);
  device T* A = a + matrix * m * n;
  const device int* ipiv = pivots + matrix * k;
  // After the interchanges, panel row j0 + e holds row j0 + source; a row
  // j0 + below (below >= w) that an interchange reached holds row j0 +
  // below_source, listed by the lane of the first interchange to reach it.
  int source = e;
  int below = -1;
  int below_source = 0;
  const int target = e < w ? ipiv[j0 + e] - 1 - j0 : e;
  for (int f = 0; f < w; ++f) {
    const int p = simd_shuffle(target, ushort(f));
    const int at_f = simd_shuffle(source, ushort(f));
    if (p < w) {
      const int at_p = simd_shuffle(source, ushort(p));
      source = e == f ? at_p : (e == p ? at_f : source);
    } else {
      const int slot = simd_min(below == p ? e : PANEL_WIDTH);
      const int at_slot = simd_shuffle(below_source, ushort(slot % PANEL_WIDTH));
      if (slot < PANEL_WIDTH) {
        below_source = e == slot ? at_f : below_source;
        source = e == f ? at_slot : source;
      } else if (e == f) {
        below = p;
        below_source = at_f;
        source = p;
      }
    }
  }
  const T zero = scalar_traits<T>::from_real(typename scalar_traits<T>::real(0));
  const long rs = row_stride;
  device T* line = A + long(column) * column_stride;
  const bool solves = column > j0;  // uniform
  T l[PANEL_WIDTH];
  #pragma unroll
  for (int f = 0; f < PANEL_WIDTH; ++f) {
    l[f] = zero;
    if (solves && f < e && e < w) {
      l[f] = load(A + long(j0 + e) * rs + long(j0 + f) * column_stride);
    }
  }
  T value = zero;
  T moved = zero;
  if (e < w) {
    value = load(line + long(j0 + source) * rs);
  }
  if (below >= 0) {
    moved = load(line + long(j0 + below_source) * rs);
  }
  simdgroup_barrier(mem_flags::mem_device);  // every read before any write
  if (below >= 0) {
    store(line + long(j0 + below) * rs, moved);
  }
  if (solves) {
    #pragma unroll
    for (int f = 0; f < PANEL_WIDTH; ++f) {
      const T x = simd_shuffle(value, ushort(f));
      if (f < e && e < w) {
        value = multiply_subtract(value, l[f], x);
      }
    }
  }
  if (e < w) {
    store(line + long(j0 + e) * rs, value);
  }
}

// The row order that LAPACK's interchanges describe (slaswp applied to 0..m-1):
// row i of P^T A is row permutation[i] of A. One thread per matrix; pivots are
// clamped to the matrix, so malformed ones cannot write outside it.
//   pivots: count x k (1-based); permutation: count x m.
template <typename T, int GROUP>
METAL_FUNC void lu_permutation(const device int* pivots, device int* permutation, int m, int k, int count,
                               thread_position pos) {
  const long matrix = long(pos.group_index) * GROUP + pos.thread_index;
  if (matrix >= count) {
    return;
  }
  device int* order = permutation + matrix * m;
  const device int* ipiv = pivots + matrix * k;
  for (int i = 0; i < m; ++i) {
    order[i] = i;
  }
  for (int j = 0; j < k; ++j) {
    const int p = min(max(ipiv[j] - 1, 0), m - 1);
    const int swapped = order[j];
    order[j] = order[p];
    order[p] = swapped;
  }
}

// One u_jj into a determinant's product (lu_determinant's two forms).
template <typename T>
METAL_FUNC void multiply_in(thread T& product, thread typename scalar_traits<T>::real& log_sum, T u, int logarithmic) {
  typedef typename scalar_traits<T>::real R;
  if (!logarithmic) {
    product = product * u;
    return;
  }
  const R size = magnitude(u);
  // An exact zero: sign 0 (torch's), log 0 = -inf.
  product = product * (size == R(0) ? scalar_traits<T>::from_real(R(0)) : phase(u, size));
  log_sum += log(size);
}

// The determinant from sgetrf's factors, as LAPACK's callers form it (torch's
// linalg_det and linalg_slogdet): the product of U's diagonal times (-1) to the
// number of interchanges; one thread a matrix. In place of a dozen elementwise
// launches, each a kernel on Metal.
//   lu: count x n x n; pivots: count x n (1-based).
//   logarithmic = 0: det into det_or_sign; logabs is not read or written.
//   logarithmic = 1: into det_or_sign the sign (the product of u_jj / |u_jj|, a
//   unit-modulus number; 0 if some u_jj is 0), into logabs the sum of log |u_jj|
//   (-inf if some u_jj is 0; a NaN propagates to both).
template <typename T, int GROUP>
METAL_FUNC void lu_determinant(const device T* lu, const device int* pivots, device T* det_or_sign,
                               device typename scalar_traits<T>::real* logabs, int n, int count, int logarithmic,
                               thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const long matrix = long(pos.group_index) * GROUP + pos.thread_index;
  if (matrix >= count) {
    return;
  }
  const device T* a = lu + matrix * long(n) * n;
  const device int* ipiv = pivots + matrix * n;
  bool odd = false;
  for (int j = 0; j < n; ++j) {
    odd = odd != (ipiv[j] != j + 1);
  }
  T product = scalar_traits<T>::from_real(odd ? R(-1) : R(1));
  R log_sum = R(0);
  for (int j = 0; j < n; ++j) {
    multiply_in(product, log_sum, load(a + long(j) * (n + 1)), logarithmic);
  }
  store(det_or_sign + matrix, product);
  if (logarithmic) {
    logabs[matrix] = log_sum;
  }
}

// The determinant (or sign and log |det|) of n x n A, n <= N <= 32, in one
// kernel: factor_rows, then lu_determinant's product over U's diagonal, which
// the thread of each row leaves in the team's tile.
//   a: count x n x n; det_or_sign, logabs: count (as lu_determinant's).
template <typename T, int N, int TEAMS>
METAL_FUNC void determinant_small(const device T* a, device T* det_or_sign, device typename scalar_traits<T>::real* logabs,
                                  int n, int count, int logarithmic,
                                  threadgroup typename scalar_traits<T>::real* offered_values,
                                  threadgroup int* offered_positions, threadgroup T* offered_rows,
                                  threadgroup int* pivot_rows, threadgroup T* staging, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int STRIDE = team_shape<N>::STRIDE;
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  threadgroup T* tile = staging + team * N * STRIDE;
  threadgroup int* team_pivots = pivot_rows + team * N;
  T row[N];
  load_rows<T, N>(a + matrix * n * n, n, n, present, t, tile, row);
  int position = t;
  factor_rows<T, N, TEAMS>(row, position, n, n, present && t < n, 1, team_pivots, offered_values, offered_positions,
                           offered_rows, pos);
  if (present && t < n) {
    T diagonal = row[0];  // u_jj of the row at position j: element j of its row
    #pragma unroll
    for (int k = 1; k < N; ++k) {
      diagonal = k == position ? row[k] : diagonal;
    }
    tile[position] = diagonal;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (present && t == 0) {
    bool odd = false;
    for (int j = 0; j < n; ++j) {
      odd = odd != (team_pivots[j] != j);
    }
    T product = scalar_traits<T>::from_real(odd ? R(-1) : R(1));
    R log_sum = R(0);
    for (int j = 0; j < n; ++j) {
      multiply_in(product, log_sum, tile[j], logarithmic);
    }
    store(det_or_sign + matrix, product);
    if (logarithmic) {
      logabs[matrix] = log_sum;
    }
  }
}
