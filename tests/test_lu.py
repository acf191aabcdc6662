"""The LU family against SciPy and torch.linalg, with LAPACK's test ratios.

lu_factor: ||P L U - A||_1 / (n ||A||_1 eps) < 15 (sget01); solves:
max_j ||b_j - op(A) x_j||_1 / (||op(A)||_1 ||x_j||_1 eps) < 15 (sget02); inv:
||I - X A||_1 / (n ||A||_1 ||X||_1 eps) < 15 (sget03); det: |det - ref| / (n kappa eps |ref|) < 15.
Pivots are compared exactly with LAPACK's (SciPy, torch on the CPU) on matrices without ties.
"""

import math
import re
from unittest import mock

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpslinalg as LA
from conftest import OLD_SINGULAR_PATTERNS, keeps_subnormals, on, supported
from mpslinalg import lu_family as family
from mpslinalg.runtimes import for_device
from mpslinalg.testing import (
    LARGE, SMALL, THRESHOLD, batch_of, det_ratio, exact, general_solve_ratio, inv_ratio, latms, lu_ratio,
)

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
rng = np.random.default_rng(4)
# Around every size limit: the small kernel's N = 8, 16, 32, 64, the panel width 32.
SHAPES = [(1, 1), (2, 2), (3, 5), (5, 3), (8, 8), (9, 9), (16, 16), (17, 10), (10, 17), (31, 31), (32, 32),
          (33, 33), (63, 64), (64, 64), (65, 65), (40, 100), (100, 40), (130, 130)]


def gaussian(shape, dtype, seed=None):
    r = np.random.default_rng(seed) if seed is not None else rng
    a = r.standard_normal(shape) + (1j * r.standard_normal(shape) if dtype.is_complex else 0)
    return torch.from_numpy(np.asarray(a)).to(dtype)


def scipy_pivots(A: torch.Tensor) -> np.ndarray:
    """LAPACK's 1-based pivots of each matrix, from SciPy in float64 (not the float32
    factorization, whose pivots can differ where two candidates are within rounding)."""
    a = exact(A).reshape(-1, *A.shape[-2:])
    return np.array([scipy.linalg.lu_factor(x)[1] + 1 for x in a]).reshape(*A.shape[:-2], -1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n", SHAPES)
def test_lu_factor_matches_lapack(device, m, n, dtype):
    supported(device, dtype)
    A = gaussian((3, m, n), dtype)
    LU, pivots, info = LA.lu_factor_ex(A.to(device))
    assert LU.shape == A.shape and LU.dtype == dtype and pivots.dtype == torch.int32 and info.dtype == torch.int32
    assert pivots.shape == (3, min(m, n)) and info.shape == (3,) and not info.any()
    assert lu_ratio(A, LU, pivots) < THRESHOLD
    torch.testing.assert_close(pivots.cpu(), torch.linalg.lu_factor_ex(A).pivots, rtol=0, atol=0)
    if m == n and dtype in (torch.float64, torch.complex128):
        np.testing.assert_array_equal(pivots.cpu().numpy(), scipy_pivots(A))


@st.composite
def matrices(draw):
    dtype = draw(st.sampled_from(DTYPES))
    square = draw(st.booleans())
    n = draw(st.integers(0, 300))
    m = n if square else draw(st.integers(0, 300))
    batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    if m * n * max(1, math.prod(batch)) > 40000:  # keeps the CPU run short
        batch = ()
    cond = 10.0 ** draw(st.floats(0, 6))
    scale = 10.0 ** draw(st.sampled_from([0, -30, 30, -10, 10]))
    seed = draw(st.integers(0, 2**32 - 1))
    r = np.random.default_rng(seed)
    count = math.prod(batch)
    if square:
        A = batch_of(batch, n, dtype, r, cond=cond, scale=scale, mode=draw(st.integers(1, 5)))
    else:
        A = gaussian((*batch, m, n), dtype, seed) * scale
    return A, cond if square else None, count


@given(case=matrices())
def test_lu_factor_ratio_over_shapes_conditioning_and_scales(device, case):
    A, _, _ = case
    supported(device, A.dtype)
    LU, pivots, info = LA.lu_factor_ex(on(device, A))
    assert lu_ratio(A, LU, pivots) < THRESHOLD
    assert not info.any()


@pytest.mark.parametrize("m,n", [(6, 6), (5, 9), (9, 5), (40, 40), (70, 70), (70, 50)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_zero_columns_give_lapack_info(device, m, n, dtype):
    # LAPACK's GE types 5-7: first, last and the last k/2 columns zero; info is the first zero column.
    k = min(m, n)
    for zero, expected in [(slice(0, 1), 1), (slice(k - 1, k), k), (slice(k // 2, n), k // 2 + 1)]:
        A = gaussian((2, m, n), dtype)
        A[..., zero] = 0
        LU, pivots, info = LA.lu_factor_ex(A.to(device))
        assert info.tolist() == [expected, expected] == torch.linalg.lu_factor_ex(A).info.tolist()
        assert lu_ratio(A, LU, pivots) < THRESHOLD


def test_singular_and_zero_matrices_as_torch(device):
    for A in [torch.tensor([[1.0, 2.0], [2.0, 4.0]]), torch.zeros(3, 3), torch.zeros(70, 70)]:
        ours, theirs = LA.lu_factor_ex(A.to(device)), torch.linalg.lu_factor_ex(A)
        for got, expected in zip(ours, theirs):
            torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("n", [3, 20, 50, 100])
@pytest.mark.parametrize("where", [(1, 1), (0, 0)], ids=["inside", "first"])
def test_nan_propagates(device, n, dtype, where):
    # A NaN never wins a pivot search against a number, but the pivots stay a
    # valid sequence of interchanges and no pivot is taken for zero.
    A = gaussian((2, n, n), dtype)
    A[1][where] = math.nan
    LU, pivots, info = LA.lu_factor_ex(A.to(device))
    pivots = pivots.cpu()
    steps = torch.arange(1, n + 1, dtype=torch.int32)
    assert LU[1].isnan().any() and not info.any()
    assert ((pivots >= steps) & (pivots <= n)).all()
    assert lu_ratio(A[:1], LU[:1].cpu(), pivots[:1]) < THRESHOLD


@pytest.mark.parametrize("m,n", [(5, 5), (40, 30), (30, 40), (100, 100)])
def test_without_pivoting(device, m, n):
    # Diagonally dominant, so that no pivoting is needed; pivots are then 1..k, as torch on CUDA.
    A = gaussian((2, m, n), torch.float32) + 4 * max(m, n) * torch.eye(m, n)
    LU, pivots, info = LA.lu_factor_ex(A.to(device), pivot=False)
    k = min(m, n)
    assert torch.equal(pivots.cpu(), torch.arange(1, k + 1, dtype=torch.int32).expand(2, k))
    assert lu_ratio(A, LU, pivots) < THRESHOLD and not info.any()
    P, L, U = LA.lu(A.to(device), pivot=False)
    assert P.numel() == 0
    torch.testing.assert_close((L @ U).cpu(), A, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("m,n", [(4, 4), (5, 3), (3, 5), (70, 40)])
def test_lu_unpacks_as_torch(device, m, n, dtype):
    A = gaussian((2, m, n), dtype)
    P, L, U = LA.lu(A.to(device))
    Pt, Lt, Ut = torch.linalg.lu(A)
    assert (P.shape, L.shape, U.shape) == (Pt.shape, Lt.shape, Ut.shape)
    torch.testing.assert_close(P.cpu(), Pt, rtol=0, atol=0)
    torch.testing.assert_close(L.cpu(), Lt, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(U.cpu(), Ut, rtol=1e-4, atol=1e-4)
    assert torch.equal(L.cpu().triu(1), torch.zeros_like(L.cpu()).triu(1))


SOLVE_FLAGS = [(left, adjoint) for left in (True, False) for adjoint in (False, True)]


@pytest.mark.parametrize("left,adjoint", SOLVE_FLAGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n,k", [(1, 1), (6, 3), (32, 8), (64, 64), (100, 5)])
def test_lu_solve(device, n, k, dtype, left, adjoint):
    supported(device, dtype)
    A = batch_of((3,), n, dtype, rng, cond=100)
    B = gaussian((3, n, k) if left else (3, k, n), dtype)
    LU, pivots = LA.lu_factor(A.to(device))
    X = LA.lu_solve(LU, pivots, B.to(device), left=left, adjoint=adjoint)
    assert X.shape == B.shape and X.dtype == dtype
    assert general_solve_ratio(A, X, B, left, adjoint) < THRESHOLD
    ref = torch.linalg.lu_solve(*torch.linalg.lu_factor(A), B, left=left, adjoint=adjoint)
    torch.testing.assert_close(X.cpu(), ref, rtol=1e-3, atol=1e-3 * ref.abs().max().item())


def test_lu_solve_broadcasts_as_torch(device):
    A = batch_of((2, 1), 5, torch.float32, rng)
    B = gaussian((4, 5, 2), torch.float32)
    LU, pivots = LA.lu_factor(A.to(device))
    X = LA.lu_solve(LU, pivots, B.to(device))
    ref = torch.linalg.lu_solve(*torch.linalg.lu_factor(A), B)
    assert X.shape == ref.shape == (2, 4, 5, 2)
    torch.testing.assert_close(X.cpu(), ref, rtol=1e-4, atol=1e-4)


def launches_of(device, call) -> tuple[list[str], object]:
    """(the kernels ``call`` launches, its result)."""
    runtime = for_device(device)
    real, launched = runtime.launch, []

    def counted(instance, *args, **kwargs):
        launched.append(instance.kernel.function)
        return real(instance, *args, **kwargs)

    with mock.patch.object(runtime, "launch", counted):
        result = call()
    return launched, result


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("n", [5, 8, 13, 16, 17, 32])
def test_fused_solves_in_one_launch(device, n, dtype):
    """n <= 32 with no derivative to record: solve, solve_ex, inv, inv_ex and lu_solve
    each launch one kernel (sgesv, sgetrs fused), under sget02's / sget03's ratio, in
    every left/adjoint case, with one vector or more right-hand sides than a team has
    threads, a B (or an LU) shared by the batch, and views."""
    A = batch_of((3,), n, dtype, rng, cond=100)
    a = A.to(device)
    LU, pivots = LA.lu_factor(a)

    def once(kernel, call):
        launched, result = launches_of(device, call)
        assert launched == [kernel]
        return result

    for left in (True, False):
        for k in (1, 40):
            B = gaussian((3, n, k) if left else (3, k, n), dtype)
            b = B.to(device)
            X = once("solve_small", lambda: LA.solve(a, b, left=left))
            assert general_solve_ratio(A, X, B, left) < THRESHOLD
            X, info = once("solve_small", lambda: LA.solve_ex(a, b[:1], left=left))  # one B for the batch
            assert general_solve_ratio(A, X, B[:1].expand_as(B), left) < THRESHOLD and not info.any()
            for adjoint in (False, True):
                X = once("lu_solve_small", lambda: LA.lu_solve(LU, pivots, b, left=left, adjoint=adjoint))
                assert general_solve_ratio(A, X, B, left, adjoint) < THRESHOLD
                X = once("lu_solve_small", lambda: LA.lu_solve(LU[1], pivots[1], b, left=left, adjoint=adjoint))
                assert general_solve_ratio(A[1], X, B, left, adjoint) < THRESHOLD  # one LU for every B
                by_columns = LU.mT.contiguous().mT  # LAPACK's layout, as torch's lu_factor returns it: read in place
                X = once("lu_solve_small", lambda: LA.lu_solve(by_columns, pivots, b, left=left, adjoint=adjoint))
                assert general_solve_ratio(A, X, B, left, adjoint) < THRESHOLD
    X = once("solve_small", lambda: LA.solve(a.mT.conj(), a[..., :2]))  # views of A and B
    assert general_solve_ratio(A.mH, X, A[..., :2]) < THRESHOLD
    assert inv_ratio(A, once("solve_small", lambda: LA.inv(a))) < THRESHOLD
    inverse, info = once("solve_small", lambda: LA.inv_ex(a.mT))
    assert inv_ratio(A.mT, inverse) < THRESHOLD and not info.any()


def test_solves_that_record_derivatives_take_the_factorization(device):
    """The fused kernels keep no factors: a call whose gradient is recorded factors A
    (lu_factor_small) and solves through the differentiable triangular solves."""
    supported(device, torch.float64)
    A = batch_of((2,), 6, torch.float64, rng).to(device).requires_grad_()
    B = gaussian((2, 6, 2), torch.float64).to(device)
    launched, X = launches_of(device, lambda: LA.solve(A, B))
    assert "lu_factor_small" in launched and "solve_small" not in launched
    launched, _ = launches_of(device, lambda: LA.lu_solve(*LA.lu_factor(A), B))
    assert "lu_solve_small" not in launched
    with torch.no_grad():
        launched, _ = launches_of(device, lambda: LA.solve(A, B))
    assert launched == ["solve_small"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.float64], ids=str)
@pytest.mark.parametrize("n", [1, 5, 33, 64, 150])
def test_solve_and_inverse(device, n, dtype):
    supported(device, dtype)
    A = batch_of((2,), n, dtype, rng, cond=1e3)
    B = gaussian((2, n, 4), dtype)
    X = LA.solve(A.to(device), B.to(device))
    assert general_solve_ratio(A, X, B) < THRESHOLD
    X = LA.solve(A.to(device), B.mT.to(device), left=False)
    assert general_solve_ratio(A, X, B.mT, left=False) < THRESHOLD
    b = gaussian((n,), dtype)
    x = LA.solve(A.to(device), b.to(device))  # a vector right-hand side, broadcast over A's batch
    assert x.shape == (2, n) and general_solve_ratio(A, x[..., None], b.expand(2, n)[..., None]) < THRESHOLD
    inverse, info = LA.inv_ex(A.to(device))
    assert inv_ratio(A, inverse) < THRESHOLD and not info.any()
    assert inv_ratio(A, LA.inv(A.to(device))) < THRESHOLD


@given(case=matrices(), k=st.sampled_from([1, 3, 8]), left=st.booleans())
def test_solve_ratio_over_shapes_conditioning_and_scales(device, case, k, left):
    A, cond, _ = case
    supported(device, A.dtype)
    if cond is None:  # rectangular: only its square part solves
        A = A[..., : min(A.shape[-2:]), : min(A.shape[-2:])]
    n = A.shape[-1]
    B = gaussian((*A.shape[:-2], n, k) if left else (*A.shape[:-2], k, n), A.dtype) * (A.abs().max().item() if A.numel() else 1)
    X, info = LA.solve_ex(on(device, A), on(device, B), left=left)
    if not info.any():
        assert general_solve_ratio(A, X, B, left) < THRESHOLD


@pytest.mark.parametrize("n", [2, 6, 80])
def test_singular_solves_and_inverses_as_torch(device, n):
    A = torch.eye(n).expand(3, n, n).clone()
    A[1, :, 1] = 0  # batch element 1 has U[2, 2] = 0
    B = torch.ones(3, n, 1)
    for ours, theirs in [
        (lambda: LA.solve(A.to(device), B.to(device)), lambda: torch.linalg.solve(A, B)),
        (lambda: LA.solve_ex(A.to(device), B.to(device), check_errors=True), lambda: torch.linalg.solve_ex(A, B, check_errors=True)),
        (lambda: LA.inv(A.to(device)), lambda: torch.linalg.inv(A)),
        (lambda: LA.inv_ex(A.to(device), check_errors=True), lambda: torch.linalg.inv_ex(A, check_errors=True)),
        (lambda: LA.lu_factor(A.to(device)), lambda: torch.linalg.lu_factor(A)),
        (lambda: LA.lu_factor_ex(A.to(device), check_errors=True), lambda: torch.linalg.lu_factor_ex(A, check_errors=True)),
    ]:
        with pytest.raises(RuntimeError) as expected:
            theirs()
        with pytest.raises(RuntimeError) as got:
            ours()
        assert type(got.value) is type(expected.value) and str(got.value) == str(expected.value)
    X, info = LA.solve_ex(A.to(device), B.to(device))
    Xt, info_t = torch.linalg.solve_ex(A, B)
    assert torch.equal(info.cpu(), info_t)
    if not OLD_SINGULAR_PATTERNS:  # torch 2.7: all NaN where newer torch has inf and finite entries
        assert torch.equal(X.cpu().isfinite(), Xt.isfinite())
    inverse, info = LA.inv_ex(A.to(device))
    assert torch.equal(info.cpu(), torch.linalg.inv_ex(A).info) and not inverse[1].isfinite().all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("n", [5, 16, 64, 100])
def test_det_slogdet_logdet(device, n, dtype):
    supported(device, dtype)
    # Singular values 2 .. 1/2, log-evenly: det is near 1 for every n, far from under- and overflow.
    A = batch_of((3,), n, dtype, rng, cond=4, scale=2)
    d = LA.det(A.to(device))
    assert d.shape == (3,) and d.dtype == dtype and det_ratio(A, d) < THRESHOLD
    sign, logabs = LA.slogdet(A.to(device))
    sign_t, logabs_t = torch.linalg.slogdet(A)
    assert sign.dtype == dtype and logabs.dtype == dtype.to_real()
    torch.testing.assert_close(sign.cpu(), sign_t, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(logabs.cpu(), logabs_t, rtol=1e-4, atol=1e-4 * n)
    torch.testing.assert_close(LA.logdet(A.to(device)).cpu(), torch.logdet(A), rtol=1e-4, atol=1e-4 * n, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_slogdet_of_subnormal_matrices(device, dtype):
    # A complex quotient by a subnormal |u_ii| once gave a NaN sign (found by tests/test_fuzz.py).
    keeps_subnormals(device)
    A = torch.diag_embed(torch.tensor([[3e-40, 5e-41, 2e-39]], dtype=torch.float32)).to(dtype)
    if dtype.is_complex:
        A = A * torch.tensor(0.6 + 0.8j, dtype=dtype)
    sign, logabs = LA.slogdet(A.to(device))
    expected = np.linalg.slogdet(A.numpy().astype(np.complex128 if dtype.is_complex else np.float64))
    torch.testing.assert_close(sign.cpu(), torch.from_numpy(np.asarray(expected.sign)).to(dtype), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(logabs.cpu().double(), torch.from_numpy(np.asarray(expected.logabsdet)), rtol=1e-5, atol=0)


def test_determinants_of_singular_and_empty_matrices_as_torch(device):
    S = torch.eye(6)
    S[3, 3] = 0
    cases = [S, torch.zeros(0, 0), torch.zeros(2, 0, 0), torch.zeros(0, 6, 6), -torch.eye(7), torch.zeros(70, 70)]
    for A in cases:
        torch.testing.assert_close(LA.det(A.to(device)).cpu(), torch.linalg.det(A))
        for got, expected in zip(LA.slogdet(A.to(device)), torch.linalg.slogdet(A)):
            torch.testing.assert_close(got.cpu(), expected)
        torch.testing.assert_close(LA.logdet(A.to(device)).cpu(), torch.logdet(A), equal_nan=True)


@pytest.mark.parametrize("scale", [SMALL, LARGE])
def test_extreme_scales(device, scale):
    # LAPACK's ANORM = SMALL and LARGE (slatb4): the factorization is scale-invariant.
    A = batch_of((2,), 40, torch.float32, rng, cond=100, scale=scale)
    LU, pivots, _ = LA.lu_factor_ex(A.to(device))
    assert lu_ratio(A, LU, pivots) < THRESHOLD
    B = gaussian((2, 40, 3), torch.float32)
    assert general_solve_ratio(A, LA.solve(A.to(device), B.to(device)), B) < THRESHOLD


@pytest.mark.parametrize("n", [16, 100], ids=["small", "blocked"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_subnormal_pivot_divides(device, n, dtype):
    # sgetf2's sfmin rule: 1 / pivot overflows for a subnormal pivot, so the
    # multipliers are quotients, as reference LAPACK forms them (torch's CPU
    # LAPACK multiplies by the reciprocal here and returns inf). The subnormal
    # column is made from bit patterns and its float64 reference from integers,
    # so that no arithmetic on the host (which may flush subnormals) touches it.
    keeps_subnormals(device)
    A = gaussian((2, n, n), dtype)
    # At most 2^-129, so that 1 / pivot overflows float32.
    mantissas = torch.randint(1, 2**20, (2, n), dtype=torch.int32, generator=torch.Generator().manual_seed(n))
    negative = torch.arange(2 * n).reshape(2, n) % 3 == 0
    column = torch.where(negative, mantissas | torch.tensor(-(2**31), dtype=torch.int32), mantissas).view(torch.float32)
    A[..., 0] = column
    reference = A.to(torch.complex128 if dtype.is_complex else torch.float64)
    reference[..., 0] = torch.where(negative, -1.0, 1.0).double() * mantissas.double() * 2.0**-149
    on_device = A.to(device)
    assert (on_device[..., 0] != 0).all()  # subnormal, not flushed, on the device
    LU, pivots, info = LA.lu_factor_ex(on_device)
    assert not info.any() and LU.isfinite().all()
    expected = torch.linalg.lu_factor_ex(reference)
    torch.testing.assert_close(pivots.cpu(), expected.pivots, rtol=0, atol=0)
    # Column 0 below the diagonal: the multipliers, O(1) quotients of subnormals.
    torch.testing.assert_close(LU.cpu()[..., 1:, 0].to(reference.dtype), expected.LU[..., 1:, 0], rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_views_equal_contiguous(device, dtype):
    A = gaussian((4, 20, 20), dtype).to(device)
    B = gaussian((4, 20, 3), dtype).to(device)
    for name, V in {"transposed": A.mT, "conj": A.conj(), "strided": A[::2], "neg": torch._neg_view(A)}.items():
        contiguous = V.clone().resolve_conj().resolve_neg().contiguous()
        for got, expected in zip(LA.lu_factor_ex(V), LA.lu_factor_ex(contiguous)):
            torch.testing.assert_close(got, expected, msg=name)
        assert not LA.lu_factor(V).LU.is_conj()
        torch.testing.assert_close(LA.solve(V, B[: V.shape[0]].conj()), LA.solve(contiguous, B[: V.shape[0]].conj().resolve_conj()), msg=name)


def test_out_arguments(device):
    A = batch_of((2,), 6, torch.float32, rng).to(device)
    LU, pivots, info = torch.empty(0, device=device), torch.empty(0, dtype=torch.int32, device=device), torch.empty(0, dtype=torch.int32, device=device)
    result = LA.lu_factor_ex(A, out=(LU, pivots, info))
    assert result.LU is LU and LU.shape == (2, 6, 6) and lu_ratio(A, LU, pivots) < THRESHOLD
    X = torch.empty(0, device=device)
    assert LA.solve(A, A, out=X) is X
    torch.testing.assert_close(X, torch.eye(6, device=device).expand(2, 6, 6), rtol=1e-4, atol=1e-4)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        LA.lu_factor(A.clone().requires_grad_(), out=(LU, pivots))


def _bad_inputs():
    square, vector, wide = torch.ones(3, 3), torch.ones(3), torch.ones(2, 3)
    LU, pivots = torch.linalg.lu_factor(torch.eye(3))
    return {
        "lu_factor vector": ("lu_factor", (vector,), {}),
        "lu vector": ("lu", (vector,), {}),
        "lu_factor int": ("lu_factor", (square.int(),), {}),
        "lu_solve pivots int64": ("lu_solve", (LU, pivots.long(), square), {}),
        "lu_solve shapes": ("lu_solve", (LU, pivots, torch.ones(4, 2)), {}),
        "lu_solve right shapes": ("lu_solve", (LU, pivots, torch.ones(4, 2)), {"left": False}),
        "lu_solve pivots": ("lu_solve", (LU, pivots[:2], square), {}),
        "lu_solve dtype": ("lu_solve", (LU, pivots, square.double()), {}),
        "lu_solve non-square": ("lu_solve", (LU[:2], pivots, square), {}),
        "lu_solve vector B": ("lu_solve", (LU, pivots, vector), {}),
        "solve non-square": ("solve", (wide, vector[:2]), {}),
        "solve shapes": ("solve", (square[:2, :2], vector), {}),
        "solve dtype": ("solve", (square, square.double()), {}),
        "solve vector A": ("solve", (vector, vector), {}),
        "solve batches": ("solve", (torch.eye(3).expand(2, 3, 3), torch.ones(4, 3, 1)), {}),
        "solve 1x1 right vector": ("solve", (torch.ones(2, 1, 1), torch.ones(2, 1)), {"left": False}),
        "det non-square": ("det", (wide,), {}),
        "slogdet non-square": ("slogdet", (wide,), {}),
        "slogdet int": ("slogdet", (square.long(),), {}),
        "inv non-square 5x6": ("inv", (torch.ones(5, 6),), {}),
    }


BAD = _bad_inputs()


@pytest.mark.parametrize("name", BAD)
def test_errors_match_torch(device, name):
    function, args, kwargs = BAD[name]
    args = tuple(a.to(device) for a in args)
    with pytest.raises(Exception) as expected:
        getattr(torch.linalg, function)(*args, **kwargs)
    with pytest.raises(Exception) as got:
        getattr(LA, function)(*args, **kwargs)
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)


def test_logdet_errors_match_torch(device):
    with pytest.raises(RuntimeError) as expected:
        torch.logdet(torch.ones(2, 3, device=device))
    with pytest.raises(RuntimeError) as got:
        LA.logdet(torch.ones(2, 3, device=device))
    assert str(got.value) == str(expected.value)


def test_kernel_choice(device, monkeypatch):
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    for shape, expected in [((3, 3), "lu_factor_small"), ((64, 20), "lu_factor_small"), ((65, 65), "lu_factor_panel")]:
        launched.clear()
        A = gaussian(shape, torch.float32)
        LU, pivots, _ = LA.lu_factor_ex(A.to(device))
        assert launched[0] == expected and lu_ratio(A, LU, pivots) < THRESHOLD
    launched.clear()
    LA.lu_factor_ex(gaussian((100, 100), torch.float32).to(device))
    assert launched.count("lu_factor_panel") == 4  # panels of 32 columns


@pytest.mark.parametrize(
    "panel,layout",
    [(shape, layout) for shape in family.PANEL_SHAPES for layout in ("rows", "columns")] + [(None, "rows"), ("mixed", "rows")],
    ids=lambda p: "tall" if p is None else p if isinstance(p, str) else "x".join(map(str, p)),
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.complex128], ids=str)
def test_blocked_lu_on_each_panel(device, panel, layout, dtype, monkeypatch):
    # Every register panel shape (sub-panels of 8, 4 and 2 columns by dtype) on
    # row-major matrices and column-major copies, the tall panel, and both in one
    # matrix (the tall panel while the panel is over 100 rows); on several panels,
    # a last one narrower than a sub-panel, wide and tall matrices, a zero column
    # (info) and a NaN.
    supported(device, dtype)
    if panel == "mixed":
        monkeypatch.setattr(family, "_register_panel", lambda h, dtype, device: {"GROUP": 256, "ROWS": 1} if h <= 100 else None)
    else:
        values = None if panel is None else {"GROUP": panel[0], "ROWS": panel[1]}
        monkeypatch.setattr(family, "_register_panel", lambda h, dtype, device: values)
    monkeypatch.setattr(family, "FEW_MATRICES", 10**9 if layout == "columns" else 0)
    for m, n in [(70, 70), (200, 77), (77, 200), (130, 97)]:
        A = gaussian((2, m, n), dtype)
        LU, pivots, info = LA.lu_factor_ex(A.to(device))
        assert lu_ratio(A, LU, pivots) < THRESHOLD and not info.any()
        torch.testing.assert_close(pivots.cpu(), torch.linalg.lu_factor_ex(A).pivots, rtol=0, atol=0)
    A = gaussian((2, 90, 90), dtype)
    A[0, :, 40] = 0
    A[1, 50, 60] = math.nan
    LU, pivots, info = LA.lu_factor_ex(A.to(device))
    assert info.tolist() == [41, 0]
    assert lu_ratio(A[:1], LU[:1], pivots[:1]) < THRESHOLD
    assert LU[1].isnan().any() and not LU[1, :50, :60].isnan().any()


# --- gradients ---


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("m,n", [(4, 4), (3, 6), (6, 3), (40, 40), (70, 50), (50, 70)])
def test_lu_factor_gradient(device, m, n, dtype):
    supported(device, dtype)
    A = gaussian((2, m, n), dtype).to(device).requires_grad_()
    small = max(m, n) <= 8
    assert torch.autograd.gradcheck(lambda A: LA.lu_factor_ex(A).LU, (A,), fast_mode=not small)
    assert torch.autograd.gradcheck(lambda A: LA.lu(A)[1:], (A,), fast_mode=True)
    if small:
        assert torch.autograd.gradgradcheck(lambda A: LA.lu_factor_ex(A).LU, (A,), fast_mode=True)


@pytest.mark.parametrize("left,adjoint", SOLVE_FLAGS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("n", [4, 40])
def test_solve_gradients(device, n, dtype, left, adjoint):
    supported(device, dtype)
    A = batch_of((2,), n, dtype, rng, cond=10).to(device).requires_grad_()
    B = gaussian((2, n, 3) if left else (2, 3, n), dtype).to(device).requires_grad_()

    def f(A, B):
        LU, pivots = LA.lu_factor(A)
        return LA.lu_solve(LU, pivots, B, left=left, adjoint=adjoint)

    assert torch.autograd.gradcheck(f, (A, B), fast_mode=True)
    if not adjoint:
        assert torch.autograd.gradcheck(lambda A, B: LA.solve(A, B, left=left), (A, B), fast_mode=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("n", [5, 40])
def test_inverse_and_determinant_gradients(device, n, dtype):
    supported(device, dtype)
    A = batch_of((2,), n, dtype, rng, cond=10, scale=1.2).to(device).requires_grad_()
    for f in [LA.inv, LA.det, lambda A: LA.slogdet(A).logabsdet, LA.logdet if dtype.is_complex else lambda A: LA.logdet(A @ A.mT)]:
        assert torch.autograd.gradcheck(f, (A,), fast_mode=True)
    if dtype.is_complex:
        assert torch.autograd.gradcheck(lambda A: LA.slogdet(A).sign, (A,), fast_mode=True)
    assert torch.autograd.gradgradcheck(LA.det, (A,), fast_mode=True)


def test_det_gradient_is_zero_at_singular_matrices_as_torch(device):
    A = torch.eye(6, dtype=torch.float64)
    A[2, 2] = 0
    ours, theirs = A.clone().to(device).requires_grad_(), A.clone().requires_grad_()
    LA.det(ours).backward()
    torch.linalg.det(theirs).backward()
    torch.testing.assert_close(ours.grad.cpu(), theirs.grad)


def test_float32_gradients_agree_with_torch(device):
    A = batch_of((3,), 20, torch.float32, rng, cond=10)
    B = gaussian((3, 20, 4), torch.float32)
    G = gaussian((3, 20, 4), torch.float32)
    grads = []
    for module, where in [(LA, device), (torch.linalg, "cpu")]:
        a, b = A.clone().to(where).requires_grad_(), B.clone().to(where).requires_grad_()
        LU, pivots = module.lu_factor(a)
        loss = (module.lu_solve(LU, pivots, b) * G.to(where)).sum() + module.slogdet(a).logabsdet.sum() + (LU * G[..., :1].to(where)).sum()
        loss.backward()
        grads.append((a.grad.cpu(), b.grad.cpu()))
    for ours, theirs in zip(*grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-3 * theirs.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_forward_mode_and_vmap_match_torch(device, dtype):
    supported(device, dtype)
    for shape in [(3, 6, 6), (2, 4, 7), (2, 7, 4), (2, 70, 70)]:
        A = gaussian(shape, dtype).to(device)
        dA = torch.randn_like(A)
        ours = torch.func.jvp(lambda A: LA.lu_factor_ex(A).LU, (A,), (dA,))[1]
        # LAPACK's pivots: cuBLAS/MAGMA may pivot complex columns by another magnitude.
        theirs = torch.func.jvp(lambda A: torch.linalg.lu_factor_ex(A).LU, (A.cpu(),), (dA.cpu(),))[1]
        torch.testing.assert_close(ours, theirs.to(device))
    A = gaussian((3, 6, 6), dtype).to(device)
    B = gaussian((3, 6, 2), dtype).to(device)
    dA = torch.randn_like(A)
    for ours, theirs in [(LA.det, torch.linalg.det), (lambda A: LA.solve(A, B), lambda A: torch.linalg.solve(A, B)),
                         (lambda A: LA.slogdet(A).logabsdet, lambda A: torch.linalg.slogdet(A).logabsdet)]:
        torch.testing.assert_close(torch.func.jvp(ours, (A,), (dA,))[1], torch.func.jvp(theirs, (A,), (dA,))[1])
        torch.testing.assert_close(torch.func.vmap(ours)(A), torch.func.vmap(theirs)(A))
    torch.testing.assert_close(torch.func.vmap(LA.inv)(A), torch.linalg.inv(A))
    for got, expected in zip(torch.func.vmap(LA.lu)(A), LA.lu(A)):
        torch.testing.assert_close(got, expected)


def test_compiles_without_graph_breaks(device):
    torch._dynamo.reset()
    A = batch_of((3,), 12, torch.float32, rng).to(device).requires_grad_()
    B = gaussian((3, 12, 2), torch.float32).to(device)

    def f(A, B):
        LU, pivots = LA.lu_factor(A)
        return (LA.lu_solve(LU, pivots, B).sum() + LA.solve(A, B).sum() + LA.det(A).sum()
                + LA.slogdet(A).logabsdet.sum() + LA.inv(A).sum())

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(A, B)
    y.backward()
    torch.testing.assert_close(y, f(A, B))
    # With no gradient to record, the graph takes the fused ops, the singular check included.
    launched, y = launches_of(device, lambda: compiled(A.detach(), B))
    assert {"solve_small", "lu_solve_small"} <= set(launched)
    torch.testing.assert_close(y, f(A.detach(), B))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        torch.compile(lambda A, B: LA.solve(A, B), fullgraph=True, backend="aot_eager")(torch.zeros_like(A.detach()), B)


# --- lu_unpack ---

UNPACK_FLAGS = [(data, pivots) for data in (True, False) for pivots in (True, False)]


@pytest.mark.parametrize("unpack_data,unpack_pivots", UNPACK_FLAGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 3, 5, 5), (4, 70, 40), (0, 3, 3), (2, 0, 3)], ids=str)
def test_lu_unpack_equals_torch(device, shape, dtype, unpack_data, unpack_pivots):
    supported(device, dtype)
    LU, pivots = torch.linalg.lu_factor(gaussian(shape, dtype))
    got = LA.lu_unpack(LU.to(device), pivots.to(device), unpack_data, unpack_pivots)
    expected = torch.lu_unpack(LU, pivots, unpack_data, unpack_pivots)
    assert type(got) is type(expected)
    for ours, theirs in zip(got, expected):
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
        torch.testing.assert_close(ours.cpu(), theirs, rtol=0, atol=0)  # copies and a permutation: exact


def test_lu_unpack_permutation_runs_on_the_kernel(device, monkeypatch):
    # The pivots become P on the device: lu_permutation's launch, no call to torch's lu_unpack.
    LU, pivots = torch.linalg.lu_factor(gaussian((3, 5, 5), torch.float32))
    monkeypatch.setattr(family._dispatch.TORCH, "lu_unpack", None)
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k))[1])
    P, _, _ = LA.lu_unpack(LU.to(device), pivots.to(device))
    assert launched == ["lu_permutation"]
    torch.testing.assert_close(P.cpu(), torch.lu_unpack(LU, pivots).P, rtol=0, atol=0)


def test_lu_unpack_errors_as_torch(device):
    LU, pivots = torch.linalg.lu_factor(gaussian((2, 4, 3), torch.float32))
    LU, pivots = LU.to(device), pivots.to(device)
    for args, kwargs in [
        ((LU[0, 0], pivots), {}),  # one dim
        ((LU, pivots.long()), {}),  # int64 pivots
        ((LU, pivots[:1]), {}),  # batch dims differ
        ((LU, pivots[..., :2]), {}),  # not min(m, n) pivots
    ]:
        with pytest.raises(Exception) as got:
            LA.lu_unpack(*args, **kwargs)
        try:  # torch on the same device
            torch.lu_unpack(*args, **kwargs)
        except Exception as expected:
            assert (got.type, str(got.value)) == (type(expected), str(expected))
        else:  # torch 2.7 lets pivots of other batch dims through: refused as newer torch refuses them
            assert got.type is ValueError and str(got.value).startswith("Expected LU_pivots to have shape")
    # Without unpack_pivots, torch reads neither the pivots' dtype nor their shape.
    got = LA.lu_unpack(LU, pivots[:1].long(), unpack_pivots=False)
    torch.testing.assert_close(got.U, torch.lu_unpack(LU, pivots[:1].long(), unpack_pivots=False).U)


def test_lu_unpack_out(device):
    LU, pivots = torch.linalg.lu_factor(gaussian((2, 5, 5), torch.float32))
    out = tuple(torch.empty(0, device=device) for _ in range(3))
    result = LA.lu_unpack(LU.to(device), pivots.to(device), out=out)
    assert all(r is o for r, o in zip(result, out))
    for ours, theirs in zip(out, torch.lu_unpack(LU, pivots)):
        torch.testing.assert_close(ours.cpu(), theirs, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("shape", [(2, 4, 4), (5, 3), (3, 5)], ids=str)
def test_lu_unpack_gradients(device, shape, dtype):
    supported(device, dtype)
    A = gaussian(shape, dtype).to(device)
    LU, pivots = LA.lu_factor(A)
    LU = LU.detach().requires_grad_()

    def unpacked(LU):
        P, L, U = LA.lu_unpack(LU, pivots)
        return L, U

    assert torch.autograd.gradcheck(unpacked, (LU,), check_forward_ad=True)
    P, L, U = LA.lu_unpack(LU, pivots)
    assert not P.requires_grad
    # torch's gradient, through the same L and U
    gL, gU = torch.randn_like(L), torch.randn_like(U)
    ours = torch.autograd.grad((L * gL).sum().real + (U * gU).sum().real, LU)[0]
    LUt = LU.detach().cpu().requires_grad_()
    _, Lt, Ut = torch.lu_unpack(LUt, pivots.cpu())
    theirs = torch.autograd.grad((Lt * gL.cpu()).sum().real + (Ut * gU.cpu()).sum().real, LUt)[0]
    torch.testing.assert_close(ours.cpu(), theirs, rtol=0, atol=0)
