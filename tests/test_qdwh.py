"""QDWH's polar decomposition and the spectral divide and conquer (``mpslinalg.qdwh``):
LAPACK's ssyt21 and sbdt01/sort01 ratios through eigh, svd and polar on the routes'
crossovers moved down to test sizes, the iteration's weights, the splits' fallbacks."""

import math

import numpy as np
import pytest
import torch

import mpslinalg as LA
from conftest import supported
from mpslinalg import composite, eigh_family, qdwh, svd_family
from mpslinalg.testing import THRESHOLD, eigh_ratios, exact, hermitian_batch, latms, svd_ratios

DTYPES = [torch.float32, torch.complex64]
N = 72  # past eigh_pairs' 64 (32 complex): two levels of splits at least


@pytest.fixture
def routes(monkeypatch):
    """The QDWH routes from N columns (their crossovers are for GPUs, far above test sizes)."""
    monkeypatch.setattr(eigh_family, "DIVISION_FROM", N)
    monkeypatch.setattr(svd_family, "POLAR_FROM", N)


def splits(monkeypatch) -> list:
    """The results of every _split (None: refused) while the test runs."""
    seen, real = [], qdwh._split
    monkeypatch.setattr(qdwh, "_split", lambda H, sigma: seen.append(real(H, sigma)) or seen[-1])
    return seen


def test_weights_reach_one():
    """The weights' bound of the smallest singular value, from eps, ends within 5 eps of 1:
    4 iterations in float32, 6 in float64, the first 2 by QR (c > 100); about Halley's (3, 1, 3) last."""
    for eps, count, by_qr in ((torch.finfo(torch.float32).eps, 4, 2), (torch.finfo(torch.float64).eps, 6, 2)):
        found = qdwh.weights(eps)
        assert len(found) == count
        assert sum(c > qdwh.CHOLESKY_FROM for _, _, c in found) == by_qr
        l = eps
        for a, b, c in found:
            l = l * (a + b * l * l) / (1 + c * l * l)
        assert 1 - l <= 5 * eps
        assert found[-1] == pytest.approx((3, 1, 3), abs=0.02)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n,cond", [(N, N, 1e2), (110, N, 1e5), (N, N, 1e-0)])
def test_polar_factor_is_the_svds(device, dtype, m, n, cond):
    """U has orthonormal columns to n eps, and is W Vh of the SVD to cond n eps; H = U^H A
    is A's: ||A - U H|| to n eps ||A||."""
    supported(device, dtype)
    rng = np.random.default_rng(3)
    a = latms(m, cond, 1.0, rng, dtype.is_complex)[:, :n] if m == n else np.linalg.qr(
        latms(m, 1.0, 1.0, rng, dtype.is_complex))[0][:, :n] @ latms(n, cond, 1.0, rng, dtype.is_complex)
    A = torch.from_numpy(a).to(dtype)
    U = qdwh.polar_factor(A[None].to(device))[0].cpu()
    eps = torch.finfo(torch.float32).eps
    u = exact(U)
    assert np.abs(np.eye(n) - u.conj().T @ u).sum(0).max() / (n * eps) < THRESHOLD
    w, _, vh = np.linalg.svd(exact(A), full_matrices=False)
    assert np.abs(u - w @ vh).max() / (cond * n * eps) < THRESHOLD
    h = u.conj().T @ exact(A)
    h = (h + h.conj().T) / 2
    assert np.abs(exact(A) - u @ h).sum(0).max() / (n * np.abs(exact(A)).sum(0).max() * eps) < THRESHOLD


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["random", "clustered", "repeated at the median", "identity", "zero", "graded"])
def test_eigh_by_division(device, routes, monkeypatch, dtype, kind):
    """ssyt21's ratios and the eigenvalues to n eps ||A|| on the divide and conquer; an
    eigenvalue of multiplicity 20 at the median of the diagonal (H diagonal) makes the
    first split refuse (its projector has eigenvalues 1/2) and a shifted one succeed."""
    supported(device, dtype)
    rng = np.random.default_rng(5)
    if kind == "random":
        A = hermitian_batch((), N, dtype, rng, cond=1e3, definite=False)
    elif kind == "clustered":
        A = hermitian_batch((), N, dtype, rng, eigenvalues=np.concatenate((np.full(N // 2, -1.0), 1 + 1e-6 * rng.random(N - N // 2))))
    elif kind == "repeated at the median":
        d = np.concatenate((-1 - rng.random(26), np.zeros(20), 1 + rng.random(N - 46)))
        A = torch.diag(torch.from_numpy(rng.permutation(d))).to(dtype)
    elif kind == "identity":
        A = torch.eye(N, dtype=dtype)
    elif kind == "zero":
        A = torch.zeros(N, N, dtype=dtype)
    else:  # graded: D B D, entries over 12 orders of magnitude (absolute accuracy only)
        D = torch.from_numpy(np.logspace(0, -6, N)).to(dtype)
        A = D[:, None] * hermitian_batch((), N, dtype, rng, cond=10.0) * D[None, :]
    seen = splits(monkeypatch)
    w, V = LA.eigh(A.to(device))
    assert seen and any(s is not None for s in seen) or kind in ("zero",)
    if kind == "repeated at the median":
        assert seen[0] is None and seen[1] is not None
    assert (w.cpu()[:-1] <= w.cpu()[1:]).all()
    ratios = eigh_ratios(A, w.cpu(), V.cpu())
    assert max(ratios) < THRESHOLD, ratios
    assert max(eigh_ratios(A, LA.eigvalsh(A.to(device)).cpu(), None)) < THRESHOLD


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n,rank", [(N, N, N), (N, N, N // 2), (120, N, N), (N, 100, N), (N, N, 0)])
def test_svd_by_polar(device, routes, dtype, m, n, rank):
    """sbdt01 / sort01 ratios and the singular values to k eps S_max, also where A's rank
    falls short (QDWH leaves those columns of U zero; the QR completes them) and for a
    zero A; tall and wide through the QR and the conjugate transpose."""
    supported(device, dtype)
    rng = np.random.default_rng(7)
    a = latms(max(m, n), 1e3, 1.0, rng, dtype.is_complex)[:m, :n]
    if rank < min(m, n):
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        a = (u[:, :rank] * s[:rank]) @ vh[:rank]
    A = torch.from_numpy(a).to(dtype)
    for full in (False, True):
        U, S, Vh = LA.svd(A.to(device), full_matrices=full)
        ratios = svd_ratios(A, U.cpu(), S.cpu(), Vh.cpu())
        assert max(ratios) < THRESHOLD, ratios
    torch.testing.assert_close(LA.svdvals(A.to(device)).cpu(), S.cpu())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonfinite_gives_nan(device, routes, dtype):
    supported(device, dtype)
    A = torch.eye(N, dtype=dtype)
    A[3, 5] = A[5, 3] = torch.nan
    w, V = LA.eigh(A.to(device))
    assert w.isnan().all() and V.isnan().all()
    U, S, Vh = LA.svd(A.to(device))
    assert U.isnan().all() and S.isnan().all() and Vh.isnan().all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_polar_by_qdwh_and_its_fallback(device, routes, monkeypatch, dtype):
    """Full column rank: polar's U by QDWH (no SVD) and torch's U and H to cond n eps;
    rank-deficient A goes to the SVD's route, whose U has orthonormal columns."""
    supported(device, dtype)
    rng = np.random.default_rng(11)
    A = torch.from_numpy(latms(100, 1e2, 1.0, rng, dtype.is_complex)[:, :N]).to(dtype)
    calls = []
    real_svd = composite.svd
    monkeypatch.setattr(composite, "svd", lambda *a, **k: calls.append(1) or real_svd(*a, **k))
    U, H = LA.polar(A.to(device))
    assert not calls
    U_ref, H_ref = torch.linalg.polar(A.to(torch.complex128 if dtype.is_complex else torch.float64))
    eps = torch.finfo(torch.float32).eps
    assert (U.cpu().to(U_ref.dtype) - U_ref).abs().max() < 1e2 * N * eps * THRESHOLD
    assert (H.cpu().to(H_ref.dtype) - H_ref).abs().max() < N * eps * THRESHOLD * H_ref.abs().max()
    low = A.clone()
    low[:, N // 2:] = low[:, : N - N // 2]  # rank N / 2
    U, H = LA.polar(low.to(device))
    assert calls
    u = exact(U.cpu())
    assert np.abs(np.eye(N) - u.conj().T @ u).max() < N * eps * THRESHOLD


def test_polar_gradients_by_qdwh(device, monkeypatch):
    """The polar decomposition's derivatives where QDWH took the forward pass (H's
    eigenbasis from eigh in the backward pass): gradcheck and gradgradcheck in float64."""
    supported(device, torch.float64)
    monkeypatch.setattr(svd_family, "POLAR_FROM", 6)
    A = (torch.randn(8, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) + 3 * torch.eye(8, 6, dtype=torch.float64))
    A = A.to(device).requires_grad_()
    assert composite._polar_by_qdwh(A.detach()) is not None
    torch.autograd.gradcheck(lambda X: LA.polar(X), (A,))
    torch.autograd.gradgradcheck(lambda X: LA.polar(X), (A,))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_polar_factor_of_subnormal_and_huge_matrices(device, dtype):
    """The power-of-two scaling before the norms: A's polar factor is that of A 2^-140
    (subnormal entries; 2^140 alone overflows float32) and of A 2^100."""
    supported(device, dtype)
    A = torch.from_numpy(latms(N, 10.0, 1.0, np.random.default_rng(13), dtype.is_complex)).to(dtype)
    U = qdwh.polar_factor(A[None].to(device))[0].cpu()
    for scale in (2.0**-140, 2.0**100):
        scaled = qdwh.polar_factor((A * scale)[None].to(device))[0].cpu()
        assert torch.isfinite(scaled).all()
        assert (scaled - U).abs().max() < 1e3 * N * torch.finfo(torch.float32).eps
