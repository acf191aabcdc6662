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

// A reflector's tau and beta (the new diagonal entry of R).
template <typename T>
struct reflector {
  T tau;
  typename scalar_traits<T>::real beta;
};

// slarfg / clarfg on rows j .. m - 1 of column v = [alpha; x], by the LANES
// lanes of a team's first SIMD group, lane l taking rows l, l + LANES, ...:
// scales x (rows > j) to the reflector's v so that H^H [alpha; x] = [beta; 0]
// for H = I - tau [1; v] [1; v]^H, and returns tau and beta = -sign(Re alpha)
// ||[alpha; x]||, which the caller stores at row j once every lane has read
// alpha. x = 0 with a real alpha gives tau = 0 (H = I, even for alpha < 0, as
// LAPACK). The norm is formed from terms scaled by the largest, so that it
// neither overflows nor underflows where the result is representable (as
// snrm2 / slapy3); v is x times 1 / (alpha - beta), or x divided by it where
// that reciprocal would overflow (LAPACK rescales instead). Every lane of the
// SIMD group calls this (its reductions are shuffles).
template <typename T, int LANES, int ROWS>
METAL_FUNC reflector<T> make_reflector(threadgroup T* v, int j, int m, int lane) {
  typedef typename scalar_traits<T>::real R;
  const T alpha = v[j];
  R tail_scale = R(0);
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      tail_scale = fmax(tail_scale, abs_max(v[i]));
    }
  }
  tail_scale = lanes_max<LANES>(tail_scale);
  const R scale = fmax(tail_scale, fmax(fabs(real_part(alpha)), fabs(imag_part(alpha))));
  const R inverse_scale = scale > R(0) ? R(1) / scale : R(0);
  R sum = R(0);
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      sum += squared_magnitude(inverse_scale * v[i]);
    }
  }
  sum = lanes_sum<LANES>(sum);
  if (tail_scale == R(0) && imag_part(alpha) == R(0)) {
    return {scalar_traits<T>::from_real(R(0)), real_part(alpha)};
  }
  const R re = real_part(alpha) * inverse_scale;
  const R im = imag_part(alpha) * inverse_scale;
  const R norm = scale * sqrt(fma(re, re, fma(im, im, sum)));
  const R beta = real_part(alpha) >= R(0) ? -norm : norm;
  const T tau = with_imag(scalar_traits<T>::from_real((beta - real_part(alpha)) / beta), -imag_part(alpha) / beta);
  const T d = alpha - scalar_traits<T>::from_real(beta);
  const bool by_reciprocal = has_safe_reciprocal(d);
  const T factor = reciprocal(d);
  #pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = lane + r * LANES;
    if (i > j && i < m) {
      v[i] = by_reciprocal ? v[i] * factor : v[i] / d;
    }
  }
  return {tau, beta};
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
