"""Test matrices with a known condition number (LAPACK's slatms, in NumPy) and test ratios.

Used by the test suite and by ``python -m mpslinalg check``. Ratios follow
LAPACK's TESTING/LIN (sget03 etc.) with eps = torch.finfo(dtype).eps: a ratio of
15 or more fails (LAPACK's threshold 30 with its eps = 2^-24). References are
SciPy's, in float64/complex128, on the float32 inputs as stored.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import torch

THRESHOLD = 15.0
REAL = {torch.float32: torch.float32, torch.complex64: torch.float32,
        torch.float64: torch.float64, torch.complex128: torch.float64}
EXACT = {torch.float32: np.float64, torch.complex64: np.complex128,
         torch.float64: np.float64, torch.complex128: np.complex128}

# LAPACK's slatb4 scales for float32: SMALL = 0.25 * sfmin / eps, LARGE = 1 / SMALL.
SMALL = 2.0**-105
LARGE = 2.0**105


def eps(dtype: torch.dtype) -> float:
    return torch.finfo(REAL[dtype]).eps


def haar(n: int, rng: np.random.Generator, complex_: bool) -> np.ndarray:
    g = rng.standard_normal((n, n))
    if complex_:
        g = g + 1j * rng.standard_normal((n, n))
    q, r = np.linalg.qr(g)
    d = np.diagonal(r)
    return q * (d / np.where(d == 0, 1, np.abs(d)))


def latms(n: int, cond: float, scale: float, rng: np.random.Generator, complex_: bool, mode: int = 3) -> np.ndarray:
    """U diag(d) V^H with d from slatms MODE ``mode`` (1..5), max(d) = scale, d_max/d_min = cond."""
    i = np.arange(n)
    t = i / max(n - 1, 1)
    if mode == 1:
        d = np.where(i == 0, 1.0, 1 / cond)
    elif mode == 2:
        d = np.where(i == n - 1, 1 / cond, 1.0)
    elif mode == 3:
        d = cond ** (-t)
    elif mode == 4:
        d = 1 - t * (1 - 1 / cond)
    else:
        d = np.exp(rng.uniform(-np.log(cond), 0, n))
    d = d * scale / (d.max() if n else 1)
    return (haar(n, rng, complex_) * d) @ haar(n, rng, complex_).conj().T


def batch_of(shape: tuple, n: int, dtype: torch.dtype, rng, cond=10.0, scale=1.0, mode=3) -> torch.Tensor:
    count = int(np.prod(shape, dtype=np.int64))
    mats = [latms(n, cond, scale, rng, dtype.is_complex, mode) for _ in range(count)]
    array = np.array(mats).reshape(*shape, n, n) if count else np.zeros((*shape, n, n))
    return torch.from_numpy(array).to(dtype)


def exact(t: torch.Tensor) -> np.ndarray:
    """The float64/complex128 values of a tensor, for SciPy references."""
    return t.detach().cpu().resolve_conj().numpy().astype(EXACT[t.dtype])


def norm1(a: np.ndarray) -> np.ndarray:
    """Matrix 1-norms over the last two dims."""
    return np.abs(a).sum(-2).max(-1) if a.shape[-1] else np.zeros(a.shape[:-2])


def inv_ratio(A: torch.Tensor, X: torch.Tensor) -> float:
    """LAPACK sget03: max over the batch of ||I - X A||_1 / (n ||A||_1 ||X||_1 eps)."""
    a, x = exact(A), exact(X)
    n = a.shape[-1]
    if n == 0 or a.size == 0:
        return 0.0
    residual = norm1(np.eye(n) - x @ a)
    scale = n * norm1(a) * norm1(x) * eps(A.dtype)
    return float(np.max(np.where(scale > 0, residual / np.where(scale > 0, scale, 1), 1 / eps(A.dtype))))


def condition(A: torch.Tensor) -> np.ndarray:
    """kappa_1 per matrix, from SciPy's float64 inverse."""
    a = exact(A)
    return norm1(a) * norm1(scipy.linalg.inv(a)) if a.shape[-1] else np.ones(a.shape[:-2])


def det_ratio(A: torch.Tensor, d: torch.Tensor) -> float:
    """max over the batch of |det - ref| / (n kappa eps |ref|), ref from SciPy in float64."""
    a = exact(A)
    n = a.shape[-1]
    if a.size == 0:
        return 0.0
    ref = scipy.linalg.det(a)
    error = np.abs(exact(d) - ref)
    return float(np.max(error / (n * condition(A) * eps(A.dtype) * np.abs(ref))))


def triangle(n: int, cond: float, rng: np.random.Generator, complex_: bool, upper: bool, unit: bool) -> np.ndarray:
    """A triangular matrix with a controlled condition number.

    Random triangles are exponentially ill-conditioned; R of the QR of a slatms
    matrix has that matrix's singular values, so kappa_2(R) = cond. A unit
    triangle is L of a pivoted LU (|l_ij| <= 1), of a slatms matrix of that cond.
    """
    a = latms(n, cond, 1.0, rng, complex_)
    if unit:
        _, lower, _ = scipy.linalg.lu(a) if n else (None, np.zeros((0, 0)), None)
        t = lower if not upper else lower.conj().T
    else:
        r = np.linalg.qr(a)[1] if n else np.zeros((0, 0))
        t = r if upper else r.conj().T
    return t


def solve_ratio(A: torch.Tensor, X: torch.Tensor, B: torch.Tensor, upper: bool, left: bool, unit: bool) -> float:
    """LAPACK sget02/strt02: max_j ||b_j - op(A) x_j||_1 / (||op(A)||_1 ||x_j||_1 eps).

    op(A) is the triangle of A that the solve reads (unit diagonal if ``unit``);
    for right solves (X A = B) the ratio is taken on the transposed system.
    """
    a, x, b = exact(A), exact(X), exact(B)
    if a.shape[-1] == 0 or x.size == 0:
        return 0.0
    t = np.triu(a) if upper else np.tril(a)
    if unit:
        idx = np.arange(a.shape[-1])
        t[..., idx, idx] = 1
    return _column_ratio(t, x, b, left, A.dtype)


def scaled_ratio(residual: np.ndarray, scale: np.ndarray, dtype: torch.dtype) -> float:
    """max residual / scale over a batch (0 for an empty one), as LAPACK's tests: a nonzero
    residual where the scale is zero counts 1/eps."""
    return float(np.max(np.where(scale > 0, residual / np.where(scale > 0, scale, 1), np.where(residual > 0, 1 / eps(dtype), 0)), initial=0))


def _column_ratio(a: np.ndarray, x: np.ndarray, b: np.ndarray, left: bool, dtype: torch.dtype) -> float:
    """max_j ||b_j - a x_j||_1 / (||a||_1 ||x_j||_1 eps) of a X = B, or of X a = B
    taken on the transposed system; 1/eps for a residual with a zero scale."""
    if not left:
        a, x, b = np.swapaxes(a, -1, -2), np.swapaxes(x, -1, -2), np.swapaxes(b, -1, -2)
    residual = np.abs(b - a @ x).sum(-2)  # per column
    scale = norm1(a)[..., None] * np.abs(x).sum(-2) * eps(dtype)
    return scaled_ratio(residual, scale, dtype)


def lu_ratio(A: torch.Tensor, LU: torch.Tensor, pivots: torch.Tensor) -> float:
    """LAPACK sget01: max over the batch of ||P L U - A||_1 / (n ||A||_1 eps), the
    interchanges undone in float64 (1/eps for a nonzero residual of a zero A)."""
    a, lu = exact(A), exact(LU)
    m, n = a.shape[-2:]
    k = min(m, n)
    if a.size == 0 or k == 0:
        return 0.0
    lower = np.tril(lu[..., :, :k], -1) + np.eye(m, k)
    product = lower @ np.triu(lu[..., :k, :])
    order = np.broadcast_to(np.arange(m), a.shape[:-1]).copy()
    piv = pivots.cpu().numpy().astype(np.int64) - 1
    for j in range(k):  # slaswp's interchanges, first to last: the row order of P^T A
        here = np.take_along_axis(order, piv[..., j : j + 1], -1)
        there = order[..., j : j + 1].copy()
        order[..., j : j + 1] = here
        np.put_along_axis(order, piv[..., j : j + 1], there, -1)
    rows = np.take_along_axis(a, order[..., None], -2)  # P^T A
    residual = norm1(product - rows)
    scale = n * norm1(a) * eps(A.dtype)
    return scaled_ratio(residual, scale, A.dtype)


def general_solve_ratio(A: torch.Tensor, X: torch.Tensor, B: torch.Tensor, left: bool = True, adjoint: bool = False) -> float:
    """LAPACK sget02: max_j ||b_j - op(A) x_j||_1 / (||op(A)||_1 ||x_j||_1 eps) for
    op(A) X = B (``left``) or X op(A) = B, op(A) = A or A^H; batch dims broadcast."""
    a, x, b = exact(A), exact(X), exact(B)
    if a.shape[-1] == 0 or x.size == 0:
        return 0.0
    if adjoint:
        a = np.conj(np.swapaxes(a, -1, -2))
    return _column_ratio(a, x, b, left, A.dtype)


def qr_ratios(A: torch.Tensor, Q: torch.Tensor, R: torch.Tensor) -> tuple[float, float]:
    """LAPACK's sqrt01 / sqrt02 ratios, the largest over the batch:
    ||R - Q^H A||_1 / (max(1, m) ||A||_1 eps) and ||I - Q^H Q||_1 / (max(1, m) eps)."""
    a, q, r = exact(A), exact(Q), exact(R)
    m = a.shape[-2]
    e = eps(A.dtype)
    qh = np.conj(np.swapaxes(q, -1, -2))
    rows = r.shape[-2]
    residual = norm1(r - (qh @ a)[..., :rows, :]) / (max(1, m) * np.maximum(norm1(a), np.finfo(float).tiny) * e)
    orthogonality = norm1(np.eye(q.shape[-1]) - qh @ q) / (max(1, m) * e)
    return float(np.max(residual, initial=0)), float(np.max(orthogonality, initial=0))


def svd_ratios(A: torch.Tensor, U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor) -> tuple[float, float, float, float]:
    """LAPACK's sbdt01 / sort01 ratios and the singular values' error, the largest over the batch:
    ||A - U S Vh||_1 / (max(m, n) ||A||_1 eps), ||I - U^H U||_1 / (m eps), ||I - Vh Vh^H||_1 /
    (n eps), and max |S - S_ref| / (k S_max eps) against SciPy's on A as stored."""
    a, u, s, vh = exact(A), exact(U), exact(S).real, exact(Vh)
    m, n = a.shape[-2:]
    if a.size == 0:
        return 0.0, 0.0, 0.0, 0.0
    k = min(m, n)
    e = eps(A.dtype)
    product = (u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :]
    residual = norm1(a - product) / (max(m, n, 1) * np.maximum(norm1(a), np.finfo(float).tiny) * e)
    uu = norm1(np.eye(u.shape[-1]) - np.conj(np.swapaxes(u, -1, -2)) @ u) / (max(m, 1) * e)
    vv = norm1(np.eye(vh.shape[-2]) - vh @ np.conj(np.swapaxes(vh, -1, -2))) / (max(n, 1) * e)
    reference = np.array([scipy.linalg.svdvals(x) for x in a.reshape(-1, m, n)]).reshape(s.shape)
    largest = np.maximum(reference[..., :1], np.finfo(float).tiny) if k else reference
    values = np.abs(s - reference) / (max(k, 1) * largest * e) if k else np.zeros(1)
    return tuple(float(np.max(r, initial=0)) for r in (residual, uu, vv, values))


def polar_ratios(A: torch.Tensor, U: torch.Tensor, H: torch.Tensor) -> tuple[float, float, float]:
    """The polar decomposition's ratios, the largest over the batch: ||A - U H||_1 /
    (n ||A||_1 eps), ||I - U^H U||_1 / (m eps), and H's departure from Hermitian,
    ||H - H^H||_1 / (n ||H||_1 eps)."""
    a, u, h = exact(A), exact(U), exact(H)
    m, n = a.shape[-2:]
    if a.size == 0:
        return 0.0, 0.0, 0.0
    e = eps(A.dtype)
    tiny = np.finfo(float).tiny
    residual = norm1(a - u @ h) / (n * np.maximum(norm1(a), tiny) * e)
    orthogonality = norm1(np.eye(n) - np.conj(np.swapaxes(u, -1, -2)) @ u) / (m * e)
    hermitian = norm1(h - np.conj(np.swapaxes(h, -1, -2))) / (n * np.maximum(norm1(h), tiny) * e)
    return tuple(float(np.max(r, initial=0)) for r in (residual, orthogonality, hermitian))


def hermitian_batch(shape: tuple, n: int, dtype: torch.dtype, rng, eigenvalues: np.ndarray | None = None,
                    cond: float = 10.0, scale: float = 1.0, definite: bool = True) -> torch.Tensor:
    """Hermitian matrices Q diag(d) Q^H, Q Haar-distributed: d = ``eigenvalues`` (one set,
    or one per matrix), else slatms MODE 3 between scale / cond and scale, with
    alternating signs unless ``definite``."""
    count = int(np.prod(shape, dtype=np.int64))
    mats = []
    for index in range(count):
        if eigenvalues is None:
            d = scale * cond ** (-np.arange(n) / max(n - 1, 1))
            d = d if definite else d * (-1.0) ** np.arange(n)
        else:
            d = np.asarray(eigenvalues, dtype=np.float64)
            d = d if d.ndim == 1 else d[index]
        q = haar(n, rng, dtype.is_complex)
        a = (q * d) @ q.conj().T
        mats.append((a + a.conj().T) / 2)
    array = np.array(mats).reshape(*shape, n, n) if count else np.zeros((*shape, n, n))
    return torch.from_numpy(array).to(dtype)


def with_junk(A: torch.Tensor, upper: bool, rng, diagonal: bool = True) -> torch.Tensor:
    """A with the triangle a Hermitian (or triangular) solver does not read, the upper
    one unless ``upper``, filled with junk of magnitude 1e3; with ``diagonal``, complex
    A's diagonal gets an imaginary part too, which cholesky and eigh do not read."""
    def junk() -> torch.Tensor:
        return torch.from_numpy(rng.standard_normal(A.shape) * 1e3).to(A.dtype)

    noise = junk() + (1j * junk() if A.is_complex() else 0)
    skipped = torch.tril(noise, -1) if upper else torch.triu(noise, 1)
    if A.is_complex() and diagonal:
        skipped = skipped + torch.diag_embed(1j * noise.diagonal(dim1=-2, dim2=-1).real)
    return A + skipped


def hermitian_of(a: np.ndarray, upper: bool = False) -> np.ndarray:
    """The Hermitian matrix that the lower (``upper``: upper) triangle of ``a`` stands for,
    as LAPACK reads it: the diagonal's real part, the triangle mirrored."""
    t = np.triu(a, 1) if upper else np.tril(a, -1)
    return t + np.conj(np.swapaxes(t, -1, -2)) + np.eye(a.shape[-1]) * np.diagonal(a, 0, -2, -1).real[..., None, :]


def cholesky_ratio(A: torch.Tensor, L: torch.Tensor, upper: bool = False) -> float:
    """LAPACK spot01: max over the batch of ||L L^H - A||_1 / (n ||A||_1 eps), A the
    Hermitian matrix of the triangle read (U^H U for ``upper``)."""
    a, factor = hermitian_of(exact(A), upper), exact(L)
    n = a.shape[-1]
    if a.size == 0:
        return 0.0
    factor = np.triu(factor) if upper else np.tril(factor)
    if upper:
        factor = np.conj(np.swapaxes(factor, -1, -2))
    residual = norm1(factor @ np.conj(np.swapaxes(factor, -1, -2)) - a)
    return scaled_ratio(residual, n * norm1(a) * eps(A.dtype), A.dtype)


def eigh_ratios(A: torch.Tensor, w: torch.Tensor, V: torch.Tensor | None, upper: bool = False) -> tuple[float, float, float]:
    """LAPACK's ssyt21 ratios and the eigenvalues' error, the largest over the batch:
    ||A - V diag(w) V^H||_1 / (n ||A||_1 eps), ||I - V^H V||_1 / (n eps), and
    max |w - w_ref| / (n ||A||_1 eps) against SciPy's eigvalsh on A as stored (A the
    Hermitian matrix of the triangle read). Without V, the first two are 0."""
    a, values = hermitian_of(exact(A), upper), exact(w).real
    n = a.shape[-1]
    if a.size == 0:
        return 0.0, 0.0, 0.0
    e = eps(A.dtype)
    scale = n * np.maximum(norm1(a), np.finfo(float).tiny) * e
    residual = orthogonality = 0.0
    if V is not None:
        v = exact(V)
        vh = np.conj(np.swapaxes(v, -1, -2))
        residual = float(np.max(norm1(a - (v * values[..., None, :]) @ vh) / scale))
        orthogonality = float(np.max(norm1(np.eye(n) - vh @ v) / (n * e)))
    reference = np.array([scipy.linalg.eigvalsh(x) for x in a.reshape(-1, n, n)]).reshape(values.shape)
    error = float(np.max(np.abs(values - reference).max(-1) / scale))
    return residual, orthogonality, error


def nonnormal_batch(shape: tuple, n: int, dtype: torch.dtype, rng, cond: float = 10.0, scale: float = 1.0) -> torch.Tensor:
    """Non-normal matrices X D X^-1, X of condition number ``cond`` (slatms MODE 3) and D
    normal random: diagonal for complex dtypes, for real ones 2 x 2 blocks
    [[a, b], [-b, a]] (the pairs a +- ib) and a last real eigenvalue for odd n."""
    count = int(np.prod(shape, dtype=np.int64))
    complex_ = dtype.is_complex
    mats = []
    for _ in range(count):
        x = latms(n, cond, 1.0, rng, complex_)
        if complex_:
            d = rng.standard_normal(n) + 1j * rng.standard_normal(n)
            mats.append((x * d) @ np.linalg.inv(x))
            continue
        blocks = np.zeros((n, n))
        for i in range(0, n - 1, 2):
            a, b = rng.standard_normal(2)
            blocks[i:i + 2, i:i + 2] = [[a, b], [-b, a]]
        if n % 2:
            blocks[-1, -1] = rng.standard_normal()
        mats.append(x @ blocks @ np.linalg.inv(x))
    array = np.array(mats).reshape(*shape, n, n) if count else np.zeros((*shape, n, n))
    return torch.from_numpy(array * scale).to(dtype)


def eig_ratios(A: torch.Tensor, w: torch.Tensor, V: torch.Tensor | None) -> tuple[float, float, float]:
    """LAPACK's sget22 ratio, the eigenvectors' norms (cgeev's) and the eigenvalues'
    error, the largest over the batch: ||A V - V diag(w)||_1 / (n ||A||_1 ||V||_1 eps),
    max |(||v_j||_2 - 1)| / (n eps), and max |w_j - w_ref| / (n ||A||_1 eps cond(w_ref))
    against SciPy's eig on A as stored, each computed eigenvalue paired with one of
    SciPy's (an assignment by distance), cond(w) = 1 / |y^H x| of its unit left and
    right eigenvectors (the first-order bound on its error). Without V, the first two
    are 0."""
    from scipy.optimize import linear_sum_assignment

    a, values = exact(A).astype(np.complex128), exact(w).astype(np.complex128)
    n = a.shape[-1]
    if a.size == 0 or n == 0:
        return 0.0, 0.0, 0.0
    e = eps(A.dtype)
    a, values = a.reshape(-1, n, n), values.reshape(-1, n)
    norms = np.maximum(norm1(a), np.finfo(float).tiny)
    residual = normalisation = 0.0
    if V is not None:
        v = exact(V).astype(np.complex128).reshape(-1, n, n)
        scale = n * norms * np.maximum(norm1(v), np.finfo(float).tiny) * e
        residual = float(np.max(norm1(a @ v - v * values[:, None, :]) / scale))
        normalisation = float(np.max(np.abs(np.linalg.norm(v, axis=-2) - 1)) / (n * e))
    error = 0.0
    for matrix, computed, norm in zip(a, values, norms):
        reference, left, right = scipy.linalg.eig(matrix, left=True, right=True)
        condition = 1 / np.maximum(np.abs(np.sum(left.conj() * right, axis=0)), np.finfo(float).tiny)
        distance = np.abs(computed[:, None] - reference[None, :])
        rows, columns = linear_sum_assignment(distance)
        error = max(error, float(np.max(distance[rows, columns] / (n * norm * e * condition[columns]))))
    return residual, normalisation, error


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a complex tensor's parts (an exact comparison that tells -0
    from 0 and compares NaN)."""
    parts = torch.view_as_real(t.cpu().resolve_conj()).contiguous()
    return parts.view(torch.int32 if parts.dtype == torch.float32 else torch.int64)


def real_eig_structure(w: torch.Tensor, V: torch.Tensor | None = None) -> int | None:
    """The number of real eigenvalues where the eigenpairs of real matrices have sgeev's
    structure, else None. Walking each matrix's eigenvalues, a real one has an imaginary
    part of exactly 0 and (with V) an exactly real eigenvector whose largest component
    is positive (of components equal to rounding, one); a complex one has a positive
    imaginary part and is followed by its exact conjugate (bit for bit), whose
    eigenvector is the conjugate of its own (in value: LAPACK's route past n = 64 may
    leave a +0 for -0). A matrix that was not decomposed is NaN throughout."""
    n = w.shape[-1]
    w = w.cpu().reshape(-1, n) if n else w.cpu().reshape(0, 0)
    V = None if V is None else V.cpu().reshape(w.shape[0], n, n)
    real_count = 0
    for m in range(w.shape[0]):
        if torch.isnan(w[m]).any():
            if not torch.isnan(w[m]).all():
                return None
            continue
        j = 0
        while j < n:
            if w[m, j].imag == 0:
                real_count += 1
                if V is not None:
                    v = V[m, :, j]
                    size = v.real.abs()
                    if (v.imag != 0).any() or not (v.real[size >= size.max() * (1 - 8 * torch.finfo(size.dtype).eps)] > 0).any():
                        return None
                j += 1
                continue
            if not (w[m, j].imag > 0 and j + 1 < n and torch.equal(_bits(w[m, j + 1]), _bits(w[m, j].conj()))):
                return None
            if V is not None and not torch.equal(V[m, :, j + 1], V[m, :, j].conj().resolve_conj()):
                return None
            j += 2
    return real_count
