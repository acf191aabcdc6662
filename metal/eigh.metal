// Hermitian eigenproblems of small matrices by two-sided (cyclic) Jacobi, as
// analysed by Demmel and Veselic (LAPACK's ssyevd / cheevd solve the same
// problem by tridiagonalization): each rotation J^H A J zeroes one off-diagonal
// pair a_pq, until every |a_pq| <= tol sqrt(|a_pp a_qq|); then A = V diag(a_ii) V^H,
// V the product of the rotations. Under that relative test a positive definite
// matrix's eigenvalues keep their relative accuracy (its scaled condition number
// times eps), and an indefinite one's are within n eps ||A|| as LAPACK's.
// The kernels read only the lower triangle of a (upper != 0: the upper one), and of
// the diagonal only the real part, as ssyevd / cheevd do; scale the matrix by a
// power of two so that its largest part lies in [1/2, 1) (exact: nothing overflows
// or underflows that need not); and write the eigenvalues ascending, equal ones by
// index, with the eigenvectors as the columns of v (only when vectors != 0). Non-finite
// input gives NaN eigenvalues and eigenvectors.
//   a, v: count x n x n; w: count x n.
#include "jacobi.h"

// Element (r, c) of the Hermitian matrix whose lower (upper != 0: upper) triangle
// A holds: the triangle's entry, or the conjugate of its mirror image.
template <typename T>
METAL_FUNC T hermitian_entry(const device T* A, int n, int r, int c, int upper) {
  if (r == c) {
    return scalar_traits<T>::from_real(real_part(load(A + long(r) * n + r)));
  }
  if ((r > c) != (upper != 0)) {
    return load(A + long(r) * n + c);
  }
  return conj(load(A + long(c) * n + r));
}

// The order of the outputs: ascending, equal values by index, NaN last.
template <typename R>
METAL_FUNC bool ascends_before(R a, int i, R b, int k) {
  if (isnan(a) != isnan(b)) {
    return isnan(b);
  }
  return a < b || (!(a > b) && i < k);
}

// n = N <= 4, a thread per matrix, in registers; the cyclic order of pairs, as
// any order converges for so few.
template <typename T, int N, int GROUP>
METAL_FUNC void eigh_tiny(const device T* a, device typename scalar_traits<T>::real* w, device T* v, int upper,
                          int vectors, int count, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const long matrix = long(pos.group_index) * GROUP + pos.thread_index;
  if (matrix >= count) {
    return;
  }
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  const device T* A = a + matrix * N * N;
  T h[N][N];
  T x[N][N];  // V
  R largest = R(0);
  bool nan_seen = false;  // fmax passes over NaN: counted apart
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    #pragma unroll
    for (int c = 0; c < N; ++c) {
      h[r][c] = hermitian_entry(A, N, r, c, upper);
      largest = fmax(largest, largest_part(h[r][c]));
      nan_seen = nan_seen || isnan(abs2(h[r][c]));
      x[r][c] = r == c ? one : zero;
    }
  }
  const bool usable = isfinite(largest) && !nan_seen;
  int e = 0;
  if (usable && largest > R(0)) {
    frexp(largest, e);
  }
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    #pragma unroll
    for (int c = 0; c < N; ++c) {
      h[r][c] = scaled(h[r][c], -e);
    }
  }
  const R tolerance = sqrt(R(N)) * unit_roundoff<R>();
  for (int sweep = 0; usable && sweep < JACOBI_SWEEPS; ++sweep) {
    bool rotated = false;
    #pragma unroll
    for (int p = 0; p < N; ++p) {
      #pragma unroll
      for (int q = p + 1; q < N; ++q) {
        const R alpha = real_part(h[p][p]);
        const R beta = real_part(h[q][q]);
        const jacobi_rotation<T> j = rotation_for(alpha, beta, h[p][q], tolerance);
        if (j.rotates) {
          rotated = true;
          #pragma unroll
          for (int r = 0; r < N; ++r) {
            rotate(h[r][p], h[r][q], j);
          }
          #pragma unroll
          for (int c = 0; c < N; ++c) {
            rotate_rows(h[p][c], h[q][c], j);
          }
          h[p][p] = scalar_traits<T>::from_real(alpha - j.shift);
          h[q][q] = scalar_traits<T>::from_real(beta + j.shift);
          h[p][q] = zero;
          h[q][p] = zero;
          if (vectors != 0) {
            #pragma unroll
            for (int r = 0; r < N; ++r) {
              rotate(x[r][p], x[r][q], j);
            }
          }
        }
      }
    }
    if (!rotated) {
      break;
    }
  }
  const R nan = R(0) / R(0);
  const T nan_entry = scalar_traits<T>::from_real(nan);
  R d[N];
  #pragma unroll
  for (int i = 0; i < N; ++i) {
    d[i] = usable ? real_part(h[i][i]) : nan;
  }
  device T* V = v + matrix * N * N;
  #pragma unroll
  for (int i = 0; i < N; ++i) {
    int rank = 0;
    #pragma unroll
    for (int k = 0; k < N; ++k) {
      rank += ascends_before(d[k], k, d[i], i) ? 1 : 0;
    }
    w[matrix * N + rank] = ldexp(d[i], e);
    if (vectors != 0) {
      #pragma unroll
      for (int r = 0; r < N; ++r) {
        store(V + r * N + rank, usable ? x[r][i] : nan_entry);
      }
    }
  }
}

// The rows of a column after next_round moved the columns: the same moves, so that
// element 2i of each column stays the row of lane i's top column and 2i + 1 that of
// its bottom one.
template <typename T, int N>
METAL_FUNC void next_round_rows(thread T (&x)[N]) {
  const int H = N / 2;
  T old[N];
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    old[r] = x[r];
  }
  // top_i <- top_{i-1} (i >= 2), top_1 <- bottom_0, top_0 stays;
  // bottom_i <- bottom_{i+1} (i < H - 1), bottom_{H-1} <- top_{H-1}.
  #pragma unroll
  for (int i = 2; i < H; ++i) {
    x[2 * i] = old[2 * i - 2];
  }
  x[2] = old[1];
  #pragma unroll
  for (int i = 0; i < H - 1; ++i) {
    x[2 * i + 1] = old[2 * i + 3];
  }
  x[2 * H - 1] = old[2 * H - 2];
}

// n <= N (N >= 4), a team of H = N / 2 lanes per matrix, all in registers. As in
// svd_pairs, lane i holds two columns of A and the same two of V, the pair it
// rotates this round, and the round-robin ordering moves columns between lanes by
// shuffles. A's rows are kept in the order of its columns (element 2i of a column
// is the row of lane i's top column, 2i + 1 the row of its bottom one), so that
// every pair's row rotation touches the same registers in every lane: a round is
// each lane's rotation of its own two columns, then the H row rotations, broadcast
// by shuffles, applied to them; no memory, no barrier. Columns n..N-1 are zero and
// never rotate. A SIMD group's teams sweep until none rotates, so its shuffles
// stay uniform. With V_SHARED (N = 64, and complex N = 32, where four columns of N
// a lane would not fit in registers) V's columns stay in threadgroup memory (vs, N x
// N a team, row-major so that the lanes' columns fall in distinct banks), each
// rotated by the lane that holds its pair; only the column indices move between
// lanes.
template <typename T, int N, int GROUP, bool V_SHARED>
METAL_FUNC void eigh_pairs(const device T* a, device typename scalar_traits<T>::real* w, device T* v, int n,
                           int upper, int vectors, int count, threadgroup T* vs, thread_position pos) {
  typedef typename scalar_traits<T>::real R;
  const int H = N / 2;
  threadgroup T* V_team = vs + (V_SHARED ? int(pos.thread_index) / H * N * N : 0);
  const int lane = int(pos.simd_lane);
  const int member = lane % H;
  const int first = lane - member;  // the team's lane 0
  const long matrix = (long(pos.group_index) * GROUP + pos.thread_index) / H;
  const bool exists = matrix < count;
  const long nn = long(n) * n;
  const T zero = scalar_traits<T>::from_real(R(0));
  const T one = scalar_traits<T>::from_real(R(1));
  const device T* A = a + matrix * nn;
  T top[N];
  T bottom[N];
  T v_top[N];
  T v_bottom[N];
  int id_top = member;  // which of A's columns each slot holds
  int id_bottom = member + H;
  bool nan_seen = false;
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    const int row = r % 2 == 0 ? r / 2 : r / 2 + H;
    top[r] = zero;
    bottom[r] = zero;
    if (exists && row < n) {
      if (id_top < n) {
        top[r] = hermitian_entry(A, n, row, id_top, upper);
      }
      if (id_bottom < n) {
        bottom[r] = hermitian_entry(A, n, row, id_bottom, upper);
      }
    }
    v_top[r] = r == id_top && r < n ? one : zero;
    v_bottom[r] = r == id_bottom && r < n ? one : zero;
    if (V_SHARED) {
      V_team[r * N + id_top] = v_top[r];
      V_team[r * N + id_bottom] = v_bottom[r];
    }
  }
  R largest = R(0);
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    largest = fmax(largest, fmax(largest_part(top[r]), largest_part(bottom[r])));
  }
  largest = lanes_max<H>(largest);
  int e = 0;
  if (isfinite(largest) && largest > R(0)) {
    frexp(largest, e);
  }
  #pragma unroll
  for (int r = 0; r < N; ++r) {
    top[r] = scaled(top[r], -e);
    bottom[r] = scaled(bottom[r], -e);
    nan_seen = nan_seen || isnan(abs2(top[r])) || isnan(abs2(bottom[r]));
  }
  // fmax passes over NaN, so NaN is counted apart; the team agrees through a sum. The
  // sum is taken by every lane: a shuffle behind && would run in the teams of finite
  // matrices only, and a shuffle that some lanes skip is undefined (on the H200 it
  // paired later shuffles wrongly: an infinite entry gave duplicate ranks).
  const R nan_lanes = lanes_sum<H>(R(nan_seen ? 1 : 0));
  const bool usable = isfinite(largest) && nan_lanes == R(0);
  const R tolerance = sqrt(R(n)) * unit_roundoff<R>();
  const int own = 2 * member;
  for (int sweep = 0; sweep < JACOBI_SWEEPS; ++sweep) {
    R rotated = R(0);
    for (int round = 0; round < N - 1; ++round) {
      const R alpha = real_part(element_of<T, N, N>(top, 0, own));
      const R beta = real_part(element_of<T, N, N>(bottom, 0, own + 1));
      jacobi_rotation<T> j = rotation_for(alpha, beta, element_of<T, N, N>(bottom, 0, own), tolerance);
      j.rotates = j.rotates && usable;
      if (j.rotates) {
        rotated = R(1);
        #pragma unroll
        for (int r = 0; r < N; ++r) {
          rotate(top[r], bottom[r], j);
        }
        if (vectors != 0 && !V_SHARED) {
          #pragma unroll
          for (int r = 0; r < N; ++r) {
            rotate(v_top[r], v_bottom[r], j);
          }
        }
        if (vectors != 0 && V_SHARED) {
          for (int r = 0; r < n; ++r) {
            T x = V_team[r * N + id_top];
            T y = V_team[r * N + id_bottom];
            rotate(x, y, j);
            V_team[r * N + id_top] = x;
            V_team[r * N + id_bottom] = y;
          }
        }
      }
      #pragma unroll
      for (int k = 0; k < H; ++k) {
        const ushort from = ushort(first + k);
        const jacobi_rotation<T> jk = {simd_shuffle(j.c, from), simd_shuffle(j.sg, from), R(0),
                                       simd_shuffle(j.rotates ? 1 : 0, from) != 0};
        if (jk.rotates) {
          rotate_rows(top[2 * k], top[2 * k + 1], jk);
          rotate_rows(bottom[2 * k], bottom[2 * k + 1], jk);
        }
      }
      if (j.rotates) {
        set_element<T, N, N>(top, 0, own, scalar_traits<T>::from_real(alpha - j.shift));
        set_element<T, N, N>(top, 0, own + 1, zero);
        set_element<T, N, N>(bottom, 0, own, zero);
        set_element<T, N, N>(bottom, 0, own + 1, scalar_traits<T>::from_real(beta + j.shift));
      }
      next_round<T, N, H>(top, bottom, member, lane);
      next_round_rows<T, N>(top);
      next_round_rows<T, N>(bottom);
      if (vectors != 0 && !V_SHARED) {
        next_round<T, N, H>(v_top, v_bottom, member, lane);
      }
      if (V_SHARED) {
        simdgroup_barrier(mem_flags::mem_threadgroup);  // the columns' next lanes read them
      }
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
  const R nan = R(0) / R(0);
  const R d_top = usable ? real_part(element_of<T, N, N>(top, 0, own)) : nan;
  const R d_bottom = usable ? real_part(element_of<T, N, N>(bottom, 0, own + 1)) : nan;
  // Ranks among the team's n columns.
  int rank_top = 0;
  int rank_bottom = 0;
  for (int k = 0; k < H; ++k) {
    const R other_top = simd_shuffle(d_top, ushort(first + k));
    const R other_bottom = simd_shuffle(d_bottom, ushort(first + k));
    const int other_id_top = simd_shuffle(id_top, ushort(first + k));
    const int other_id_bottom = simd_shuffle(id_bottom, ushort(first + k));
    if (other_id_top < n) {
      rank_top += ascends_before(other_top, other_id_top, d_top, id_top) ? 1 : 0;
      rank_bottom += ascends_before(other_top, other_id_top, d_bottom, id_bottom) ? 1 : 0;
    }
    if (other_id_bottom < n) {
      rank_top += ascends_before(other_bottom, other_id_bottom, d_top, id_top) ? 1 : 0;
      rank_bottom += ascends_before(other_bottom, other_id_bottom, d_bottom, id_bottom) ? 1 : 0;
    }
  }
  if (!exists) {
    return;
  }
  const T nan_entry = scalar_traits<T>::from_real(nan);
  device T* V = v + matrix * nn;
  if (id_top < n) {
    w[matrix * n + rank_top] = ldexp(d_top, e);
  }
  if (id_bottom < n) {
    w[matrix * n + rank_bottom] = ldexp(d_bottom, e);
  }
  if (vectors != 0) {
    #pragma unroll
    for (int r = 0; r < N; ++r) {
      T x = v_top[r];
      T y = v_bottom[r];
      if (V_SHARED) {
        x = V_team[r * N + id_top];
        y = V_team[r * N + id_bottom];
      }
      if (r < n && id_top < n) {
        store(V + long(r) * n + rank_top, usable ? x : nan_entry);
      }
      if (r < n && id_bottom < n) {
        store(V + long(r) * n + rank_bottom, usable ? y : nan_entry);
      }
    }
  }
}
