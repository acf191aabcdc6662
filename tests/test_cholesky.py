"""cholesky, cholesky_ex, cholesky_solve and cholesky_inverse against SciPy and torch, with
LAPACK's ratios: spot01 ||L L^H - A||_1 / (n ||A||_1 eps), spot02 for the solves and
spot03 for the inverse, below 15; info as LAPACK's."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpslinalg as LA
from conftest import supported
from mpslinalg import cholesky_family as family
from mpslinalg.testing import THRESHOLD, cholesky_ratio, eps, general_solve_ratio, hermitian_batch, inv_ratio, with_junk

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
rng = np.random.default_rng(21)
# The kernel's N = 4 .. 64 below and at N, and the recursion past it.
SIZES = [1, 3, 4, 5, 8, 16, 17, 32, 33, 64, 65, 130]


def positive_definite(shape, n, dtype, cond=100.0, scale=1.0):
    return hermitian_batch(shape, n, dtype, rng, cond=cond, scale=scale)


def check_factor(A, L, info, upper):
    assert L.shape == A.shape and L.dtype == A.dtype and info.dtype == torch.int32
    assert (info == 0).all()
    L = L.cpu()
    assert not (torch.tril(L, -1) if upper else torch.triu(L, 1)).any()
    diagonal = L.diagonal(dim1=-2, dim2=-1)
    if L.is_complex():
        assert not diagonal.imag.any()
        diagonal = diagonal.real
    assert (diagonal > 0).all()
    assert cholesky_ratio(A, L, upper) < THRESHOLD


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_lapack(device, n, upper, dtype):
    supported(device, dtype)
    A = with_junk(positive_definite((3,), n, dtype), upper, rng)
    L, info = LA.cholesky_ex(A.to(device), upper=upper)
    check_factor(A, L, info, upper)
    torch.testing.assert_close(LA.cholesky(A.to(device), upper=upper), L, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_large_factor_ratio(device, dtype):
    """The blocked factorization over ten steps (the last 24 columns), condition 10^6:
    spot01's ratio and torch's factor."""
    A = positive_definite((), 600, dtype, cond=1e6)
    L, info = LA.cholesky_ex(A.to(device))
    check_factor(A, L, info, False)


@given(
    n=st.integers(0, 80), batch=st.sampled_from([(), (1,), (3,), (2, 2), (0,)]), complex_=st.booleans(),
    log_cond=st.floats(0, 5), log_scale=st.floats(-30, 35), upper=st.booleans(),
)
def test_cholesky_conditioning_and_scale(device, n, batch, complex_, log_cond, log_scale, upper):
    dtype = torch.complex64 if complex_ else torch.float32
    # Eigenvalues from 10^log_scale down by 10^log_cond: the smallest a normal float32
    # number (Apple GPUs may flush subnormals).
    A = with_junk(positive_definite(batch, n, dtype, cond=10**log_cond, scale=10**log_scale), upper, rng)
    L, info = LA.cholesky_ex(A.to(device), upper=upper)
    check_factor(A, L, info, upper)


def unit_lower(n, dtype):
    """A unit lower-triangular C: C D C^H has the leading minors D gives. Its entries (parts)
    are 0 and +-1/2, so that every sum the factorization forms is exact: a zero pivot of D
    is a zero pivot of the computation."""
    a = rng.integers(-1, 2, (n, n)) * 0.5
    if dtype.is_complex:
        a = a + 1j * rng.integers(-1, 2, (n, n)) * 0.5
    return torch.from_numpy(np.tril(a, -1) + np.eye(n)).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n,failing", [(1, 0), (4, 2), (8, 7), (20, 19), (40, 33), (64, 1), (70, 66), (130, 100)])
def test_info_is_the_first_indefinite_minor(device, n, failing, dtype):
    """info = k + 1 where D's first non-positive entry is k (a zero, a negative, a NaN), as
    LAPACK's and torch's; L's columns before it are the factor's."""
    supported(device, dtype)
    # A zero pivot is exact in the kernel alone: the blocked path's triangular solves round.
    for bad in (-1.0, float("nan")) + ((0.0,) if n <= family.SIZES[-1] else ()):
        d = torch.ones(n, dtype=torch.float64)
        d[failing] = 1.0 if bad != bad else bad
        d[failing + 1:] = -2.0  # later minors fail too: the first is reported
        C = unit_lower(n, dtype)
        A = (C * d.to(dtype)) @ C.mH
        if bad != bad:  # a NaN pivot
            A[failing, failing] = bad
        A = torch.stack((A, positive_definite((), n, dtype)))
        L, info = LA.cholesky_ex(A.to(device))
        assert info.tolist() == [failing + 1, 0]
        exact = A.double() if not A.is_complex() else A.to(torch.complex128)
        assert torch.linalg.cholesky_ex(exact).info.tolist() == info.tolist()
        # The columns before the failing one are the factor's: A's first k columns are L's
        # first k columns times the leading k x k block of L^H (spot01's ratio on them).
        k = failing
        if k:
            first = L[0, :, :k].cpu().to(exact.dtype)
            residual = torch.linalg.matrix_norm(exact[0, :, :k] - first @ first[:k].mH, 1)
            assert residual / (n * torch.linalg.matrix_norm(exact[0, :, :k], 1) * eps(dtype)) < THRESHOLD
        check_factor(A[1:], L[1:], info[1:], False)


def test_errors_match_torch(device):
    bad = [torch.ones(3, device=device), torch.ones(2, 3, device=device), torch.ones(2, 2, dtype=torch.int64, device=device)]
    for function in ("cholesky", "cholesky_ex"):
        for A in bad:
            with pytest.raises(RuntimeError) as expected:
                getattr(torch.linalg, function)(A.cpu())
            with pytest.raises(RuntimeError) as got:
                getattr(LA, function)(A)
            assert str(got.value) == str(expected.value)
    A = torch.tensor([[[4.0, 2.0], [2.0, 1.0]], [[1.0, 0.0], [0.0, -1.0]]], device=device)
    for function, kwargs in (("cholesky", {}), ("cholesky_ex", {"check_errors": True})):
        for X in (A, A[1]):
            with pytest.raises(torch.linalg.LinAlgError) as expected:
                getattr(torch.linalg, function)(X.cpu(), **kwargs)
            with pytest.raises(torch.linalg.LinAlgError) as got:
                getattr(LA, function)(X, **kwargs)
            assert str(got.value) == str(expected.value)
    for args in [(torch.ones(3, 2), torch.eye(2)), (torch.ones(2, 2, dtype=torch.float64), torch.eye(2)), (torch.ones(2), torch.eye(2)),
                 (torch.ones(2, 2), torch.ones(2, 3)), (torch.ones(2, 2), torch.ones(2)), (torch.ones(3, 2, 2), torch.ones(2, 2, 2))]:
        with pytest.raises(RuntimeError) as expected:
            torch.cholesky_solve(*args)
        with pytest.raises(RuntimeError) as got:
            LA.cholesky_solve(*(a.to(device) for a in args))
        assert str(got.value) == str(expected.value)
    for L in (torch.ones(2, 3), torch.ones(3)):
        with pytest.raises(RuntimeError) as expected:
            torch.cholesky_inverse(L)
        with pytest.raises(RuntimeError) as got:
            LA.cholesky_inverse(L.to(device))
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 0), (0, 0)])
def test_empty_matches_torch(device, shape):
    A = torch.zeros(shape)
    for ours, theirs in ((LA.cholesky_ex(A.to(device)), torch.linalg.cholesky_ex(A)),
                         ((LA.cholesky_inverse(A.to(device)),), (torch.cholesky_inverse(A),))):
        for got, expected in zip(ours, theirs):
            assert got.shape == expected.shape and got.dtype == expected.dtype
            torch.testing.assert_close(got.cpu(), expected)
    B = torch.zeros(*shape[:-1], 2)
    assert LA.cholesky_solve(B.to(device), A.to(device)).shape == torch.cholesky_solve(B, A).shape


def test_views_match_contiguous(device):
    A = positive_definite((4,), 12, torch.complex64)
    for view in (A.mT, A.conj(), A[::2], torch.stack((A, A), -1)[..., 0]):
        for upper in (False, True):
            torch.testing.assert_close(LA.cholesky(view.to(device), upper=upper), LA.cholesky(view.resolve_conj().contiguous().to(device), upper=upper))


def test_out_matches_torch(device):
    A = positive_definite((2,), 5, torch.float32).to(device)
    L, info = torch.empty_like(A), torch.empty(2, dtype=torch.int32, device=device)
    result = LA.cholesky_ex(A, out=(L, info))
    assert result.L.data_ptr() == L.data_ptr() and result.info.data_ptr() == info.data_ptr()
    out = torch.empty(0, device=device)
    assert LA.cholesky(A, out=out).data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, L)


# --- cholesky_solve, cholesky_inverse ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n,k", [(1, 1), (5, 3), (16, 16), (33, 2), (70, 9)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_and_inverse(device, n, k, upper, dtype):
    supported(device, dtype)
    A = positive_definite((2,), n, dtype, cond=1e3)
    L = torch.linalg.cholesky(A.double() if not dtype.is_complex else A.to(torch.complex128), upper=upper).to(dtype)
    A = L.mH @ L if upper else L @ L.mH  # the matrix L stands for, as stored
    B = torch.from_numpy(rng.standard_normal((2, n, k))).to(dtype)
    X = LA.cholesky_solve(B.to(device), with_junk(L, upper, rng, diagonal=False).to(device), upper=upper)
    assert general_solve_ratio(A, X, B) < THRESHOLD
    inverse = LA.cholesky_inverse(with_junk(L, upper, rng, diagonal=False).to(device), upper=upper)
    assert inv_ratio(A, inverse) < THRESHOLD


def test_cholesky_solve_broadcasts_as_torch(device):
    L = torch.linalg.cholesky(positive_definite((3, 1), 4, torch.float64))
    B = torch.from_numpy(rng.standard_normal((2, 4, 5))).to(torch.float64)
    torch.testing.assert_close(LA.cholesky_solve(B.to(device), L.to(device)).cpu(), torch.cholesky_solve(B, L))


# --- gradients ---


def spd(A):
    """A positive-definite function of any A, as torch's OpInfo samples make them."""
    return A @ A.mH + torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("n", [1, 3, 6, 70])
@pytest.mark.parametrize("upper", [False, True])
def test_gradients(device, n, upper, dtype):
    supported(device, dtype)
    A = torch.from_numpy(rng.standard_normal((2, n, n)) / np.sqrt(n)).to(dtype).to(device).requires_grad_()
    B = torch.from_numpy(rng.standard_normal((2, n, 2))).to(dtype).to(device).requires_grad_()
    fast = n > 6
    assert torch.autograd.gradcheck(lambda A: LA.cholesky(spd(A), upper=upper), (A,), fast_mode=fast)
    if n <= 6:
        # Only L's triangle is read, and torch's gradient is not projected on it: checked
        # through the triangle, as torch's OpInfos do (gradcheck_wrapper_triangular_input).
        L = torch.linalg.cholesky(spd(A.detach()), upper=upper).requires_grad_()
        triangle = lambda L: L.triu() if upper else L.tril()
        assert torch.autograd.gradcheck(lambda B, L: LA.cholesky_solve(B, triangle(L), upper=upper), (B, L))
        assert torch.autograd.gradcheck(lambda L: LA.cholesky_inverse(triangle(L), upper=upper), (L,))


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("upper", [False, True])
def test_gradients_and_tangents_match_torch(device, upper, dtype):
    """torch's formulas, unprojected: a gradient on both triangles of A (cholesky) and of L
    (cholesky_solve, cholesky_inverse), and forward-mode tangents from the whole dA."""
    supported(device, dtype)
    A = spd(torch.from_numpy(rng.standard_normal((2, 5, 5))).to(dtype))
    L = torch.linalg.cholesky(A, upper=upper)
    B = torch.from_numpy(rng.standard_normal((2, 5, 3))).to(dtype)
    dA, dL, dB = torch.randn_like(A), torch.randn_like(L), torch.randn_like(B)
    cases = [
        (lambda A: LA.cholesky(A, upper=upper), lambda A: torch.linalg.cholesky(A, upper=upper), (A,), (dA,)),
        (lambda B, L: LA.cholesky_solve(B, L, upper), lambda B, L: torch.cholesky_solve(B, L, upper), (B, L), (dB, dL)),
        (lambda L: LA.cholesky_inverse(L, upper), lambda L: torch.cholesky_inverse(L, upper), (L,), (dL,)),
    ]
    for ours, theirs, inputs, tangents in cases:
        on_device = tuple(x.to(device) for x in inputs)
        loss = lambda f: lambda *x: (f(*x) * f(*x).conj()).real.sum() + f(*x).real.sum()
        got = torch.func.grad(loss(ours), argnums=tuple(range(len(inputs))))(*on_device)
        expected = torch.func.grad(loss(theirs), argnums=tuple(range(len(inputs))))(*inputs)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g.cpu(), e)
        if theirs is not cases[-1][1]:
            got = torch.func.jvp(ours, on_device, tuple(t.to(device) for t in tangents))[1]
            torch.testing.assert_close(got.cpu(), torch.func.jvp(theirs, inputs, tangents)[1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_inverse_tangent_is_the_derivative(device, upper, dtype):
    """torch's cholesky_inverse JVP is wrong (pytorch/pytorch#196682: -X dL X L^H for
    -X dL L^H X); ours, the transposed VJP, matches central differences along a tangent
    that keeps L a Cholesky factor (triangular, real diagonal: LAPACK's potri reads no
    imaginary part there)."""
    supported(device, dtype)
    L = torch.linalg.cholesky(spd(torch.from_numpy(rng.standard_normal((2, 5, 5))).to(dtype)), upper=upper)
    dL = torch.randn_like(L)
    dL = (dL.triu() if upper else dL.tril()) - 1j * torch.diag_embed(dL.diagonal(dim1=-2, dim2=-1).imag) if dtype.is_complex else (
        dL.triu() if upper else dL.tril())
    h = 1e-6
    differences = (torch.cholesky_inverse(L + h * dL, upper) - torch.cholesky_inverse(L - h * dL, upper)) / (2 * h)
    got = torch.func.jvp(lambda L: LA.cholesky_inverse(L, upper), (L.to(device),), (dL.to(device),))[1]
    torch.testing.assert_close(got.cpu(), differences, rtol=1e-6, atol=1e-6)


def test_vmap_and_dual_numbers_match_torch(device):
    A = spd(torch.from_numpy(rng.standard_normal((3, 2, 4, 4))))
    L = torch.linalg.cholesky(A)
    B = torch.from_numpy(rng.standard_normal((3, 2, 4, 2)))
    torch.testing.assert_close(torch.func.vmap(LA.cholesky)(A.to(device)).cpu(), L)
    torch.testing.assert_close(torch.func.vmap(LA.cholesky_inverse)(L.to(device)).cpu(), torch.cholesky_inverse(L))
    torch.testing.assert_close(torch.func.vmap(LA.cholesky_solve)(B.to(device), L.to(device)).cpu(), torch.cholesky_solve(B, L))
    import torch.autograd.forward_ad as fwAD

    dA = torch.randn_like(A)
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(LA.cholesky(fwAD.make_dual(A.to(device), dA.to(device)))).tangent
    torch.testing.assert_close(tangent.cpu(), torch.func.jvp(torch.linalg.cholesky, (A,), (dA,))[1])


def test_kernel_choice(device, monkeypatch):
    """n <= 64: cholesky_small of the smallest N that holds n; larger: a potf2_block per
    64 columns and a trsm_panel below each but the last (the products are torch's)."""
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append((kernel.function, k["N"])), real(kernel, *a, **k)))
    factor, panel = ("potf2_block", family.STEP_BLOCK), ("trsm_panel", family.STEP_BLOCK)
    for n, expected in [(3, [("cholesky_small", 4)]), (5, [("cholesky_small", 8)]), (64, [("cholesky_small", 64)]),
                        (65, [factor, panel, factor]), (200, [factor, panel] * 3 + [factor])]:
        launched.clear()
        LA.cholesky(positive_definite((2,), n, torch.float32).to(device))
        assert launched == expected, launched


def test_compiles_without_graph_breaks(device, monkeypatch):
    torch._dynamo.reset()
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    A = torch.from_numpy(rng.standard_normal((3, 6, 6))).float().to(device).requires_grad_()
    B = torch.from_numpy(rng.standard_normal((3, 6, 2))).float().to(device)

    def f(A):
        L = LA.cholesky(spd(A))
        return L.sum() + LA.cholesky_ex(spd(A), upper=True).L.sum() + LA.cholesky_solve(B, L).sum() + LA.cholesky_inverse(L).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(A)
    y.backward()
    torch.testing.assert_close(y, f(A))
    assert "cholesky_small" in launched, "the compiled graph runs the kernels"
