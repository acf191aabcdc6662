// Householder QR of batched small matrices, LAPACK's sgeqr2 / cgeqr2 and
// sorg2r / cung2r: A = Q R with Q = H_0 H_1 ... H_{k-1}, H_j = I - tau_j v_j v_j^H,
// v_j = [0 (j entries); 1; below the diagonal of column j of the packed result].
//
// A team of N threads holds a matrix in threadgroup memory by columns (column
// stride N + 1, so that threads reading their own columns' row i hit distinct
// banks); thread c owns column c.
#include "common.h"

template <typename R>
METAL_FUNC R real_part(R x) {
  return x;
}

template <typename R>
METAL_FUNC R real_part(complex_t<R> z) {
  return z.re;
}

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

// slarfg / clarfg on rows j .. m - 1 of column v = [alpha; x], by the LANES
// lanes of a team's first SIMD group, lane l taking rows l, l + LANES, ...:
// scales x (rows > j) to the reflector's v and returns the reflector, whose
// beta the caller stores at row j once every lane has read alpha. x = 0 with a
// real alpha gives tau = 0. ||x|| is formed from x / max |x_i|, so that it
// neither overflows nor underflows where it is representable (as snrm2). Every
// lane of the SIMD group calls this (its reductions are shuffles).
template <typename T, int LANES, int ROWS>
METAL_FUNC reflector<T> make_reflector(threadgroup T* v, int j, int m, int lane) {
  typedef typename scalar_traits<T>::real R;
  const T alpha = v[j];
  R largest = R(0);
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      largest = fmax(largest, abs_max(v[i]));
    }
  }
  largest = lanes_max<LANES>(largest);
  if (largest == R(0) && imag_part(alpha) == R(0)) {
    return identity_reflector(alpha);
  }
  const bool scale_by_reciprocal = has_safe_reciprocal(largest);
  const R inverse = R(1) / largest;
  R sum = R(0);
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      sum += squared_magnitude(scaled_by(v[i], largest, inverse, scale_by_reciprocal));
    }
  }
  const reflector<T> h = reflector_of(alpha, largest, sqrt(lanes_sum<LANES>(sum)));
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      v[i] = reflected(v[i], h);
    }
  }
  return h;
}

// The team's matrix (m x n, row-major in device memory) into its tile by
// columns, with consecutive threads reading consecutive elements.
template <typename T, int N>
METAL_FUNC void load_columns(const device T* a, int m, int n, bool present, threadgroup T* tile, int t) {
  for (int e = t; e < m * n; e += N) {
    if (present) {
      tile[(e % n) * (N + 1) + e / n] = a[e];
    }
  }
}

template <typename T, int N>
METAL_FUNC void store_columns(const threadgroup T* tile, device T* a, int m, int n, bool present, int t) {
  for (int e = t; e < m * n; e += N) {
    if (present) {
      a[e] = tile[(e % n) * (N + 1) + e / n];
    }
  }
}

// c - s v, the update of one column by a reflector, from row `first` on
// (v[first] = 1 is implicit).
template <typename T>
METAL_FUNC void apply_reflector(threadgroup T* c, const threadgroup T* v, int first, int m, T tau) {
  T w = c[first];
  for (int i = first + 1; i < m; ++i) {
    w = w + conj(v[i]) * c[i];
  }
  const T s = tau * w;
  c[first] = c[first] - s;
  for (int i = first + 1; i < m; ++i) {
    c[i] = multiply_subtract(c[i], s, v[i]);
  }
}

// sgeqr2 / cgeqr2 for m x n matrices, m, n <= N, a team of N threads per matrix
// and TEAMS teams per threadgroup. At step j the team forms the reflector from
// column j; after a barrier every column right of it takes H_j^H (the
// reflector's column is read, not written, until step j is over, but for its
// diagonal entry, which no update reads).
//   a, qr: count x m x n (qr: R on and above the diagonal, the v_j below);
//   tau: count x min(m, n).
template <typename T, int N, int TEAMS>
METAL_FUNC void geqrf_small(const device T* a, device T* qr, device T* tau, int m, int n, int count,
                            threadgroup T* tiles, threadgroup T* taus, thread_position pos) {
  const int team = int(pos.thread_index) / N;
  const int t = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  const int steps = min(m, n);
  threadgroup T* tile = tiles + team * N * (N + 1);
  load_columns<T, N>(a + matrix * m * n, m, n, present, tile, t);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  // The reflectors are formed by the team's first SIMD group (all of a team of
  // N <= 32), which holds every row's lane.
  const int LANES = N < 32 ? N : 32;
  for (int j = 0; j < steps; ++j) {
    threadgroup T* v = tile + j * (N + 1);
    typename scalar_traits<T>::real beta = 0;
    if (t < LANES) {
      const reflector<T> h = make_reflector<T, LANES, N / LANES>(v, j, m, t);
      beta = h.beta;
      if (t == 0) {
        taus[team * N + j] = h.tau;
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (present && t == j % LANES) {
      v[j] = scalar_traits<T>::from_real(beta);
    }
    if (present && t > j && t < n) {
      apply_reflector(tile + t * (N + 1), v, j, m, conj(taus[team * N + j]));
    }
    // Column j + 1, updated by its thread, is read by the next reflector's lanes.
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  store_columns<T, N>(tile, qr + matrix * m * n, m, n, present, t);
  if (present && t < steps) {
    tau[matrix * steps + t] = taus[team * N + t];
  }
}

// sorg2r / cung2r: Q = H_0 ... H_{k-1} I[:, :n] (m x n, k <= n <= m <= N) from the
// first k reflectors of a (m x n, as geqrf leaves them), a team of N threads per
// matrix: thread c builds column c, applying H_{k-1} first. Columns never
// interact, so the sweep has no barrier; the reflectors are read from device
// memory (every thread reads the same element: a broadcast).
//   a, q: count x m x n; tau: count x k.
template <typename T, int N, int TEAMS>
METAL_FUNC void householder_small(const device T* a, const device T* tau, device T* q, int m, int n, int k,
                                  int count, threadgroup T* tiles, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int team = int(pos.thread_index) / N;
  const int c = int(pos.thread_index) % N;
  const long matrix = long(pos.group_index) * TEAMS + team;
  const bool present = matrix < count;
  threadgroup T* tile = tiles + team * N * (N + 1);
  threadgroup T* column = tile + c * (N + 1);
  const device T* A = a + matrix * m * n;
  for (int i = 0; i < m; ++i) {
    column[i] = scalar_traits<T>::from_real(R(i == c ? 1 : 0));
  }
  if (present && c < n) {
    for (int j = min(k, c + 1) - 1; j >= 0; --j) {
      // Rows j + 1 .. m - 1 of v_j, and v_j[j] = 1.
      T w = column[j];
      for (int i = j + 1; i < m; ++i) {
        w = w + conj(A[i * n + j]) * column[i];
      }
      const T s = tau[matrix * k + j] * w;
      column[j] = column[j] - s;
      for (int i = j + 1; i < m; ++i) {
        column[i] = multiply_subtract(column[i], s, A[i * n + j]);
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  store_columns<T, N>(tile, q + matrix * m * n, m, n, present, c);
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
  // Squares of subnormals err by at most 2^-149 each; above this floor, m of
  // them stay below eps relative to the sum for any m < 2^24.
  if (ssq >= R(9.86076132e-32f) && ssq <= R(3.40282347e+38f)) {
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
