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
  const R value = magnitude >= R(0) ? magnitude : R(-0.5f);
  return {eligible ? value : R(-1), eligible ? position : NO_PIVOT_POSITION};
}

template <typename R>
METAL_FUNC bool better(pivot_key<R> a, pivot_key<R> b) {
  return a.value > b.value || (a.value == b.value && a.position < b.position);
}

// The best key of a team of TEAM threads (t = 0..TEAM-1), through threadgroup
// memory: SPAN-wide groups are reduced by TEAM / SPAN leaders, whose results
// every thread then reduces. values/positions hold TEAM entries, the leaders'
// arrays TEAM / SPAN; two barriers, which every thread of the threadgroup reaches.
template <typename R, int TEAM>
METAL_FUNC pivot_key<R> team_best(pivot_key<R> mine, int t, threadgroup R* values, threadgroup int* positions,
                                  threadgroup R* leader_values, threadgroup int* leader_positions) {
  const int SPAN = TEAM < 8 ? TEAM : 8;
  const int LEADERS = TEAM / SPAN;
  // Stored span-major, so that the leaders' reads fall in distinct banks.
  values[(t % SPAN) * LEADERS + t / SPAN] = mine.value;
  positions[(t % SPAN) * LEADERS + t / SPAN] = mine.position;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (t < LEADERS) {
    pivot_key<R> best = {values[t], positions[t]};
    for (int s = 1; s < SPAN; ++s) {
      const pivot_key<R> other = {values[s * LEADERS + t], positions[s * LEADERS + t]};
      if (better(other, best)) {
        best = other;
      }
    }
    leader_values[t] = best.value;
    leader_positions[t] = best.position;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  pivot_key<R> best = {leader_values[0], leader_positions[0]};
  for (int s = 1; s < LEADERS; ++s) {
    const pivot_key<R> other = {leader_values[s], leader_positions[s]};
    if (better(other, best)) {
      best = other;
    }
  }
  return best;
}

// The multiplier x / pivot, as sgetf2 forms it: by the reciprocal unless that
// overflows; a zero pivot leaves its column as it is.
template <typename T>
METAL_FUNC T multiplier(T x, T pivot) {
  typedef typename scalar_traits<T>::real R;
  if (pivot == scalar_traits<T>::from_real(R(0))) {
    return x;
  }
  return has_safe_reciprocal(pivot) ? x * (scalar_traits<T>::from_real(R(1)) / pivot) : x / pivot;
}

// sgetf2 / cgetf2 for m x n matrices with m, n <= N, a team of N threads per
// matrix and TEAMS teams per threadgroup. Thread t holds row t in registers, in
// blocks of CB columns (the block loop is unrolled, so every index is static,
// and the step loop inside a block is not). Rows never move: each thread tracks
// its row's position, the pivot row is broadcast through threadgroup memory,
// and every row is stored at its final position. Three barriers a step.
//   a, lu: count x m x n; pivots: count x min(m, n) (1-based); info: count.
//   pivoting = 0 factors without row interchanges (pivots are then 1..k).
template <typename T, int N, int TEAMS>
METAL_FUNC void lu_factor_small(const device T* a, device T* lu, device int* pivots, device int* info, int m, int n,
                                int count, int pivoting, threadgroup typename scalar_traits<T>::real* values,
                                threadgroup int* positions, threadgroup typename scalar_traits<T>::real* leader_values,
                                threadgroup int* leader_positions, threadgroup T* pivot_rows, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int CB = N < 8 ? N : 8;
  const int LEADERS = N / (N < 8 ? N : 8);
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  // Threads of a matrix past the batch end still reach every barrier.
  const bool active = matrix < count && t < m;
  const int steps = min(m, n);
  threadgroup R* my_values = values + team * N;
  threadgroup int* my_positions = positions + team * N;
  threadgroup R* my_leader_values = leader_values + team * LEADERS;
  threadgroup int* my_leader_positions = leader_positions + team * LEADERS;
  threadgroup T* pivot_row = pivot_rows + team * N;
  const T zero = scalar_traits<T>::from_real(R(0));

  T row[N];
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    row[k] = zero;
    if (active && k < n) {
      row[k] = a[(matrix * m + t) * n + k];
    }
  }
  int position = t;
  int first_zero = 0;
  #pragma unroll
  for (int c = 0; c < N / CB; ++c) {
    for (int jj = 0; jj < CB && c * CB + jj < steps; ++jj) {
      const int j = c * CB + jj;
      T x = row[c * CB];
      #pragma unroll
      for (int kk = 1; kk < CB; ++kk) {
        if (kk == jj) {
          x = row[c * CB + kk];
        }
      }
      const bool eligible = active && (pivoting ? position >= j : position == j);
      const pivot_key<R> best = team_best<R, N>(candidate(x, position, eligible), t, my_values, my_positions,
                                                my_leader_values, my_leader_positions);
      const int p = best.position;
      const bool winner = active && position == p;
      if (winner) {
        #pragma unroll
        for (int k = c * CB; k < N; ++k) {
          pivot_row[k] = row[k];
        }
        pivots[matrix * steps + j] = p + 1;
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (position == j) {
        position = p;
      }
      if (winner) {
        position = j;
      }
      const T pivot = pivot_row[j];
      if (first_zero == 0 && pivot == zero) {
        first_zero = j + 1;
      }
      if (active && position > j) {
        const T l = multiplier(x, pivot);
        #pragma unroll
        for (int kk = 0; kk < CB; ++kk) {
          if (kk == jj) {
            row[c * CB + kk] = l;
          } else if (kk > jj) {
            row[c * CB + kk] = row[c * CB + kk] - l * pivot_row[c * CB + kk];
          }
        }
        #pragma unroll
        for (int k = (c + 1) * CB; k < N; ++k) {
          row[k] = row[k] - l * pivot_row[k];
        }
      }
    }
  }
  if (active) {
    #pragma unroll
    for (int k = 0; k < N; ++k) {
      if (k < n) {
        lu[(matrix * m + position) * n + k] = row[k];
      }
    }
  }
  if (matrix < count && t == 0) {
    info[matrix] = first_zero;
  }
}

// sgetf2 on the panel of columns [j0, j0 + w) of each m x n matrix (its rows j0..m-1),
// in place in device memory, one threadgroup of GROUP threads per matrix: the
// panel kernel of the blocked sgetrf. Each interchange swaps whole rows, which
// applies the panel's pivots to the columns left and right of it too (getrf's
// slaswp calls). info must hold 0 or an earlier panel's first zero pivot.
//   a: count x m x n; pivots: count x min(m, n); info: count.
template <typename T, int GROUP>
METAL_FUNC void lu_factor_panel(device T* a, device int* pivots, device int* info, int m, int n, int j0, int w,
                                int pivoting, threadgroup typename scalar_traits<T>::real* values,
                                threadgroup int* positions, threadgroup typename scalar_traits<T>::real* leader_values,
                                threadgroup int* leader_positions, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int t = int(pos.thread_index);
  const int steps = min(m, n);
  device T* A = a + long(pos.group_index) * m * n;
  device int* ipiv = pivots + long(pos.group_index) * steps;
  const int last = min(j0 + w, steps);
  const int columns = min(j0 + w, n);
  for (int j = j0; j < last; ++j) {
    pivot_key<R> mine = {R(-1), NO_PIVOT_POSITION};
    for (int i = j + t; i < (pivoting ? m : j + 1); i += GROUP) {
      const pivot_key<R> other = candidate(A[long(i) * n + j], i, true);
      if (better(other, mine)) {
        mine = other;
      }
    }
    const int p = team_best<R, GROUP>(mine, t, values, positions, leader_values, leader_positions).position;
    if (p != j) {
      for (int k = t; k < n; k += GROUP) {
        const T swapped = A[long(j) * n + k];
        A[long(j) * n + k] = A[long(p) * n + k];
        A[long(p) * n + k] = swapped;
      }
    }
    if (t == 0) {
      ipiv[j] = p + 1;
    }
    threadgroup_barrier(mem_flags::mem_device);
    const T pivot = A[long(j) * n + j];
    if (t == 0 && info[pos.group_index] == 0 && pivot == scalar_traits<T>::from_real(R(0))) {
      info[pos.group_index] = j + 1;
    }
    for (int i = j + 1 + t; i < m; i += GROUP) {
      const T l = multiplier(A[long(i) * n + j], pivot);
      A[long(i) * n + j] = l;
      for (int k = j + 1; k < columns; ++k) {
        A[long(i) * n + k] = A[long(i) * n + k] - l * A[long(j) * n + k];
      }
    }
    threadgroup_barrier(mem_flags::mem_device);
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
