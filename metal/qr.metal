// Householder QR of batched small matrices, LAPACK's sgeqr2 / cgeqr2 and
// sorg2r / cung2r: A = Q R with Q = H_0 H_1 ... H_{k-1}, H_j = I - tau_j v_j v_j^H,
// v_j = [0 (j entries); 1; below the diagonal of column j of the packed result].
#include "common.h"

template <typename R>
METAL_FUNC R imag_part(R) {
  return R(0);
}

template <typename R>
METAL_FUNC R imag_part(complex_t<R> z) {
  return z.im;
}

// x with its imaginary part replaced (a real x has none to replace).
template <typename R>
METAL_FUNC R with_imag(R x, R) {
  return x;
}

template <typename R>
METAL_FUNC complex_t<R> with_imag(complex_t<R> z, R im) {
  return {z.re, im};
}

// The larger of |re| and |im|: the scale that keeps squares in range.
template <typename R>
METAL_FUNC R abs_max(R x) {
  return fabs(x);
}

template <typename R>
METAL_FUNC R abs_max(complex_t<R> z) {
  return fmax(fabs(z.re), fabs(z.im));
}

template <typename R>
METAL_FUNC R squared_magnitude(R x) {
  return x * x;
}

template <typename R>
METAL_FUNC R squared_magnitude(complex_t<R> z) {
  return fma(z.re, z.re, z.im * z.im);
}

// A reflector H = I - tau [1; v] [1; v]^H with H^H [alpha; x] = [beta; 0], and
// how v is formed from x: v = (prescale x) / d, by the reciprocal `factor`
// unless it would overflow.
template <typename T>
struct reflector {
  T tau;
  typename scalar_traits<T>::real beta;
  typename scalar_traits<T>::real prescale;
  T d;
  T factor;
  bool by_reciprocal;
};

template <typename T>
METAL_FUNC T reflected(T x, reflector<T> h) {
  x = h.prescale * x;
  if (h.by_reciprocal) {
    return x * h.factor;
  }
  return x / h.d;
}

// sqrt(|alpha|^2 + xnorm^2) without overflow or harmful underflow (slapy3).
template <typename T>
METAL_FUNC typename scalar_traits<T>::real hypot_of(T alpha, typename scalar_traits<T>::real xnorm) {
  typedef typename scalar_traits<T>::real R;
  const R scale = fmax(abs_max(alpha), xnorm);
  const R re = real_part(alpha) / scale;
  const R im = imag_part(alpha) / scale;
  const R x = xnorm / scale;
  return scale * sqrt(fma(re, re, fma(im, im, x * x)));
}

// slarfg / clarfg's arithmetic for [alpha; x] with ||x|| = xscale * xroot, not
// both zero: beta = -sign(Re alpha) ||[alpha; x]||, tau = (beta - alpha) / beta.
// Where alpha and x are all below 2^-102 (LAPACK's safmin / eps) the
// subtractions would lose bits among subnormals, so alpha and x are first
// scaled by 2^102, exactly, as slarfg rescales.
template <typename T>
METAL_FUNC reflector<T> reflector_of(T alpha, typename scalar_traits<T>::real xscale,
                                     typename scalar_traits<T>::real xroot) {
  typedef typename scalar_traits<T>::real R;
  const R prescale = fmax(abs_max(alpha), xscale) < R(1.97215226e-31f) ? R(5.07060240e+30f) : R(1);
  const T a = prescale * alpha;
  const R norm = hypot_of(a, (prescale * xscale) * xroot);
  const R beta = real_part(a) >= R(0) ? -norm : norm;
  const T tau = with_imag(scalar_traits<T>::from_real((beta - real_part(a)) / beta), -imag_part(a) / beta);
  const T d = a - scalar_traits<T>::from_real(beta);
  return {tau, beta / prescale, prescale, d, reciprocal(d), has_safe_reciprocal(d)};
}

// The reflector that leaves [alpha; 0] as it is (tau = 0, LAPACK's choice for a
// real alpha of either sign); x = 0 becomes v = 0.
template <typename T>
METAL_FUNC reflector<T> identity_reflector(T alpha) {
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  return {zero, real_part(alpha), R(1), zero, zero, true};
}

// x / scale, by the reciprocal unless the scale is subnormal (the reciprocal
// would overflow).
template <typename R>
METAL_FUNC R scaled_by(R x, R scale, R inverse, bool by_reciprocal) {
  return by_reciprocal ? inverse * x : x / scale;
}

template <typename R>
METAL_FUNC complex_t<R> scaled_by(complex_t<R> z, R scale, R inverse, bool by_reciprocal) {
  return {scaled_by(z.re, scale, inverse, by_reciprocal), scaled_by(z.im, scale, inverse, by_reciprocal)};
}

// The small kernels keep a matrix's columns in registers, thread c of a team
// of N holding column c (rows past m are zero), and share the reflectors
// through the team's tile in threadgroup memory. Steps go in blocks of RB;
// loops over rows are unrolled (every register index static) and start at
// the block's first row b, so a step spends at most RB - 1 rows above its own.
// The tile holds v_j (v_j[j] = 1, zeros above) from row b on, so that applying
// a reflector needs no per-row test: column j starts at offset(j), and tau_j
// is kept in the N entries after the tile. Every read of the tile in a
// sweep is a broadcast.
template <int N>
struct small_tile {
  // Enumerators, not static data members: MSL puts those at program scope, where
  // a variable must be in the constant address space (an enum is valid on every
  // runtime).
  enum : int {
    RB = N < 8 ? N : 8,
    SIZE = RB * (N / RB) * N - RB * RB * (N / RB) * (N / RB - 1) / 2,
    TEAM_SIZE = SIZE + N + 2,  // + taus, a step's alpha and beta
  };
  // Columns of earlier blocks hold N - (their block's b) rows each.
  METAL_FUNC static int offset(int j) {
    const int block = j / RB;
    return RB * block * N - RB * RB * block * (block - 1) / 2 + (j % RB) * (N - block * RB);
  }
};

// Orders a team's tile accesses: a team of at most 32 lies in one SIMD group.
template <int N>
METAL_FUNC void team_barrier() {
  if (N <= 32) {
    simdgroup_barrier(mem_flags::mem_threadgroup);
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
}

// slarfg / clarfg on x = rows j + 1 .. m - 1 of tile column v, below alpha, by
// the LANES lanes of a team's first SIMD group, lane l taking rows l, l + LANES,
// ...: scales x to the reflector's v and returns the reflector (to every lane).
// x = 0 with a real alpha gives tau = 0. ||x|| is formed from x / max |x_i|, so
// that it neither overflows nor underflows where it is representable (snrm2).
template <typename T, int LANES, int ROWS>
METAL_FUNC reflector<T> make_reflector(threadgroup T* v, T alpha, int j, int m, int lane) {
  typedef typename scalar_traits<T>::real R;
  R largest = R(0);
  R ssq = R(0);
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      largest = fmax(largest, abs_max(v[i]));
      ssq += squared_magnitude(v[i]);
    }
  }
  // Every lane takes every reduction: the SIMD group holds other teams, whose
  // x may be zero where this one's is not.
  largest = lanes_max<LANES>(largest);
  ssq = lanes_sum<LANES>(ssq);  // NaN where x holds one, which fmax passes over
  const bool identity = largest == R(0) && imag_part(alpha) == R(0) && !isnan(ssq);
  const R scale = largest > R(0) ? largest : R(1);
  const bool scale_by_reciprocal = has_safe_reciprocal(scale);
  const R inverse = R(1) / scale;
  R sum = R(0);
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      sum += squared_magnitude(scaled_by(v[i], scale, inverse, scale_by_reciprocal));
    }
  }
  sum = lanes_sum<LANES>(sum);
  reflector<T> h = identity_reflector(alpha);
  if (!identity) {
    h = reflector_of(alpha, largest, sqrt(sum));
  }
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      v[i] = reflected(v[i], h);
    }
  }
  return h;
}

// x <- H x (ADJOINT false) or H^H x (true) for H = I - tau v v^H, v from row b
// of its tile column on (zero above its diagonal row).
template <typename T, int N, bool ADJOINT>
METAL_FUNC void apply_reflector(thread T (&x)[N], const threadgroup T* v, T tau, int b) {
  T w = conj(v[b]) * x[b];
  #pragma unroll
  for (int i = b + 1; i < N; ++i) {
    w = w + conj(v[i]) * x[i];
  }
  if (ADJOINT) {
    tau = conj(tau);
  }
  const T s = tau * w;
  #pragma unroll
  for (int i = b; i < N; ++i) {
    x[i] = multiply_subtract(x[i], s, v[i]);
  }
}

// sgeqr2 / cgeqr2 on the team's matrix, its columns in registers. At step j,
// column j's thread puts x (below the diagonal) in the tile, the team's first
// SIMD group turns it into v_j; after a barrier, every column right of j takes
// H_j^H. The tile ends with every reflector, visible to the team; v_j stays out
// of column j's registers.
template <typename T, int N>
METAL_FUNC void factor_columns(thread T (&col)[N], threadgroup T* tile, int m, int n, int c) {
  typedef typename scalar_traits<T>::real R;
  const int RB = small_tile<N>::RB;
  const int LANES = N < 32 ? N : 32;
  const int steps = min(m, n);
  threadgroup T* taus = tile + small_tile<N>::SIZE;
  threadgroup T* alpha = taus + N;  // the step's diagonal entry
  threadgroup T* beta = taus + N + 1;  // and what it becomes
  #pragma unroll
  for (int b = 0; b < N; b += RB) {
    const int block_steps = min(RB, steps - b);
    for (int jj = 0; jj < block_steps; ++jj) {
      const int j = b + jj;
      threadgroup T* v = tile + small_tile<N>::offset(j) - b;  // v[i], i >= b
      if (c == j) {
        #pragma unroll
        for (int i = b; i < N; ++i) {
          T x = col[i];
          if (i <= j) {
            x = scalar_traits<T>::from_real(R(i == j ? 1 : 0));
          }
          v[i] = x;
        }
        *alpha = element_of<T, N, RB>(col, b, jj);
      }
      team_barrier<N>();
      if (c < LANES) {
        const reflector<T> h = make_reflector<T, LANES, N / LANES>(v, *alpha, j, m, c);
        if (c == 0) {
          taus[j] = h.tau;
          *beta = scalar_traits<T>::from_real(h.beta);
        }
      }
      team_barrier<N>();
      if (c == j) {
        set_element<T, N, RB>(col, b, jj, *beta);
      }
      if (c > j) {
        apply_reflector<T, N, true>(col, v, taus[j], b);
      }
    }
  }
}

// sorg2r / cung2r for column c of Q = H_0 ... H_{k-1} I: e_c, then H_{k-1}
// first. H_j leaves e_c as it is for j > c, so thread c's work begins at
// min(k - 1, c); the team's threads run the same steps, those before theirs
// idle.
template <typename T, int N>
METAL_FUNC void form_q_column(thread T (&q)[N], const threadgroup T* tile, int k, int c) {
  typedef typename scalar_traits<T>::real R;
  const int RB = small_tile<N>::RB;
  const threadgroup T* taus = tile + small_tile<N>::SIZE;
  #pragma unroll
  for (int i = 0; i < N; ++i) {
    q[i] = scalar_traits<T>::from_real(R(i == c ? 1 : 0));
  }
  #pragma unroll
  for (int b = N - RB; b >= 0; b -= RB) {
    for (int j = min(b + RB, k) - 1; j >= b; --j) {
      if (c >= j) {
        apply_reflector<T, N, false>(q, tile + small_tile<N>::offset(j) - b, taus[j], b);
      }
    }
  }
}

// Column c (< n) of the team's m x n matrix into registers, rows past m zero:
// thread c reads element c of each row, so that a team's reads of a row are
// one contiguous run.
template <typename T, int N>
METAL_FUNC void load_column(const device T* a, int m, int n, bool present, int c, thread T (&col)[N]) {
  typedef typename scalar_traits<T>::real R;
  #pragma unroll
  for (int i = 0; i < N; ++i) {
    col[i] = scalar_traits<T>::from_real(R(0));
    if (present && c < n && i < m) {
      col[i] = a[i * n + c];
    }
  }
}

// Rows 0 .. rows - 1 of column c (< n) of an n-column matrix from registers;
// rows past `last` are stored as zeros (R's triangle).
template <typename T, int N>
METAL_FUNC void store_column(thread const T (&col)[N], device T* a, int rows, int n, int last, bool present, int c) {
  typedef typename scalar_traits<T>::real R;
  #pragma unroll
  for (int i = 0; i < N; ++i) {
    T value = scalar_traits<T>::from_real(R(0));
    if (i <= last) {
      value = col[i];
    }
    if (present && c < n && i < rows) {
      a[i * n + c] = value;
    }
  }
}

// sgeqr2 / cgeqr2 for m x n matrices, m, n <= N, a team of N threads per matrix
// and TEAMS teams per threadgroup.
//   a, qr: count x m x n (qr: R on and above the diagonal, the v_j below);
//   tau: count x min(m, n).
template <typename T, int N, int TEAMS>
METAL_FUNC void geqrf_small(const device T* a, device T* qr, device T* tau, int m, int n, int count,
                            threadgroup T* tiles, thread_position pos) {
  const int team = int(pos.thread_index) / N;
  const int c = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  const int steps = min(m, n);
  threadgroup T* tile = tiles + team * small_tile<N>::TEAM_SIZE;
  T col[N];
  load_column<T, N>(a + matrix * m * n, m, n, present, c, col);
  factor_columns<T, N>(col, tile, m, n, c);
  if (c < steps) {  // v_c below the diagonal
    const threadgroup T* v = tile + small_tile<N>::offset(c) - c / small_tile<N>::RB * small_tile<N>::RB;
    #pragma unroll
    for (int i = 1; i < N; ++i) {
      if (i > c) {
        col[i] = v[i];
      }
    }
  }
  store_column<T, N>(col, qr + matrix * m * n, m, n, N, present, c);
  if (present && c < steps) {
    tau[matrix * steps + c] = tile[small_tile<N>::SIZE + c];
  }
}

// sorg2r / cung2r: Q = H_0 ... H_{k-1} I[:, :n] (m x n, k <= n <= m <= N) from the
// first k reflectors of a (m x n, as geqrf leaves them), a team of N threads per
// matrix, thread c building column c.
//   a, q: count x m x n; tau: count x k.
template <typename T, int N, int TEAMS>
METAL_FUNC void householder_small(const device T* a, const device T* tau, device T* q, int m, int n, int k,
                                  int count, threadgroup T* tiles, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int RB = small_tile<N>::RB;
  const int team = int(pos.thread_index) / N;
  const int c = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  threadgroup T* tile = tiles + team * small_tile<N>::TEAM_SIZE;
  T x[N];
  load_column<T, N>(a + matrix * m * n, m, n, present && c < k, c, x);
  // Thread c < k stores v_c from its block's first row on.
  if (c < k) {
    const int b = c / RB * RB;
    threadgroup T* v = tile + small_tile<N>::offset(c) - b;
    #pragma unroll
    for (int i = 0; i < N; ++i) {
      T vi = scalar_traits<T>::from_real(R(i == c ? 1 : 0));
      if (i > c) {
        vi = x[i];
      }
      if (i >= b) {
        v[i] = vi;
      }
    }
    T tau_c = scalar_traits<T>::from_real(R(0));
    if (present) {
      tau_c = tau[matrix * k + c];
    }
    tile[small_tile<N>::SIZE + c] = tau_c;
  }
  team_barrier<N>();
  form_q_column<T, N>(x, tile, k, c);
  store_column<T, N>(x, q + matrix * m * n, m, n, N, present, c);
}

// Householder QR with Q formed in the same launch, m, n <= N, a team of N
// threads per matrix: R (r_rows x n, zeros below the diagonal) and Q (m x
// q_columns, q_columns <= m; not formed when q_columns = 0).
//   a: count x m x n; q: count x m x q_columns; r: count x r_rows x n.
template <typename T, int N, int TEAMS>
METAL_FUNC void qr_small(const device T* a, device T* q, device T* r, int m, int n, int q_columns, int r_rows,
                         int count, threadgroup T* tiles, thread_position pos) {
  const int team = int(pos.thread_index) / N;
  const int c = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  threadgroup T* tile = tiles + team * small_tile<N>::TEAM_SIZE;
  T col[N];
  load_column<T, N>(a + matrix * m * n, m, n, present, c, col);
  factor_columns<T, N>(col, tile, m, n, c);
  store_column<T, N>(col, r + matrix * r_rows * n, r_rows, n, c, present, c);
  if (q_columns > 0) {
    form_q_column<T, N>(col, tile, min(m, n), c);
    store_column<T, N>(col, q + matrix * m * q_columns, m, q_columns, N, present, c);
  }
}

// The sum (MAX false) or the maximum (MAX true) of x over the threadgroup's
// GROUP threads, which all get it. sums: GROUP / 32 entries, free again on
// return. Every thread calls it.
template <int GROUP, bool MAX, typename R>
METAL_FUNC R group_reduce(R x, threadgroup R* sums, thread_position pos) {
  x = MAX ? lanes_max<32>(x) : lanes_sum<32>(x);
  if (pos.simd_lane == 0) {
    sums[pos.simd_group] = x;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  R total = sums[0];
  for (int s = 1; s < GROUP / 32; ++s) {
    total = MAX ? fmax(total, sums[s]) : total + sums[s];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  return total;
}

// ||x|| = scale * root.
template <typename R>
struct scaled_norm {
  R scale;
  R root;
};

// ||x|| for x = rows j + 1 .. m - 1 of column j of A (row stride n): the square
// root of ssq, the plain sum of their squares, where that sum shows that no
// square overflowed and none that underflowed matters; otherwise (near the
// range limits, or x = 0) from the squares of x / max |x_i|, as snrm2 scales,
// in two more passes. ssq must be the same in every thread (the branch is
// uniform).
template <typename T, int GROUP>
METAL_FUNC scaled_norm<typename scalar_traits<T>::real> tail_norm(const device T* A, int n, int j, int m,
                                                                  typename scalar_traits<T>::real ssq,
                                                                  threadgroup typename scalar_traits<T>::real* sums,
                                                                  thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  // A square below 2^-126 errs by at most 2^-149, or is lost whole (less than
  // 2^-126) where subnormals flush to zero, as on Apple GPUs; above this floor,
  // 2^-78, m of them stay below eps relative to the sum for any m < 2^24.
  if (ssq >= R(3.30872245e-24f) && ssq <= R(3.40282347e+38f)) {
    return {R(1), sqrt(ssq)};
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);  // every thread has read sums for ssq
  R largest = R(0);
  for (int i = j + 1 + int(pos.thread_index); i < m; i += GROUP) {
    largest = fmax(largest, abs_max(A[long(i) * n + j]));
  }
  largest = group_reduce<GROUP, true>(largest, sums, pos);
  if (!(largest > R(0))) {
    return {largest, R(0)};
  }
  const bool by_reciprocal = has_safe_reciprocal(largest);
  const R inverse = R(1) / largest;
  R sum = R(0);
  for (int i = j + 1 + int(pos.thread_index); i < m; i += GROUP) {
    sum += squared_magnitude(scaled_by(A[long(i) * n + j], largest, inverse, by_reciprocal));
  }
  return {largest, sqrt(group_reduce<GROUP, false>(sum, sums, pos))};
}

// The first pass of a panel step over ROWS rows of one column (the lane's), at
// rows `at`, `at + stride`, ...: the reflector's lane (pivot_lane) turns its x
// into v and stores it, every lane gets v_i by a shuffle and adds
// conj(v_i) a_i to p, its part of w = v^H A. Only the last run (TAIL) checks its
// rows against count; every lane takes part in the shuffles.
template <typename T, int ROWS, bool TAIL>
METAL_FUNC T reflect_rows(device T* at, int stride, int count, bool owns_column, bool reflector_lane,
                          ushort pivot_lane, reflector<T> h, T p) {
  typedef typename scalar_traits<T>::real R;
  T own[ROWS];
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    own[r] = scalar_traits<T>::from_real(R(0));
    if (owns_column && (!TAIL || r < count)) {
      own[r] = at[r * stride];
    }
  }
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const T v = simd_shuffle(reflected(own[r], h), pivot_lane);
    if (reflector_lane && (!TAIL || r < count)) {
      at[r * stride] = v;
    }
    p = p + conj(v) * own[r];
  }
  return p;
}

// The second pass: a_i - v_i s for the columns right of the reflector (updates),
// s = conj(tau) w; the lane of the next column (squares_lane) adds the squares
// of its updated rows other than row `skip` (the next diagonal) to ssq.
template <typename T, int ROWS, int SIMDS, bool TAIL>
METAL_FUNC typename scalar_traits<T>::real update_rows(device T* at, int stride, int count, int row, int skip,
                                                       bool owns_column, bool updates, bool squares_lane,
                                                       ushort pivot_lane, T s, typename scalar_traits<T>::real ssq) {
  typedef typename scalar_traits<T>::real R;
  T own[ROWS];
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    own[r] = scalar_traits<T>::from_real(R(0));
    if (owns_column && (!TAIL || r < count)) {
      own[r] = at[r * stride];
    }
  }
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const T v = simd_shuffle(own[r], pivot_lane);
    const T updated = multiply_subtract(own[r], v, s);
    if (updates && (!TAIL || r < count)) {
      at[r * stride] = updated;
    }
    if (squares_lane && (!TAIL || r < count) && row + r * SIMDS != skip) {
      ssq += squared_magnitude(updated);
    }
  }
  return ssq;
}

// sgeqr2 / cgeqr2 on the panel of columns [j0, j0 + w), w <= 32, of each m x n
// matrix (its rows j0 .. m - 1), in place in device memory, one threadgroup of
// GROUP threads per matrix: the panel kernel of the blocked sgeqrf. Lane c of
// each SIMD group owns column j0 + c and SIMD group g rows j + 1 + g,
// j + 1 + g + GROUP / 32, ..., so that each access to a row of the panel is one
// contiguous run. Step j reads the panel twice: to form v_j and w = v_j^H A,
// then to update A -= conj(tau) v_j w, the next column's lane summing its new
// squares for the next norm (rows go ROWS at a time, their loads in flight
// together).
//   a: count x m x n; tau: count x min(m, n).
template <typename T, int GROUP>
METAL_FUNC void geqrf_panel(device T* a, device T* tau, int m, int n, int j0, int w, threadgroup T* partials,
                            threadgroup typename scalar_traits<T>::real* sums, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int SIMDS = GROUP / 32;
  const int ROWS = 8;
  const int lane = int(pos.simd_lane);
  const int group = int(pos.simd_group);
  const int steps = min(m, n);
  device T* A = a + long(pos.group_index) * m * n;
  device T* taus = tau + long(pos.group_index) * steps;
  const int last = min(j0 + w, steps);
  const int k = j0 + lane;  // this lane's column
  const bool owns_column = lane < w && k < n;
  const T zero = scalar_traits<T>::from_real(R(0));
  const int stride = SIMDS * n;

  R ssq = R(0);
  for (int i = j0 + 1 + int(pos.thread_index); i < m; i += GROUP) {
    ssq += squared_magnitude(A[long(i) * n + j0]);
  }
  ssq = group_reduce<GROUP, false>(ssq, sums, pos);
  for (int j = j0; j < last; ++j) {
    const scaled_norm<R> xnorm = tail_norm<T, GROUP>(A, n, j, m, ssq, sums, pos);
    const T alpha = A[long(j) * n + j];
    reflector<T> h = identity_reflector(alpha);
    if (!(xnorm.root == R(0) && imag_part(alpha) == R(0))) {
      h = reflector_of(alpha, xnorm.scale, xnorm.root);
    }
    T u = zero;  // row j of this lane's column (v_j[j] = 1)
    if (owns_column) {
      u = A[long(j) * n + k];
    }
    const ushort pivot_lane = ushort(j - j0);
    const int first = j + 1 + group;

    T p = zero;
    int i0 = first;
    for (; i0 + (ROWS - 1) * SIMDS < m; i0 += ROWS * SIMDS) {
      p = reflect_rows<T, ROWS, false>(A + long(i0) * n + k, stride, ROWS, owns_column, k == j, pivot_lane,
                                       h, p);
    }
    if (i0 < m) {
      p = reflect_rows<T, ROWS, true>(A + long(i0) * n + k, stride, (m - i0 + SIMDS - 1) / SIMDS, owns_column,
                                      k == j, pivot_lane, h, p);
    }
    partials[group * 32 + lane] = p;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    T wc = u;
    for (int g = 0; g < SIMDS; ++g) {
      wc = wc + partials[g * 32 + lane];
    }
    const T s = conj(h.tau) * wc;
    const bool updates = owns_column && k > j;

    R next = R(0);
    i0 = first;
    for (; i0 + (ROWS - 1) * SIMDS < m; i0 += ROWS * SIMDS) {
      next = update_rows<T, ROWS, SIMDS, false>(A + long(i0) * n + k, stride, ROWS, i0, j + 1, owns_column, updates,
                                                k == j + 1, pivot_lane, s, next);
    }
    if (i0 < m) {
      next = update_rows<T, ROWS, SIMDS, true>(A + long(i0) * n + k, stride, (m - i0 + SIMDS - 1) / SIMDS, i0, j + 1,
                                               owns_column, updates, k == j + 1, pivot_lane, s, next);
    }
    if (group == 0 && updates) {
      A[long(j) * n + k] = u - s;
    }
    if (group == 0 && owns_column && k == j) {
      A[long(j) * n + j] = scalar_traits<T>::from_real(h.beta);
    }
    if (pos.thread_index == 0) {
      taus[j] = h.tau;
    }
    next = lanes_sum<32>(next);
    if (lane == 0) {
      sums[group] = next;
    }
    // Column j + 1 and the sums of its squares, for the next step.
    threadgroup_barrier(mem_flags::mem_device);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    ssq = R(0);
    for (int g = 0; g < SIMDS; ++g) {
      ssq += sums[g];
    }
  }
}
