// General (non-symmetric) eigenproblems A V = V diag(w), as LAPACK's cgeev, for
// batches of small matrices: a thread per matrix, working in device memory.
//
// Complex arithmetic throughout (a real matrix arrives as a complex one):
//   1. scaling by a power of two (max |part| in [1/2, 1)), then balancing by
//      powers of two (cgebal's scaling, without its permutations);
//   2. Householder reduction to upper Hessenberg form (cgehd2), its reflectors
//      accumulated into Z (cunghr);
//   3. the single-shift QR algorithm to the Schur form T = Z^H H Z (clahqr):
//      Wilkinson's shift, exceptional shifts at iterations 10 and 20, a
//      subdiagonal entry set to zero where it is below ulp times its neighbours;
//   4. eigenvectors of T by back substitution (ctrevc: near-zero divisors
//      replaced by smin, growth rescaled), back-transformed by Z and the
//      balancing, normalised as cgeev does: unit 2-norm, largest component real.
// Non-finite input, and a QR iteration that does not converge within
// 30 max(10, n) iterations (clahqr's limit), give NaN eigenvalues and vectors.
//   h: count x n x n, A as complex, overwritten (the workspace);
//   z: count x n x n, the eigenvectors as columns (written only when vectors != 0);
//   w: count x n; work: count x 3n.
#include "common.h"

template <typename R>
METAL_FUNC R eig_unit_roundoff() {
  return sizeof(R) == 4 ? R(5.96046448e-08f) : R(1.11022302e-16f);
}

// Element (r, c) of a row-major n x n matrix.
template <typename T>
METAL_FUNC device T* at(device T* M, int n, int r, int c) {
  return M + long(r) * n + c;
}

// sqrt(z), the root with a non-negative real part, without squaring |z|.
template <typename R>
METAL_FUNC complex_t<R> complex_sqrt(complex_t<R> z) {
  const R size = magnitude(z);
  if (size == R(0)) {
    return {R(0), R(0)};
  }
  const R root = sqrt(R(0.5) * (size + fabs(z.re)));
  if (z.re >= R(0)) {
    return {root, z.im / (R(2) * root)};
  }
  return {fabs(z.im) / (R(2) * root), z.im < R(0) ? -root : root};
}

// The 2-norm of x[0], x[stride], ... (count entries), scaled against underflow.
template <typename T>
METAL_FUNC typename scalar_traits<T>::real scaled_norm(const device T* x, int count, long stride) {
  typedef typename scalar_traits<T>::real R;
  R largest = R(0);
  for (int i = 0; i < count; ++i) {
    largest = fmax(largest, largest_part(load(x + i * stride)));
  }
  if (largest == R(0)) {
    return largest;
  }
  R sum = R(0);
  for (int i = 0; i < count; ++i) {
    const T y = load(x + i * stride);
    const R re = y.re / largest;
    const R im = y.im / largest;
    sum += fma(re, re, im * im);
  }
  return largest * sqrt(sum);
}

// The plane rotation G = [[c, s], [-conj(s), c]] (c real) with G [x; y] = [r; 0].
template <typename T>
struct plane_rotation {
  typename scalar_traits<T>::real c;
  T s;
};

template <typename T>
METAL_FUNC plane_rotation<T> rotation_zeroing(T x, T y) {
  typedef typename scalar_traits<T>::real R;
  const R ax = magnitude(x);
  const R ay = magnitude(y);
  if (ay == R(0)) {
    return {R(1), scalar_traits<T>::from_real(R(0))};
  }
  if (ax == R(0)) {
    return {R(0), scalar_traits<T>::from_real(R(1))};
  }
  const R big = fmax(ax, ay);
  const R r = big * sqrt((ax / big) * (ax / big) + (ay / big) * (ay / big));
  const T unit = phase(x, ax);
  return {ax / r, (R(1) / r) * (unit * conj(y))};
}

// Rows p, q of a matrix: [a_p; a_q] <- G [a_p; a_q].
template <typename T>
METAL_FUNC void rotate_rows_by(device T* a, device T* b, plane_rotation<T> g) {
  const T x = load(a);
  const T y = load(b);
  store(a, g.c * x + g.s * y);
  store(b, g.c * y - conj(g.s) * x);
}

// Columns p, q: [a_p a_q] <- [a_p a_q] G^H.
template <typename T>
METAL_FUNC void rotate_columns_by(device T* a, device T* b, plane_rotation<T> g) {
  const T x = load(a);
  const T y = load(b);
  store(a, g.c * x + conj(g.s) * y);
  store(b, g.c * y - g.s * x);
}

template <typename T, int GROUP>
METAL_FUNC void eig_small(device T* h, device T* z, device T* w, device T* work, int n, int vectors, int count,
                          thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const long matrix = long(pos.group_index) * GROUP + pos.thread_index;
  if (matrix >= count) {
    return;
  }
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  const R ulp = eig_unit_roundoff<R>() * R(2);
  // float's smallest normal and a bound on growth, also for double (no double literal in Metal source).
  const R safe_min = R(1.17549435e-38f);
  const R big = R(1e30f);
  device T* H = h + matrix * n * n;
  device T* Z = z + matrix * n * n;
  device T* W = w + matrix * n;
  device T* x = work + matrix * 3 * n;  // ctrevc's solution
  device T* column = x + n;             // a back-transformed eigenvector
  device T* balance = column + n;       // cgebal's scale factors, in the real parts

  // 1. The power of two that brings max |part| into [1/2, 1): exact, and no later
  // square overflows or underflows on account of A's scale.
  R largest = R(0);
  bool nan_seen = false;  // fmax passes over NaN
  for (int i = 0; i < n * n; ++i) {
    const T a = load(H + i);
    largest = fmax(largest, largest_part(a));
    nan_seen = nan_seen || isnan(a.re) || isnan(a.im);
  }
  bool usable = isfinite(largest) && !nan_seen;
  int e = 0;
  if (usable && largest > R(0)) {
    frexp(largest, e);
  }
  for (int i = 0; usable && i < n * n; ++i) {
    store(H + i, scaled(load(H + i), -e));
  }
  // cgebal's scaling (LAPACK 3.4's, by sums of |re| + |im| off the diagonal): row
  // i divided and column i multiplied by a power of two f until the two sums are
  // within a factor 2, while that reduces their sum by 5 %.
  for (int i = 0; i < n; ++i) {
    store(balance + i, one);
  }
  const R small_scale = safe_min / ulp;
  const R large_scale = R(1) / small_scale;
  bool balancing = usable;
  for (int pass = 0; balancing && pass < 64; ++pass) {
    balancing = false;
    for (int i = 0; i < n; ++i) {
      R c = R(0);
      R r = R(0);
      for (int j = 0; j < n; ++j) {
        if (j != i) {
          c += abs1(load(at(H, n, j, i)));
          r += abs1(load(at(H, n, i, j)));
        }
      }
      if (c == R(0) || r == R(0)) {
        continue;
      }
      const R total = c + r;
      R f = R(1);
      R g = r / R(2);
      while (c < g && f < large_scale && c < large_scale) {
        f *= R(2);
        c *= R(2);
        r /= R(2);
        g /= R(2);
      }
      g = c / R(2);
      while (g >= r && f > small_scale && r < large_scale) {
        f /= R(2);
        c /= R(2);
        g /= R(2);
        r *= R(2);
      }
      const R scale = load(balance + i).re;
      if (c + r >= R(0.95) * total || (f < R(1) && scale < R(1) && f * scale <= small_scale) ||
          (f > R(1) && scale > R(1) && scale >= large_scale / f)) {
        continue;
      }
      store(balance + i, scalar_traits<T>::from_real(scale * f));
      balancing = true;
      for (int j = 0; j < n; ++j) {
        store(at(H, n, i, j), (R(1) / f) * load(at(H, n, i, j)));
        store(at(H, n, j, i), f * load(at(H, n, j, i)));
      }
    }
  }

  // 2. Hessenberg form H <- Q^H H Q, Q = H_0 H_1 ... accumulated in Z (cgehd2):
  // H_k = I - tau v v^H, v = (0, ..., 0, 1, v_{k+2}, ...), stored below H's
  // subdiagonal while it is applied.
  if (vectors != 0) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        store(at(Z, n, i, j), i == j ? one : zero);
      }
    }
  }
  for (int k = 0; usable && k + 2 < n; ++k) {
    const T alpha = load(at(H, n, k + 1, k));
    const R tail = scaled_norm(at(H, n, k + 2, k), n - k - 2, long(n));
    if (tail == R(0) && alpha.im == R(0)) {
      continue;  // H_k = I
    }
    // clarfg: beta = -sign(Re alpha) |(alpha, tail)|.
    const R size = magnitude(alpha);
    const R larger = fmax(size, tail);
    const R norm = larger * sqrt((size / larger) * (size / larger) + (tail / larger) * (tail / larger));
    const R beta = alpha.re >= R(0) ? -norm : norm;
    const T tau = {(beta - alpha.re) / beta, -alpha.im / beta};
    const T divisor = reciprocal(alpha - scalar_traits<T>::from_real(beta));
    for (int i = k + 2; i < n; ++i) {
      store(at(H, n, i, k), load(at(H, n, i, k)) * divisor);
    }
    store(at(H, n, k + 1, k), one);  // v's leading 1 while H_k is applied
    // From the right, H <- H H_k (all rows), and Z <- Z H_k.
    for (int pass = 0; pass < (vectors != 0 ? 2 : 1); ++pass) {
      device T* M = pass == 0 ? H : Z;
      for (int i = 0; i < n; ++i) {
        T s = zero;
        for (int j = k + 1; j < n; ++j) {
          s = s + load(at(M, n, i, j)) * load(at(H, n, j, k));
        }
        s = tau * s;
        for (int j = k + 1; j < n; ++j) {
          store(at(M, n, i, j), multiply_subtract(load(at(M, n, i, j)), s, conj(load(at(H, n, j, k)))));
        }
      }
    }
    // From the left, H <- H_k^H H (columns k + 1 on).
    for (int j = k + 1; j < n; ++j) {
      T s = zero;
      for (int i = k + 1; i < n; ++i) {
        s = s + conj(load(at(H, n, i, k))) * load(at(H, n, i, j));
      }
      s = conj(tau) * s;
      for (int i = k + 1; i < n; ++i) {
        store(at(H, n, i, j), multiply_subtract(load(at(H, n, i, j)), load(at(H, n, i, k)), s));
      }
    }
    store(at(H, n, k + 1, k), scalar_traits<T>::from_real(beta));
    for (int i = k + 2; i < n; ++i) {
      store(at(H, n, i, k), zero);
    }
  }

  // 3. clahqr: the active block is rows and columns l..hi; eigenvalues below hi
  // have converged. With vectors, every rotation reaches the whole rows and
  // columns (the full Schur form, and Z).
  const R small_subdiagonal = safe_min * (R(n) / ulp);
  const int iteration_limit = 30 * max(10, n);
  int hi = n - 1;
  while (usable && hi >= 0) {
    int l = 0;
    bool converged = false;
    for (int iteration = 0; iteration <= iteration_limit; ++iteration) {
      // The last negligible subdiagonal entry at or above hi.
      for (l = hi; l > 0; --l) {
        const R below = abs1(load(at(H, n, l, l - 1)));
        if (below <= small_subdiagonal) {
          break;
        }
        const R around = abs1(load(at(H, n, l - 1, l - 1))) + abs1(load(at(H, n, l, l)));
        if (below <= ulp * around) {
          break;
        }
      }
      if (l > 0) {
        store(at(H, n, l, l - 1), zero);
      }
      if (l >= hi) {
        converged = true;
        break;
      }
      T shift;
      if (iteration == 10) {
        shift = load(at(H, n, l, l)) + scalar_traits<T>::from_real(R(0.75) * abs1(load(at(H, n, l + 1, l))));
      } else if (iteration == 20) {
        shift = load(at(H, n, hi, hi)) + scalar_traits<T>::from_real(R(0.75) * abs1(load(at(H, n, hi, hi - 1))));
      } else {
        // Wilkinson's: the eigenvalue of the trailing 2 x 2 [[a, b], [c, d]] nearer d.
        const T a = load(at(H, n, hi - 1, hi - 1));
        const T bc = load(at(H, n, hi - 1, hi)) * load(at(H, n, hi, hi - 1));
        const T d = load(at(H, n, hi, hi));
        const T gap = R(0.5) * (a - d);
        T root = complex_sqrt(gap * gap + bc);
        if (gap.re * root.re + gap.im * root.im < R(0)) {
          root = -root;
        }
        const T denominator = gap + root;
        shift = d;
        if (magnitude(denominator) > R(0)) {
          shift = d - bc / denominator;
        }
      }
      // One implicit QR step: the bulge made by the shift chased down to hi.
      const int first_column = vectors != 0 ? n : hi + 1;
      const int first_row = vectors != 0 ? 0 : l;
      for (int k = l; k < hi; ++k) {
        const T top = k == l ? load(at(H, n, l, l)) - shift : load(at(H, n, k, k - 1));
        const T bottom = k == l ? load(at(H, n, l + 1, l)) : load(at(H, n, k + 1, k - 1));
        const plane_rotation<T> g = rotation_zeroing(top, bottom);
        for (int j = k == l ? l : k - 1; j < first_column; ++j) {
          rotate_rows_by(at(H, n, k, j), at(H, n, k + 1, j), g);
        }
        for (int i = first_row; i <= min(k + 2, hi); ++i) {
          rotate_columns_by(at(H, n, i, k), at(H, n, i, k + 1), g);
        }
        if (vectors != 0) {
          for (int i = 0; i < n; ++i) {
            rotate_columns_by(at(Z, n, i, k), at(Z, n, i, k + 1), g);
          }
        }
        if (k > l) {
          store(at(H, n, k + 1, k - 1), zero);
        }
      }
    }
    usable = converged;
    hi = l - 1;
  }

  const R nan = R(0) / R(0);
  const T nan_entry = {nan, nan};
  for (int i = 0; i < n; ++i) {
    T eigenvalue = nan_entry;
    if (usable) {
      eigenvalue = scaled(load(at(H, n, i, i)), e);
    }
    store(W + i, eigenvalue);
  }
  if (vectors == 0) {
    return;
  }
  if (!usable) {
    for (int i = 0; i < n * n; ++i) {
      store(Z + i, nan_entry);
    }
    return;
  }

  // 4. ctrevc: T x = lambda_k x with x_k = 1, x_i = 0 below k, by back
  // substitution; the eigenvector of A is D Z x (D the balancing), normalised.
  // Columns from the last: column k of Z is not read after its own.
  for (int k = n - 1; k >= 0; --k) {
    const T lambda = load(at(H, n, k, k));
    const R smin = fmax(ulp * abs1(lambda), small_subdiagonal);
    store(x + k, one);
    for (int i = k - 1; i >= 0; --i) {
      T sum = zero;
      for (int j = i + 1; j <= k; ++j) {
        sum = multiply_subtract(sum, load(at(H, n, i, j)), load(x + j));
      }
      T divisor = load(at(H, n, i, i)) - lambda;
      if (abs1(divisor) < smin) {
        divisor = scalar_traits<T>::from_real(smin);
      }
      // clatrs's care: where sum / divisor would pass big, x_{i+1..k} (and sum)
      // are scaled down first; the solution's direction is kept.
      const R sum_size = abs1(sum);
      if (sum_size > R(1) && abs1(divisor) * big < sum_size) {
        const R down = R(1) / sum_size;
        for (int j = i + 1; j <= k; ++j) {
          store(x + j, down * load(x + j));
        }
        sum = down * sum;
      }
      store(x + i, sum / divisor);
    }
    for (int r = 0; r < n; ++r) {
      T sum = zero;
      for (int j = 0; j <= k; ++j) {
        sum = sum + load(at(Z, n, r, j)) * load(x + j);
      }
      store(column + r, load(balance + r).re * sum);
    }
    // cgeev's normalisation: unit 2-norm, then the largest |v_r| (the first of
    // equals) made real and positive.
    const R norm = scaled_norm(column, n, 1);
    int top = 0;
    R top_size = R(-1);
    for (int r = 0; r < n; ++r) {
      const R size = magnitude(load(column + r));
      if (size > top_size) {
        top_size = size;
        top = r;
      }
    }
    T unit = one;
    if (top_size > R(0)) {
      unit = conj(phase(load(column + top), top_size));
    }
    for (int r = 0; r < n; ++r) {
      T v = (R(1) / norm) * (unit * load(column + r));
      if (r == top) {
        v.im = R(0);
      }
      store(at(Z, n, r, k), v);
    }
  }
}
