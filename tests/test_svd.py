"""SVD, pinv, lstsq and matrix_rank against SciPy and torch.linalg, with LAPACK's ratios
(sbdt01, sort01): ||A - U S Vh||_1 / (max(m, n) ||A||_1 eps), ||I - U^H U||_1 / (m eps) and
||I - Vh Vh^H||_1 / (n eps) below 15, and singular values within k eps S_max of SciPy's."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpslinalg as LA
from conftest import supported
from mpslinalg import svd_family as family
from mpslinalg.testing import THRESHOLD, eps, exact, haar, svd_ratios

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
rng = np.random.default_rng(11)
# The one-thread kernel's n <= 3, the register kernel's N = 8, 16, 32 (complex: 8, 16)
# with n below and at N, the threadgroup kernel past them; tall (QR first) and wide
# (transposed) shapes; vectors.
SHAPES = [(1, 1), (2, 2), (3, 3), (3, 2), (2, 3), (1, 4), (4, 1), (4, 4), (7, 7), (8, 5), (5, 8), (16, 16), (17, 17),
          (32, 32), (33, 33), (40, 12), (12, 40), (70, 66), (130, 3)]


def gaussian(shape, dtype, scale=1.0):
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.is_complex else 0)
    return torch.from_numpy(np.asarray(a * scale)).to(dtype)


def with_singular_values(m, n, values, dtype):
    """U diag(values) V^H with Haar U, V (float64, cast at the end)."""
    k = len(values)
    u = haar(m, rng, dtype.is_complex)[:, :k]
    v = haar(n, rng, dtype.is_complex)[:, :k]
    return torch.from_numpy((u * np.asarray(values)) @ v.conj().T).to(dtype)


def check_svd(A, U, S, Vh, full_matrices=True):
    m, n = A.shape[-2:]
    k = min(m, n)
    assert U.shape == (*A.shape[:-2], m, m if full_matrices else k)
    assert Vh.shape == (*A.shape[:-2], n if full_matrices else k, n)
    assert S.shape == (*A.shape[:-2], k) and S.dtype == (A.real.dtype if A.is_complex() else A.dtype)
    assert U.dtype == A.dtype and Vh.dtype == A.dtype
    assert (S.cpu()[..., :-1] >= S.cpu()[..., 1:]).all() and (S >= 0).all()
    ratios = svd_ratios(A.cpu(), U.cpu(), S.cpu(), Vh.cpu())
    assert max(ratios) < THRESHOLD, ratios


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n", SHAPES)
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_matches_lapack(device, m, n, full_matrices, dtype):
    supported(device, dtype)
    A = gaussian((2, m, n), dtype)
    U, S, Vh = LA.svd(A.to(device), full_matrices=full_matrices)
    check_svd(A, U, S, Vh, full_matrices)
    torch.testing.assert_close(LA.svdvals(A.to(device)).cpu(), S.cpu(), rtol=0, atol=0)


@given(
    m=st.integers(1, 40), n=st.integers(1, 40), batch=st.sampled_from([(), (1,), (3,), (2, 2)]),
    log_cond=st.floats(0, 6), log_scale=st.floats(-30, 30), complex_=st.booleans(), seed=st.integers(0, 2**16),
)
def test_svd_conditioning_and_scale(device, m, n, batch, log_cond, log_scale, complex_, seed):
    dtype = torch.complex64 if complex_ else torch.float32
    k = min(m, n)
    values = 10.0**log_scale * np.geomspace(1, 10.0**-log_cond, k)
    count = int(np.prod(batch, dtype=np.int64))
    A = torch.stack([with_singular_values(m, n, values, dtype) for _ in range(count)]).reshape(*batch, m, n)
    U, S, Vh = LA.svd(A.to(device))
    check_svd(A, U, S, Vh)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("m,n", [(3, 3), (12, 12), (40, 10)])
def test_graded_matrices_keep_relative_accuracy(device, m, n, dtype):
    # D1 B D2 with well-conditioned B: one-sided Jacobi finds every singular value to a
    # small relative error, down to the smallest (here 1e-8 of the largest, which the
    # absolute bound k eps S_max would not resolve at all).
    B = with_singular_values(m, n, np.linspace(1, 0.5, min(m, n)), torch.float64)
    D2 = torch.from_numpy(np.geomspace(1, 1e-8, n))
    A = (B * D2).to(dtype)
    S = LA.svdvals(A.to(device)).cpu().double()
    reference = torch.from_numpy(scipy.linalg.svdvals(exact(A)))
    relative = ((S - reference).abs() / reference).max().item()
    assert relative < 100 * n * eps(dtype), relative


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("m,n", [(3, 3), (2, 3), (6, 6), (20, 8), (8, 20), (16, 16), (30, 30), (33, 33)])
def test_rank_deficient_zero_and_repeated(device, m, n, dtype):
    k = min(m, n)
    cases = [
        torch.zeros(m, n, dtype=dtype),
        with_singular_values(m, n, [1.0] + [0.0] * (k - 1), dtype),  # rank 1
        with_singular_values(m, n, [2.0] * k, dtype),  # all equal
        torch.eye(m, n, dtype=dtype),
    ]
    zero_column = gaussian((m, n), dtype)
    zero_column[:, n // 2] = 0
    cases.append(zero_column)
    A = torch.stack(cases)
    for full_matrices in (True, False):
        U, S, Vh = LA.svd(A.to(device), full_matrices=full_matrices)
        check_svd(A, U, S, Vh, full_matrices)
    assert (S[0] == 0).all() and (U[0].cpu().mH @ U[0].cpu() - torch.eye(U.shape[-1])).abs().max() < 1e-5


@pytest.mark.parametrize("scale", [1e-35, 1e-20, 1e20, 1e35])
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_extreme_scales(device, scale, dtype):
    A = gaussian((3, 9, 6), dtype, scale)
    A[0] = gaussian((9, 6), dtype)[..., :1] * gaussian((1, 6), dtype) * scale  # rank 1 at that scale
    U, S, Vh = LA.svd(A.to(device))
    assert torch.isfinite(S).all() and torch.isfinite(U).all() and torch.isfinite(Vh).all()
    check_svd(A, U, S, Vh)


@pytest.mark.parametrize("n", [2, 3, 10])
def test_nonfinite_input_gives_nan(device, n):
    A = gaussian((3, n, n), torch.float32)
    A[0, 0, 0] = math.nan
    A[1, 1, 0] = math.inf
    U, S, Vh = LA.svd(A.to(device))
    assert S[0].isnan().any() and not torch.isfinite(S[1]).all()
    check_svd(A[2:], U[2:], S[2:], Vh[2:])


@pytest.mark.parametrize("shape", [(0, 3, 3), (3, 0), (0, 3), (2, 0, 0), (2, 4, 0)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_empty_matches_torch(device, shape, full_matrices):
    A = torch.zeros(shape)
    ours = LA.svd(A.to(device), full_matrices=full_matrices)
    theirs = torch.linalg.svd(A, full_matrices=full_matrices)
    for x, y in zip(ours, theirs):
        torch.testing.assert_close(x.cpu(), y, rtol=0, atol=0)
    assert LA.svdvals(A.to(device)).shape == torch.linalg.svdvals(A).shape


def test_views_match_contiguous(device):
    A = gaussian((4, 7, 9), torch.complex64)
    for view in (A.mT, A.conj(), A.mH, A[:, ::2, 1:]):
        U, S, Vh = LA.svd(view.to(device))
        check_svd(view.resolve_conj(), U, S, Vh)


def test_errors_match_torch(device):
    for bad in (torch.ones(3, device=device), torch.ones(3, 3, dtype=torch.int32, device=device)):
        with pytest.raises(RuntimeError) as expected:
            torch.linalg.svd(bad)
        with pytest.raises(RuntimeError) as got:
            LA.svd(bad)
        assert str(got.value) == str(expected.value)


def test_driver_only_on_cuda(device):
    A = gaussian((2, 4, 4), torch.float32).to(device)
    if device.type == "cuda":
        for driver in family.SVD_DRIVERS:
            torch.testing.assert_close(LA.svdvals(A, driver=driver), LA.svdvals(A))
        return
    with pytest.raises(RuntimeError) as expected:
        torch.linalg.svd(A, driver="gesvd")
    with pytest.raises(RuntimeError) as got:
        LA.svd(A, driver="gesvd")
    assert str(got.value) == str(expected.value)


def test_kernel_choice(device, monkeypatch):
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append((kernel.function, k)), real(kernel, *a, **k)))
    for shape, dtype, expected in [
        ((3, 3), torch.float32, ("svd_tiny", {"N": 3})), ((5, 2), torch.float32, ("svd_tiny", {"N": 2})),
        ((4, 4), torch.float32, ("svd_pairs", {"N": 8})), ((12, 12), torch.complex64, ("svd_pairs", {"N": 16})),
        ((40, 20), torch.float32, ("svd_pairs", {"N": 32})), ((20, 20), torch.complex64, ("svd_jacobi", {"GROUP": 512})),
        ((40, 40), torch.float32, ("svd_jacobi", {"GROUP": 1024})),
    ]:
        launched.clear()
        LA.svd(gaussian(shape, dtype).to(device))
        assert launched[-1] == expected


# --- gradients ---


def gauge_invariant_losses(A):
    U, S, Vh = LA.svd(A, full_matrices=False)
    return S, U.abs(), (U @ Vh)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("m,n", [(3, 3), (2, 2), (5, 3), (3, 5), (6, 6)])
def test_svd_gradient(device, m, n, dtype):
    supported(device, dtype)
    values = np.linspace(2, 0.5, min(m, n))  # distinct and away from zero
    A = torch.stack([with_singular_values(m, n, values, dtype) for _ in range(2)]).to(device).requires_grad_()
    assert torch.autograd.gradcheck(gauge_invariant_losses, (A,), fast_mode=True)
    assert torch.autograd.gradcheck(lambda A: LA.svdvals(A), (A,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_svd_gradient_matches_torch(device, dtype):
    A = torch.stack([with_singular_values(6, 4, np.linspace(3, 1, 4), dtype) for _ in range(3)])
    weights = gaussian((3, 6, 4), dtype)
    grads = []
    for fn, X in ((LA.svd, A.to(device)), (torch.linalg.svd, A)):
        X = X.clone().requires_grad_()
        U, S, Vh = fn(X, full_matrices=False)
        loss = (U @ Vh * weights.to(X.device)).real.sum() + S.square().sum()
        loss.backward()
        grads.append(X.grad.cpu())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-3, atol=1e-4)


def test_phase_dependent_loss_raises_as_torch(device):
    A = gaussian((4, 4), torch.complex128).to(device).requires_grad_()
    U, S, Vh = LA.svd(A)
    with pytest.raises(RuntimeError, match="specified up to multiplication by e\\^\\{i phi\\}"):
        U[..., 0, 0].real.backward()


# --- pinv, matrix_rank, lstsq ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n", [(3, 3), (5, 3), (3, 5), (20, 20), (40, 12)])
def test_pinv_moore_penrose(device, m, n, dtype):
    supported(device, dtype)
    A = gaussian((2, m, n), dtype)
    A[1] = with_singular_values(m, n, [1.0, 0.5] + [0.0] * (min(m, n) - 2), dtype)  # rank 2
    X = LA.pinv(A.to(device)).cpu()
    a, x = exact(A), exact(X)
    tol = 100 * max(m, n) * eps(dtype) * max(1.0, float(np.abs(x).max()) ** 2)
    h = lambda M: np.conj(np.swapaxes(M, -1, -2))
    for lhs, rhs in ((a @ x @ a, a), (x @ a @ x, x), (h(a @ x), a @ x), (h(x @ a), x @ a)):
        np.testing.assert_allclose(lhs, rhs, atol=tol, rtol=0)
    # SciPy with the same cut: A[1] is rank 2 only up to float32 rounding.
    np.testing.assert_allclose(x, np.array([scipy.linalg.pinv(b, rtol=max(m, n) * eps(dtype)) for b in a]), atol=tol, rtol=0)


@pytest.mark.parametrize("kwargs", [{}, {"rtol": 1e-3}, {"atol": 0.4}, {"atol": 0.4, "rtol": 0.2}, {"hermitian": True}])
def test_pinv_and_rank_cuts_match_torch(device, kwargs):
    values = [1.0, 0.5, 1e-3 * 0.5, 1e-8]
    A = torch.stack([with_singular_values(5, 5, values, torch.float64) for _ in range(2)])
    if kwargs.get("hermitian"):
        A = torch.randn(2, 5, 5, dtype=torch.float64)  # only its lower triangle counts
    torch.testing.assert_close(LA.pinv(A.to(device), **kwargs).cpu(), torch.linalg.pinv(A, **kwargs), rtol=1e-6, atol=1e-6)
    assert LA.matrix_rank(A.to(device), **kwargs).tolist() == torch.linalg.matrix_rank(A, **kwargs).tolist()


def test_pinv_tensor_tolerances_broadcast(device):
    A = torch.stack([with_singular_values(4, 4, [1.0, 0.1, 0.01, 0.001], torch.float64) for _ in range(3)])
    rtol = torch.tensor([0.5, 0.05, 0.005], dtype=torch.float64)
    torch.testing.assert_close(LA.pinv(A.to(device), rtol=rtol.to(device)).cpu(), torch.linalg.pinv(A, rtol=rtol))


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("m,n", [(4, 4), (6, 3), (3, 6)])
def test_pinv_gradient(device, m, n, dtype):
    supported(device, dtype)
    A = gaussian((2, m, n), dtype).to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda A: LA.pinv(A), (A,), fast_mode=True)
    # hermitian=True: torch's formula takes A whole (a gradient on both triangles).
    if m == n:
        H = A.detach() + A.detach().mH
        weights = gaussian((2, m, n), dtype).to(device)
        ours = torch.func.grad(lambda A: (LA.pinv(A, hermitian=True) * weights).real.sum())(H)
        theirs = torch.func.grad(lambda A: (torch.linalg.pinv(A, hermitian=True) * weights.cpu()).real.sum())(H.cpu())
        torch.testing.assert_close(ours.cpu(), theirs)


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize("m,n", [(6, 3), (3, 6), (4, 4)])
def test_lstsq_matches_torch(device, driver, m, n):
    if device.type == "cuda" and driver not in (None, "gels"):
        pytest.skip("torch allows only gels on CUDA")
    A = gaussian((2, m, n), torch.float64)
    B = gaussian((2, m, 2), torch.float64)
    ours = LA.lstsq(A.to(device), B.to(device), driver=driver)
    theirs = torch.linalg.lstsq(A, B, driver=driver or ("gelsy" if device.type == "cpu" else "gels"))
    torch.testing.assert_close(ours.solution.cpu(), theirs.solution)
    for field in ("residuals", "rank", "singular_values"):
        x, y = getattr(ours, field).cpu(), getattr(theirs, field)
        if driver in (None, "gels") and device.type == "cuda":
            continue  # torch.linalg on the CPU is the reference, whose gels fills other fields
        assert x.shape == y.shape, field
        torch.testing.assert_close(x, y, check_dtype=False)


def test_lstsq_rank_deficient_minimum_norm(device):
    A = with_singular_values(6, 4, [1.0, 0.5, 0.0, 0.0], torch.float32)
    B = gaussian((6, 3), torch.float32)
    X = LA.lstsq(A.to(device), B.to(device), driver="gelsd" if device.type == "cpu" else None).solution.cpu()
    reference = scipy.linalg.pinv(exact(A), rtol=6 * eps(A.dtype)) @ exact(B)
    np.testing.assert_allclose(X.double().numpy(), reference, atol=1e-4)


def test_lstsq_broadcasts_and_vector_rhs(device):
    A = gaussian((1, 5, 3), torch.float64)
    B = gaussian((4, 5, 2), torch.float64)
    torch.testing.assert_close(LA.lstsq(A.to(device), B.to(device)).solution.cpu(), torch.linalg.lstsq(A, B).solution)
    b = gaussian((5,), torch.float64)
    torch.testing.assert_close(LA.lstsq(A[0].to(device), b.to(device)).solution.cpu(), torch.linalg.lstsq(A[0], b).solution)


def test_lstsq_gradient(device):
    A = gaussian((2, 5, 3), torch.float64).to(device).requires_grad_()
    B = gaussian((2, 5, 2), torch.float64).to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda A, B: LA.lstsq(A, B).solution, (A, B), fast_mode=True)


def test_lstsq_errors_match_torch(device):
    A = torch.ones(4, 3, device=device)
    for B, kwargs in ((torch.ones(5, 2, device=device), {}), (torch.ones(4, 2, dtype=torch.float64, device=device), {}),
                      (torch.ones(4, 2, device=device), {"driver": "bad"})):
        with pytest.raises(RuntimeError) as expected:  # torch on the same device (gels alone on CUDA)
            torch.linalg.lstsq(A, B, **kwargs)
        with pytest.raises(RuntimeError) as got:
            LA.lstsq(A, B, **kwargs)
        assert str(got.value) == str(expected.value)


def test_vmap_matches_torch(device):
    A = gaussian((3, 2, 5, 4), torch.float64).to(device)
    for ours, theirs in [(LA.svdvals, torch.linalg.svdvals), (LA.pinv, torch.linalg.pinv),
                         (lambda A: LA.svd(A, full_matrices=False)[0].abs(), lambda A: torch.linalg.svd(A, full_matrices=False)[0].abs())]:
        torch.testing.assert_close(torch.func.vmap(ours)(A).cpu(), torch.func.vmap(theirs)(A.cpu()))
    rtol = torch.tensor([0.5, 0.1, 0.01], dtype=torch.float64)
    torch.testing.assert_close(
        torch.func.vmap(lambda A, r: LA.pinv(A, rtol=r))(A, rtol.to(device)).cpu(),
        torch.func.vmap(lambda A, r: torch.linalg.pinv(A, rtol=r))(A.cpu(), rtol),
    )


def aligned(ours, theirs):
    """Our (U, S, Vh) and their tangents with our singular vectors turned to torch's
    phases (signs): each pair (u_j, v_j) is unique up to one, and so are its tangents."""
    (U, S, Vh), (dU, dS, dVh) = ours
    k = S.shape[-1]
    phase = (U[..., :k].mH @ theirs[0][..., :k]).diagonal(dim1=-2, dim2=-1)
    phase = phase / phase.abs()
    return dU[..., :k] * phase.unsqueeze(-2), dS, dVh[..., :k, :] * phase.conj().unsqueeze(-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("shape", [(3, 5, 4), (2, 4, 6), (2, 5, 5), (2, 20, 20), (40, 12)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_forward_mode_matches_torch(device, shape, full_matrices, dtype):
    """torch's JVP, phases included: ours transposes the VJP and splits each pair's phase
    evenly between u_j and v_j, as torch's; the completed columns get none."""
    supported(device, dtype)
    A = gaussian(shape, dtype).to(device)
    dA = torch.randn_like(A)
    ours = torch.func.jvp(lambda A: LA.svd(A, full_matrices=full_matrices), (A,), (dA,))
    theirs = torch.func.jvp(lambda A: torch.linalg.svd(A, full_matrices=full_matrices), (A.cpu(),), (dA.cpu(),))
    for got, expected in zip(aligned([[t.cpu() for t in o] for o in ours], theirs[0]), aligned(theirs, theirs[0])):
        torch.testing.assert_close(got, expected)
    k = min(shape[-2:])
    assert ours[1][0][..., k:].abs().max().item() == 0 if ours[1][0].shape[-1] > k else True


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_torch_func_and_forward_mode_match_torch(device, dtype):
    """svdvals, svd, pinv and lstsq under torch.func.jvp, grad, jacfwd/jacrev and the
    dual-number API, against torch's on the CPU."""
    supported(device, dtype)
    A = gaussian((2, 6, 4), dtype).to(device)
    B = gaussian((2, 6, 3), dtype).to(device)
    dA = torch.randn_like(A)
    driver = None if device.type == "cuda" else "gelsd"  # on CUDA torch (and so mpslinalg) takes gels alone
    cases = [
        (LA.svdvals, torch.linalg.svdvals),
        (LA.pinv, torch.linalg.pinv),
        (lambda A: LA.pinv(A.mT), lambda A: torch.linalg.pinv(A.mT)),
        (lambda A: LA.lstsq(A, B, driver=driver).solution, lambda A: torch.linalg.lstsq(A, B.cpu(), driver="gelsd").solution),
        (lambda A: (lambda U, S, Vh: (U * S.unsqueeze(-2)) @ Vh)(*LA.svd(A, full_matrices=False)),
         lambda A: (lambda U, S, Vh: (U * S.unsqueeze(-2)) @ Vh)(*torch.linalg.svd(A, full_matrices=False))),
    ]
    for ours, theirs in cases:
        torch.testing.assert_close(torch.func.jvp(ours, (A,), (dA,))[1].cpu(), torch.func.jvp(theirs, (A.cpu(),), (dA.cpu(),))[1])
        loss = lambda f: lambda A: f(A).abs().sum()
        torch.testing.assert_close(torch.func.grad(loss(ours))(A).cpu(), torch.func.grad(loss(theirs))(A.cpu()))
        if not dtype.is_complex:  # jacfwd takes real inputs only
            torch.testing.assert_close(torch.func.jacfwd(ours)(A).cpu(), torch.func.jacrev(theirs)(A.cpu()))
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(LA.svdvals(fwAD.make_dual(A, dA))).tangent
    torch.testing.assert_close(tangent.cpu(), torch.func.jvp(torch.linalg.svdvals, (A.cpu(),), (dA.cpu(),))[1])


def test_compiles_without_graph_breaks(device, monkeypatch):
    torch._dynamo.reset()
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    A = torch.stack([with_singular_values(6, 4, np.linspace(3, 1, 4), torch.float32) for _ in range(3)])
    A = A.to(device).requires_grad_()

    def f(A):
        U, S, Vh = LA.svd(A, full_matrices=False)
        return (U @ Vh).sum() + S.sum() + LA.svdvals(A).sum() + LA.pinv(A).sum() + LA.lstsq(A, A[..., :2]).solution.sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(A)
    y.backward()
    torch.testing.assert_close(y, f(A))
    assert "svd_pairs" in launched, "the compiled graph runs the kernels"


@pytest.mark.parametrize("A", [torch.eye(3, dtype=torch.float64), torch.zeros(3, 3, dtype=torch.float64)], ids=["identity", "zero"])
def test_svdvals_gradient_at_repeated_singular_values_is_torch(device, A):
    # The singular vectors' cotangents are None, not zeros over zero gaps (NaN before).
    X = A.to(device).requires_grad_()
    Y = A.clone().requires_grad_()
    expected = torch.autograd.grad(torch.linalg.svdvals(Y).sum(), Y)[0]
    torch.testing.assert_close(torch.autograd.grad(LA.svdvals(X).sum(), X)[0].cpu(), expected)
    torch.testing.assert_close(torch.autograd.grad(LA.svd(X)[1].sum(), X)[0].cpu(), expected)
