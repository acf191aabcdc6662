"""eig and eigvals against SciPy and torch, with LAPACK's ratios (sget22):
||A V - V diag(w)||_1 / (n ||A||_1 ||V||_1 eps) and the eigenvectors' unit norms below 15,
and each eigenvalue within n ||A||_1 eps times its condition number of SciPy's."""

from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import supported
from mpslinalg import eig_family
from mpslinalg.eig_family import eig, eigvals
from mpslinalg.testing import THRESHOLD, eig_ratios, nonnormal_batch

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
    ratios = eig_ratios(A.cpu(), w.cpu(), None if V is None else V.cpu())
    assert max(ratios) < THRESHOLD, ratios


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


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nonfinite_input_gives_nan(device, value):
    A = torch.randn(3, 5, 5)
    A[1, 2, 3] = value
    w, V = eig(A.to(device))
    assert torch.isnan(w[1]).all() and torch.isnan(V[1]).all()
    assert torch.isfinite(w[[0, 2]]).all() and torch.isfinite(V[[0, 2]]).all()


def test_batched_equals_one_at_a_time(device):
    A = general((4,), 7, torch.complex64)
    w, V = eig(A.to(device))
    for i in range(4):
        wi, Vi = eig(A[i].to(device))
        torch.testing.assert_close(wi, w[i], rtol=0, atol=0)
        torch.testing.assert_close(Vi, V[i], rtol=0, atol=0)


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
