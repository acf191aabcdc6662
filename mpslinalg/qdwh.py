"""The polar decomposition by QDWH, and the Hermitian eigenproblem and the SVD of large
matrices by the spectral divide and conquer built on it (Nakatsukasa, Bai and Gygi,
SIAM J. Matrix Anal. Appl. 31(5), 2010; Nakatsukasa and Higham, SIAM J. Sci. Comput.
35(3), 2013). Every step is a matrix product, a QR or a Cholesky factorization, which a
GPU runs in parallel; LAPACK's reductions to tridiagonal and bidiagonal form, and the
Jacobi kernels past a few hundred columns, do not.

- ``polar_factor``: U of A = U H (m >= n; U with orthonormal columns), the QR-based
  dynamically weighted Halley iteration. A is scaled by alpha = sqrt(||A||_1 ||A||_inf)
  >= ||A||_2 and the lower bound of its singular values taken as eps (as JAX's
  ``qdwh``), so that the iteration's weights, and how many iterations there are (4 in
  float32, 6 in float64), are fixed on the host: no synchronisation. Iterations whose
  weight c exceeds CHOLESKY_FROM take the QR of [sqrt(c) X; I], the rest the Cholesky
  factor of I + c X^H X (stable there: its condition is at most 1 + c).
- ``eigh_by_division``: the polar factor of H - sigma I (sigma the median of the
  diagonal) is sign(H - sigma I); P = (I + sign) / 2 projects onto the eigenvectors above
  sigma, rank k = trace(P) (one host synchronisation a split). A QR of P Omega (Omega a
  fixed Gaussian n x k, then once more of P Q: a subspace iteration) gives the
  orthonormal basis [V1 V2] of the split, and V1^H H V1, V2^H H V2 are divided again,
  down to sizes the Jacobi kernels take. A split is kept only if the coupling it drops,
  ||V2^H H V1||_F, is below SPLIT_TOLERANCE n eps ||H||_F (an eigenvalue at sigma leaves
  P with eigenvalues 1/2, and its subspace mixed): else sigma moves, and after
  SPLIT_TRIES the block goes to the Jacobi route whole.
- ``svd_by_polar``: A = U_p H, H = V S V^H by eigh_by_division, U = U_p V, then U's
  columns made orthonormal by a QR (columns of zero singular values, which QDWH leaves
  zero, become an orthonormal completion).

Accuracy: backward stable, as LAPACK's (residuals and orthogonality to a modest multiple
of n eps); small eigenvalues and singular values to n eps ||A|| absolutely, not to the
relative accuracy of Jacobi on graded matrices, which is why the routes keep Jacobi
below the crossovers (``eigh_family.DIVISION_FROM``, ``svd_family.POLAR_FROM``).
"""

from __future__ import annotations

import functools
import math

import torch

from . import _checks, cholesky_family, qr_family, svd_family

CHOLESKY_FROM = 100.0  # c above it: the QR-based iteration (Nakatsukasa and Higham's)
MAX_ITERATIONS = 10
SPLIT_TOLERANCE = 10.0
SPLIT_TRIES = 3


@functools.lru_cache(maxsize=None)
def weights(eps: float) -> tuple[tuple[float, float, float], ...]:
    """QDWH's (a, b, c) for each iteration from the lower bound l0 = eps of the scaled
    singular values, until every one is within 5 eps of 1 (the bound l_k of the
    smallest, l_{k+1} = l_k (a + b l_k^2) / (1 + c l_k^2)), in double precision."""
    l, found = eps, []
    while 1 - l > 5 * eps and len(found) < MAX_ITERATIONS:
        l2 = l * l
        d = (4 * (1 - l2) / (l2 * l2)) ** (1 / 3)
        root = math.sqrt(1 + d)
        a = root + 0.5 * math.sqrt(8 - 4 * d + 8 * (2 - l2) / (l2 * root))
        b = (a - 1) ** 2 / 4
        c = a + b - 1
        l = l * (a + b * l2) / (1 + c * l2)
        found.append((a, b, c))
    return tuple(found)


def _identity(n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.eye(n, dtype=like.dtype, device=like.device)


def polar_factor(A: torch.Tensor) -> torch.Tensor:
    """U of A = U H for (count, m, n) A, m >= n, by QDWH (the module's contract)."""
    count, m, n = A.shape
    real = _checks.real_dtype(A.dtype)
    # By a power of two first (exact), so that the norms neither overflow nor underflow.
    largest = A.abs().amax(dim=(-2, -1))
    e = torch.where(largest > 0, torch.frexp(largest).exponent, 0)
    down = svd_family._power_of_two(-e, real)  # two factors: 2^-e alone overflows for subnormal A
    A = A * down[0][:, None, None].to(A.dtype) * down[1][:, None, None].to(A.dtype)
    one_norm = A.abs().sum(-2).amax(-1)
    inf_norm = A.abs().sum(-1).amax(-1)
    alpha = torch.sqrt(one_norm * inf_norm)  # >= ||A||_2
    alpha = torch.where(alpha > 0, alpha, 1)
    X = A / alpha[:, None, None].to(A.dtype)
    I = _identity(n, A)
    for a, b, c in weights(torch.finfo(real).eps):
        if c > CHOLESKY_FROM:
            Q, _ = qr_family._qr_body(torch.cat((math.sqrt(c) * X, I.expand(count, n, n)), dim=-2), "reduced")
            X = (b / c) * X + ((a - b / c) / math.sqrt(c)) * (Q[:, :m] @ Q[:, m:].mH)
        else:
            Z = torch.baddbmm(I.expand(count, n, n), X.mH, X, alpha=c)
            L, _ = cholesky_family._cholesky_ex_body(Z, False, "")
            # X Z^-1 = (Z^-1 X^H)^H.
            X = (b / c) * X + (a - b / c) * cholesky_family._cholesky_solve_body(X.mH.contiguous(), L, False).mH
    return X


def hermitian_part(M: torch.Tensor) -> torch.Tensor:
    """(M + M^H) / 2 (composite's Sylvester derivatives use it too)."""
    return (M + M.mH) / 2


def _gaussian(n: int, k: int, like: torch.Tensor) -> torch.Tensor:
    """A fixed Gaussian n x k (the same for every call: results are reproducible)."""
    generator = torch.Generator().manual_seed(n * 7919 + k)
    return torch.randn(n, k, generator=generator, dtype=like.dtype).to(like.device)


def _split(H: torch.Tensor, sigma: torch.Tensor):
    """(V1, V2) splitting (n, n) H at sigma as the module says, or None if the split is
    empty or its dropped coupling is above the tolerance."""
    n = H.shape[-1]
    I = _identity(n, H)
    U = hermitian_part(polar_factor((H - sigma.to(H.dtype) * I)[None])[0])
    P = 0.5 * (I + U)
    coarse = torch.stack((P.diagonal().real.sum(), torch.linalg.matrix_norm(H)))
    rank, norm = coarse.tolist()  # a host synchronisation (the coupling's is the other)
    if not math.isfinite(rank) or not 0 < round(rank) < n:
        return None
    k = int(round(rank))
    Q, _ = qr_family._qr_body((P @ _gaussian(n, k, H))[None], "reduced")
    Q, _ = qr_family._qr_body(P @ Q, "complete")
    V1, V2 = Q[0, :, :k], Q[0, :, k:]
    coupling = torch.linalg.matrix_norm(V2.mH @ (H @ V1))
    eps = torch.finfo(_checks.real_dtype(H.dtype)).eps
    if not float(coupling) <= SPLIT_TOLERANCE * n * eps * norm:
        return None
    return V1, V2


def eigh_by_division(H: torch.Tensor, leaf, whole, vectors: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(w ascending, V or None) of Hermitian (n, n) H (both triangles read) as the module
    says. ``leaf(H, vectors)`` answers the blocks small enough for it ((1, n, n) -> (w, V),
    or None where it does not apply), ``whole(H, vectors)`` any block a split fails on."""
    n = H.shape[-1]
    found = leaf(H[None], vectors)
    if found is None:
        halves = None
        diagonal = H.diagonal().real
        spread = torch.linalg.matrix_norm(H) / math.sqrt(n)
        sigma = diagonal.median()
        for attempt in range(SPLIT_TRIES):
            halves = _split(H, sigma)
            if halves is not None:
                break
            # Off the eigenvalue the median may sit on, by a growing fraction of the spread.
            sigma = diagonal.median() + (0.5 * 10.0 ** (attempt - 3) * (-1) ** attempt) * spread
        if halves is not None:
            return _conquer(H, *halves, leaf, whole, vectors)
        found = whole(H[None], vectors)
    w, V = found
    return w[0], V[0] if vectors else None


def _conquer(H, V1, V2, leaf, whole, vectors):
    """The eigendecomposition of H from those of its split's two blocks."""
    upper_w, upper_V = eigh_by_division(hermitian_part(V1.mH @ H @ V1), leaf, whole, vectors)
    lower_w, lower_V = eigh_by_division(hermitian_part(V2.mH @ H @ V2), leaf, whole, vectors)
    w, order = torch.sort(torch.cat((lower_w, upper_w)))  # in order but for rounding at sigma
    if not vectors:
        return w, None
    return w, torch.cat((V2 @ lower_V, V1 @ upper_V), dim=-1)[:, order]


def svd_by_polar(A: torch.Tensor, leaf, whole) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U, S descending, Vh) of square (count, n, n) A as the module says; ``leaf`` and
    ``whole`` as eigh_by_division's."""
    U_p = polar_factor(A)
    Hs = hermitian_part(U_p.mH @ A)
    Us, Ss, Vhs = [], [], []
    for U_i, H_i in zip(U_p, Hs):
        w, V = eigh_by_division(H_i, leaf, whole)
        w, V = w.flip(-1), V.flip(-1)
        Us.append(U_i @ V)
        Ss.append(w.clamp(min=0))  # H is semidefinite: what lies below 0 is rounding
        Vhs.append(V.mH)
    U, S, Vh = torch.stack(Us), torch.stack(Ss), torch.stack(Vhs)
    # Orthonormal columns: Q of U's QR, each column's phase back to U's (R's diagonal
    # near 1 in modulus where U's columns already are; 0 where QDWH left a zero column).
    Q, R = qr_family._qr_body(U, "reduced")
    d = R.diagonal(dim1=-2, dim2=-1)
    phase = torch.where(d.abs() > 0, d / d.abs().clamp(min=torch.finfo(S.dtype).tiny), 1)
    return Q * phase[:, None, :], S, Vh
