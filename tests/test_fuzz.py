"""Fuzzing every function with what users feed it: extreme scales (2^±120, near float32's
overflow and underflow), subnormals, NaN and ±Inf, exactly singular and rank-deficient
matrices, empty and zero-size dimensions, batches, and transposed, conjugated and
strided views. Each call either meets LAPACK's ratio bound (no worse than torch.linalg's
own float32 result on the same input, where LAPACK itself loses it), or raises exactly
torch.linalg's error, or, for NaN input, gives non-finite output as torch does. Where
torch fails (its CPU SVD raises on non-finite input, its gels trips an internal assert
on NaN, its LU of subnormal matrices overflows), ours must still answer.

CI runs the 'ci' profile; ``HYPOTHESIS_PROFILE=fuzz python -m pytest tests/test_fuzz.py
--hypothesis-show-statistics`` runs thousands of examples per function."""

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, note, strategies as st

import mpslinalg as LA
from conftest import require
from mpslinalg import svd_family, testing

DTYPES = (torch.float32, torch.complex64)
KINDS = ("gaussian", "scaled", "subnormal", "singular", "rank one", "nan", "inf", "zero")


@st.composite
def matrices(draw, square=True, max_n=12):
    dtype = draw(st.sampled_from(DTYPES))
    batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    n = draw(st.integers(0, max_n))
    m = n if square else draw(st.integers(0, max_n))
    kind = draw(st.sampled_from(KINDS))
    seed = draw(st.integers(0, 2**32 - 1))
    generator = torch.Generator().manual_seed(seed)
    A = torch.randn(*batch, m, n, dtype=dtype, generator=generator)
    if kind == "scaled":
        A = A * 2.0 ** draw(st.integers(-120, 120))
    elif kind == "subnormal":
        A = A * 2.0**-130
    elif kind == "singular" and min(m, n) > 1:
        A[..., -1, :] = A[..., 0, :]  # two equal rows
    elif kind == "rank one":
        A = A[..., :, :1] @ A[..., :1, :] if min(m, n) else A
    elif kind in ("nan", "inf") and A.numel():
        A.view(-1)[draw(st.integers(0, A.numel() - 1))] = math.nan if kind == "nan" else -math.inf
    elif kind == "zero":
        A = torch.zeros_like(A)
    view = draw(st.sampled_from(("contiguous", "transposed", "conjugated", "strided")))
    if view == "transposed":
        A = A.mT.contiguous().mT
    elif view == "conjugated" and A.is_complex():
        A = A.conj().resolve_conj().conj()  # a conjugate view with A's values
    elif view == "strided":
        A = torch.stack((A, torch.zeros_like(A)), -1)[..., 0]  # every other element
    note(f"{kind}, {view}, {tuple(A.shape)}, {dtype}")
    return A


def both(ours, theirs, *args):
    """The outcomes of ``ours`` (on the OpenCL kernels) and ``theirs`` (torch's) on ``args``."""
    with LA.use_backend("opencl"):
        mine = outcome(ours, *args)
    return mine, outcome(theirs, *args)


def outcome(function, *args):
    try:
        return "returned", function(*args)
    except Exception as error:  # the type and message are what is compared
        return type(error), str(error)


def torch_failed(result) -> bool:
    """torch reporting a bug of its own (an internal assert), as its CPU gels does on NaN."""
    return result[0] is RuntimeError and "INTERNAL ASSERT FAILED" in result[1]


def subnormal(A) -> bool:
    """Whether every entry of A is subnormal (or zero): such numbers carry fewer significant
    bits than eps assumes (2^-149 apart in float32), so LAPACK's ratios do not apply; only
    errors, finiteness and NaN are compared for them."""
    return A.numel() > 0 and float(A.abs().max()) < torch.finfo(A.dtype).tiny


def did_not_converge(result, A) -> bool:
    """torch's SVD on the CPU (LAPACK) raising for non-finite input."""
    return result[0] is torch.linalg.LinAlgError and "failed to converge" in result[1] and not bool(torch.isfinite(A).all())


def agree(name, ours, theirs, ratio, A):
    """Ours against torch's: the same error, or a ratio within LAPACK's bound (or within
    twice torch's own, where the input defeats float32 LAPACK too); non-finite input
    must give non-finite output where torch's is."""
    flat = lambda r: [t for t in (r if isinstance(r, tuple) else (r,)) if t.is_floating_point() or t.is_complex()]
    if did_not_converge(theirs, A) or torch_failed(theirs):
        # torch's SVD on the CPU (LAPACK) raises for non-finite input, and its gels trips an
        # internal assert on NaN; on CUDA, as ours, the SVD gives NaN
        assert ours[0] == "returned", ours
        assert torch.isfinite(A).all() or not all(torch.isfinite(t).all() for t in flat(ours[1])), ours
        return
    if theirs[0] != "returned":
        assert ours[:2] == theirs[:2], f"{name}: {ours[0]} where torch raised {theirs}"
        return
    assert ours[0] == "returned", f"{name} raised {ours} where torch returned"
    finite = lambda r: all(bool(torch.isfinite(t).all()) for t in flat(r))
    if not torch.isfinite(A).all():
        # Infinities give IEEE results, which may be finite limits (the inverse of
        # [[-inf, b], [c, d]] is [[0, 0], [0, 1/d]], where torch gives NaN); a NaN must show.
        if torch.isnan(A).any() and not finite(theirs[1]):
            assert not finite(ours[1]), f"{name}: finite output from NaN input"
        return
    if subnormal(A):
        return
    mine, reference = ratio(ours[1]), ratio(theirs[1])
    if not math.isfinite(reference) or not finite(theirs[1]):
        # torch's result overflows too (the inverse of a subnormal matrix; LAPACK's LU of one)
        assert mine < testing.THRESHOLD or not finite(ours[1]), f"{name}: ratio {mine} (torch's {reference})"
    else:
        assert mine < testing.THRESHOLD or mine <= 2 * reference, f"{name}: ratio {mine} (torch's {reference})"


def numerically_singular(A) -> bool:
    """Whether some matrix of A has a condition number past 1/eps of its dtype, where
    whether elimination meets an exactly zero pivot depends on rounding."""
    a = testing.exact(A)
    if a.size == 0 or not np.isfinite(a).all():  # non-finite input is judged on its own
        return False
    return bool((np.linalg.cond(a.reshape(-1, *a.shape[-2:])) * testing.eps(A.dtype) > 1).any())


@given(matrices())
def test_inv_ex_and_det(A):
    require("opencl")
    ours_inv, theirs_inv = both(LA.inv_ex, torch.linalg.inv_ex, A)
    ours_det, theirs_det = both(LA.det, torch.linalg.det, A)
    singular = any(r[0] == "returned" and bool((r[1].info > 0).any()) for r in (ours_inv, theirs_inv))
    if ours_inv[0] == "returned" and theirs_inv[0] == "returned":
        assert torch.equal(ours_inv[1].info > 0, theirs_inv[1].info > 0) or not torch.isfinite(A).all() or numerically_singular(A)
    if not singular:
        agree("inv_ex", ours_inv, theirs_inv, lambda r: testing.inv_ratio(A, r.inverse), A)
    if ours_det[0] == "returned" and theirs_det[0] == "returned" and torch.isfinite(A).all() and torch.isfinite(theirs_det[1]).all():
        if numerically_singular(A):  # det's relative ratio means nothing near zero: a backward error bound
            a = testing.exact(A).reshape(-1, *A.shape[-2:])
            sigma = np.linalg.svd(a, compute_uv=False)
            n = A.shape[-1]
            bound = 10 * n * testing.eps(A.dtype) * sigma[:, 0] * np.prod(sigma[:, : n - 1], axis=-1)
            assert (np.abs(testing.exact(ours_det[1]).reshape(-1)) <= bound).all()
        else:
            assume(bool((theirs_det[1] != 0).all()))  # underflowed: det's ratio is relative
            agree("det", ours_det, theirs_det, lambda d: testing.det_ratio(A, d), A)
    else:
        assert ours_det[0] == theirs_det[0]


@given(matrices(), st.integers(1, 3))
def test_solve_ex_and_triangular(A, k):
    require("opencl")
    B = torch.ones(*A.shape[:-1], k, dtype=A.dtype)
    ours, theirs = both(LA.solve_ex, torch.linalg.solve_ex, A, B)
    ours_tri, theirs_tri = both(lambda A, B: LA.solve_triangular(A, B, upper=False),
                                lambda A, B: torch.linalg.solve_triangular(A, B, upper=False), A.tril(), B)
    if any(r[0] == "returned" and (r[1].info > 0).any() for r in (ours, theirs)):
        assert ours[0] == theirs[0] == "returned" and (torch.equal(ours[1].info > 0, theirs[1].info > 0) or numerically_singular(A))
    else:
        agree("solve_ex", ours, theirs, lambda r: testing.general_solve_ratio(A, r.result, B), A)
    agree("solve_triangular", ours_tri, theirs_tri,
          lambda X: testing.solve_ratio(A.tril(), X, B, upper=False, left=True, unit=False), A)


# name -> (ours, torch's, LAPACK's ratio of a result for A): the factorizations of any shape
FACTORIZATIONS = {
    "lu_factor_ex": (LA.lu_factor_ex, torch.linalg.lu_factor_ex, lambda A, r: testing.lu_ratio(A, r.LU, r.pivots)),
    "qr": (LA.qr, torch.linalg.qr, lambda A, r: max(testing.qr_ratios(A, r.Q, r.R))),
    "svd": (lambda A: LA.svd(A, False), lambda A: torch.linalg.svd(A, False),
            lambda A, r: max(testing.svd_ratios(A, r.U, r.S, r.Vh))),
}


@pytest.mark.parametrize("name", FACTORIZATIONS)
@given(A=matrices(square=False))
def test_factorization(name, A):
    require("opencl")
    ours_function, theirs_function, ratio = FACTORIZATIONS[name]
    agree(name, *both(ours_function, theirs_function, A), lambda r: ratio(A, r), A)


def penrose_ratio(A, X) -> float:
    """||A X A - A|| / (||A||^2 ||X|| eps): the first Moore-Penrose condition, scaled."""
    a, x = testing.exact(A), testing.exact(X)
    size = testing.norm1(a) ** 2 * testing.norm1(x) * testing.eps(A.dtype)
    residual = testing.norm1(a @ x @ a - a)
    return float(np.max(np.where(size > 0, residual / np.where(size > 0, size, 1), residual), initial=0))


@given(matrices(square=False))
def test_pinv_and_matrix_rank(A):
    require("opencl")
    ours, theirs = both(LA.pinv, torch.linalg.pinv, A)
    ours_rank, theirs_rank = both(LA.matrix_rank, torch.linalg.matrix_rank, A)

    agree("pinv", ours, theirs, lambda X: penrose_ratio(A, X), A)
    if ours_rank[0] == "returned" and theirs_rank[0] == "returned" and torch.isfinite(A).all():
        # ranks may differ only where a singular value sits at the cut-off
        difference = (ours_rank[1] - theirs_rank[1]).abs()
        assert difference.numel() == 0 or difference.max() <= 1
    elif theirs_rank[0] != "returned" and not did_not_converge(theirs_rank, A):
        assert ours_rank == theirs_rank  # torch's error (its NaN error is answered as in agree)


# --- flags, and the entry points not fuzzed above ---


def right_hand_side(A, left, k):
    """Ones for op(A) X = B (``left``, k columns) or X op(A) = B (k rows)."""
    n = A.shape[-1]
    return torch.ones(*A.shape[:-2], n, k, dtype=A.dtype) if left else torch.ones(*A.shape[:-2], k, n, dtype=A.dtype)


def plu_ratio(A, P, L, U) -> float:
    """sget01's ratio for lu()'s P, L, U: ||P L U - A|| / (n ||A|| eps)."""
    a = testing.exact(A)
    residual = testing.norm1(testing.exact(P) @ testing.exact(L) @ testing.exact(U) - a)
    return testing.scaled_ratio(residual, max(1, A.shape[-1]) * testing.norm1(a) * testing.eps(A.dtype), A.dtype)


def gram_ratio(A, R) -> float:
    """For qr(mode='r'): ||R^H R - A^H A|| / (m ||A||^2 eps), free of R's row signs."""
    a, r = testing.exact(A), testing.exact(R)
    h = lambda x: np.conj(np.swapaxes(x, -1, -2))
    residual = testing.norm1(h(r) @ r - h(a) @ a)
    return testing.scaled_ratio(residual, max(1, A.shape[-2]) * testing.norm1(a) ** 2 * testing.eps(A.dtype), A.dtype)


def values_ratio(A, S) -> float:
    """max |S - S_SciPy| / (k S_max eps)."""
    a = testing.exact(A)
    if a.size == 0:
        return 0.0
    reference = np.linalg.svd(a, compute_uv=False)
    return testing.scaled_ratio(np.abs(testing.exact(S) - reference).max(-1),
                                max(1, min(A.shape[-2:])) * reference[..., 0] * testing.eps(A.dtype), A.dtype)


@given(matrices(), st.booleans(), st.booleans(), st.booleans(), st.integers(1, 3))
def test_solve_triangular_flags(A, upper, left, unit, k):
    require("opencl")
    B = right_hand_side(A, left, k)
    flags = dict(upper=upper, left=left, unitriangular=unit)
    ours, theirs = both(lambda A, B: LA.solve_triangular(A, B, **flags), lambda A, B: torch.linalg.solve_triangular(A, B, **flags), A, B)
    agree("solve_triangular", ours, theirs, lambda X: testing.solve_ratio(A, X, B, upper=upper, left=left, unit=unit), A)


@given(matrices(), st.booleans(), st.booleans(), st.integers(1, 3))
def test_solve_and_lu_solve_flags(A, left, adjoint, k):
    require("opencl")
    B = right_hand_side(A, left, k)
    ours, theirs = both(lambda A, B: LA.solve(A, B, left=left), lambda A, B: torch.linalg.solve(A, B, left=left), A, B)
    if numerically_singular(A):  # whether a pivot is exactly zero depends on rounding
        assert ours[0] in (theirs[0], "returned", torch.linalg.LinAlgError)
    else:
        agree("solve", ours, theirs, lambda X: testing.general_solve_ratio(A, X, B, left=left), A)
    factors = torch.linalg.lu_factor_ex(A)
    if torch.isfinite(A).all() and not numerically_singular(A) and not (factors.info > 0).any():
        ours, theirs = both(lambda *a: LA.lu_solve(*a, left=left, adjoint=adjoint),
                            lambda *a: torch.linalg.lu_solve(*a, left=left, adjoint=adjoint), factors.LU, factors.pivots, B)
        agree("lu_solve", ours, theirs, lambda X: testing.general_solve_ratio(A, X, B, left=left, adjoint=adjoint), A)


@given(matrices(square=False))
def test_lu_and_lu_factor(A):
    require("opencl")
    ours, theirs = both(LA.lu, torch.linalg.lu, A)
    ours_factor, theirs_factor = both(LA.lu_factor, torch.linalg.lu_factor, A)
    agree("lu", ours, theirs, lambda r: plu_ratio(A, *r), A)
    if numerically_singular(A):  # lu_factor raises for an exactly zero pivot, which rounding decides
        assert ours_factor[0] == "returned" or "is zero and using it on lu_solve" in ours_factor[1], ours_factor
    else:
        agree("lu_factor", ours_factor, theirs_factor, lambda r: testing.lu_ratio(A, r.LU, r.pivots), A)


@given(matrices())
def test_inv_slogdet_logdet(A):
    """inv against torch; slogdet and logdet against NumPy's float64 slogdet (torch's CPU
    LU turns subnormal matrices into inf/NaN), to n eps cond(A) in log|det| and the sign."""
    require("opencl")
    ours_inv, theirs_inv = both(LA.inv, torch.linalg.inv, A)
    with LA.use_backend("opencl"):
        ours_slogdet, ours_logdet = outcome(LA.slogdet, A), outcome(LA.logdet, A)
    if numerically_singular(A) or not torch.isfinite(A).all():
        assert ours_inv[0] in (theirs_inv[0], "returned", torch.linalg.LinAlgError)
        return
    agree("inv", ours_inv, theirs_inv, lambda X: testing.inv_ratio(A, X), A)
    assert ours_slogdet[0] == ours_logdet[0] == "returned", (ours_slogdet, ours_logdet)
    if subnormal(A):
        return
    a = testing.exact(A)
    sign, logabs = np.linalg.slogdet(a)
    tolerance = 10 * max(1, A.shape[-1]) * testing.eps(A.dtype) * np.maximum(testing.condition(A), 1)
    assert np.all(np.abs(testing.exact(ours_slogdet[1].sign) - sign) <= tolerance)
    tolerance = tolerance + 2 * testing.eps(A.dtype) * np.abs(logabs)  # log|det| itself rounded to float32
    assert np.all(np.abs(testing.exact(ours_slogdet[1].logabsdet) - logabs) <= tolerance)
    logdet = testing.exact(ours_logdet[1])
    if A.is_complex():
        assert np.all(np.abs(logdet - (np.log(sign) + logabs)) <= 2 * tolerance)
    else:  # NaN for a negative determinant, as torch.logdet
        assert np.all(np.isnan(logdet) == (sign < 0)) and np.all(np.abs(np.where(sign > 0, logdet - logabs, 0)) <= tolerance)


@given(matrices(square=False), st.sampled_from(("reduced", "complete", "r")))
def test_qr_modes_geqrf_householder_product(A, mode):
    require("opencl")
    ours, theirs = both(LA.qr, torch.linalg.qr, A, mode)
    ours_geqrf, theirs_geqrf = both(LA.geqrf, torch.geqrf, A)
    if mode == "r":
        agree("qr(r)", ours, theirs, lambda r: gram_ratio(A, r.R), A)
    else:
        agree(f"qr({mode})", ours, theirs, lambda r: max(testing.qr_ratios(A, r.Q, r.R)), A)
    k = min(A.shape[-2:])

    def geqrf_ratios(r):
        with LA.use_backend("opencl"):
            Q = LA.householder_product(r[0][..., :k], r[1])  # m x k: square for a wide A
        return max(testing.qr_ratios(A, Q, r[0][..., :k, :].triu()))

    agree("geqrf + householder_product", ours_geqrf, theirs_geqrf, geqrf_ratios, A)


@given(matrices(square=False), st.booleans())
def test_svd_full_matrices_and_svdvals(A, full_matrices):
    require("opencl")
    ours, theirs = both(LA.svd, torch.linalg.svd, A, full_matrices)
    ours_values, theirs_values = both(LA.svdvals, torch.linalg.svdvals, A)
    agree("svd", ours, theirs, lambda r: max(testing.svd_ratios(A, r.U, r.S, r.Vh)), A)
    agree("svdvals", ours_values, theirs_values, lambda S: values_ratio(A, S), A)


@given(matrices(square=False), st.sampled_from(("gels", "gelsy", "gelsd", "gelss")), st.integers(1, 2))
def test_lstsq_drivers(A, driver, k):
    """Every driver's solution meets the normal equations A^H (A X - B) = 0 to rounding,
    which any least-squares solution does (torch's gels on a rank-deficient A need not)."""
    require("opencl")
    B = torch.ones(*A.shape[:-1], k, dtype=A.dtype)
    ours, theirs = both(lambda A, B: LA.lstsq(A, B, driver=driver), lambda A, B: torch.linalg.lstsq(A, B, driver=driver), A, B)

    def normal_equations(r):
        a, x, b = testing.exact(A), testing.exact(r.solution), testing.exact(B)
        residual = testing.norm1(np.conj(np.swapaxes(a, -1, -2)) @ (a @ x - b))
        size = max(A.shape[-2:]) * testing.norm1(a) * (testing.norm1(a) * testing.norm1(x) + testing.norm1(b)) * testing.eps(A.dtype)
        return testing.scaled_ratio(residual, size, A.dtype)

    if theirs[0] is torch.linalg.LinAlgError and "full rank" in theirs[1]:
        # torch's gels on the CPU refuses a rank-deficient A; every mpslinalg driver solves by the SVD
        assert ours[0] == "returned" and normal_equations(ours[1]) < testing.THRESHOLD, ours
        return
    agree(f"lstsq({driver})", ours, theirs, normal_equations, A)


@given(matrices(), st.booleans())
def test_pinv_hermitian(A, hermitian):
    require("opencl")
    ours, theirs = both(lambda A: LA.pinv(A, hermitian=hermitian), lambda A: torch.linalg.pinv(A, hermitian=hermitian), A)
    read = svd_family._hermitian_from_lower(A) if hermitian else A
    agree(f"pinv(hermitian={hermitian})", ours, theirs, lambda X: penrose_ratio(read, X), A)


@given(matrices(), st.sampled_from(("L", "U")))
def test_eigh_and_eigvalsh(A, UPLO):
    require("opencl")
    upper = UPLO == "U"
    ours, theirs = both(lambda A: LA.eigh(A, UPLO=UPLO), lambda A: torch.linalg.eigh(A, UPLO=UPLO), A)
    agree("eigh", ours, theirs, lambda r: max(testing.eigh_ratios(A, r.eigenvalues, r.eigenvectors, upper)), A)
    ours, theirs = both(lambda A: LA.eigvalsh(A, UPLO=UPLO), lambda A: torch.linalg.eigvalsh(A, UPLO=UPLO), A)
    agree("eigvalsh", ours, theirs, lambda w: testing.eigh_ratios(A, w, None, upper)[2], A)


@given(matrices(), st.booleans())
def test_cholesky_ex_of_gram_matrices(A, upper):
    """cholesky_ex of A A^H (positive semidefinite; definite unless A is singular): where
    ours completes (info 0) spot01 holds; where torch's completes on a matrix that is not
    numerically singular, ours completes too; a NaN it reads never completes."""
    require("opencl")
    P = A @ A.mH
    ours, theirs = both(lambda P: LA.cholesky_ex(P, upper=upper), lambda P: torch.linalg.cholesky_ex(P, upper=upper), P)
    assert ours[0] == theirs[0] == "returned", (ours, theirs)
    (L, info), expected = ours[1], theirs[1].info
    assert info.shape == expected.shape and info.dtype == expected.dtype
    if torch.isnan(P).any():  # a NaN in what is read: the triangle, the diagonal's real part
        triangle = P.triu(1) if upper else P.tril(-1)
        diagonal = P.diagonal(dim1=-2, dim2=-1)
        read = torch.isnan(triangle).flatten(-2).any(-1) | torch.isnan(diagonal.real if P.is_complex() else diagonal).any(-1)
        assert (info[read] > 0).all()
        return
    if not torch.isfinite(P).all() or subnormal(P):
        return
    done = info == 0
    if done.any():
        assert testing.cholesky_ratio(P[done], L[done], upper) < testing.THRESHOLD
    if not numerically_singular(P):
        assert (done | (expected > 0)).all(), (info, expected)
