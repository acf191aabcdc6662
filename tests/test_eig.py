"""eig and eigvals against SciPy and torch, with LAPACK's ratios (sget22):
||A V - V diag(w)||_1 / (n ||A||_1 ||V||_1 eps) and the eigenvectors' unit norms below 15,
and each eigenvalue within n ||A||_1 eps times its condition number of SciPy's. Real
input has sgeev's structure: real eigenvalues with an imaginary part of exactly 0 and
real eigenvectors, complex ones in adjacent exactly conjugate pairs (positive imaginary
part first), with exactly conjugate eigenvectors."""

from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import supported
from mpslinalg import eig_family
from mpslinalg.eig_family import eig, eigvals
from mpslinalg.testing import THRESHOLD, eig_ratios, haar, hermitian_batch, nonnormal_batch, real_eig_structure

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}
rng = np.random.default_rng(37)


def check_eig(A, w, V=None):
    out = COMPLEX.get(A.dtype, A.dtype)
    assert w.shape == A.shape[:-1] and w.dtype == out
    if V is not None:
        assert V.shape == A.shape and V.dtype == out
        # cgeev's normalisation: each column's largest component is real and positive
        # (of components equal to rounding, one).
        if V.numel():
            v = V.cpu().reshape(-1, A.shape[-1], A.shape[-1])
            size = v.abs()
            largest = size >= size.amax(-2, keepdim=True) * (1 - 8 * torch.finfo(size.dtype).eps)
            assert (largest & (v.imag == 0) & (v.real > 0)).any(-2).all()
    if not A.is_complex():
        check_real_structure(w, V)
    ratios = eig_ratios(A.cpu(), w.cpu(), None if V is None else V.cpu())
    assert max(ratios) < THRESHOLD, ratios


def check_real_structure(w, V=None):
    """Asserts sgeev's structure of real input's eigenpairs (testing.real_eig_structure);
    returns the number of real eigenvalues."""
    real_count = real_eig_structure(w, V)
    assert real_count is not None, (w, V)
    return real_count


def general(shape, n, dtype, cond=10.0, scale=1.0):
    return nonnormal_batch(shape, n, dtype, rng, cond=cond, scale=scale)


SIZES = [0, 1, 2, 3, 4, 5, 8, 16, 17, 32, 33, 64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_eig_matches_lapack(device, n, dtype):
    supported(device, dtype)
    A = general((3,), n, dtype, cond=100.0)
    w, V = eig(A.to(device))
    check_eig(A, w, V)
    torch.testing.assert_close(eigvals(A.to(device)), w, rtol=0, atol=0)


@given(
    n=st.integers(0, 24), batch=st.sampled_from([(), (1,), (3,), (2, 2), (0,)]),
    dtype=st.sampled_from(DTYPES), log_cond=st.floats(0, 4), log_scale=st.sampled_from([-30, -8, 0, 8, 30]),
)
def test_eig_property(device, n, batch, dtype, log_cond, log_scale):
    supported(device, dtype)
    A = general(batch, n, dtype, cond=10.0**log_cond, scale=10.0**log_scale)
    w, V = eig(A.to(device))
    check_eig(A, w, V)


def jordan(n, eigenvalue=0.5):
    return eigenvalue * torch.eye(n, dtype=torch.float64) + torch.diag(torch.ones(n - 1, dtype=torch.float64), 1)


def companion(roots):
    coefficients = np.poly(roots)
    n = len(roots)
    c = np.zeros((n, n))
    c[0, :] = -coefficients[1:] / coefficients[0]
    c[1:, :-1] = np.eye(n - 1)
    return torch.from_numpy(c)


SPECIAL = {
    "zero": torch.zeros(6, 6, dtype=torch.float64),
    "identity": torch.eye(5, dtype=torch.float64),
    "diagonal": torch.diag(torch.tensor([3.0, -1.0, 2.0, 2.0, 0.0], dtype=torch.float64)),
    "upper triangular": torch.triu(torch.from_numpy(np.random.default_rng(1).standard_normal((7, 7)))),
    "rotation": torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.float64),
    "companion": companion([1.0, 2.0, 3.0, -4.0, 0.5]),
    "permutation": torch.eye(6, dtype=torch.float64)[[1, 2, 3, 4, 5, 0]],
    "badly scaled": torch.diag(torch.tensor([1e-6, 1.0, 1e6], dtype=torch.float64)) @ torch.from_numpy(
        np.random.default_rng(2).standard_normal((3, 3))) @ torch.diag(torch.tensor([1e6, 1.0, 1e-6], dtype=torch.float64)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("name", SPECIAL)
def test_eig_of_special_matrices(device, name, dtype):
    A = SPECIAL[name].to(dtype)
    w, V = eig(A.to(device))
    check_eig(A, w, V)


REAL = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", REAL, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_random_real_matrices_have_sgeev_structure(device, n, dtype):
    # Gaussian matrices: real eigenvalues exactly real, the others in exact conjugate
    # pairs, as many real ones as LAPACK's dgeev finds in float64 on the stored matrix.
    supported(device, dtype)
    A = torch.from_numpy(np.random.default_rng(100 + n).standard_normal((4, n, n))).to(dtype)
    w, V = eig(A.to(device))
    check_eig(A, w, V)
    reference = np.linalg.eigvals(A.double().numpy()) if n else np.zeros((4, 0))
    assert check_real_structure(w, V) == int((reference.imag == 0).sum())


@pytest.mark.parametrize("dtype", REAL, ids=str)
def test_companion_matrix_roots(device, dtype):
    # Roots 3, -2, 1/2, 1 +- 2i, -1/2 +- i/4 of a real polynomial: three exactly real
    # eigenvalues and two exactly conjugate pairs.
    supported(device, dtype)
    A = companion([3.0, -2.0, 0.5, 1 + 2j, 1 - 2j, -0.5 + 0.25j, -0.5 - 0.25j]).to(dtype)
    w, V = eig(A.to(device))
    check_eig(A, w, V)
    assert check_real_structure(w, V) == 3
    real = w[w.imag == 0].real.cpu().double().sort().values
    torch.testing.assert_close(real, torch.tensor([-2.0, 0.5, 3.0], dtype=torch.float64), rtol=1e3 * torch.finfo(dtype).eps, atol=0)


def kornia_companions(rng, count):
    """Companion matrices of degree-ten polynomials as kornia's five-point solver builds
    them (kornia.geometry.epipolar.essential: ones on the superdiagonal, the last row
    -c_0..c_9 / c_10), with 0, 2, ..., 10 real roots (spread over [-2.5, 2.5], at least
    1/2 apart) and the others in pairs a +- ib, b >= 0.3; and the number of real roots."""
    matrices, real_counts = [], []
    for index in range(count):
        real = 2 * (index % 6)
        roots = list(rng.choice(np.linspace(-2.5, 2.5, 11), real, replace=False))
        for _ in range((10 - real) // 2):
            a, b = rng.uniform(-2, 2), rng.uniform(0.3, 1.5)
            roots += [a + 1j * b, a - 1j * b]
        c = np.poly(roots)[::-1].real * rng.uniform(0.5, 2)  # z^0 first
        m = np.zeros((10, 10))
        m[:9, 1:] = np.eye(9)
        m[9] = -c[:10] / c[10]
        matrices.append(m)
        real_counts.append(real)
    return torch.from_numpy(np.array(matrices)), torch.tensor(real_counts)


@pytest.mark.parametrize("dtype", REAL, ids=str)
def test_kornia_companion_matrices_keep_every_real_root(device, dtype):
    # The client: kornia keeps the eigenvalues with |imag| <= 1e-10 max(1, |z|) as the
    # polynomial's real roots; with the imaginary parts of real input's real eigenvalues
    # of order eps ||A|| (complex arithmetic), it kept none of them.
    supported(device, dtype)
    A, real_counts = kornia_companions(np.random.default_rng(11), 24)
    A = A.to(dtype)
    w = eigvals(A.to(device))
    kept = w.imag.abs() < 1e-10
    assert torch.equal(kept.sum(-1).cpu(), real_counts)
    assert torch.equal(kept.cpu(), w.imag.cpu() == 0)
    check_eig(A, w)
    w2, V = eig(A.to(device))
    torch.testing.assert_close(w2, w, rtol=0, atol=0)
    check_eig(A, w2, V)


@pytest.mark.parametrize("dtype", REAL, ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 8, 17, 33, 64])
def test_symmetric_real_input_has_real_eigenpairs(device, n, dtype):
    supported(device, dtype)
    A = hermitian_batch((3,), n, dtype, rng, definite=False)
    w, V = eig(A.to(device))
    check_eig(A, w, V)
    assert (w.imag == 0).all() and (V.imag == 0).all()
    assert (eigvals(A.to(device)).imag == 0).all()


def quasi_triangular(n, rng, upper=1.0):
    """A real upper quasi-triangular matrix of 1 x 1 and 2 x 2 diagonal blocks in random
    order, Gaussian entries times ``upper`` above them; its real eigenvalues distinct points
    of a grid of spacing 16 / (2n), its pairs a +- ib with b >= 1/2. Half of the 2 x 2 blocks
    hold a complex pair ((a - d)^2 + 4 bc < 0), half two real eigenvalues (a triangle turned
    by a rotation: not in standard form). Returns it and its number of real eigenvalues."""
    t = np.triu(rng.standard_normal((n, n)), 1) * upper
    grid = iter(rng.permutation(np.linspace(-8, 8, 2 * n + 1)))
    j, real, pairs = 0, 0, 0
    while j < n:
        if j + 1 < n and rng.uniform() < 0.6:
            if pairs % 2 == 0:
                a, d = rng.standard_normal(2)
                b = 1 + abs(rng.standard_normal())
                c = -((a - d) ** 2 / (4 * b) + 0.25 + abs(rng.standard_normal()))
                block = [[a, b], [c, d]]
            else:
                angle = rng.uniform(0, 2 * np.pi)
                g = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
                block = g @ np.array([[next(grid), rng.standard_normal()], [0, next(grid)]]) @ g.T
                real += 2
            t[j:j + 2, j:j + 2] = block
            pairs, j = pairs + 1, j + 2
        else:
            t[j, j] = next(grid)
            real, j = real + 1, j + 1
    return t, real


@pytest.mark.parametrize("dtype", REAL, ids=str)
@pytest.mark.parametrize("n", [2, 3, 5, 8, 16, 33, 64])
def test_block_triangular_real_matrices(device, n, dtype):
    # Quasi-triangular matrices as they are (already Hessenberg, blocks not in standard
    # form: their eigenvalues' kind is decided by slanv2 alone, whatever their condition),
    # the same turned by an orthogonal Q (Q T Q^T, the part above the blocks 1/10 of the
    # size to keep them well conditioned), and block upper triangular [[B, C], [0, D]] of
    # dense Gaussian blocks.
    supported(device, dtype)
    local = np.random.default_rng(200 + n)
    matrices, counts = [], []
    for upper in (1.0, 0.1):
        t, real = quasi_triangular(n, local, upper)
        q = haar(n, local, False)
        matrices += [t, q @ t @ q.T] if upper < 1 else [t]
        counts += [real, real] if upper < 1 else [real]
    half = n // 2
    block = np.triu(local.standard_normal((n, n)))
    block[:half, :half] = local.standard_normal((half, half))
    block[half:, half:] = local.standard_normal((n - half, n - half))
    matrices.append(block)
    A = torch.from_numpy(np.array(matrices)).to(dtype)
    w, V = eig(A.to(device))
    check_eig(A, w, V)
    for m, real in enumerate(counts):
        assert check_real_structure(w[m], V[m]) == real, m
    reference = np.linalg.eigvals(A[-1].double().numpy())
    assert check_real_structure(w[-1], V[-1]) == int((reference.imag == 0).sum())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [16, 33, 64])
def test_random_hessenberg_matrices(device, n, dtype):
    # Gaussian upper Hessenberg matrices: LAPACK 3.4's balancing (sums off the diagonal)
    # scaled them by factors 2^20 apart and sget22's ratio reached 40 to 700; xgebal's
    # 2-norms (LAPACK 3.5 on) keep it under 1, as LAPACK's.
    supported(device, dtype)
    local = np.random.default_rng(300 + n)
    a = local.standard_normal((8, n, n)) + (1j * local.standard_normal((8, n, n)) if dtype.is_complex else 0)
    A = torch.from_numpy(np.triu(a, -1)).to(dtype)
    w, V = eig(A.to(device))
    check_eig(A, w, V)


@given(n=st.integers(1, 12), dtype=st.sampled_from(REAL), seed=st.integers(0, 2**32 - 1), spread=st.sampled_from([1, 2, 3]))
def test_small_integer_real_matrices_property(device, n, dtype, seed, spread):
    # Entries in -spread..spread: repeated, zero and defective eigenvalues, exactly
    # triangular and singular matrices. sgeev's structure, sget22's residual and the
    # unit norms (a defective eigenvalue has no first-order condition number to test
    # it against).
    supported(device, dtype)
    A = torch.from_numpy(np.random.default_rng(seed).integers(-spread, spread + 1, (3, n, n))).to(dtype)
    w, V = eig(A.to(device))
    check_real_structure(w, V)
    ratios = eig_ratios(A, w.cpu(), V.cpu())
    assert ratios[0] < THRESHOLD and ratios[1] < THRESHOLD, ratios
    torch.testing.assert_close(eigvals(A.to(device)), w, rtol=0, atol=0)


@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_defective_matrices_give_finite_accurate_eigenpairs(device, n):
    # A Jordan block's eigenvalue has condition number infinity: its computed values
    # spread to eps^(1/n) (first-order bounds do not apply), but the residual and the
    # normalisation keep LAPACK's ratio and nothing overflows to NaN.
    A = jordan(n).to(torch.float32)
    w, V = eig(A.to(device))
    assert torch.isfinite(w).all() and torch.isfinite(V).all()
    ratios = eig_ratios(A, w.cpu(), V.cpu())
    assert ratios[0] < THRESHOLD and ratios[1] < THRESHOLD, ratios
    assert (w.cpu() - 0.5).abs().max() < 4 * torch.finfo(torch.float32).eps ** (1 / n)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nonfinite_input_gives_nan(device, value, dtype):
    supported(device, dtype)
    A = torch.randn(3, 5, 5, dtype=dtype)
    A[1, 2, 3] = value
    w, V = eig(A.to(device))
    assert torch.isnan(w[1]).all() and torch.isnan(V[1]).all()
    assert torch.isfinite(w[[0, 2]]).all() and torch.isfinite(V[[0, 2]]).all()
    assert torch.isnan(eigvals(A.to(device))[1]).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batched_equals_one_at_a_time(device, dtype):
    # For real input, matrices whose real eigenvalues and pairs fall in different places
    # (Gaussian ones): OpenCL's CPU runtime runs a batch's matrices in the lanes of a vector,
    # where loops that stepped by 1 or 2 columns a pass once mixed one lane's path with another's.
    supported(device, dtype)
    A = general((4,), 7, dtype)
    if not dtype.is_complex:
        A = torch.cat((A, torch.from_numpy(np.random.default_rng(5).standard_normal((36, 7, 7))).to(dtype)))
    w, V = eig(A.to(device))
    for i in range(A.shape[0]):
        wi, Vi = eig(A[i].to(device))
        torch.testing.assert_close(wi, w[i], rtol=0, atol=0)
        torch.testing.assert_close(Vi, V[i], rtol=0, atol=0)
    check_eig(A, w, V)


def test_views_and_strides(device):
    A = general((2,), 6, torch.float32)
    w, V = eig(A.to(device))
    for view in (A.to(device).mT.mT, A.repeat(1, 2, 2).to(device)[:, :6, :6]):
        w2, V2 = eig(view)
        torch.testing.assert_close(w2, w, rtol=0, atol=0)
        torch.testing.assert_close(V2, V, rtol=0, atol=0)
    Ac = general((2,), 6, torch.complex64)
    w3, _ = eig(Ac.conj().to(device))
    check_eig(Ac.conj().resolve_conj(), w3)


def test_no_host_synchronisation(device):
    A = general((3,), 8, torch.float32).to(device)
    refuse = mock.Mock(side_effect=AssertionError("a host synchronisation"))
    with mock.patch.object(torch.Tensor, "item", refuse), mock.patch.object(torch.Tensor, "__bool__", refuse), \
            mock.patch.object(torch.Tensor, "tolist", refuse):
        eig(A)
        eigvals(A)


def test_errors_match_torch(device):
    for bad in (torch.ones(2, 3, device=device), torch.ones(3, device=device), torch.ones(2, 2, dtype=torch.long, device=device)):
        with pytest.raises(RuntimeError) as expected:
            torch.linalg.eig(bad.cpu())
        with pytest.raises(RuntimeError, match=str(expected.value).split(":")[-1].strip()[:40]):
            eig(bad)


def test_out_and_large_n_route(device):
    A = general((), 70, torch.float32)
    w, V = eig(A.to(device))  # past KERNEL_SIZES_UP_TO: LAPACK on the CPU
    assert A.shape[-1] > eig_family.KERNEL_SIZES_UP_TO
    check_eig(A, w, V)
    out = (torch.empty(0, dtype=torch.complex64, device=device), torch.empty(0, dtype=torch.complex64, device=device))
    result = eig(A.to(device), out=out)
    assert result[0] is out[0] and result[1] is out[1]
    torch.testing.assert_close(out[0], w, rtol=0, atol=0)


def phase_free(A):
    """Functions of eig's outputs that do not depend on the eigenvectors' phases."""
    w, V = eig(A)
    return w, V.abs()


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_gradients_match_torch_formula(device, dtype):
    # Well-separated eigenvalues keep the derivative well conditioned.
    A = general((2,), 4, dtype).to(device).requires_grad_()
    assert torch.autograd.gradcheck(phase_free, (A,), check_forward_ad=True)
    assert torch.autograd.gradcheck(lambda A: eigvals(A), (A,), check_forward_ad=True)


def test_gradient_equals_torch(device):
    # The order of the eigenvalues differs from LAPACK's: the loss is symmetric in them.
    A = general((3,), 5, torch.float64)
    grads = []
    for function, where in ((eig, device), (torch.linalg.eig, torch.device("cpu"))):
        X = A.to(where).requires_grad_()
        w, V = function(X)
        loss = (w**3).real.sum() + (w.imag**2).sum() + V.abs().pow(3).sum()
        grads.append(torch.autograd.grad(loss, X)[0].cpu())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-8, atol=1e-8)


def test_phase_dependent_loss_raises_as_torch(device):
    A = general((), 4, torch.complex128).to(device).requires_grad_()
    w, V = eig(A)
    with pytest.raises(RuntimeError, match="specified up to multiplication by e\\^\\{i phi\\}"):
        V.real.sum().backward()


@pytest.mark.parametrize("A", [torch.eye(3, dtype=torch.float64), torch.zeros(3, 3, dtype=torch.float64)], ids=["identity", "zero"])
def test_eigenvalue_only_loss_at_repeated_eigenvalues_has_torch_gradient(device, A):
    # The eigenvectors' cotangent is None, not zeros over zero gaps (NaN before).
    for function, reference in ((lambda X: eigvals(X).real.sum(), lambda X: torch.linalg.eigvals(X).real.sum()),
                                (lambda X: eig(X)[0].real.sum(), lambda X: torch.linalg.eig(X)[0].real.sum())):
        X = A.to(device).requires_grad_()
        Y = A.clone().requires_grad_()
        torch.testing.assert_close(torch.autograd.grad(function(X), X)[0].cpu(), torch.autograd.grad(reference(Y), Y)[0])
