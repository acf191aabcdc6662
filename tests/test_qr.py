"""QR against SciPy and torch.linalg, with LAPACK's test ratios (sqrt01, sqrt02):
||R - Q^H A||_1 / (max(1, m) ||A||_1 eps) < 15 and ||I - Q^H Q||_1 / (max(1, m) eps) < 15.
R is compared with SciPy's in float64 (the same Householder convention as LAPACK,
so the same signs); geqrf's packed result and tau with SciPy's raw mode."""

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpslinalg as LA
from conftest import keeps_subnormals, supported
from mpslinalg import qr_family as family
from mpslinalg.testing import LARGE, SMALL, THRESHOLD, eps, exact, latms, qr_ratios

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
rng = np.random.default_rng(5)
# Around the small kernels' N = 8, 16, 32, 64, tall, wide, vectors, and past them (blocked:
# one panel, several, a last panel narrower than 32, panel heights for each threadgroup size).
SHAPES = [(1, 1), (1, 5), (5, 1), (3, 5), (5, 3), (8, 8), (9, 9), (17, 10), (10, 17), (32, 32), (33, 20),
          (64, 64), (64, 40), (40, 64), (70, 30), (100, 70), (70, 100), (130, 33), (600, 40)]


def gaussian(shape, dtype, scale=1.0):
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.is_complex else 0)
    return torch.from_numpy(np.asarray(a * scale)).to(dtype)


def check_qr(A, Q, R, mode):
    m, n = A.shape[-2:]
    k = min(m, n)
    columns = m if mode == "complete" else k
    assert Q.shape == (*A.shape[:-2], m, columns) and R.shape == (*A.shape[:-2], columns if mode == "complete" else k, n)
    assert Q.dtype == A.dtype and R.dtype == A.dtype
    assert (R.cpu().tril(-1) == 0).all()
    residual, orthogonality = qr_ratios(A.cpu(), Q.cpu(), R.cpu())
    assert residual < THRESHOLD and orthogonality < THRESHOLD, (residual, orthogonality)


def scipy_r(A):
    return np.array([scipy.linalg.qr(a, mode="economic")[1] for a in exact(A).reshape(-1, *A.shape[-2:])]).reshape(
        *A.shape[:-2], min(A.shape[-2:]), A.shape[-1]
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n", SHAPES)
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_matches_lapack(device, m, n, mode, dtype):
    supported(device, dtype)
    A = gaussian((3, m, n), dtype)
    Q, R = LA.qr(A.to(device), mode=mode)
    check_qr(A, Q, R, mode)
    k = min(m, n)
    reference = scipy_r(A)
    scale = np.abs(reference).max()
    np.testing.assert_allclose(exact(R)[..., :k, :], reference, atol=100 * eps(dtype) * scale * max(m, n), rtol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n", [(5, 3), (3, 5), (16, 16), (40, 20), (100, 70), (40, 100)])
def test_geqrf_matches_lapack(device, m, n, dtype):
    supported(device, dtype)
    A = gaussian((2, m, n), dtype)
    packed, tau = LA.geqrf(A.to(device))
    assert packed.shape == A.shape and tau.shape == (2, min(m, n))
    for a, p, t in zip(exact(A), exact(packed), exact(tau)):
        (ref_packed, ref_tau), _ = scipy.linalg.qr(a, mode="raw")
        scale = np.abs(a).max() * max(m, n) * 100 * eps(dtype)
        np.testing.assert_allclose(p, ref_packed, atol=scale, rtol=0)
        np.testing.assert_allclose(t, ref_tau, atol=100 * max(m, n) * eps(dtype), rtol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n,k", [(5, 3, 3), (5, 3, 2), (8, 8, 8), (8, 8, 0), (30, 20, 20), (70, 30, 30), (100, 70, 70), (100, 70, 45), (90, 90, 0)])
def test_householder_product_matches_torch(device, m, n, k, dtype):
    supported(device, dtype)
    packed, tau = torch.geqrf(gaussian((2, m, n), dtype))
    tau = tau[..., :k]
    Q = LA.householder_product(packed.to(device), tau.to(device))
    expected = torch.linalg.householder_product(packed, tau)
    torch.testing.assert_close(Q.cpu(), expected, atol=50 * max(m, 1) * eps(dtype), rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_r_mode_and_batches(device, dtype):
    A = gaussian((2, 3, 9, 6), dtype)
    Q, R = LA.qr(A.to(device), mode="r")
    assert Q.numel() == 0
    torch.testing.assert_close(R, LA.qr(A.to(device))[1])
    Q, R = LA.qr(A.to(device))
    check_qr(A, Q, R, "reduced")


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("shape", [(0, 3, 3), (3, 0), (0, 3), (2, 0, 4)])
def test_empty(device, shape, dtype):
    A = torch.zeros(shape, dtype=dtype)
    for mode in ("reduced", "complete", "r"):
        Q, R = LA.qr(A.to(device), mode=mode)
        Qt, Rt = torch.linalg.qr(A, mode=mode)
        assert Q.shape == Qt.shape and R.shape == Rt.shape
        torch.testing.assert_close(Q.cpu(), Qt)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("m,n", [(12, 8), (90, 70)])
def test_rank_deficient_zero_columns_and_nan(device, m, n, dtype):
    A = gaussian((2, m, n), dtype)
    A[..., 3] = 0  # tau = 0 for that reflector where the column below is zero too
    A[..., 5] = A[..., 1] * 2
    Q, R = LA.qr(A.to(device))
    check_qr(A, Q, R, "reduced")
    Z = torch.zeros(1, m, n, dtype=dtype)
    packed, tau = LA.geqrf(Z.to(device))
    assert (tau == 0).all() and (packed == 0).all()
    Q, R = LA.qr(Z.to(device))
    torch.testing.assert_close(Q.cpu(), torch.eye(m, n, dtype=dtype).expand(1, m, n))
    A[0, 2, 2] = float("nan")
    Q, R = LA.qr(A.to(device))
    assert Q[0].isnan().any() and not Q[1].isnan().any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("scale", [SMALL, 1e-30, 1e30, LARGE])
@pytest.mark.parametrize("n", [12, 80])
def test_extreme_scales(device, n, scale, dtype):
    A = torch.from_numpy(np.array([latms(n, 1e3, scale, rng, dtype.is_complex) for _ in range(2)])).to(dtype)
    Q, R = LA.qr(A.to(device))
    assert Q.isfinite().all() and R.isfinite().all()
    check_qr(A, Q, R, "reduced")


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("m,n", [(12, 8), (90, 70)])
def test_subnormal_columns(device, m, n, dtype):
    # Entries near 1e-40 (subnormal in float32): their squares underflow to zero, so
    # the norms are scaled, by a division (1 / a subnormal overflows), and the
    # reflectors formed from values scaled by 2^102 (subtractions among subnormals
    # lose bits). Q stays orthogonal; A - QR is at the level of the arithmetic's
    # absolute error there (2^-149 an operation); matrix 1 keeps full precision in R.
    keeps_subnormals(device)
    A = gaussian((2, m, n), dtype) * 1e-40
    A[0, :, 1] *= 1e-3
    Q, R = LA.qr(A.to(device))
    assert Q.isfinite().all() and R.isfinite().all()
    assert qr_ratios(A, Q.cpu(), R.cpu())[1] < THRESHOLD
    error = np.abs(exact(A) - exact(Q) @ exact(R)).max()
    assert error < 10 * m * n * 2.0**-149 + THRESHOLD * m * eps(dtype) * np.abs(exact(A)).sum(-2).max()
    reference = scipy_r(A.to(torch.complex128 if dtype.is_complex else torch.float64))
    np.testing.assert_allclose(np.abs(exact(R)[1].diagonal()), np.abs(reference[1].diagonal()), rtol=1e-4)


def test_kahan_matrix(device):
    n, theta = 20, 1.2
    s, c = np.sin(theta), np.cos(theta)
    kahan = np.diag(s ** np.arange(n)) @ (np.eye(n) - c * np.triu(np.ones((n, n)), 1))
    A = torch.from_numpy(kahan).to(torch.float32)[None]
    Q, R = LA.qr(A.to(device))
    check_qr(A, Q, R, "reduced")


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_views_equal_contiguous(device, dtype):
    A = gaussian((4, 10, 7), dtype).to(device)
    for name, V in {"transposed": A.mT, "conj": A.conj(), "strided": A[::2], "neg": torch._neg_view(A)}.items():
        contiguous = V.clone().resolve_conj().resolve_neg().contiguous()
        for got, expected in zip(LA.qr(V), LA.qr(contiguous)):
            torch.testing.assert_close(got, expected, msg=name)


@given(
    m=st.integers(1, 40), n=st.integers(1, 40), batch=st.sampled_from([(), (1,), (3,), (2, 2)]),
    dtype=st.sampled_from([torch.float32, torch.complex64]), mode=st.sampled_from(["reduced", "complete"]),
    log_cond=st.integers(0, 7), log_scale=st.integers(-30, 30),
)
def test_qr_property(device, m, n, batch, dtype, mode, log_cond, log_scale):
    k = min(m, n)
    left = np.array([latms(m, 1.0, 1.0, rng, dtype.is_complex) for _ in range(int(np.prod(batch, dtype=int)))])
    core = np.array([latms(k, 10.0**log_cond, 10.0**log_scale, rng, dtype.is_complex) for _ in range(left.shape[0])])
    right = np.array([latms(n, 1.0, 1.0, rng, dtype.is_complex) for _ in range(left.shape[0])])
    a = left[..., :, :k] @ core @ right[..., :k, :]
    A = torch.from_numpy(a.reshape(*batch, m, n)).to(dtype)
    Q, R = LA.qr(A.to(device), mode=mode)
    check_qr(A, Q, R, mode)


# --- gradients ---


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("m,n,mode", [(5, 3, "reduced"), (4, 4, "reduced"), (3, 5, "reduced"), (3, 5, "complete"),
                                      (4, 4, "complete"), (20, 12, "reduced")])
def test_qr_gradient(device, m, n, mode, dtype):
    supported(device, dtype)
    A = gaussian((2, m, n), dtype).to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda A: LA.qr(A, mode=mode), (A,), fast_mode=True)
    # Against torch's on the CPU.
    Q, R = LA.qr(A, mode=mode)
    weights = gaussian(Q.shape, dtype).to(device), gaussian(R.shape, dtype).to(device)
    loss = lambda Q, R: ((Q * weights[0].to(Q.device)).sum() + (R * weights[1].to(R.device)).sum()).abs()
    (grad,) = torch.autograd.grad(loss(Q, R), A)
    A_cpu = A.detach().cpu().requires_grad_()
    (expected,) = torch.autograd.grad(loss(*torch.linalg.qr(A_cpu, mode=mode)), A_cpu)
    torch.testing.assert_close(grad.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("m,n,k", [(6, 4, 3), (40, 36, 34)])
def test_householder_product_gradient(device, m, n, k, dtype):
    supported(device, dtype)
    packed, tau = torch.geqrf(gaussian((2, m, n), dtype))
    A, t = packed.to(device).requires_grad_(), tau[..., :k].to(device).requires_grad_()
    assert torch.autograd.gradcheck(LA.householder_product, (A, t), fast_mode=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("m,n,mode", [(5, 3, "reduced"), (3, 5, "complete"), (4, 4, "complete"), (40, 36, "reduced")])
def test_forward_mode_and_torch_func_match_torch(device, m, n, mode, dtype):
    """qr under torch.func.jvp (its VJP transposed), grad, vmap and, for real input,
    jacfwd; householder_product's JVP (through its compact-WY reference), grad and vmap."""
    supported(device, dtype)
    A = gaussian((2, m, n), dtype).to(device)
    dA = torch.randn_like(A)
    ours = torch.func.jvp(lambda A: LA.qr(A, mode=mode), (A,), (dA,))[1]
    theirs = torch.func.jvp(lambda A: torch.linalg.qr(A, mode=mode), (A.cpu(),), (dA.cpu(),))[1]
    for got, expected in zip(ours, theirs):
        torch.testing.assert_close(got.cpu(), expected)
    loss = lambda qr: lambda A: qr(A, mode=mode)[1].abs().sum() + qr(A, mode=mode)[0].real.sum()
    torch.testing.assert_close(torch.func.grad(loss(LA.qr))(A).cpu(), torch.func.grad(loss(torch.linalg.qr))(A.cpu()))
    for got, expected in zip(torch.func.vmap(lambda A: LA.qr(A, mode=mode))(A), LA.qr(A, mode=mode)):
        torch.testing.assert_close(got, expected)
    if not dtype.is_complex:  # jacfwd takes real inputs only
        torch.testing.assert_close(torch.func.jacfwd(lambda A: LA.qr(A, mode=mode)[1])(A).cpu(),
                                   torch.func.jacrev(lambda A: torch.linalg.qr(A, mode=mode)[1])(A.cpu()))
    if m < n:
        return
    packed, tau = torch.geqrf(gaussian((2, m, n), dtype))
    dtau = torch.randn_like(tau)
    ours = torch.func.jvp(LA.householder_product, (packed.to(device), tau.to(device)), (dA, dtau.to(device)))[1]
    torch.testing.assert_close(ours.cpu(), torch.func.jvp(torch.linalg.householder_product, (packed, tau), (dA.cpu(), dtau))[1])
    loss = lambda product: lambda A, tau: product(A, tau).abs().sum()
    for got, expected in zip(torch.func.grad(loss(LA.householder_product), argnums=(0, 1))(packed.to(device), tau.to(device)),
                             torch.func.grad(loss(torch.linalg.householder_product), argnums=(0, 1))(packed, tau)):
        torch.testing.assert_close(got.cpu(), expected)
    torch.testing.assert_close(torch.func.vmap(LA.householder_product, in_dims=(0, None))(packed.to(device), tau[0].to(device)).cpu(),
                               torch.linalg.householder_product(packed, tau[0].expand_as(tau)))
    for got, expected in zip(torch.func.vmap(LA.geqrf)(A), LA.geqrf(A)):
        torch.testing.assert_close(got, expected)


def test_forward_mode_errors_match_torch(device):
    A, dA = gaussian((5, 3), torch.float64).to(device), gaussian((5, 3), torch.float64).to(device)
    for mode in ("r", "complete"):
        with pytest.raises(RuntimeError) as expected:
            torch.func.jvp(lambda A: torch.linalg.qr(A, mode=mode), (A.cpu(),), (dA.cpu(),))
        with pytest.raises(RuntimeError) as got:
            torch.func.jvp(lambda A: LA.qr(A, mode=mode), (A,), (dA,))
        assert str(got.value) == str(expected.value)


def test_qr_gradient_errors(device):
    A = gaussian((5, 3), torch.float32).to(device).requires_grad_()
    with pytest.raises(RuntimeError, match="not computed when mode='r'"):
        LA.qr(A, mode="r")[1].sum().backward()
    with pytest.raises(RuntimeError, match="not differentiable when mode='complete' and nrows > ncols"):
        LA.qr(A, mode="complete")[0].sum().backward()
    with pytest.raises(NotImplementedError, match="the derivative for 'geqrf' is not implemented"):
        LA.geqrf(A)


def test_errors_match_torch(device):
    cases = [
        (lambda f: f(torch.ones(3, device=device)), "qr"),
        (lambda f: f(torch.ones(3, 3, dtype=torch.int32, device=device)), "qr"),
        (lambda f: f(torch.ones(3, 3, device=device), mode="raw"), "qr"),
    ]
    for call, _ in cases:
        with pytest.raises(RuntimeError) as ours:
            call(LA.qr)
        with pytest.raises(RuntimeError) as theirs:
            call(torch.linalg.qr)
        assert str(ours.value) == str(theirs.value)
    for A, tau in [(torch.ones(3, 5), torch.ones(2)), (torch.ones(5, 3), torch.ones(4)), (torch.ones(5, 3), torch.ones(2, dtype=torch.float64))]:
        with pytest.raises(RuntimeError) as ours:
            LA.householder_product(A.to(device), tau.to(device))
        with pytest.raises(RuntimeError) as theirs:
            torch.linalg.householder_product(A, tau)
        assert str(ours.value) == str(theirs.value)
    with pytest.raises(RuntimeError, match="input must have at least 2 dimensions"):
        LA.geqrf(torch.ones(3, device=device))


def test_kernels_are_taken(device, monkeypatch):
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    monkeypatch.setattr(torch, "geqrf", None)  # never torch's
    LA.qr(gaussian((4, 20, 12), torch.complex64).to(device))
    assert launched == ["qr_small"]
    launched.clear()
    LA.householder_product(*LA.geqrf(gaussian((4, 20, 12), torch.complex64).to(device)))
    assert launched == ["geqrf_small", "householder_small"]
    launched.clear()
    LA.qr(gaussian((2, 100, 70), torch.complex64).to(device))
    assert launched == ["geqrf_panel"] * 3


# --- ormqr ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("mn,k,other", [(6, 4, 5), (70, 40, 3), (90, 70, 90)])
def test_ormqr_matches_torch(device, mn, k, other, left, transpose, dtype):
    supported(device, dtype)
    packed, tau = torch.geqrf(gaussian((2, mn, k), dtype))
    C = gaussian((2, mn, other) if left else (2, other, mn), dtype)
    got = LA.ormqr(packed.to(device), tau.to(device), C.to(device), left, transpose)
    expected = torch.ormqr(packed, tau, C, left, transpose)
    scale = C.abs().max().item()
    torch.testing.assert_close(got.cpu(), expected, atol=50 * mn * eps(dtype) * scale, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("left,transpose", [(True, False), (True, True), (False, False), (False, True)])
def test_ormqr_gradient(device, left, transpose, dtype):
    supported(device, dtype)
    packed, tau = torch.geqrf(gaussian((2, 6, 4), dtype))
    C = gaussian((2, 6, 3) if left else (2, 3, 6), dtype).to(device).requires_grad_()
    # Three reflectors, as torch's CPU kernel checks them: tau.shape[-1] == A.shape[-1] == 3.
    A, t = packed[..., :3].to(device).requires_grad_(), tau[..., :3].to(device).requires_grad_()
    assert torch.autograd.gradcheck(lambda A, t, C: LA.ormqr(A, t, C, left, transpose), (A, t, C), fast_mode=True)


def test_ormqr_errors_match_torch(device):
    A, tau = torch.ones(5, 3, device=device), torch.ones(3, device=device)
    for C in (torch.ones(4, 5, device=device), torch.ones(2, 5, 4, device=device)):
        with pytest.raises(RuntimeError) as ours:
            LA.ormqr(A, tau, C)
        with pytest.raises(RuntimeError) as theirs:
            torch.ormqr(A.cpu(), tau.cpu(), C.cpu())
        assert str(ours.value) == str(theirs.value)


def test_compiles_without_graph_breaks(device):
    torch._dynamo.reset()
    A = gaussian((3, 8, 6), torch.float32).to(device).requires_grad_()

    def f(A):
        Q, R = LA.qr(A)
        return Q.sum() + R.sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(A)
    y.backward()
    torch.testing.assert_close(y, f(A))
