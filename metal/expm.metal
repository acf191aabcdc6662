// The squaring phase of the matrix exponential by scaling and squaring, as
// scipy.linalg.expm and Higham's algorithm ("The scaling and squaring method for
// the matrix exponential revisited", SIAM J. Matrix Anal. Appl. 26(4), 2005,
// Algorithm 2.3; MATLAB's expm): exp(A) = r(A / 2^s)^(2^s), the Pade approximant r
// formed by the host (matrix_exp.py), which also chooses s for each matrix from
// its 1-norm. Here each matrix X = r(A / 2^s) is squared in place s times, s read
// from a buffer: the number of squarings differs between matrices, which batched
// products would serve only by squaring every matrix max(s) times.
#include "common.h"
// The LU teams' staging and factorization, for expm_small.
#include "lu.metal"

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

// The row of a product: out = left B, B in a team's tile (row k at k * STRIDE),
// left a thread's row in registers. Threads of a team read the same element of
// B at each step (a broadcast).
template <typename T, int N>
METAL_FUNC void row_times(thread const T (&left)[N], threadgroup const T* B, thread T (&out)[N]) {
  const int STRIDE = team_shape<N>::STRIDE;
  const T zero = scalar_traits<T>::from_real(typename scalar_traits<T>::real(0));
  #pragma unroll
  for (int j = 0; j < N; ++j) {
    T sum = zero;
    #pragma unroll
    for (int k = 0; k < N; ++k) {
      sum = multiply_add(sum, left[k], B[k * STRIDE + j]);
    }
    out[j] = sum;
  }
}

// A thread's row into the team's tile at row i, then a barrier: the tile is
// whole for a product. Callers put a barrier between a product's reads and the
// next write.
template <typename T, int N>
METAL_FUNC void to_tile(thread const T (&row)[N], int i, bool present, threadgroup T* tile) {
  const int STRIDE = team_shape<N>::STRIDE;
  if (present) {
    #pragma unroll
    for (int k = 0; k < N; ++k) {
      tile[i * STRIDE + k] = row[k];
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}

// out += c P, elementwise on a thread's rows.
template <typename T, int N>
METAL_FUNC void add_terms(thread T (&out)[N], thread const T (&P)[N], typename scalar_traits<T>::real c) {
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    out[k] = multiply_add(out[k], scalar_traits<T>::from_real(c), P[k]);
  }
}

// out = c2 P + c4 Q + c6 S, elementwise on a thread's rows.
template <typename T, int N>
METAL_FUNC void combination(thread T (&out)[N], thread const T (&P)[N], thread const T (&Q)[N],
                            thread const T (&S)[N], typename scalar_traits<T>::real c2,
                            typename scalar_traits<T>::real c4, typename scalar_traits<T>::real c6) {
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    out[k] = multiply_add(multiply_add(scalar_traits<T>::from_real(c2) * P[k], scalar_traits<T>::from_real(c4), Q[k]),
                          scalar_traits<T>::from_real(c6), S[k]);
  }
}

// The matrix exponential of n x n matrices, n <= N (8 or 16), in one kernel: Higham's
// scaling and squaring (Algorithm 2.3 of the paper above), every step of
// matrix_exp's composed route (expm_family.py) on a team of N threads, thread t
// holding row t of each matrix in registers, as the LU kernels' teams (lu.metal):
//   1. the 1-norm as expm_family._scaling takes it (largest |a_ij| times the
//      1-norm of A / largest, in log2), the Pade degree (the first whose
//      log2 theta_m bounds it, else the last) and the squarings s;
//   2. X = A / 2^s; X^2, X^4, X^6 by products through the team's tile; U = X W and
//      V, with W, V the combinations of I, X^2, X^4, X^6 (and, for degree 13,
//      X^6 times combinations of them) that Higham's scheme evaluates r_m by;
//   3. (V - U) R = V + U by sgesv's steps: factor_rows (partial pivoting), then
//      forward and back substitution on the rows in registers, the pivot row's
//      elements taken by shuffles (the team lies in one SIMD group);
//   4. R squared s times, and stored (NaN throughout for a matrix with an
//      infinite or NaN entry, as torch's).
// Padding (rows and columns n..N-1) stays zero throughout: the identity terms
// touch only rows below n, and the factorization takes only the n x n system.
//   a, x: count x n x n. coefficients: degrees x slots, b_0 .. b_13 of each
//   degree's approximant (zero past the degree); log2_theta: degrees, ascending.
//   Degree 13 (slots past 7 nonzero) only where R is double.
template <typename T, int N, int TEAMS>
METAL_FUNC void expm_small(const device T* a, device T* x, const device typename scalar_traits<T>::real* coefficients,
                           const device typename scalar_traits<T>::real* log2_theta, int degrees, int slots, int n,
                           int count, threadgroup typename scalar_traits<T>::real* offered_values,
                           threadgroup int* offered_positions, threadgroup T* offered_rows, threadgroup int* order,
                           threadgroup int* most_squarings, threadgroup T* staging, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int STRIDE = team_shape<N>::STRIDE;
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  const bool active = present && t < n;
  const int lane0 = int(pos.simd_lane) - t;
  threadgroup T* tile = staging + team * N * STRIDE;
  threadgroup int* team_order = order + team * N;
  const T zero = scalar_traits<T>::from_real(R(0));
  T X[N];
  load_rows<T, N>(a + matrix * n * n, n, n, present, t, tile, X);

  // 1. The scaling. Lanes of a team reduce by butterflies over their N lanes.
  R largest = R(0);
  R nonfinite = R(0);
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    const R m = magnitude(X[k]);
    nonfinite = isfinite(m) ? nonfinite : R(1);
    largest = fmax(largest, m);
  }
  largest = lanes_max<N>(largest);
  const bool finite = lanes_max<N>(nonfinite) == R(0);
  const R divisor = finite && largest > R(0) ? largest : R(1);
  R norm = R(0);  // of A / divisor
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    norm = fmax(norm, lanes_sum<N>(magnitude(X[k]) / divisor));
  }
  const R log2_norm = log2(norm) + log2(divisor);  // -inf for a zero matrix
  int degree = 0;
  for (int d = 0; d < degrees - 1; ++d) {
    degree += log2_norm > log2_theta[d] ? 1 : 0;
  }
  const R excess = ceil(log2_norm - log2_theta[degrees - 1]);
  const int s = finite && excess > R(0) ? int(excess) : 0;
  const device R* b = coefficients + degree * slots;

  // 2. The approximant's terms, X = A / 2^s.
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    X[k] = scaled(X[k], -s);
  }
  T W[N];  // b_7 X^6 + b_5 X^4 + b_3 X^2 + b_1 I
  T V[N];  // b_6 X^6 + b_4 X^4 + b_2 X^2 + b_0 I
  T P[N];
  T Q[N];
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    W[k] = scalar_traits<T>::from_real(active && k == t ? b[1] : R(0));
    V[k] = scalar_traits<T>::from_real(active && k == t ? b[0] : R(0));
  }
  to_tile<T, N>(X, t, present, tile);
  row_times<T, N>(X, tile, P);  // X^2
  threadgroup_barrier(mem_flags::mem_threadgroup);
  add_terms<T, N>(W, P, b[3]);
  add_terms<T, N>(V, P, b[2]);
  to_tile<T, N>(P, t, present, tile);
  row_times<T, N>(P, tile, Q);  // X^4
  add_terms<T, N>(W, Q, b[5]);
  add_terms<T, N>(V, Q, b[4]);
  T S[N];
  row_times<T, N>(Q, tile, S);  // X^6 = X^4 X^2
  threadgroup_barrier(mem_flags::mem_threadgroup);
  add_terms<T, N>(W, S, b[7]);
  add_terms<T, N>(V, S, b[6]);
  if (sizeof(R) == 8) {
    // Degree 13: W += (b_13 X^6 + b_11 X^4 + b_9 X^2) X^6, V += (b_12 X^6 + b_10 X^4 +
    // b_8 X^2) X^6, as Higham's X^6 (...), with which they commute (as U below); P,
    // Q, S hold X^2, X^4, X^6.
    T Z[N];
    T product[N];
    to_tile<T, N>(S, t, present, tile);
    combination<T, N>(Z, P, Q, S, b[9], b[11], b[13]);
    row_times<T, N>(Z, tile, product);
    add_terms<T, N>(W, product, R(1));
    combination<T, N>(Z, P, Q, S, b[8], b[10], b[12]);
    row_times<T, N>(Z, tile, product);
    add_terms<T, N>(V, product, R(1));
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  // U = X W as W X (W, a polynomial in X, commutes with it): with X in the tile,
  // Intel's OpenCL CPU compiler (2026.2) miscompiles the product for complex T
  // (-cl-opt-disable gives the right U).
  to_tile<T, N>(X, t, present, tile);
  row_times<T, N>(W, tile, P);
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // 3. (V - U) R = V + U: M = V - U factored in place, the right-hand sides' row
  // t in W. Row t of M (and of the right-hand sides) moves to `position`.
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    W[k] = V[k] + P[k];
    V[k] = V[k] - P[k];
  }
  int position = t;
  factor_rows<T, N, TEAMS>(V, position, n, n, active, 1, team_order, offered_values, offered_positions, offered_rows,
                           pos);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (present) {
    team_order[position] = t;  // the thread that holds position i
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // L y = P^T (V + U): at step j the row at position j is final, and the rows
  // below it subtract l_ij times it.
  #pragma unroll
  for (int j = 0; j < N - 1; ++j) {
    if (j < n) {
      const int source = lane0 + team_order[j];
      const T l = V[j];  // l_ij, left of the diagonal in the row at position i
      #pragma unroll
      for (int c = 0; c < N; ++c) {
        const T element = simd_shuffle(W[c], ushort(source));
        if (active && position > j) {
          W[c] = multiply_subtract(W[c], l, element);
        }
      }
    }
  }
  // U R = y: the row at position j divides by u_jj, and the rows above it subtract
  // u_ij times it.
  #pragma unroll
  for (int j = N - 1; j >= 0; --j) {
    if (j < n) {
      const int source = lane0 + team_order[j];
      const T u = V[j];
      if (active && position == j) {
        #pragma unroll
        for (int c = 0; c < N; ++c) {
          W[c] = W[c] / u;
        }
      }
      #pragma unroll
      for (int c = 0; c < N; ++c) {
        const T element = simd_shuffle(W[c], ushort(source));
        if (active && position < j) {
          W[c] = multiply_subtract(W[c], u, element);
        }
      }
    }
  }

  // 4. s squarings (every thread runs the threadgroup's most, so that the
  // barriers are uniform), then the rows to their positions and out.
  if (t == 0) {
    most_squarings[team] = present ? s : 0;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int steps = 0;
  for (int k = 0; k < TEAMS; ++k) {
    steps = max(steps, most_squarings[k]);
  }
  for (int step = 0; step < steps; ++step) {
    to_tile<T, N>(W, position, present, tile);
    row_times<T, N>(W, tile, P);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (step < s) {
      #pragma unroll
      for (int k = 0; k < N; ++k) {
        W[k] = P[k];
      }
    }
  }
  const T nan = scalar_traits<T>::from_real(R(0) / R(0));
  #pragma unroll
  for (int k = 0; k < N; ++k) {
    W[k] = finite ? W[k] : nan;
  }
  to_tile<T, N>(W, position, present, tile);
  device T* out = x + matrix * n * n;
  #pragma unroll
  for (int q = 0; q < N; ++q) {  // consecutive threads along a row
    const int e = q * N + t;
    const int i = e / N;
    const int k = e % N;
    if (present && i < n && k < n) {
      store(out + i * n + k, tile[i * STRIDE + k]);
    }
  }
}
