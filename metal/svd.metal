// Singular value decomposition by one-sided Jacobi (Hestenes), as LAPACK's
// sgesvj / cgesvj: pairs of columns of a square matrix X are rotated until
// every pair is orthogonal to working precision; then X V = U Sigma, with the
// column norms as Sigma, the normalized columns as U and the product of the
// rotations as V. Unlike bidiagonalization, small singular values keep their
// relative accuracy (Demmel and Veselic). Callers pass square matrices (a tall
// one's R after QR, a wide one's conjugate transpose), scaled by a power of two
// so that max |x_ij| lies in [1/2, 1), and transposed: row j of a is column j
// of X. Outputs are sorted by descending singular value, NaN first: row i of u
// is U's column i, row i of w is V's column i. Left vectors of exactly zero
// singular values, which the rotations leave undefined, are completed to an
// orthonormal basis (4.4 of linalg-contracts: Gram-Schmidt, twice, from unit
// vectors).
#include "jacobi.h"

// The order of the outputs: descending, NaN first, equal values by index.
template <typename R>
METAL_FUNC bool comes_before(R a, int i, R b, int k) {
  if (isnan(a) != isnan(b)) {
    return isnan(a);
  }
  return a > b || (!(a < b) && i < k);
}

// The round-robin (circle) ordering of columns 0..np-1, np even: in each of the
// np - 1 rounds, pairs 0..np/2-1 are disjoint, and every pair meets once a sweep.
METAL_FUNC void round_robin_pair(int round, int i, int np, thread int& p, thread int& q) {
  if (i == 0) {
    p = round;
    q = np - 1;
  } else {
    p = (round + i) % (np - 1);
    q = (round - i + np - 1) % (np - 1);
  }
}

// Columns first..n-1 of U, n <= N, whose singular values are zero (U's row r
// of column l at U[l * column_step + r * row_step]):
// each the unit vector e_k farthest from the span of the columns before (1 -
// sum_l |u_lk|^2 the largest, which is at least (n - i) / n), less its
// components along them, twice; one thread's work. svd_jacobi does the same
// with its threadgroup.
template <typename T, int N>
METAL_FUNC void complete_columns(device T* U, int n, int first, int column_step, int row_step) {
  typedef typename scalar_traits<T>::real R;
  const T zero = scalar_traits<T>::from_real(R(0));
  for (int i = first; i < n; ++i) {
    int k = 0;
    R farthest = R(-1);
    for (int c = 0; c < n; ++c) {
      R outside = R(1);
      for (int l = 0; l < i; ++l) {
        outside -= abs2(load(U + long(l) * column_step + c * row_step));
      }
      if (outside > farthest) {
        farthest = outside;
        k = c;
      }
    }
    T y[N];
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      y[r] = zero;
      if (r == k) {
        y[r] = scalar_traits<T>::from_real(R(1));
      }
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (int l = 0; l < i; ++l) {
        T c = zero;
        #pragma unroll
        for (int r = 0; r < N; ++r) {
          if (r < n) {
            c = c + conj(load(U + long(l) * column_step + r * row_step)) * y[r];
          }
        }
        #pragma unroll
        for (int r = 0; r < N; ++r) {
          if (r < n) {
            y[r] = multiply_subtract(y[r], load(U + long(l) * column_step + r * row_step), c);
          }
        }
      }
    }
    R norm = R(0);
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      norm += abs2(y[r]);
    }
    const R scale = R(1) / sqrt(norm);
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      if (r < n) {
        store(U + long(i) * column_step + r * row_step, scalar_traits<T>::from_real(scale) * y[r]);
      }
    }
  }
}

// sgesvj on an n x n matrix with n <= 3, a thread per matrix, in registers; the
// cyclic order of pairs, as any order converges for so few columns.
//   a: count x N x N (rows: X's columns); u, w: count x N x N; s: count x N.
template <typename T, int N, int GROUP>
METAL_FUNC void svd_tiny(const device T* a, device T* u, device typename scalar_traits<T>::real* s, device T* w,
                         int count, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const long matrix = long(pos.group_index) * GROUP + pos.thread_index;
  if (matrix >= count) {
    return;
  }
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  T x[N][N];  // x[j][r]: row r of column j
  T v[N][N];
  R largest = R(0);
  #pragma unroll
  for (int j = 0; j < N; ++j) {
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      x[j][r] = load(a + matrix * N * N + r * N + j);
      largest = fmax(largest, largest_part(x[j][r]));
      v[j][r] = zero;
    }
    v[j][j] = one;
  }
  // Scaled by 2^-e, max part in [1/2, 1), as svd_jacobi's caller does on the host:
  // exact, and no sum of squares can overflow or underflow.
  int e = 0;
  if (isfinite(largest) && largest > R(0)) {
    frexp(largest, e);
    #pragma unroll
    for (int j = 0; j < N; ++j) {
      #pragma unroll
      for (int r = 0; r < N; ++r) {
        x[j][r] = scaled(x[j][r], -e);
      }
    }
  }
  const R tolerance = sqrt(R(N)) * unit_roundoff<R>();
  for (int sweep = 0; sweep < JACOBI_SWEEPS; ++sweep) {
    bool rotated = false;
    #pragma unroll
    for (int p = 0; p < N; ++p) {
      #pragma unroll
      for (int q = p + 1; q < N; ++q) {
        R alpha = R(0);
        R beta = R(0);
        T gamma = zero;
        #pragma unroll
        for (int r = 0; r < N; ++r) {
          alpha += abs2(x[p][r]);
          beta += abs2(x[q][r]);
          gamma = gamma + conj(x[p][r]) * x[q][r];
        }
        const jacobi_rotation<T> j = rotation_for(alpha, beta, gamma, tolerance);
        if (j.rotates) {
          rotated = true;
          #pragma unroll
          for (int r = 0; r < N; ++r) {
            rotate(x[p][r], x[q][r], j);
            rotate(v[p][r], v[q][r], j);
          }
        }
      }
    }
    if (!rotated) {
      break;
    }
  }
  R sigma[N];
  #pragma unroll
  for (int j = 0; j < N; ++j) {
    R sum = R(0);
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      sum += abs2(x[j][r]);
    }
    sigma[j] = sqrt(sum);
  }
  device T* U = u + matrix * N * N;
  device T* W = w + matrix * N * N;
  int nonzero = 0;
  #pragma unroll
  for (int j = 0; j < N; ++j) {
    int rank = 0;
    #pragma unroll
    for (int i = 0; i < N; ++i) {
      rank += comes_before(sigma[i], i, sigma[j], j) ? 1 : 0;
    }
    nonzero += sigma[j] == R(0) ? 0 : 1;
    s[matrix * N + rank] = ldexp(sigma[j], e);
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      T normalized = zero;
      if (sigma[j] != R(0)) {
        normalized = x[j][r] / scalar_traits<T>::from_real(sigma[j]);
      }
      store(U + r * N + rank, normalized);
      store(W + rank * N + r, conj(v[j][r]));
    }
  }
  complete_columns<T, N>(U, N, nonzero, 1, N);  // zero singular values come last
}


// sgesvj on an n x n matrix, n <= N, a team of H = N / 2 lanes per matrix, all
// in registers: lane i holds two columns of X and the same two of V, the pair it
// rotates this round, and the round-robin ordering moves columns between lanes by
// shuffles, so a rotation touches no memory and needs no barrier. Columns n..N-1
// are zero and never rotate. A SIMD group's teams sweep until none rotates (a
// team that has converged rotates nothing more), so its shuffles stay uniform.
//   a: count x n x n (rows: X's columns); u, w: count x n x n; s: count x n.
template <typename T, int N, int GROUP>
METAL_FUNC void svd_pairs(const device T* a, device T* u, device typename scalar_traits<T>::real* s, device T* w,
                          int n, int count, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int H = N / 2;
  const int lane = int(pos.simd_lane);
  const int member = lane % H;
  const long matrix = (long(pos.group_index) * GROUP + pos.thread_index) / H;
  const bool exists = matrix < count;
  const long nn = long(n) * n;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  T top[N];
  T bottom[N];
  T v_top[N];
  T v_bottom[N];
  int id_top = member;  // which of X's columns each slot holds
  int id_bottom = member + H;
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    top[r] = zero;
    bottom[r] = zero;
    v_top[r] = zero;
    v_bottom[r] = zero;
    if (exists && r < n) {
      if (id_top < n) {
        top[r] = load(a + matrix * nn + long(r) * n + id_top);
      }
      if (id_bottom < n) {
        bottom[r] = load(a + matrix * nn + long(r) * n + id_bottom);
      }
    }
    if (r == id_top && r < n) {
      v_top[r] = one;
    }
    if (r == id_bottom && r < n) {
      v_bottom[r] = one;
    }
  }
  R largest = R(0);
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    largest = fmax(largest, fmax(largest_part(top[r]), largest_part(bottom[r])));
  }
  largest = lanes_max<H>(largest);
  int e = 0;  // scaled by 2^-e as svd_tiny
  if (isfinite(largest) && largest > R(0)) {
    frexp(largest, e);
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      top[r] = scaled(top[r], -e);
      bottom[r] = scaled(bottom[r], -e);
    }
  }
  const R tolerance = sqrt(R(n)) * unit_roundoff<R>();
  for (int sweep = 0; sweep < JACOBI_SWEEPS; ++sweep) {
    R rotated = R(0);
    for (int round = 0; round < N - 1; ++round) {
      R alpha = R(0);
      R beta = R(0);
      T gamma = zero;
      #pragma unroll
      for (int r = 0; r < N; ++r) {
        alpha += abs2(top[r]);
        beta += abs2(bottom[r]);
        gamma = gamma + conj(top[r]) * bottom[r];
      }
      const jacobi_rotation<T> j = rotation_for(alpha, beta, gamma, tolerance);
      if (j.rotates) {
        rotated = R(1);
        #pragma unroll
        for (int r = 0; r < N; ++r) {
          rotate(top[r], bottom[r], j);
          rotate(v_top[r], v_bottom[r], j);
        }
      }
      next_round<T, N, H>(top, bottom, member, lane);
      next_round<T, N, H>(v_top, v_bottom, member, lane);
      const int left = simd_shuffle(member == 0 ? id_bottom : id_top, ushort(member == 0 ? lane : lane - 1));
      const int right = simd_shuffle(id_bottom, ushort(member == H - 1 ? lane : lane + 1));
      const int old_top = id_top;
      id_top = member == 0 ? id_top : left;
      id_bottom = member == H - 1 ? old_top : right;
    }
    if (lanes_sum<32>(rotated) == R(0)) {
      break;
    }
  }
  R sigma_top = R(0);
  R sigma_bottom = R(0);
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    sigma_top += abs2(top[r]);
    sigma_bottom += abs2(bottom[r]);
  }
  sigma_top = sqrt(sigma_top);
  sigma_bottom = sqrt(sigma_bottom);
  // Ranks among the team's n columns.
  int rank_top = 0;
  int rank_bottom = 0;
  const int first = lane - member;
  for (int k = 0; k < H; ++k) {
    const R other_top = simd_shuffle(sigma_top, ushort(first + k));
    const R other_bottom = simd_shuffle(sigma_bottom, ushort(first + k));
    const int other_id_top = simd_shuffle(id_top, ushort(first + k));
    const int other_id_bottom = simd_shuffle(id_bottom, ushort(first + k));
    if (other_id_top < n) {
      rank_top += comes_before(other_top, other_id_top, sigma_top, id_top) ? 1 : 0;
      rank_bottom += comes_before(other_top, other_id_top, sigma_bottom, id_bottom) ? 1 : 0;
    }
    if (other_id_bottom < n) {
      rank_top += comes_before(other_bottom, other_id_bottom, sigma_top, id_top) ? 1 : 0;
      rank_bottom += comes_before(other_bottom, other_id_bottom, sigma_bottom, id_bottom) ? 1 : 0;
    }
  }
  device T* U = u + matrix * nn;
  device T* W = w + matrix * nn;
  if (exists) {
    if (id_top < n) {
      s[matrix * n + rank_top] = ldexp(sigma_top, e);
    }
    if (id_bottom < n) {
      s[matrix * n + rank_bottom] = ldexp(sigma_bottom, e);
    }
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      if (r < n && id_top < n) {
        T normalized = zero;
        if (sigma_top != R(0)) {
          normalized = top[r] / scalar_traits<T>::from_real(sigma_top);
        }
        store(U + long(r) * n + rank_top, normalized);
        store(W + long(rank_top) * n + r, conj(v_top[r]));
      }
      if (r < n && id_bottom < n) {
        T normalized = zero;
        if (sigma_bottom != R(0)) {
          normalized = bottom[r] / scalar_traits<T>::from_real(sigma_bottom);
        }
        store(U + long(r) * n + rank_bottom, normalized);
        store(W + long(rank_bottom) * n + r, conj(v_bottom[r]));
      }
    }
  }
  const R zeros = lanes_sum<H>(R((id_top < n && sigma_top == R(0)) ? 1 : 0) +
                               R((id_bottom < n && sigma_bottom == R(0)) ? 1 : 0));
  simdgroup_barrier(mem_flags::mem_device);  // the team's columns of U, for its first lane
  if (exists && member == 0 && zeros > R(0)) {
    complete_columns<T, N>(U, n, n - int(zeros), 1, n);
  }
}

// The sum over a threadgroup of GROUP threads, for every thread: each SIMD
// group's through partial (GROUP / 32 entries). Barriers before and after.
template <typename R, int GROUP>
METAL_FUNC R group_sum(R x, threadgroup R* partial, thread_position pos) {
  x = lanes_sum<32>(x);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (pos.simd_lane == 0) {
    partial[pos.simd_group] = x;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  R total = R(0);
  for (int g = 0; g < GROUP / 32; ++g) {
    total += partial[g];
  }
  return total;
}

// sgesvj on an n x n matrix, a threadgroup of GROUP threads per matrix: in each
// round of the round-robin ordering the n / 2 disjoint pairs go to the SIMD
// groups, each pair's inner products over its lanes; the columns live in device
// memory (a and v), a barrier a round. A sweep with no rotation ends the
// iteration, which every thread sees through threadgroup memory.
//   a: count x n x n (rows: X's columns; overwritten); v: count x n x n and
//   norms: count x n, scratch; u, w: count x n x n; s: count x n.
template <typename T, int GROUP>
METAL_FUNC void svd_jacobi(device T* a, device T* v, device typename scalar_traits<T>::real* norms, device T* u,
                           device typename scalar_traits<T>::real* s, device T* w, int n,
                           threadgroup int* flags, threadgroup typename scalar_traits<T>::real* partial,
                           thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int SIMDS = GROUP / 32;
  const int t = int(pos.thread_index);
  const int lane = int(pos.simd_lane);
  const long nn = long(n) * n;
  device T* X = a + pos.group_index * nn;
  device T* V = v + pos.group_index * nn;
  device R* sigma = norms + long(pos.group_index) * n;
  device T* U = u + pos.group_index * nn;
  device T* W = w + pos.group_index * nn;
  device R* S = s + long(pos.group_index) * n;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  for (long e = t; e < nn; e += GROUP) {
    store(V + e, zero);
    if (e / n == e % n) {
      store(V + e, one);
    }
  }
  if (t == 0) {
    flags[0] = 0;  // the last sweep that rotated, counted from 1
  }
  threadgroup_barrier(mem_flags::mem_device);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const R tolerance = sqrt(R(n)) * unit_roundoff<R>();
  const int np = n + (n & 1);  // with a column that pairs with nothing
  for (int sweep = 0; sweep < JACOBI_SWEEPS; ++sweep) {
    bool rotated = false;
    for (int round = 0; round < np - 1; ++round) {
      for (int i = int(pos.simd_group); i < np / 2; i += SIMDS) {
        int p, q;
        round_robin_pair(round, i, np, p, q);
        if (p < n && q < n) {  // uniform in the SIMD group
          device T* xp = X + long(p) * n;
          device T* xq = X + long(q) * n;
          R alpha = R(0);
          R beta = R(0);
          T gamma = zero;
          for (int r = lane; r < n; r += 32) {
            alpha += abs2(load(xp + r));
            beta += abs2(load(xq + r));
            gamma = gamma + conj(load(xp + r)) * load(xq + r);
          }
          const jacobi_rotation<T> j = rotation_for(lanes_sum_of(alpha), lanes_sum_of(beta), lanes_sum_of(gamma),
                                                    tolerance);
          if (j.rotates) {
            rotated = true;
            device T* vp = V + long(p) * n;
            device T* vq = V + long(q) * n;
            for (int r = lane; r < n; r += 32) {
              T x0 = load(xp + r);
              T x1 = load(xq + r);
              rotate(x0, x1, j);
              store(xp + r, x0);
              store(xq + r, x1);
              T v0 = load(vp + r);
              T v1 = load(vq + r);
              rotate(v0, v1, j);
              store(vp + r, v0);
              store(vq + r, v1);
            }
          }
        }
      }
      threadgroup_barrier(mem_flags::mem_device);
    }
    if (rotated) {
      flags[0] = sweep + 1;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (flags[0] != sweep + 1) {
      break;
    }
  }
  for (int j = int(pos.simd_group); j < n; j += SIMDS) {
    R sum = R(0);
    for (int r = lane; r < n; r += 32) {
      sum += abs2(load(X + long(j) * n + r));
    }
    sum = lanes_sum<32>(sum);
    if (lane == 0) {
      sigma[j] = sqrt(sum);
    }
  }
  threadgroup_barrier(mem_flags::mem_device);
  // Each column to its rank: a SIMD group per column, its lanes counting.
  for (int j = int(pos.simd_group); j < n; j += SIMDS) {
    const R sj = sigma[j];
    int before = 0;
    for (int i = lane; i < n; i += 32) {
      before += comes_before(sigma[i], i, sj, j) ? 1 : 0;
    }
    const int rank = lanes_sum<32>(before);
    if (lane == 0) {
      S[rank] = sj;
    }
    for (int r = lane; r < n; r += 32) {
      T normalized = zero;
      if (sj != R(0)) {
        normalized = load(X + long(j) * n + r) / scalar_traits<T>::from_real(sj);
      }
      store(U + long(rank) * n + r, normalized);
      store(W + long(rank) * n + r, conj(load(V + long(j) * n + r)));
    }
  }
  threadgroup_barrier(mem_flags::mem_device);
  // Zero singular values come last (S is sorted): the first of them by bisection.
  int lo = 0;
  int hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (S[mid] == R(0)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  // Their columns of U: the unit vector e_k farthest from the span of the columns
  // before (1 - sum_l |u_lk|^2 the largest, at least (n - i) / n), less its
  // components along them, twice. The norms and V's first row are scratch.
  for (int i = lo; i < n; ++i) {
    for (int r = t; r < n; r += GROUP) {
      R outside = R(1);
      for (int l = 0; l < i; ++l) {
        outside -= abs2(load(U + long(l) * n + r));
      }
      sigma[r] = outside;
    }
    threadgroup_barrier(mem_flags::mem_device);
    int k = 0;
    for (int r = 1; r < n; ++r) {
      k = sigma[r] > sigma[k] ? r : k;
    }
    device T* y = U + long(i) * n;
    for (int r = t; r < n; r += GROUP) {
      T value = zero;
      if (r == k) {
        value = one;
      }
      for (int l = 0; l < i; ++l) {
        value = multiply_subtract(value, load(U + long(l) * n + r), conj(load(U + long(l) * n + k)));
      }
      store(y + r, value);
    }
    threadgroup_barrier(mem_flags::mem_device);
    for (int l = int(pos.simd_group); l < i; l += SIMDS) {
      T c = zero;
      for (int r = lane; r < n; r += 32) {
        c = c + conj(load(U + long(l) * n + r)) * load(y + r);
      }
      c = lanes_sum_of(c);
      if (lane == 0) {
        store(V + l, c);
      }
    }
    threadgroup_barrier(mem_flags::mem_device);
    R norm = R(0);
    for (int r = t; r < n; r += GROUP) {
      T value = load(y + r);
      for (int l = 0; l < i; ++l) {
        value = multiply_subtract(value, load(U + long(l) * n + r), load(V + l));
      }
      store(y + r, value);
      norm += abs2(value);
    }
    const R scale = R(1) / sqrt(group_sum<R, GROUP>(norm, partial, pos));
    for (int r = t; r < n; r += GROUP) {
      store(y + r, scalar_traits<T>::from_real(scale) * load(y + r));
    }
    threadgroup_barrier(mem_flags::mem_device);
  }
}
