// General (non-symmetric) eigenproblems A V = V diag(w), as LAPACK's cgeev
// (complex input) and sgeev (real input), for batches of small matrices: a
// thread per matrix, working in device memory.
//
// Both paths (eig_small picks one by the scalar type):
//   1. scaling by a power of two (max |part| in [1/2, 1)), then balancing by
//      powers of two (xgebal's scaling, without its permutations): shared;
//   2. Householder reduction to upper Hessenberg form (cgehd2 / sgehd2), the
//      reflectors accumulated into Z (cunghr / sorghr): shared;
//   3. complex: the single-shift QR algorithm to the Schur form T = Z^H H Z
//      (clahqr): Wilkinson's shift, exceptional shifts at iterations 10 and 20,
//      a subdiagonal entry set to zero where it is below ulp times its
//      neighbours. Real: Francis's implicit double-shift QR to the real Schur
//      form (slahqr): exceptional shifts after 10 and 20 iterations without a
//      deflation, Ahues and Tisseur's deflation test, each 2 x 2 block put into
//      standard form by slanv2, so that a real eigenvalue has an imaginary part
//      of exactly 0 and a complex pair is written (a + ib, a - ib), b > 0,
//      exactly conjugate (sgeev's wr, wi);
//   4. eigenvectors of T by back substitution (ctrevc / strevc: near-zero
//      divisors replaced by smin, growth rescaled; strevc's quasi-triangular
//      solve with slaln2's 2 x 2 blocks, in real arithmetic for a real
//      eigenvalue and in complex arithmetic on the real T for a pair),
//      back-transformed by Z and the balancing, normalised as cgeev does: unit
//      2-norm, largest component real and positive. A pair's second vector is
//      the exact conjugate of its first.
// Non-finite input, and a QR iteration that does not converge within
// 30 max(10, n) iterations (the limit of clahqr and slahqr), give NaN
// eigenvalues and vectors.
// Complex T:
//   h: count x n x n, A, overwritten (the workspace);
//   z: count x n x n, the eigenvectors as columns (written only when vectors != 0);
//   w: count x n; work: count x 3n.
// Real T (z and w hold complex numbers as (re, im) pairs of T):
//   h: count x n x n, A, overwritten (the workspace);
//   z: count x 2 n n, the eigenvectors as complex columns (written only when vectors != 0);
//   w: count x 2n; work: count x (6n + n n), the last n n (Z) only when vectors != 0.
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

// The value of element (r, c) of a row-major n x n real matrix, and its update.
template <typename R>
METAL_FUNC R entry(const device R* M, int n, int r, int c) {
  return M[long(r) * n + c];
}

template <typename R>
METAL_FUNC void set_entry(device R* M, int n, int r, int c, R value) {
  M[long(r) * n + c] = value;
}

// sqrt(z), the root with a non-negative real part, without squaring |z|.
template <typename R>
METAL_FUNC complex_t<R> complex_sqrt(complex_t<R> z) {
  const R size = magnitude(z);
  if (size == R(0)) {
    return {R(0), R(0)};
  }
  const R root = sqrt(R(0.5f) * (size + fabs(z.re)));
  if (z.re >= R(0)) {
    return {root, z.im / (R(2) * root)};
  }
  return {fabs(z.im) / (R(2) * root), z.im < R(0) ? -root : root};
}

// The imaginary part (0 for a real x).
template <typename R>
METAL_FUNC R imaginary_part(R) {
  return R(0);
}

template <typename R>
METAL_FUNC R imaginary_part(complex_t<R> z) {
  return z.im;
}

// Whether x has a NaN part.
template <typename R>
METAL_FUNC bool has_nan(R x) {
  return isnan(x);
}

template <typename R>
METAL_FUNC bool has_nan(complex_t<R> z) {
  return isnan(z.re) || isnan(z.im);
}

// x as a complex number.
template <typename R>
METAL_FUNC complex_t<R> to_complex(R x) {
  return {x, R(0)};
}

template <typename R>
METAL_FUNC complex_t<R> to_complex(complex_t<R> z) {
  return z;
}

// c + a b for a real a and a real or complex b, c (an update of a solution by a
// column of a real matrix).
template <typename R>
METAL_FUNC R plus_product(R c, R a, R b) {
  return fma(a, b, c);
}

template <typename R>
METAL_FUNC complex_t<R> plus_product(complex_t<R> c, R a, complex_t<R> b) {
  return {fma(a, b.re, c.re), fma(a, b.im, c.im)};
}

// |x / largest|^2: a term of a scaled 2-norm.
template <typename R>
METAL_FUNC R scaled_square(R x, R largest) {
  const R re = x / largest;
  return re * re;
}

template <typename R>
METAL_FUNC R scaled_square(complex_t<R> z, R largest) {
  const R re = z.re / largest;
  const R im = z.im / largest;
  return fma(re, re, im * im);
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
    sum += scaled_square(load(x + i * stride), largest);
  }
  return largest * sqrt(sum);
}

// The Householder reflector's tau = (beta - alpha) / beta (clarfg, slarfg).
template <typename R>
METAL_FUNC R reflector_tau(R alpha, R beta) {
  return (beta - alpha) / beta;
}

template <typename R>
METAL_FUNC complex_t<R> reflector_tau(complex_t<R> alpha, R beta) {
  return {(beta - alpha.re) / beta, -alpha.im / beta};
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

// Whether A could be scaled (it is finite), and the power of two it was scaled by.
struct eig_scaling {
  bool usable;
  int exponent;
};

// Step 1 of cgeev and sgeev, on H (n x n, A on entry): the power of two that
// brings max |part| into [1/2, 1) (exact, and no later square overflows or
// underflows on account of A's scale; xgeev scales by slascl where ||A|| is
// near the range's limits), then xgebal's scaling (LAPACK 3.5's and later, by
// 2-norms of whole rows and columns): row i divided and column i multiplied by a
// power of two f until the two norms are within a factor 2, while that reduces
// their sum by 5 %. The factors go to balance (real parts). (LAPACK 3.4's sums of
// |re| + |im| off the diagonal, used here before, balanced random Hessenberg
// matrices by factors 2^20 apart, and their eigenvectors' sget22 ratios reached
// 40 to 700, LAPACK's 0.3: James, Langou and Lowery, "On matrix balancing and
// eigenvector computation", 2014.)
template <typename T>
METAL_FUNC eig_scaling eig_scale_and_balance(device T* H, device T* balance, int n, typename scalar_traits<T>::real ulp,
                                             typename scalar_traits<T>::real safe_min) {
  typedef typename scalar_traits<T>::real R;
  const T one = scalar_traits<T>::from_real(R(1));
  R largest = R(0);
  bool nan_seen = false;  // fmax passes over NaN
  for (int i = 0; i < n * n; ++i) {
    const T a = load(H + i);
    largest = fmax(largest, largest_part(a));
    nan_seen = nan_seen || has_nan(a);
  }
  const bool usable = isfinite(largest) && !nan_seen;
  int e = 0;
  if (usable && largest > R(0)) {
    frexp(largest, e);
  }
  for (int i = 0; usable && i < n * n; ++i) {
    store(H + i, scaled(load(H + i), -e));
  }
  for (int i = 0; i < n; ++i) {
    store(balance + i, one);
  }
  const R small_scale = safe_min / ulp;  // xgebal's sfmin1, sfmax1, sfmin2, sfmax2
  const R large_scale = R(1) / small_scale;
  const R small_step = small_scale * R(2);
  const R large_step = R(1) / small_step;
  bool balancing = usable;
  for (int pass = 0; balancing && pass < 64; ++pass) {
    balancing = false;
    for (int i = 0; i < n; ++i) {
      // The 2-norms of column and row i (the diagonal included) and their largest entries.
      R c = scaled_norm(at(H, n, 0, i), n, long(n));
      R r = scaled_norm(at(H, n, i, 0), n, 1);
      R ca = R(0);
      R ra = R(0);
      for (int j = 0; j < n; ++j) {
        ca = fmax(ca, magnitude(load(at(H, n, j, i))));
        ra = fmax(ra, magnitude(load(at(H, n, i, j))));
      }
      if (c == R(0) || r == R(0)) {
        continue;
      }
      const R total = c + r;
      R f = R(1);
      R g = r / R(2);
      while (c < g && fmax(f, fmax(c, ca)) < large_step && fmin(r, fmin(g, ra)) > small_step) {
        f *= R(2);
        c *= R(2);
        ca *= R(2);
        r /= R(2);
        g /= R(2);
        ra /= R(2);
      }
      g = c / R(2);
      while (g >= r && fmax(r, ra) < large_step && fmin(fmin(f, c), fmin(g, ca)) > small_step) {
        f /= R(2);
        c /= R(2);
        g /= R(2);
        ca /= R(2);
        r *= R(2);
        ra *= R(2);
      }
      const R scale = real_part(load(balance + i));
      if (c + r >= R(0.95f) * total || (f < R(1) && scale < R(1) && f * scale <= small_scale) ||
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
  const eig_scaling result = {usable, e};
  return result;
}

// Step 2 of cgeev and sgeev: Hessenberg form H <- Q^H H Q (cgehd2, sgehd2), and
// with vectors Q = H_0 H_1 ... accumulated in Z (cunghr, sorghr): H_k = I - tau
// v v^H, v = (0, ..., 0, 1, v_{k+2}, ...), stored below H's subdiagonal while it
// is applied.
template <typename T>
METAL_FUNC void eig_hessenberg(device T* H, device T* Z, int n, int vectors, bool usable) {
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
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
    if (tail == R(0) && imaginary_part(alpha) == R(0)) {
      continue;  // H_k = I
    }
    // xlarfg: beta = -sign(Re alpha) |(alpha, tail)|.
    const R size = magnitude(alpha);
    const R larger = fmax(size, tail);
    const R norm = larger * sqrt((size / larger) * (size / larger) + (tail / larger) * (tail / larger));
    const R beta = real_part(alpha) >= R(0) ? -norm : norm;
    const T tau = reflector_tau(alpha, beta);
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
}

// The normalisation of cgeev (and of this kernel's sgeev) of an eigenvector
// (column, n entries) into column k of V: unit 2-norm, then the largest |v_r|
// (the first of equals) made real and positive; a real_vector's imaginary parts
// are written as 0.
template <typename R>
METAL_FUNC void eig_normalise(device complex_t<R>* column, int n, device complex_t<R>* V, int k, bool real_vector) {
  typedef complex_t<R> T;
  const T one = {R(1), R(0)};
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
    if (r == top || real_vector) {
      v.im = R(0);
    }
    store(at(V, n, r, k), v);
  }
}

// cgeev for one matrix (steps 3 and 4 in complex arithmetic: clahqr, ctrevc).
//   H: A, n x n (the workspace); Z: the eigenvectors; W: the eigenvalues;
//   work: 3n (ctrevc's solution, a back-transformed eigenvector, the balancing).
template <typename R>
METAL_FUNC void geev_matrix(device complex_t<R>* H, device complex_t<R>* Z, device complex_t<R>* W,
                            device complex_t<R>* work, int n, int vectors) {
  typedef complex_t<R> T;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  const R ulp = eig_unit_roundoff<R>() * R(2);
  // float's smallest normal and a bound on growth, also for double (no double literal in Metal source).
  const R safe_min = R(1.17549435e-38f);
  const R big = R(1e30f);
  device T* x = work;            // ctrevc's solution
  device T* column = x + n;      // a back-transformed eigenvector
  device T* balance = column + n;  // cgebal's scale factors, in the real parts

  // 1. Scaling and balancing; 2. Hessenberg form, Q in Z.
  const eig_scaling scaling = eig_scale_and_balance(H, balance, n, ulp, safe_min);
  bool usable = scaling.usable;
  const int e = scaling.exponent;
  eig_hessenberg(H, Z, n, vectors, usable);

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
        shift = load(at(H, n, l, l)) + scalar_traits<T>::from_real(R(0.75f) * abs1(load(at(H, n, l + 1, l))));
      } else if (iteration == 20) {
        shift = load(at(H, n, hi, hi)) + scalar_traits<T>::from_real(R(0.75f) * abs1(load(at(H, n, hi, hi - 1))));
      } else {
        // Wilkinson's: the eigenvalue of the trailing 2 x 2 [[a, b], [c, d]] nearer d.
        const T a = load(at(H, n, hi - 1, hi - 1));
        const T bc = load(at(H, n, hi - 1, hi)) * load(at(H, n, hi, hi - 1));
        const T d = load(at(H, n, hi, hi));
        const T gap = R(0.5f) * (a - d);
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
    eig_normalise(column, n, Z, k, false);
  }
}

// slapy2: sqrt(x^2 + y^2) without needless overflow or underflow.
template <typename R>
METAL_FUNC R pythag(R x, R y) {
  const R a = fabs(x);
  const R b = fabs(y);
  const R w = fmax(a, b);
  const R z = fmin(a, b);
  if (z == R(0) || !isfinite(w)) {
    return w;
  }
  const R q = z / w;
  return w * sqrt(R(1) + q * q);
}

// slarfg for the vector (alpha, x2, x3) of count = 2 or 3 entries (x3 unused for
// 2): the reflector I - tau (1, v)(1, v)^T that takes it to (beta, 0, 0). alpha
// becomes beta, (x2, x3) becomes v; returns tau (0: the identity). tiny is
// slarfg's safmin (the smallest normal over eps), below which |beta| is scaled up.
template <typename R>
METAL_FUNC R small_reflector(int count, thread R& alpha, thread R& x2, thread R& x3, R tiny) {
  R xnorm = count == 3 ? pythag(x2, x3) : fabs(x2);
  if (xnorm == R(0)) {
    return R(0);
  }
  R beta = -copysign(pythag(alpha, xnorm), alpha);
  int knt = 0;
  if (fabs(beta) < tiny) {
    const R up = R(1) / tiny;
    do {
      ++knt;
      x2 *= up;
      x3 *= up;
      beta *= up;
      alpha *= up;
    } while (fabs(beta) < tiny && knt < 20);
    xnorm = count == 3 ? pythag(x2, x3) : fabs(x2);
    beta = -copysign(pythag(alpha, xnorm), alpha);
  }
  const R tau = (beta - alpha) / beta;
  const R scale = R(1) / (alpha - beta);
  x2 *= scale;
  x3 *= scale;
  for (int j = 0; j < knt; ++j) {
    beta *= tiny;
  }
  alpha = beta;
  return tau;
}

// A real plane rotation [[c, s], [-s, c]].
template <typename R>
struct real_rotation {
  R c;
  R s;
};

// slanv2: the Schur factorization of a real 2 x 2 matrix [[a, b], [c, d]] =
// [[cs, -sn], [sn, cs]] [[aa, bb], [cc, dd]] [[cs, sn], [-sn, cs]] in standard
// form: cc = 0 (two real eigenvalues aa, dd), or aa = dd and bb cc < 0 (the
// complex pair aa +- sqrt(-bb cc) i). (a, b, c, d) become (aa, bb, cc, dd);
// returns (cs, sn). eps is slamch('P') (ulp), small slanv2's safmn2.
template <typename R>
METAL_FUNC real_rotation<R> standard_form_2x2(thread R& a, thread R& b, thread R& c, thread R& d, R eps, R small) {
  const R multpl = R(4);
  real_rotation<R> g = {R(1), R(0)};
  if (c == R(0)) {
    return g;
  }
  if (b == R(0)) {
    // Swap rows and columns.
    g.c = R(0);
    g.s = R(1);
    const R temp = d;
    d = a;
    a = temp;
    b = -c;
    c = R(0);
    return g;
  }
  if ((a - d) == R(0) && copysign(R(1), b) != copysign(R(1), c)) {
    return g;
  }
  R temp = a - d;
  R p = R(0.5f) * temp;
  const R bcmax = fmax(fabs(b), fabs(c));
  const R bcmis = fmin(fabs(b), fabs(c)) * copysign(R(1), b) * copysign(R(1), c);
  R scale = fmax(fabs(p), bcmax);
  R z = (p / scale) * p + (bcmax / scale) * bcmis;
  // If z is of the order of the machine accuracy, postpone the decision on the
  // nature of the eigenvalues.
  if (z >= multpl * eps) {
    // Real eigenvalues: compute a and d.
    z = p + copysign(sqrt(scale) * sqrt(z), p);
    a = d + z;
    d = d - (bcmax / z) * bcmis;
    const R tau = pythag(c, z);
    g.c = z / tau;
    g.s = c / tau;
    b = b - c;
    c = R(0);
    return g;
  }
  // Complex eigenvalues, or real (almost) equal ones: make the diagonal entries equal.
  const R large = R(1) / small;
  R sigma = b + c;
  for (int count = 1;; ++count) {
    scale = fmax(fabs(temp), fabs(sigma));
    if (scale >= large) {
      sigma *= small;
      temp *= small;
      if (count <= 20) {
        continue;
      }
    }
    if (scale <= small) {
      sigma *= large;
      temp *= large;
      if (count <= 20) {
        continue;
      }
    }
    break;
  }
  p = R(0.5f) * temp;
  R tau = pythag(sigma, temp);
  R cs = sqrt(R(0.5f) * (R(1) + fabs(sigma) / tau));
  R sn = -(p / (tau * cs)) * copysign(R(1), sigma);
  // [[aa, bb], [cc, dd]] = [[a, b], [c, d]] [[cs, -sn], [sn, cs]]
  const R aa = a * cs + b * sn;
  const R bb = -a * sn + b * cs;
  const R cc = c * cs + d * sn;
  const R dd = -c * sn + d * cs;
  // [[a, b], [c, d]] = [[cs, sn], [-sn, cs]] [[aa, bb], [cc, dd]]
  a = aa * cs + cc * sn;
  b = (bb * cs) + (dd * sn);
  c = -(aa * sn) + (cc * cs);
  d = -bb * sn + dd * cs;
  temp = R(0.5f) * (a + d);
  a = temp;
  d = temp;
  if (c != R(0)) {
    if (b != R(0)) {
      if (copysign(R(1), b) == copysign(R(1), c)) {
        // Real eigenvalues: reduce to upper triangular form.
        const R sab = sqrt(fabs(b));
        const R sac = sqrt(fabs(c));
        p = copysign(sab * sac, c);
        tau = R(1) / sqrt(fabs(b + c));
        a = temp + p;
        d = temp - p;
        b = b - c;
        c = R(0);
        const R cs1 = sab * tau;
        const R sn1 = sac * tau;
        temp = cs * cs1 - sn * sn1;
        sn = cs * sn1 + sn * cs1;
        cs = temp;
      }
    } else {
      b = -c;
      c = R(0);
      temp = cs;
      cs = -sn;
      sn = temp;
    }
  }
  g.c = cs;
  g.s = sn;
  return g;
}

// srot on two vectors of count entries, x[i * stride] and y[i * stride]:
// (x, y) <- (c x + s y, c y - s x).
template <typename R>
METAL_FUNC void rotate_pair(device R* x, device R* y, int count, long stride, real_rotation<R> g) {
  for (int i = 0; i < count; ++i) {
    const R a = x[i * stride];
    const R b = y[i * stride];
    x[i * stride] = g.c * a + g.s * b;
    y[i * stride] = g.c * b - g.s * a;
  }
}

// The solution of a 2 x 2 system and the factor its right-hand side was scaled by.
template <typename X, typename R>
struct solution_2x2 {
  X x1;
  X x2;
  R scale;
  R norm;  // max(|x1|, |x2|) in abs1
};

// slaln2 for a 2 x 2 block: ([[t11, t12], [t21, t22]] - lambda I) (x1, x2) =
// scale (b1, b2) by complete pivoting, a pivot (or the whole matrix) below smin
// taken as smin, scale <= 1 chosen so that the solution stays below big. X is R
// for a real lambda, complex_t<R> for a complex one.
template <typename X, typename R>
METAL_FUNC solution_2x2<X, R> solve_2x2(R t11, R t12, R t21, R t22, X lambda, X b1, X b2, R smin, R big) {
  typedef scalar_traits<X> traits;
  const X a11 = traits::from_real(t11) - lambda;
  const X a12 = traits::from_real(t12);
  const X a21 = traits::from_real(t21);
  const X a22 = traits::from_real(t22) - lambda;
  solution_2x2<X, R> out;
  out.scale = R(1);
  // The pivot: the largest entry, the first of equals in column-major order.
  R cmax = abs1(a11);
  int pivot = 0;
  if (abs1(a21) > cmax) {
    cmax = abs1(a21);
    pivot = 1;
  }
  if (abs1(a12) > cmax) {
    cmax = abs1(a12);
    pivot = 2;
  }
  if (abs1(a22) > cmax) {
    cmax = abs1(a22);
    pivot = 3;
  }
  if (cmax < smin) {
    // The whole matrix is below smin: smin I in its place.
    const R bnorm = fmax(abs1(b1), abs1(b2));
    if (smin < R(1) && bnorm > R(1) && bnorm > big * smin) {
      out.scale = R(1) / bnorm;
    }
    const R f = out.scale / smin;
    out.x1 = f * b1;
    out.x2 = f * b2;
    out.norm = f * bnorm;
    return out;
  }
  // [[p, q], [r, s]] (c1, c2): the system with the pivot moved to the top left.
  X p = a11;
  X q = a12;
  X r = a21;
  X s = a22;
  X c1 = b1;
  X c2 = b2;
  if (pivot == 1) {
    p = a21;
    q = a22;
    r = a11;
    s = a12;
    c1 = b2;
    c2 = b1;
  } else if (pivot == 2) {
    p = a12;
    q = a11;
    r = a22;
    s = a21;
  } else if (pivot == 3) {
    p = a22;
    q = a21;
    r = a12;
    s = a11;
    c1 = b2;
    c2 = b1;
  }
  const X l21 = r / p;
  X u22 = multiply_subtract(s, l21, q);
  if (abs1(u22) < smin) {
    u22 = traits::from_real(smin);
  }
  const X d2 = multiply_subtract(c2, l21, c1);
  const R u22_size = abs1(u22);
  const R bound = fmax(abs1(c1) * (u22_size / cmax), abs1(d2));
  if (bound > R(1) && u22_size < R(1) && bound >= big * u22_size) {
    out.scale = R(1) / bound;
  }
  const X y2 = (out.scale * d2) / u22;
  const X y1 = multiply_subtract(out.scale * c1, q, y2) / p;
  out.x1 = y1;
  out.x2 = y2;
  if (pivot >= 2) {
    out.x1 = y2;
    out.x2 = y1;
  }
  out.norm = fmax(abs1(y1), abs1(y2));
  // Further scaling where ||A|| ||x|| would pass big.
  if (out.norm > R(1) && cmax > R(1) && out.norm > big / cmax) {
    const R down = R(1) / out.norm;
    out.x1 = down * out.x1;
    out.x2 = down * out.x2;
    out.scale *= down;
    out.norm = R(1);
  }
  return out;
}

// strevc's solve of the upper quasi-triangular system (T[0..top, 0..top] -
// lambda I) y = scale b for a right eigenvector: x[0..top] holds b on entry, y
// on return. 1 x 1 and 2 x 2 diagonal blocks (a nonzero T[j][j - 1] marks one)
// are solved as slaln2 does, divisors below smin taken as smin; where a quotient,
// or the update of the right-hand side by a column of T (norms: the 1-norms of
// T's columns above the diagonal), could pass big, all of x[0..last] is scaled
// down first (scale < 1). X is R for a real lambda, complex_t<R> for a complex one.
template <typename X, typename R>
METAL_FUNC void quasi_triangular_solve(const device R* T, int n, int top, int last, X lambda, device X* x,
                                       const device R* norms, R smin, R big) {
  typedef scalar_traits<X> traits;
  // One row a pass (see geev_matrix's step 4): the first row of a 2 x 2 block is
  // solved with its second.
  for (int j = top; j >= 0; --j) {
    if (j < top && entry(T, n, j + 1, j) != R(0)) {
      continue;
    }
    if (j > 0 && entry(T, n, j, j - 1) != R(0)) {
      // A 2 x 2 block, rows j - 1 and j.
      solution_2x2<X, R> y = solve_2x2(entry(T, n, j - 1, j - 1), entry(T, n, j - 1, j), entry(T, n, j, j - 1),
                                       entry(T, n, j, j), lambda, load(x + j - 1), load(x + j), smin, big);
      if (y.norm > R(1) && fmax(norms[j - 1], norms[j]) > big / y.norm) {
        const R down = R(1) / y.norm;
        y.x1 = down * y.x1;
        y.x2 = down * y.x2;
        y.scale *= down;
      }
      if (y.scale != R(1)) {
        for (int i = 0; i <= last; ++i) {
          store(x + i, y.scale * load(x + i));
        }
      }
      store(x + j - 1, y.x1);
      store(x + j, y.x2);
      for (int i = 0; i < j - 1; ++i) {
        store(x + i, plus_product(plus_product(load(x + i), -entry(T, n, i, j - 1), y.x1), -entry(T, n, i, j), y.x2));
      }
      continue;
    }
    X divisor = traits::from_real(entry(T, n, j, j)) - lambda;
    if (abs1(divisor) < smin) {
      divisor = traits::from_real(smin);
    }
    const X b = load(x + j);
    const R size = abs1(divisor);
    const R b_size = abs1(b);
    R scale = R(1);
    if (size < R(1) && b_size > R(1) && b_size > big * size) {
      scale = R(1) / b_size;
    }
    X y = (scale * b) / divisor;
    const R y_size = abs1(y);
    if (y_size > R(1) && norms[j] > big / y_size) {
      const R down = R(1) / y_size;
      y = down * y;
      scale *= down;
    }
    if (scale != R(1)) {
      for (int i = 0; i <= last; ++i) {
        store(x + i, scale * load(x + i));
      }
    }
    store(x + j, y);
    for (int i = 0; i < j; ++i) {
      store(x + i, plus_product(load(x + i), -entry(T, n, i, j), y));
    }
  }
}

// The eigenvector of A from the solution x[0..k] on the Schur form: D Z x
// (sgebak after strevc's back-transformation; D the balancing), x first scaled to
// a largest entry of 1 (strevc's normalisation) so that D cannot overflow it.
template <typename X, typename R>
METAL_FUNC void back_transform(const device R* Z, const device R* balance, int n, int k, const device X* x,
                               device complex_t<R>* column) {
  R largest = R(0);
  for (int j = 0; j <= k; ++j) {
    largest = fmax(largest, abs1(load(x + j)));
  }
  const R down = largest > R(0) ? R(1) / largest : R(1);
  for (int r = 0; r < n; ++r) {
    X sum = scalar_traits<X>::from_real(R(0));
    for (int j = 0; j <= k; ++j) {
      sum = plus_product(sum, entry(Z, n, r, j), load(x + j));
    }
    store(column + r, to_complex(balance[r] * (down * sum)));
  }
}

// sgeev for one real matrix (steps 3 and 4 in real arithmetic: slahqr with
// slanv2, strevc).
//   H: A, n x n (the workspace); V: the eigenvectors (complex, n x n);
//   W: the eigenvalues (complex, n);
//   work: 6n + n n reals (strevc's solution, as 2n reals for a pair's complex
//   one; a back-transformed eigenvector, 2n; sgebal's scale factors, n; strevc's
//   column norms, n; Z, n n, with vectors only).
template <typename R>
METAL_FUNC void geev_matrix(device R* H, device complex_t<R>* V, device complex_t<R>* W, device R* work, int n,
                            int vectors) {
  typedef complex_t<R> C;
  const R ulp = eig_unit_roundoff<R>() * R(2);
  // float's smallest normal and a bound on growth, also for double (as cgeev's path).
  const R safe_min = R(1.17549435e-38f);
  const R big = R(1e30f);
  const bool wantt = vectors != 0;   // the full Schur form T, not only its eigenvalues
  device C* x = reinterpret_cast<device C*>(work);            // strevc's solution (a pair's)
  device R* x_real = work;                                     // the same storage, a real eigenvalue's
  device C* column = reinterpret_cast<device C*>(work + 2 * n);  // a back-transformed eigenvector
  device R* balance = work + 4 * n;                            // sgebal's scale factors
  device R* norms = work + 5 * n;                              // strevc's column norms of T
  device R* Z = wantt ? work + 6 * n : work;                   // the Schur vectors (with vectors only)

  // 1. Scaling and balancing; 2. Hessenberg form, Q in Z.
  const eig_scaling scaling = eig_scale_and_balance(H, balance, n, ulp, safe_min);
  bool usable = scaling.usable;
  const int e = scaling.exponent;
  eig_hessenberg(H, Z, n, vectors, usable);

  // 3. slahqr: the active block is rows and columns l..i; eigenvalues below i have
  // converged, as 1 x 1 blocks and 2 x 2 blocks in slanv2's standard form. With
  // vectors, every reflector and rotation reaches the whole rows and columns
  // (the full Schur form, and Z).
  const R small_num = safe_min * (R(n) / ulp);
  const R tiny = safe_min / eig_unit_roundoff<R>();                   // slarfg's safmin
  const R small_2x2 = ldexp(R(1), sizeof(R) == 4 ? -51 : -485);        // slanv2's safmn2
  const int iteration_limit = 30 * max(10, n);
  int kdefl = 0;  // iterations since a deflation
  int i = n - 1;
  while (usable && i >= 0) {
    int l = 0;
    bool converged = false;
    for (int its = 0; its <= iteration_limit; ++its) {
      // Look for a single small subdiagonal entry (Ahues and Tisseur's test).
      int k = i;
      for (; k > l; --k) {
        const R below = fabs(entry(H, n, k, k - 1));
        if (below <= small_num) {
          break;
        }
        R around = fabs(entry(H, n, k - 1, k - 1)) + fabs(entry(H, n, k, k));
        if (around == R(0)) {
          if (k - 2 >= 0) {
            around += fabs(entry(H, n, k - 1, k - 2));
          }
          if (k + 1 <= n - 1) {
            around += fabs(entry(H, n, k + 1, k));
          }
        }
        if (below <= ulp * around) {
          const R above = fabs(entry(H, n, k - 1, k));
          const R ab = fmax(below, above);
          const R ba = fmin(below, above);
          const R diagonal = fabs(entry(H, n, k, k));
          const R gap = fabs(entry(H, n, k - 1, k - 1) - entry(H, n, k, k));
          const R aa = fmax(diagonal, gap);
          const R bb = fmin(diagonal, gap);
          const R s = aa + ab;
          if (ba * (ab / s) <= fmax(small_num, ulp * (bb * (aa / s)))) {
            break;
          }
        }
      }
      l = k;
      if (l > 0) {
        set_entry(H, n, l, l - 1, R(0));  // H(l, l - 1) is negligible
      }
      // A block of order 1 or 2 has split off.
      if (l >= i - 1) {
        converged = true;
        break;
      }
      ++kdefl;
      const int i1 = wantt ? 0 : l;
      const int i2 = wantt ? n - 1 : i;
      R h11;
      R h12;
      R h21;
      R h22;
      if (kdefl % 20 == 0) {
        // Exceptional shift (bottom).
        const R s = fabs(entry(H, n, i, i - 1)) + fabs(entry(H, n, i - 1, i - 2));
        h11 = R(0.75f) * s + entry(H, n, i, i);
        h12 = R(-0.4375f) * s;
        h21 = s;
        h22 = h11;
      } else if (kdefl % 10 == 0) {
        // Exceptional shift (top).
        const R s = fabs(entry(H, n, l + 1, l)) + fabs(entry(H, n, l + 2, l + 1));
        h11 = R(0.75f) * s + entry(H, n, l, l);
        h12 = R(-0.4375f) * s;
        h21 = s;
        h22 = h11;
      } else {
        // Francis's double shift: the eigenvalues of the trailing 2 x 2.
        h11 = entry(H, n, i - 1, i - 1);
        h21 = entry(H, n, i, i - 1);
        h12 = entry(H, n, i - 1, i);
        h22 = entry(H, n, i, i);
      }
      R rt1r = R(0);
      R rt1i = R(0);
      R rt2r = R(0);
      R rt2i = R(0);
      const R s = fabs(h11) + fabs(h12) + fabs(h21) + fabs(h22);
      if (s != R(0)) {
        h11 /= s;
        h21 /= s;
        h12 /= s;
        h22 /= s;
        const R tr = (h11 + h22) / R(2);
        const R det = (h11 - tr) * (h22 - tr) - h12 * h21;
        const R rtdisc = sqrt(fabs(det));
        if (det >= R(0)) {
          // A complex conjugate pair of shifts.
          rt1r = tr * s;
          rt2r = rt1r;
          rt1i = rtdisc * s;
          rt2i = -rt1i;
        } else {
          // Real shifts: only the one nearer h22, twice.
          rt1r = tr + rtdisc;
          rt2r = tr - rtdisc;
          if (fabs(rt1r - h22) <= fabs(rt2r - h22)) {
            rt1r = rt1r * s;
            rt2r = rt1r;
          } else {
            rt2r = rt2r * s;
            rt1r = rt2r;
          }
        }
      }
      // Look for two consecutive small subdiagonal entries: the first column of
      // (H - rt1) (H - rt2), scaled, from row m.
      int m = i - 2;
      R v1 = R(0);
      R v2 = R(0);
      R v3 = R(0);
      for (; m >= l; --m) {
        const R hmm = entry(H, n, m, m);
        R h21s = entry(H, n, m + 1, m);
        R size = fabs(hmm - rt2r) + fabs(rt2i) + fabs(h21s);
        h21s = entry(H, n, m + 1, m) / size;
        v1 = h21s * entry(H, n, m, m + 1) + (hmm - rt1r) * ((hmm - rt2r) / size) - rt1i * (rt2i / size);
        v2 = h21s * (hmm + entry(H, n, m + 1, m + 1) - rt1r - rt2r);
        v3 = h21s * entry(H, n, m + 2, m + 1);
        size = fabs(v1) + fabs(v2) + fabs(v3);
        v1 /= size;
        v2 /= size;
        v3 /= size;
        if (m == l) {
          break;
        }
        const R h01 = fabs(entry(H, n, m, m - 1)) * (fabs(v2) + fabs(v3));
        const R h00 = ulp * fabs(v1) *
                      (fabs(entry(H, n, m - 1, m - 1)) + fabs(hmm) + fabs(entry(H, n, m + 1, m + 1)));
        if (h01 <= h00) {
          break;
        }
      }
      // The double-shift QR step: a reflector of order 3 (2 at the end) makes the
      // bulge at row m and each next one chases it down a row.
      for (k = m; k <= i - 1; ++k) {
        const int nr = min(3, i - k + 1);
        if (k > m) {
          v1 = entry(H, n, k, k - 1);
          v2 = entry(H, n, k + 1, k - 1);
          if (nr == 3) {
            v3 = entry(H, n, k + 2, k - 1);
          }
        }
        const R t1 = small_reflector(nr, v1, v2, v3, tiny);
        if (k > m) {
          set_entry(H, n, k, k - 1, v1);
          set_entry(H, n, k + 1, k - 1, R(0));
          if (k < i - 1) {
            set_entry(H, n, k + 2, k - 1, R(0));
          }
        } else if (m > l) {
          // Not -H(k, k - 1): that would be wrong where v2 and v3 underflow.
          set_entry(H, n, k, k - 1, entry(H, n, k, k - 1) * (R(1) - t1));
        }
        const R t2 = t1 * v2;
        if (nr == 3) {
          const R t3 = t1 * v3;
          for (int j = k; j <= i2; ++j) {
            const R sum = entry(H, n, k, j) + v2 * entry(H, n, k + 1, j) + v3 * entry(H, n, k + 2, j);
            set_entry(H, n, k, j, entry(H, n, k, j) - sum * t1);
            set_entry(H, n, k + 1, j, entry(H, n, k + 1, j) - sum * t2);
            set_entry(H, n, k + 2, j, entry(H, n, k + 2, j) - sum * t3);
          }
          for (int j = i1; j <= min(k + 3, i); ++j) {
            const R sum = entry(H, n, j, k) + v2 * entry(H, n, j, k + 1) + v3 * entry(H, n, j, k + 2);
            set_entry(H, n, j, k, entry(H, n, j, k) - sum * t1);
            set_entry(H, n, j, k + 1, entry(H, n, j, k + 1) - sum * t2);
            set_entry(H, n, j, k + 2, entry(H, n, j, k + 2) - sum * t3);
          }
          for (int j = 0; wantt && j < n; ++j) {
            const R sum = entry(Z, n, j, k) + v2 * entry(Z, n, j, k + 1) + v3 * entry(Z, n, j, k + 2);
            set_entry(Z, n, j, k, entry(Z, n, j, k) - sum * t1);
            set_entry(Z, n, j, k + 1, entry(Z, n, j, k + 1) - sum * t2);
            set_entry(Z, n, j, k + 2, entry(Z, n, j, k + 2) - sum * t3);
          }
        } else {
          for (int j = k; j <= i2; ++j) {
            const R sum = entry(H, n, k, j) + v2 * entry(H, n, k + 1, j);
            set_entry(H, n, k, j, entry(H, n, k, j) - sum * t1);
            set_entry(H, n, k + 1, j, entry(H, n, k + 1, j) - sum * t2);
          }
          for (int j = i1; j <= i; ++j) {
            const R sum = entry(H, n, j, k) + v2 * entry(H, n, j, k + 1);
            set_entry(H, n, j, k, entry(H, n, j, k) - sum * t1);
            set_entry(H, n, j, k + 1, entry(H, n, j, k + 1) - sum * t2);
          }
          for (int j = 0; wantt && j < n; ++j) {
            const R sum = entry(Z, n, j, k) + v2 * entry(Z, n, j, k + 1);
            set_entry(Z, n, j, k, entry(Z, n, j, k) - sum * t1);
            set_entry(Z, n, j, k + 1, entry(Z, n, j, k + 1) - sum * t2);
          }
        }
      }
    }
    usable = converged;
    if (converged && l == i - 1) {
      // A 2 x 2 block has split off: slanv2's standard form, the rotation applied
      // to the rest of H and to Z.
      R a = entry(H, n, i - 1, i - 1);
      R b = entry(H, n, i - 1, i);
      R c = entry(H, n, i, i - 1);
      R d = entry(H, n, i, i);
      const real_rotation<R> g = standard_form_2x2(a, b, c, d, ulp, small_2x2);
      set_entry(H, n, i - 1, i - 1, a);
      set_entry(H, n, i - 1, i, b);
      set_entry(H, n, i, i - 1, c);
      set_entry(H, n, i, i, d);
      if (wantt) {
        rotate_pair(at(H, n, i - 1, i + 1), at(H, n, i, i + 1), n - 1 - i, 1, g);
        rotate_pair(at(H, n, 0, i - 1), at(H, n, 0, i), i - 1, long(n), g);
        rotate_pair(at(Z, n, 0, i - 1), at(Z, n, 0, i), n, long(n), g);
      }
    }
    kdefl = 0;
    i = l - 1;
  }

  // The eigenvalues (sgeev's wr, wi): T's 1 x 1 blocks, and a 2 x 2 block's pair
  // a +- ib, b = sqrt(|T(j, j + 1)|) sqrt(|T(j + 1, j)|) > 0 first.
  const R nan = R(0) / R(0);
  const C nan_entry = {nan, nan};
  for (int j = 0; j < n; ++j) {
    store(W + j, nan_entry);
  }
  for (int j = 0; usable && j < n; ++j) {
    const R re = scaled(entry(H, n, j, j), e);
    if (j + 1 < n && entry(H, n, j + 1, j) != R(0)) {
      const R im = scaled(sqrt(fabs(entry(H, n, j, j + 1))) * sqrt(fabs(entry(H, n, j + 1, j))), e);
      const C first = {re, im};
      store(W + j, first);
      store(W + j + 1, conj(first));
    } else if (j == 0 || entry(H, n, j, j - 1) == R(0)) {
      store(W + j, to_complex(re));  // not the second of a pair
    }
  }
  if (vectors == 0) {
    return;
  }
  if (!usable) {
    for (int j = 0; j < n * n; ++j) {
      store(V + j, nan_entry);
    }
    return;
  }

  // 4. strevc: T x = lambda x by back substitution on the quasi-triangular T, the
  // eigenvector of A D Z x (D the balancing), normalised; a pair's second vector
  // the conjugate of its first.
  for (int j = 0; j < n; ++j) {
    R sum = R(0);
    for (int r = 0; r < j; ++r) {
      sum += fabs(entry(H, n, r, j));
    }
    norms[j] = sum;
  }
  // Loops whose counter steps by 1 or 2 a pass, as strevc's, once gave wrong vectors
  // on Intel's OpenCL CPU runtime, which runs 32 matrices in the lanes of a vector
  // (a pair was taken for a real eigenvalue in the lanes that stepped by 2): each
  // pass handles one column, and a pair's first column is skipped.
  for (int k = n - 1; k >= 0; --k) {
    if (k + 1 < n && entry(H, n, k + 1, k) != R(0)) {
      continue;  // the first of a pair: done with its second
    }
    if (k > 0 && entry(H, n, k, k - 1) != R(0)) {
      // The pair of rows k - 1, k: the eigenvector of wr + i wi (wi > 0), x_j = 0
      // below k, x_{k-1} and x_k from the 2 x 2 block [[wr, b], [c, wr]].
      const R wr = entry(H, n, k, k);
      const R b = entry(H, n, k - 1, k);
      const R c = entry(H, n, k, k - 1);
      const R wi = sqrt(fabs(c)) * sqrt(fabs(b));
      const R smin = fmax(ulp * (fabs(wr) + fabs(wi)), small_num);
      const C lambda = {wr, wi};
      C first = {R(1), R(0)};
      C second = {R(0), wi / b};
      if (fabs(b) < fabs(c)) {
        first.re = -wi / c;
        second.im = R(1);
      }
      store(x + k - 1, first);
      store(x + k, second);
      for (int r = 0; r < k - 1; ++r) {
        const C rhs = {-first.re * entry(H, n, r, k - 1), -second.im * entry(H, n, r, k)};
        store(x + r, rhs);
      }
      quasi_triangular_solve(H, n, k - 2, k, lambda, x, norms, smin, big);
      back_transform(Z, balance, n, k, x, column);
      eig_normalise(column, n, V, k - 1, false);
      for (int r = 0; r < n; ++r) {
        store(at(V, n, r, k), conj(load(at(V, n, r, k - 1))));
      }
    } else {
      // A real eigenvalue: x_k = 1, x_j = 0 below k, in real arithmetic.
      const R lambda = entry(H, n, k, k);
      const R smin = fmax(ulp * fabs(lambda), small_num);
      x_real[k] = R(1);
      for (int r = 0; r < k; ++r) {
        x_real[r] = -entry(H, n, r, k);
      }
      quasi_triangular_solve(H, n, k - 1, k, lambda, x_real, norms, smin, big);
      back_transform(Z, balance, n, k, x_real, column);
      eig_normalise(column, n, V, k, true);
    }
  }
}

// Matrix `matrix`'s part of the buffers: cgeev's for complex T.
template <typename R>
METAL_FUNC void eig_one(device complex_t<R>* h, device complex_t<R>* z, device complex_t<R>* w,
                        device complex_t<R>* work, long matrix, int n, int vectors) {
  geev_matrix(h + matrix * n * n, z + matrix * n * n, w + matrix * n, work + matrix * 3 * n, n, vectors);
}

// sgeev's for real T: z and w hold complex numbers as pairs of T, work has Z
// only with vectors.
template <typename R>
METAL_FUNC void eig_one(device R* h, device R* z, device R* w, device R* work, long matrix, int n, int vectors) {
  device complex_t<R>* V = reinterpret_cast<device complex_t<R>*>(z) + matrix * n * n;
  device complex_t<R>* W = reinterpret_cast<device complex_t<R>*>(w) + matrix * n;
  geev_matrix(h + matrix * n * n, V, W, work + matrix * (6 * n + (vectors != 0 ? n * n : 0)), n, vectors);
}

// The kernel: a thread per matrix, cgeev's path for complex T, sgeev's for real T
// (whose z and w hold complex numbers as pairs of T).
template <typename T, int GROUP>
METAL_FUNC void eig_small(device T* h, device T* z, device T* w, device T* work, int n, int vectors, int count,
                          thread_position pos) {
  const long matrix = long(pos.group_index) * GROUP + pos.thread_index;
  if (matrix >= count) {
    return;
  }
  eig_one(h, z, w, work, matrix, n, vectors);
}
