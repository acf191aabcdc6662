"""Fuzzing every function with what users feed it: extreme scales (2^±120, near float32's
overflow and underflow), subnormals, NaN and ±Inf, exactly singular and rank-deficient
matrices, empty and zero-size dimensions, batches, and transposed, conjugated and
strided views. Each call either meets LAPACK's ratio bound (no worse than torch.linalg's
own float32 result on the same input, where LAPACK itself loses it), or raises exactly
torch.linalg's error, or, for non-finite input, gives non-finite output as torch does.

CI runs the 'ci' profile; ``HYPOTHESIS_PROFILE=fuzz python -m pytest tests/test_fuzz.py
--hypothesis-show-statistics`` runs thousands of examples per function."""

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, note, strategies as st

import mpslinalg as LA
from conftest import require
from mpslinalg import testing

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


def outcome(function, *args):
    try:
        return "returned", function(*args)
    except Exception as error:  # the type and message are what is compared
        return type(error), str(error)


def did_not_converge(result, A) -> bool:
    """torch's SVD on the CPU (LAPACK) raising for non-finite input."""
    return result[0] is torch.linalg.LinAlgError and "failed to converge" in result[1] and not bool(torch.isfinite(A).all())


def agree(name, ours, theirs, ratio, A):
    """Ours against torch's: the same error, or a ratio within LAPACK's bound (or within
    twice torch's own, where the input defeats float32 LAPACK too); non-finite input
    must give non-finite output where torch's is."""
    flat = lambda r: [t for t in (r if isinstance(r, tuple) else (r,)) if t.is_floating_point() or t.is_complex()]
    if did_not_converge(theirs, A):
        # torch's SVD on the CPU (LAPACK) raises for non-finite input; on CUDA, as ours, it gives NaN
        assert ours[0] == "returned" and not all(torch.isfinite(t).all() for t in flat(ours[1])), ours
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
    return a.size > 0 and bool((np.linalg.cond(a.reshape(-1, *a.shape[-2:])) * testing.eps(A.dtype) > 1).any())


@given(matrices())
def test_inv_ex_and_det(A):
    require("opencl")
    with LA.use_backend("opencl"):
        ours_inv, ours_det = outcome(LA.inv_ex, A), outcome(LA.det, A)
    theirs_inv, theirs_det = outcome(torch.linalg.inv_ex, A), outcome(torch.linalg.det, A)
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
    with LA.use_backend("opencl"):
        ours, ours_tri = outcome(LA.solve_ex, A, B), outcome(lambda: LA.solve_triangular(A.tril(), B, upper=False))
    theirs, theirs_tri = outcome(torch.linalg.solve_ex, A, B), outcome(lambda: torch.linalg.solve_triangular(A.tril(), B, upper=False))
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
    with LA.use_backend("opencl"):
        ours = outcome(ours_function, A)
    agree(name, ours, outcome(theirs_function, A), lambda r: ratio(A, r), A)


@given(matrices(square=False))
def test_pinv_and_matrix_rank(A):
    require("opencl")
    with LA.use_backend("opencl"):
        ours, ours_rank = outcome(LA.pinv, A), outcome(LA.matrix_rank, A)
    theirs, theirs_rank = outcome(torch.linalg.pinv, A), outcome(torch.linalg.matrix_rank, A)

    def penrose(X):  # ||A X A - A|| / (||A||^2 ||X|| eps), the first Moore-Penrose condition
        a, x = testing.exact(A), testing.exact(X)
        size = testing.norm1(a) ** 2 * testing.norm1(x) * testing.eps(A.dtype)
        residual = testing.norm1(a @ x @ a - a)
        return float(np.max(np.where(size > 0, residual / np.where(size > 0, size, 1), residual), initial=0))

    agree("pinv", ours, theirs, penrose, A)
    if ours_rank[0] == "returned" and theirs_rank[0] == "returned" and torch.isfinite(A).all():
        # ranks may differ only where a singular value sits at the cut-off
        difference = (ours_rank[1] - theirs_rank[1]).abs()
        assert difference.numel() == 0 or difference.max() <= 1
    elif theirs_rank[0] != "returned" and not did_not_converge(theirs_rank, A):
        assert ours_rank == theirs_rank  # torch's error (its NaN error is answered as in agree)
