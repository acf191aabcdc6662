"""composite.py: the rest of torch.linalg. Every public function of torch.linalg is
exported; the ones built on the decompositions (cond, matrix_norm, norm, matrix_power,
tensorsolve, tensorinv, matrix_sqrth, polar) run on mpslinalg's kernels and agree with
torch within LAPACK-style bounds (THRESHOLD * size * condition * eps), raise torch's
errors and differentiate as torch's, also where singular values or eigenvalues repeat;
the others are torch's own functions, with torch's results exactly."""

import math
from unittest import mock

import numpy as np
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import mpslinalg as LA
from conftest import on, supported
from mpslinalg import composite, runtimes
from mpslinalg.testing import THRESHOLD, batch_of, eps, exact, hermitian_batch, norm1, with_junk

DTYPES = [torch.float32, torch.complex64, torch.float64]
rng = np.random.default_rng(47)


def test_every_torch_linalg_function_is_exported():
    public = {name for name in dir(torch.linalg)
              if not name.startswith("_") and callable(getattr(torch.linalg, name)) and name != "LinAlgError"}
    assert public <= set(LA.__all__), public - set(LA.__all__)
    assert all(callable(getattr(LA, name)) for name in LA.__all__)


# --- helpers ---


def conditioned(shape, n, dtype, cond=10.0):
    """Matrices of 2-norm condition ``cond`` (slatms MODE 3), float64 data cast to dtype."""
    return batch_of(shape, n, dtype, rng, cond=cond)


def kappa(A: torch.Tensor) -> float:
    """The largest 2-norm condition number over the batch, in float64."""
    s = torch.linalg.svdvals(A.detach().cpu().to(torch.complex128 if A.is_complex() else torch.float64))
    return (s[..., 0] / s[..., -1]).max().item()


def assert_within(got, expected, dtype, size, condition=1.0):
    """``got`` within THRESHOLD * size * condition * eps of ``expected``, relative to
    expected's largest magnitude (the bound two backward-stable results keep)."""
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.shape, expected.shape, got.dtype, expected.dtype)
    got, expected = got.detach().cpu(), expected.detach().cpu()
    scale = max(expected.abs().max().item(), torch.finfo(expected.dtype).tiny) if expected.numel() else 1.0
    torch.testing.assert_close(got, expected, rtol=0, atol=THRESHOLD * size * condition * eps(dtype) * scale)


def reference(function, *args, **kwargs):
    """torch's own function on CPU copies (torch.linalg itself, whatever backend is chosen)."""
    moved = [a.detach().cpu() if isinstance(a, torch.Tensor) else a for a in args]
    return function(*moved, **kwargs)


def same_error(ours, torchs):
    """Both raise, the same type with the same message."""
    with pytest.raises(Exception) as expected:
        torchs()
    with pytest.raises(Exception) as got:
        ours()
    assert (got.type, str(got.value)) == (expected.type, str(expected.value))


ORDERS = [None, 2, -2, "fro", "nuc", math.inf, -math.inf, 1, -1]


# --- values against torch ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("p", ORDERS, ids=str)
def test_cond_matches_torch(device, p, dtype):
    supported(device, dtype)
    cond = 30.0
    A = conditioned((2, 3), 6, dtype, cond)
    got = LA.cond(on(device, A), p)
    assert_within(got, reference(torch.linalg.cond, on(device, A), p), got.dtype, 6, cond)
    if p in (None, 2, -2):  # any m x n
        for shape in ((2, 7, 4), (3, 5)):
            B = torch.randn(*shape, dtype=dtype)
            got = LA.cond(on(device, B), p)
            expected = reference(torch.linalg.cond, on(device, B), p)
            assert_within(got, expected, got.dtype, max(shape[-2:]), kappa(B))


@pytest.mark.parametrize("p", ["fro", math.inf, -math.inf, 1, -1], ids=str)
def test_cond_of_a_singular_matrix_is_inf_as_torch(device, p):
    """An exactly singular matrix (a zero pivot): inf, no error; the rest of the batch as usual."""
    A = torch.tensor([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 1.0], [1.0, 3.0]], [[0.0, 0.0], [0.0, 0.0]]])
    got = LA.cond(on(device, A), p)
    expected = torch.linalg.cond(A, p)
    assert torch.isinf(expected[0]) and torch.isinf(expected[2])
    torch.testing.assert_close(got.cpu(), expected)


def test_cond_of_empty_matrices_is_torchs(device):
    for shape, p in [((2, 0, 0), None), ((2, 0, 0), "fro"), ((3, 4, 0), 2), ((0, 3, 3), "nuc")]:
        A = torch.zeros(shape)
        torch.testing.assert_close(LA.cond(on(device, A), p).cpu(), torch.linalg.cond(A, p), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ord", [2, -2, "nuc", "fro", 1, -math.inf], ids=str)
def test_matrix_norm_matches_torch(device, ord, dtype):
    """Over any two dims, keepdim or not, with dtype= (the input converted first)."""
    supported(device, dtype)
    A = torch.randn(3, 5, 2, 4, dtype=dtype)
    for dim in ((-2, -1), (1, 3), (3, 1), (-1, 0)):
        cond = kappa(A.movedim(dim, (-2, -1))) if ord == -2 else 1.0  # sigma_min's error is eps sigma_max
        for keepdim in (False, True):
            got = LA.matrix_norm(on(device, A), ord, dim, keepdim)
            expected = reference(torch.linalg.matrix_norm, on(device, A), ord, dim, keepdim)
            assert_within(got, expected, dtype, 5, cond)
    if device.type != "mps":
        wider = torch.complex128 if dtype.is_complex else torch.float64
        got = LA.matrix_norm(on(device, A), ord, dtype=wider)
        assert_within(got, reference(torch.linalg.matrix_norm, A, ord, dtype=wider), wider, 4, kappa(A) if ord == -2 else 1.0)


def test_norm_takes_torchs_routes(device):
    """A matrix norm where dim is a 2-tuple or None with ord given on 2-D input, else a
    vector norm: ours agree with torch's on each route."""
    A = torch.randn(4, 3, 5)
    M = torch.randn(5, 6)
    cases = [
        (M, {}), (M, {"ord": 2}), (M, {"ord": -2}), (M, {"ord": "nuc"}), (M, {"ord": "fro"}), (M, {"ord": math.inf}),
        (A, {}), (A, {"ord": 2, "dim": (0, 2)}), (A, {"ord": "nuc", "dim": (-1, -2), "keepdim": True}),
        (A, {"ord": 2, "dim": 1}), (A, {"ord": 3, "dim": (1,)}), (A, {"ord": -2, "dim": (1, 2), "dtype": torch.float64}),
    ]
    for X, kwargs in cases:
        got = LA.norm(on(device, X), **kwargs)
        expected = reference(torch.linalg.norm, on(device, X), **kwargs)
        assert_within(got, expected, got.dtype, 6, kappa(X) if kwargs.get("ord") == -2 else 1.0)


def outcome(function, *args):
    """function(*args) as a list, or the type and message of what it raises."""
    try:
        return function(*args).tolist()
    except Exception as error:  # the type and message are what is compared
        return type(error), str(error)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_power_matches_torch(device, dtype):
    supported(device, dtype)
    cond = 5.0
    A = on(device, conditioned((2, 3), 5, dtype, cond))
    for n in (-5, -2, -1, 0, 1, 2, 3):
        got = LA.matrix_power(A, n)
        expected = reference(torch.linalg.matrix_power, A, n)
        assert_within(got, expected, dtype, 5 * max(abs(n), 1), cond ** max(-n, 1))
    # An integer matrix is torch's to answer: [[4, 4], [4, 4]] on the CPU; on CUDA torch
    # has no integer matrix product and raises, and so must we, with its error.
    integer = on(device, torch.ones(2, 2, dtype=torch.int64))
    assert outcome(LA.matrix_power, integer, 3) == outcome(torch.linalg.matrix_power, integer, 3)
    if integer.device.type == "cpu":
        assert LA.matrix_power(integer, 3).tolist() == [[4, 4], [4, 4]]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensorsolve_and_tensorinv_match_torch(device, dtype):
    supported(device, dtype)
    cond = 10.0
    square = conditioned((), 12, dtype, cond)
    A = square.reshape(3, 4, 2, 6)
    B = torch.randn(3, 4, dtype=dtype)
    got = LA.tensorsolve(on(device, A), on(device, B))
    assert_within(got, reference(torch.linalg.tensorsolve, on(device, A), on(device, B)), dtype, 12, cond)
    moved = A.movedim((0, 1), (2, 3))  # dims=(2, 3) moves them back
    got = LA.tensorsolve(on(device, moved), on(device, B), dims=(0, 1))
    assert_within(got, reference(torch.linalg.tensorsolve, on(device, moved), on(device, B), dims=(0, 1)), dtype, 12, cond)
    for ind, T in ((2, A.reshape(3, 4, 12)), (1, square.reshape(12, 3, 4)), (3, square.reshape(2, 3, 2, 12))):
        got = LA.tensorinv(on(device, T), ind=ind)
        assert_within(got, reference(torch.linalg.tensorinv, on(device, T), ind=ind), dtype, 12, cond)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_sqrth_matches_torch(device, dtype):
    """Only the lower triangle is read; X X = A to LAPACK's residual; negative eigenvalues
    count as zero, as torch's."""
    supported(device, dtype)
    cond = 100.0
    A = hermitian_batch((2, 2), 6, dtype, rng, cond=cond)
    X = LA.matrix_sqrth(on(device, with_junk(A, False, rng)))
    x, a = exact(X), exact(A)
    assert np.max(norm1(x @ x - a) / (6 * norm1(a) * eps(dtype))) < THRESHOLD * cond**0.5
    if hasattr(torch.linalg, "matrix_sqrth"):
        assert_within(X, torch.linalg.matrix_sqrth(A), dtype, 6, cond**0.5)
    # (No eigenvalue near 0, whose square root magnifies its rounding: sqrt(eps) for eps.)
    indefinite = hermitian_batch((2,), 4, dtype, rng, eigenvalues=[4.0, 1.0, -1.0, -9.0])
    X = LA.matrix_sqrth(on(device, indefinite))
    w = torch.linalg.eigvalsh(X.cpu().to(torch.complex128 if dtype.is_complex else torch.float64))
    torch.testing.assert_close(w, torch.tensor([0.0, 0.0, 1.0, 2.0], dtype=w.dtype).expand_as(w), rtol=0,
                               atol=THRESHOLD * 4 * 9 * eps(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,n", [(5, 5), (7, 3), (3, 3), (2, 1)])
def test_polar_matches_torch(device, m, n, dtype):
    """U with orthonormal columns, H Hermitian, A = U H to LAPACK's residuals; torch's
    factors (unique for full column rank)."""
    supported(device, dtype)
    A = torch.randn(2, 3, m, n, dtype=dtype)
    U, H = LA.polar(on(device, A))
    u, h, a = exact(U), exact(H), exact(A)
    assert U.shape == A.shape and H.shape == (2, 3, n, n)
    assert np.max(norm1(a - u @ h) / (n * norm1(a) * eps(dtype))) < THRESHOLD
    assert np.max(norm1(u.conj().swapaxes(-1, -2) @ u - np.eye(n))) / (m * eps(dtype)) < THRESHOLD
    assert np.max(norm1(h - h.conj().swapaxes(-1, -2))) / (np.max(norm1(h)) * eps(dtype)) < THRESHOLD
    if hasattr(torch.linalg, "polar"):
        s = torch.linalg.svdvals(A.to(torch.complex128 if dtype.is_complex else torch.float64))
        cond = (s[..., 0] / s[..., -1]).max().item()
        expected = torch.linalg.polar(A)
        assert_within(U, expected.U, dtype, m, cond)
        assert_within(H, expected.H, dtype, m, cond)


def test_torchs_own_functions_give_torchs_results(device):
    """The functions without a decomposition are torch's own: the same results, bit for
    bit, with every keyword passed on."""
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    A, B = torch.randn(2, 4, 4), torch.randn(2, 4, 2)
    P = A @ A.mT + torch.eye(4)
    C = torch.randn(3, 3, dtype=torch.complex64)
    C = C + C.mH
    calls = [
        (LA.vector_norm, torch.linalg.vector_norm, (A,), {"ord": 3, "dim": (0, 2), "keepdim": True, "dtype": torch.float64}),
        (LA.vector_norm, torch.linalg.vector_norm, (C,), {"ord": math.inf}),
        (LA.cross, torch.linalg.cross, (x.mT, y.mT), {"dim": 0}),
        (LA.multi_dot, torch.linalg.multi_dot, ([A[0], A[1], B[0]],), {}),
        (LA.vecdot, torch.linalg.vecdot, (x, y), {"dim": 0}),
        (LA.vander, torch.linalg.vander, (x,), {"N": 5}),
        (LA.diagonal, torch.linalg.diagonal, (A,), {"offset": 1, "dim1": 0, "dim2": 2}),
        (LA.matmul, torch.linalg.matmul, (A, B), {}),
        (LA.ldl_factor, torch.linalg.ldl_factor, (P,), {}),
        (LA.ldl_factor_ex, torch.linalg.ldl_factor_ex, (C,), {"hermitian": True, "check_errors": True}),
        (LA.ldl_solve, torch.linalg.ldl_solve, (*torch.linalg.ldl_factor(P), B), {}),
    ]
    for ours, torchs, args, kwargs in calls:
        got, expected = ours(*args, **kwargs), torchs(*args, **kwargs)
        for g, e in zip(*(r if isinstance(r, tuple) else (r,) for r in (got, expected))):
            torch.testing.assert_close(g, e, rtol=0, atol=0)
    out = torch.empty(0)
    assert LA.vector_norm(x, out=out) is out and out.item() == torch.linalg.vector_norm(x).item()


# --- errors ---


def test_errors_are_torchs(device):
    A = on(device, torch.randn(3, 3))
    singular = on(device, torch.tensor([[1.0, 2.0], [2.0, 4.0]]))
    wide, vector = on(device, torch.randn(2, 3)), on(device, torch.randn(3))
    cases = [
        ("cond", (vector,), {}), ("cond", (wide, "fro"), {}), ("cond", (A, 3), {}), ("cond", (A, "abc"), {}),
        ("matrix_norm", (A, 3), {}), ("matrix_norm", (A, 2), {"dim": (0, 0)}), ("matrix_norm", (vector, "nuc"), {}),
        ("matrix_norm", (A, -2), {"dtype": torch.complex64}), ("matrix_norm", (A, 2), {"dim": (0, 5)}),
        ("norm", (on(device, torch.randn(2, 3, 3)), 2), {}), ("norm", (A, 2), {"dim": (0, 1, 1)}),
        ("matrix_power", (wide, -1), {}), ("matrix_power", (singular, -2), {}), ("matrix_power", (vector, -2), {}),
        ("tensorsolve", (A, on(device, torch.randn(2))), {}),
        ("tensorsolve", (on(device, torch.zeros(4, 4)), on(device, torch.zeros(4))), {}),
        ("tensorsolve", (A, on(device, torch.randn(3, dtype=torch.float64))), {}),
        ("tensorinv", (A,), {"ind": 0}), ("tensorinv", (on(device, torch.zeros(2, 2, 2, 2)),), {}),
        ("tensorinv", (on(device, torch.randn(4, 3)),), {"ind": 1}),
    ]
    for name, args, kwargs in cases:
        same_error(lambda: getattr(LA, name)(*args, **kwargs), lambda: reference(getattr(torch.linalg, name), *args, **kwargs))


def test_errors_of_functions_newer_than_the_oldest_torch():
    """matrix_sqrth and polar write torch's checks out (torch 2.7 has neither): the same
    errors as torch's where it has them, on the kernels and on torch's route alike."""
    cases = [
        ("matrix_sqrth", torch.randn(3)), ("matrix_sqrth", torch.randn(3, 2)),
        ("polar", torch.randn(3)), ("polar", torch.randn(2, 3)), ("polar", torch.ones(3, 3, dtype=torch.int64)),
    ]
    for name, A in cases:
        if not hasattr(torch.linalg, name):
            pytest.skip(f"torch {torch.__version__} has no torch.linalg.{name}")
        for backend in ("opencl", "torch"):
            with LA.use_backend(backend), mock.patch.object(composite, f"TORCH_{name.upper()}", None):
                same_error(lambda: getattr(LA, name)(A), lambda: getattr(torch.linalg, name)(A))


def test_without_torchs_matrix_sqrth_and_polar_the_torch_route_computes_them():
    """Where torch lacks them (before 2.14), CPU tensors on torch's route are answered by
    the same construction on torch's eigh and svd, with torch's results."""
    A = hermitian_batch((2,), 4, torch.float64, rng, cond=10.0)
    B = torch.randn(2, 5, 3, dtype=torch.float64)
    with LA.use_backend("torch"), mock.patch.object(composite, "TORCH_MATRIX_SQRTH", None), \
            mock.patch.object(composite, "TORCH_POLAR", None):
        X = LA.matrix_sqrth(A)
        U, H = LA.polar(B)
    torch.testing.assert_close(X @ X, A)
    torch.testing.assert_close(U @ H, B)
    if hasattr(torch.linalg, "polar"):
        torch.testing.assert_close(X, torch.linalg.matrix_sqrth(A))
        torch.testing.assert_close((U, H), tuple(torch.linalg.polar(B)))


def test_out_is_written_as_torch_writes_it(device):
    """out= takes torch's dtypes (cond casts, matrix_norm and matrix_power do not), warns
    where torch warns about resizing, and refuses to record gradients where torch does."""
    A = on(device, conditioned((2,), 3, torch.float32))
    out = torch.empty(0, dtype=torch.float64, device=A.device)
    assert LA.cond(A, out=out) is out
    assert_within(out, torch.linalg.cond(A.cpu(), out=torch.empty(0, dtype=torch.float64)), torch.float32, 3, kappa(A))
    for call in (lambda **o: LA.matrix_norm(A, 2, **o), lambda **o: LA.norm(A, "nuc", dim=(1, 2), **o),
                 lambda **o: LA.matrix_power(A, -1, **o), lambda **o: LA.matrix_power(A, -2, **o),
                 lambda **o: LA.cond(A, **o), lambda **o: LA.tensorinv(A[0], ind=1, **o)):
        result = call()
        out = torch.empty(0, dtype=result.dtype, device=A.device)
        assert call(out=out) is out
        torch.testing.assert_close(out, result, rtol=0, atol=0)
        with pytest.warns(UserWarning, match="was resized") as warned:
            call(out=torch.empty(7, dtype=result.dtype, device=A.device))
        assert len(warned) == 1
    U, H = torch.empty(0, device=A.device), torch.empty(0, device=A.device)
    assert LA.polar(A, out=(U, H)).U is U and torch.allclose(U @ H, A, atol=1e-5)
    double = torch.empty(0, dtype=torch.float64, device=A.device)
    integer = torch.empty(0, dtype=torch.int32, device=A.device)
    same_error(lambda: LA.matrix_norm(A, 2, out=double), lambda: torch.linalg.matrix_norm(A.cpu(), 2, out=double.cpu()))
    same_error(lambda: LA.norm(A, 2, dim=(1, 2), out=double), lambda: torch.linalg.norm(A.cpu(), 2, dim=(1, 2), out=double.cpu()))
    for n in (-1, -2, -3):
        same_error(lambda: LA.matrix_power(A, n, out=double), lambda: torch.linalg.matrix_power(A.cpu(), n, out=double.cpu()))
        same_error(lambda: LA.matrix_power(A, n, out=integer), lambda: torch.linalg.matrix_power(A.cpu(), n, out=integer.cpu()))
    same_error(lambda: LA.tensorinv(A[0], ind=1, out=integer), lambda: torch.linalg.tensorinv(A[0].cpu(), ind=1, out=integer.cpu()))
    same_error(lambda: LA.cond(A, out=integer), lambda: torch.linalg.cond(A.cpu(), out=integer.cpu()))
    leaf = A.clone().requires_grad_()
    for n in (-1, -3):
        same_error(lambda: LA.matrix_power(leaf, n, out=torch.empty(0, device=A.device)),
                   lambda: torch.linalg.matrix_power(leaf.cpu(), n, out=torch.empty(0)))
    if hasattr(torch.linalg, "polar"):
        same_error(lambda: LA.polar(A, out=(double, double)), lambda: torch.linalg.polar(A.cpu(), out=(double.cpu(), double.cpu())))
        same_error(lambda: LA.polar(leaf, out=(U, H)), lambda: torch.linalg.polar(leaf.cpu(), out=(U.cpu(), H.cpu())))


# --- gradients ---


GRADIENT_CASES = {
    "cond": lambda A: LA.cond(A),
    "cond -2": lambda A: LA.cond(A, -2),
    "cond fro": lambda A: LA.cond(A, "fro"),
    "cond nuc": lambda A: LA.cond(A, "nuc"),
    "cond 1": lambda A: LA.cond(A, 1),
    "matrix_norm 2": lambda A: LA.matrix_norm(A, 2),
    "matrix_norm -2": lambda A: LA.matrix_norm(A, -2, dim=(0, 2)),
    "matrix_norm nuc": lambda A: LA.matrix_norm(A, "nuc"),
    "norm nuc": lambda A: LA.norm(A[0], "nuc"),
    "matrix_power -3": lambda A: LA.matrix_power(A, -3),
    "tensorsolve": lambda A: LA.tensorsolve(A, A[..., 0]),  # A: (2, 3, 6)
    "tensorinv": lambda A: LA.tensorinv(A.reshape(3, 2, 6), ind=2),
    "polar": lambda A: LA.polar(A[..., :2]),
    # A A^H + I: Hermitian positive definite whatever gradcheck's perturbation
    "matrix_sqrth": lambda A: LA.matrix_sqrth(A @ A.mH + torch.eye(3, dtype=A.dtype, device=A.device)),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_gradcheck(device, case, dtype):
    """Reverse and forward mode against finite differences (float64 and complex128)."""
    supported(device, dtype)
    A = (conditioned((2,), 3, dtype, 4.0) + 0.1 * torch.randn(2, 3, 3, dtype=dtype)).to(device).requires_grad_()
    if case in ("tensorsolve", "tensorinv"):
        A = (conditioned((), 6, dtype, 4.0).reshape(2, 3, 6) / 3).to(device).requires_grad_()
    assert gradcheck(GRADIENT_CASES[case], A, check_forward_ad=True)


@pytest.mark.parametrize("case", ["matrix_norm 2", "cond nuc", "polar", "matrix_sqrth"])
def test_second_derivatives(device, case):
    supported(device, torch.float64)
    A = (conditioned((2,), 3, torch.float64, 4.0) + 0.1 * torch.randn(2, 3, 3, dtype=torch.float64)).to(device)
    assert gradgradcheck(GRADIENT_CASES[case], A.requires_grad_())


def test_gradients_where_values_repeat_are_torchs(device):
    """Where eigenvalues or singular values repeat, torch's gradients of matrix_sqrth,
    polar and the singular-value norms are finite (eigh's and svd's are not): ours too."""
    supported(device, torch.float64)
    Q = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64))[0]
    I = torch.eye(3, dtype=torch.float64)
    # sigma = 3, 1, 1: sigma_max simple (its gradient u v^H unique), the others repeated
    R = Q @ torch.diag(torch.tensor([3.0, 1.0, 1.0], dtype=torch.float64)) @ torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64))[0]
    # Only gradients that are unique there: not sigma_min's, nor cond's 2-norm.
    W = torch.randn(3, 3, dtype=torch.float64)  # the loss <W, X>: a gradient G = W that is not Hermitian
    cases = [
        ("matrix_sqrth", I, lambda f, A: (W * f(A)).sum()), ("matrix_sqrth", 4 * I, lambda f, A: (W * f(A)).sum()),
        ("polar", Q, lambda f, A: (W * f(A).U).sum() + f(A).H.square().sum()),
        ("matrix_norm", R, lambda f, A: f(A, 2) + f(A, "nuc")),
        ("norm", Q, lambda f, A: f(A, "nuc")),
        ("cond", I, lambda f, A: f(A, "nuc")),
    ]
    for name, A, loss in cases:
        if not hasattr(torch.linalg, name):
            continue
        A = A.requires_grad_()
        (got,) = torch.autograd.grad(loss(getattr(LA, name), A.to(device)), A)
        (expected,) = torch.autograd.grad(loss(getattr(torch.linalg, name), A), A)
        assert torch.isfinite(got).all(), name
        torch.testing.assert_close(got, expected, msg=name)


def test_torch_func_transforms_agree_with_torch():
    """vmap, jacrev and jacfwd (the Functions' vmap rules and JVPs) of the functions
    with their own derivatives, against torch's."""
    if not hasattr(torch.linalg, "polar"):
        pytest.skip(f"torch {torch.__version__} has no torch.linalg.polar")
    P = hermitian_batch((), 3, torch.float64, rng, cond=5.0)
    B = torch.randn(4, 3, dtype=torch.float64)
    with LA.use_backend("opencl"):
        for ours, torchs, X in ((LA.matrix_sqrth, torch.linalg.matrix_sqrth, P),
                                (lambda A: tuple(LA.polar(A)), lambda A: tuple(torch.linalg.polar(A)), B),
                                (lambda A: LA.matrix_norm(A, 2), lambda A: torch.linalg.matrix_norm(A, 2), B)):
            torch.testing.assert_close(torch.vmap(ours)(torch.stack([X, 2 * X])), torch.vmap(torchs)(torch.stack([X, 2 * X])))
            torch.testing.assert_close(torch.func.jacrev(ours)(X), torch.func.jacrev(torchs)(X))
            torch.testing.assert_close(torch.func.jacfwd(ours)(X), torch.func.jacfwd(torchs)(X))


# --- which functions run on the kernels ---


def launches(device, call) -> int:
    runtime = runtimes.for_device(device)
    count = 0
    real = runtime.launch

    def counted(*args, **kwargs):
        nonlocal count
        count += 1
        return real(*args, **kwargs)

    with mock.patch.object(runtime, "launch", counted):
        call()
    return count


def test_decompositions_run_on_the_kernels_and_the_rest_on_torch(device):
    """The routed functions launch mpslinalg's kernels (svd, inv, solve, eigh); the
    elementwise orders and the functions that are torch's launch none; with torch's
    backend on the CPU nothing launches."""
    A = on(device, conditioned((2,), 4, torch.float32))
    routed = {
        "cond": lambda: LA.cond(A), "cond fro": lambda: LA.cond(A, "fro"), "cond nuc": lambda: LA.cond(A, "nuc"),
        "matrix_norm 2": lambda: LA.matrix_norm(A, 2), "norm nuc": lambda: LA.norm(A[0], "nuc"),
        "matrix_power -2": lambda: LA.matrix_power(A, -2), "tensorsolve": lambda: LA.tensorsolve(A[0], A[1, 0]),
        "tensorinv": lambda: LA.tensorinv(A[0], ind=1), "matrix_sqrth": lambda: LA.matrix_sqrth(A @ A.mT),
        "polar": lambda: LA.polar(A),
    }
    elementwise = {
        "matrix_norm fro": lambda: LA.matrix_norm(A), "norm": lambda: LA.norm(A), "norm 1": lambda: LA.norm(A[0], 1),
        "matrix_power 3": lambda: LA.matrix_power(A, 3), "vector_norm": lambda: LA.vector_norm(A),
        "matmul": lambda: LA.matmul(A, A), "multi_dot": lambda: LA.multi_dot([A[0], A[1]]),
        "cross": lambda: LA.cross(A[..., :3], A[..., 1:]), "vecdot": lambda: LA.vecdot(A, A), "diagonal": lambda: LA.diagonal(A),
        "vander": lambda: LA.vander(A[0, 0]),
    }
    if device.type != "mps":  # torch has no LDL on MPS
        elementwise["ldl_factor"] = lambda: LA.ldl_factor(A @ A.mT)
    for name, call in routed.items():
        assert launches(device, call) > 0, name
    for name, call in elementwise.items():
        assert launches(device, call) == 0, name
    if device.type == "cpu":
        with LA.use_backend("torch"):
            assert all(launches(device, call) == 0 for call in routed.values())
