"""inv, inv_ex and det against SciPy, with LAPACK's ratios (see matrices.py).

inv: ||I - X A||_1 / (n ||A||_1 ||X||_1 eps) < 15 (LAPACK sget03).
det: |det - ref| / (n kappa_1 eps |ref|) < 15.
"""

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpslinalg as LA
from mpslinalg import inverse as family
from mpslinalg import runtimes
from conftest import OLD_SINGULAR_PATTERNS, on, supported
from mpslinalg.testing import LARGE, SMALL, THRESHOLD, batch_of, det_ratio, exact, inv_ratio

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
rng = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_inv_and_det_match_scipy(device, n, dtype):
    supported(device, dtype)
    A = batch_of((257,), n, dtype, rng, cond=1e3).to(device)  # 257: a partial last threadgroup
    X, info = LA.inv_ex(A)
    assert X.dtype == dtype and X.shape == A.shape and info.dtype == torch.int32 and info.shape == (257,)
    assert not info.any()
    assert inv_ratio(A, X) < THRESHOLD
    assert det_ratio(A, LA.det(A)) < THRESHOLD
    np.testing.assert_allclose(exact(X), scipy.linalg.inv(exact(A)), rtol=0, atol=1e3 * 100 * torch.finfo(A.real.dtype).eps * np.abs(exact(X)).max())


@st.composite
def problems(draw):
    """Structure, not entries: batch shape, n, dtype, log10 kappa, scale, slatms mode, seed."""
    batch = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    n = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(DTYPES))
    cond = 10.0 ** draw(st.floats(0, 6))
    scale = draw(st.sampled_from([1.0, SMALL, LARGE, 2.0**-60, 2.0**60]))
    mode = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**32 - 1))
    return batch_of(batch, n, dtype, np.random.default_rng(seed), cond, scale, mode)


@given(A=problems())
def test_inv_ratio_over_conditioning_scale_and_batch(device, A):
    A = on(device, A)
    X, info = LA.inv_ex(A)
    assert X.shape == A.shape and info.shape == A.shape[:-2]
    assert not info.any()
    assert inv_ratio(A, X) < THRESHOLD
    torch.testing.assert_close(LA.inv(A), X, rtol=0, atol=0)


@given(A=problems(), exponent=st.integers(-80, 80))
def test_det_ratio_over_conditioning_scale_and_batch(device, A, exponent):
    # Entries of size 2^(exponent / n), so det is 2^exponent times that of a matrix of
    # largest entry 1 (down to ~2^-40 at kappa = 1e6): far from float32's subnormals,
    # where no relative bound can hold.
    n = A.shape[-1]
    A = A / A.abs().amax(dim=(-2, -1), keepdim=True).clamp_min(1e-30) * 2.0 ** (exponent // n)
    A = on(device, A)
    d = LA.det(A)
    assert d.shape == A.shape[:-2] and d.dtype == A.dtype
    assert det_ratio(A, d) < THRESHOLD


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_batch_shapes_and_empty(device, dtype):
    supported(device, dtype)
    for shape in [(0, 3, 3), (2, 0, 4, 4), (3, 0, 0), (0, 0), (2, 1, 1)]:
        A = torch.ones(shape, dtype=dtype, device=device)
        X, info = LA.inv_ex(A)
        ref = torch.linalg.inv_ex(A.cpu())
        assert X.shape == ref.inverse.shape and info.shape == ref.info.shape
        torch.testing.assert_close(LA.det(A).cpu(), torch.linalg.det(A.cpu()))
    A = batch_of((2, 3, 5), 3, dtype, rng).to(device)
    assert inv_ratio(A, LA.inv(A)) < THRESHOLD
    assert LA.det(A).shape == (2, 3, 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_views_equal_contiguous(device, dtype):
    A = batch_of((6,), 4, dtype, rng).to(device)
    views = {
        "transposed": A.mT,
        "strided": A[::2],
        "conj": A.conj(),
        "adjoint": A.mH,
        "neg": torch._neg_view(A),
        "conj neg": torch._neg_view(A.conj()),
        "expanded": A[:1].expand(3, 4, 4),
    }
    assert views["neg"].is_neg()
    for name, V in views.items():
        X = LA.inv(V)
        assert not X.is_conj()
        torch.testing.assert_close(X, LA.inv(V.clone().resolve_conj().resolve_neg()), msg=name)
        torch.testing.assert_close(LA.det(V), LA.det(V.clone().resolve_conj().resolve_neg()), msg=name)


def test_special_matrices(device):
    eye = torch.eye(4, device=device).expand(3, 4, 4)
    torch.testing.assert_close(LA.inv(eye), eye.contiguous())
    P = torch.eye(4, device=device)[[2, 0, 3, 1]]
    torch.testing.assert_close(LA.inv(P), P.T.contiguous())
    assert LA.det(P).item() == torch.linalg.det(P.cpu()).item()
    D = torch.diag(torch.tensor([2.0, -4.0, 0.5, 8.0], device=device))
    torch.testing.assert_close(LA.inv(D), torch.diag(1 / torch.diag(D)))
    assert LA.det(D).item() == -32.0


SINGULAR = {
    "rank one": [[1.0, 2.0], [2.0, 4.0]],
    "zero": [[0.0, 0.0], [0.0, 0.0]],
    "zero first column": [[0.0, 1.0], [0.0, 0.0]],
    "zero last column 3x3": [[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [5.0, 6.0, 0.0]],
}


@pytest.mark.parametrize("name", SINGULAR)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_singular_matches_torch(device, name, dtype):
    """info, the inf/NaN pattern of inv_ex and det equal torch.linalg's (LAPACK) on the CPU."""
    if OLD_SINGULAR_PATTERNS and dtype == torch.float32 and name in ("zero", "zero first column"):
        pytest.skip("this torch's inf/NaN pattern and info for exactly singular float32 input are older ones")
    A = torch.tensor(SINGULAR[name], dtype=dtype)
    ref = torch.linalg.inv_ex(A)
    X, info = LA.inv_ex(A.to(device))
    assert info.item() == ref.info.item() > 0
    np.testing.assert_array_equal(np.isnan(exact(X)), np.isnan(exact(ref.inverse)))
    np.testing.assert_array_equal(np.isinf(exact(X)), np.isinf(exact(ref.inverse)))
    d = LA.det(A.to(device)).cpu()
    assert d.item() == 0
    if name == "rank one":  # one row swap: det = -(2 * 0) = -0.0, as torch's
        assert torch.signbit(d.real) and torch.signbit(torch.linalg.det(A).real)


def test_nan_and_inf_propagate(device):
    """NaN and inf give torch's (LAPACK's) non-finite pattern, never a finite wrong answer."""
    A = torch.tensor([[[math.nan, 1.0], [1.0, 1.0]], [[math.inf, 1.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    X, info = LA.inv_ex(A.to(device))
    ref = torch.linalg.inv_ex(A)
    assert torch.isnan(X[0]).all()
    torch.testing.assert_close(X.cpu(), ref.inverse, equal_nan=True)
    assert info.tolist() == ref.info.tolist() == [0, 0, 0]
    d = LA.det(A.to(device)).cpu()
    assert torch.isnan(d[0]) and torch.isinf(d[1]) and d[2] == 1


def test_singular_errors_match_torch(device):
    cases = [torch.tensor(SINGULAR["rank one"]), torch.stack([torch.eye(2), torch.tensor(SINGULAR["rank one"])])]
    for A in cases:
        for ours, theirs in [
            (lambda M: LA.inv(M), torch.linalg.inv),
            (lambda M: LA.inv_ex(M, check_errors=True), lambda M: torch.linalg.inv_ex(M, check_errors=True)),
        ]:
            with pytest.raises(torch.linalg.LinAlgError) as expected:
                theirs(A)
            with pytest.raises(torch.linalg.LinAlgError) as got:
                ours(A.to(device))
            assert str(got.value) == str(expected.value)


BAD_INPUT = {
    "non-square": torch.ones(2, 3),
    "vector": torch.ones(3),
    "long": torch.ones(2, 2, dtype=torch.long),
    "int": torch.ones(2, 2, dtype=torch.int32),
    "bool": torch.ones(2, 2, dtype=torch.bool),
    "half": torch.ones(2, 2, dtype=torch.half),
    "batched non-square": torch.ones(4, 3, 2),
}


@pytest.mark.parametrize("name", BAD_INPUT)
@pytest.mark.parametrize("function", ["inv", "inv_ex", "det"])
def test_bad_input_errors_match_torch(device, name, function):
    A = BAD_INPUT[name].to(device)
    with pytest.raises(Exception) as expected:
        getattr(torch.linalg, function)(A)
    with pytest.raises(Exception) as got:
        getattr(LA, function)(A)
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_gradcheck_through_kernels(device, n, dtype):
    supported(device, dtype)
    A = batch_of((3,), n, dtype, rng, cond=5).to(device).requires_grad_()
    assert torch.autograd.gradcheck(LA.inv, (A,))
    assert torch.autograd.gradcheck(LA.det, (A,))
    assert torch.autograd.gradgradcheck(LA.inv, (A,))
    assert torch.autograd.gradgradcheck(LA.det, (A,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_gradients_agree_with_torch(device, dtype):
    A = batch_of((5,), 4, dtype, rng, cond=10)
    G = torch.randn(5, 4, 4, dtype=dtype)
    g = torch.randn(5, dtype=dtype)
    ours = A.clone().to(device).requires_grad_()
    theirs = A.clone().requires_grad_()
    ((LA.inv(ours) * G.to(device)).sum().real + (LA.det(ours) * g.to(device)).sum().real).backward()
    ((torch.linalg.inv(theirs) * G).sum().real + (torch.linalg.det(theirs) * g).sum().real).backward()
    torch.testing.assert_close(ours.grad.cpu(), theirs.grad, rtol=1e-4, atol=1e-4)


def test_det_gradient_at_singular_matrix_is_zero_as_torch(device):
    A = torch.tensor([[1.0, 2.0], [2.0, 4.0]], device=device, requires_grad=True)
    LA.det(A).backward()
    theirs = torch.tensor([[1.0, 2.0], [2.0, 4.0]], requires_grad=True)
    torch.linalg.det(theirs).backward()
    torch.testing.assert_close(A.grad.cpu(), theirs.grad)
    # Differentiating the derivative again stays finite (no inf from the singular inverse leaks in).
    A.grad = None
    (grad,) = torch.autograd.grad(LA.det(A), A, create_graph=True)
    (second,) = torch.autograd.grad(grad.sum(), A)
    assert torch.equal(grad.detach(), torch.zeros_like(grad)) and torch.isfinite(second).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_forward_mode_and_function_transforms_match_torch(device, dtype):
    supported(device, dtype)
    import torch.autograd.forward_ad as fwAD

    A = batch_of((3,), 3, dtype, rng, cond=5).to(device)
    T = torch.randn(3, 3, 3, dtype=dtype).to(device)
    for ours, theirs in [(LA.inv, torch.linalg.inv), (LA.det, torch.linalg.det)]:
        torch.testing.assert_close(torch.func.jvp(ours, (A,), (T,))[1], torch.func.jvp(theirs, (A,), (T,))[1])
        torch.testing.assert_close(torch.func.vmap(ours)(A), theirs(A))
        if not dtype.is_complex:  # jacfwd and hessian take real inputs only
            torch.testing.assert_close(torch.func.jacfwd(ours)(A[0]), torch.func.jacrev(ours)(A[0]))
    if not dtype.is_complex:
        torch.testing.assert_close(torch.func.hessian(LA.det)(A[0]), torch.func.hessian(torch.linalg.det)(A[0]))
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(LA.inv_ex(fwAD.make_dual(A, T)).inverse).tangent
    torch.testing.assert_close(tangent, torch.func.jvp(torch.linalg.inv, (A,), (T,))[1])


def test_out_arguments_behave_as_torch(device):
    A = batch_of((4,), 3, torch.float32, rng).to(device)
    G = A.detach().clone().requires_grad_()  # out= and autograd do not mix: torch's error
    out = torch.empty(0, device=device)
    assert LA.inv(A, out=out) is out
    torch.testing.assert_close(out, LA.inv(A))
    det_out = torch.empty(7, device=device)
    with pytest.warns(UserWarning, match="was resized"):
        LA.det(A, out=det_out)
    assert det_out.shape == (4,)
    inverse, info = torch.empty(0, device=device), torch.empty(0, dtype=torch.int32, device=device)
    result = LA.inv_ex(A, out=(inverse, info))
    assert result.inverse is inverse and result.info is info and info.shape == (4,)
    for ours, theirs in [
        (lambda: LA.inv(A, out=torch.empty(3, 3, 3, dtype=torch.float64, device=device)), lambda: torch.linalg.inv(A.cpu(), out=torch.empty(3, 3, 3, dtype=torch.float64))),
        (lambda: LA.inv_ex(A, out=(torch.empty(0, device=device), torch.empty(0, device=device))), lambda: torch.linalg.inv_ex(A.cpu(), out=(torch.empty(0), torch.empty(0)))),
        (lambda: LA.inv(G, out=torch.empty(0, device=device)), lambda: torch.linalg.inv(G.cpu(), out=torch.empty(0))),
        (lambda: LA.det(G, out=torch.empty(0, device=device)), lambda: torch.linalg.det(G.cpu(), out=torch.empty(0))),
        (
            lambda: LA.solve_triangular(G, A, upper=False, out=torch.empty(0, device=device)),
            lambda: torch.linalg.solve_triangular(G.cpu(), A.cpu(), upper=False, out=torch.empty(0)),
        ),
    ]:
        with pytest.raises(RuntimeError) as expected:
            theirs()
        with pytest.raises(RuntimeError) as got:
            ours()
        assert str(got.value) == str(expected.value)


def test_batches_beyond_one_launch(device, monkeypatch):
    monkeypatch.setattr(runtimes, "LAUNCH_LIMIT", 100)  # stands in for 2^30 matrices
    A = batch_of((3, 111), 4, torch.float32, rng).to(device)
    X, info = LA.inv_ex(A)
    assert inv_ratio(A, X) < THRESHOLD and info.shape == (3, 111) and not info.any()
    assert det_ratio(A, LA.det(A)) < THRESHOLD


@pytest.mark.parametrize("n", [4, 8])
def test_every_family_batches_beyond_one_launch(device, monkeypatch, n):
    """A batch of (3, 111) matrices in launches of at most 100 (runtimes.batches: the
    tensors of any shape flattened by matrix, then sliced) gives each function's
    results bit for bit as one launch does, in the batch's shape."""
    A = batch_of((3, 111), n, torch.float32, rng).to(device)
    P = A @ A.mT + torch.eye(n, device=device)
    calls = {
        "inv_ex": lambda: LA.inv_ex(A), "det": lambda: LA.det(A), "slogdet": lambda: LA.slogdet(A),
        "lu_factor_ex": lambda: LA.lu_factor_ex(A), "cholesky_ex": lambda: LA.cholesky_ex(P),
        "eigh": lambda: LA.eigh(P), "eigvalsh": lambda: LA.eigvalsh(P), "svd": lambda: LA.svd(A),
        "qr": lambda: LA.qr(A), "geqrf": lambda: LA.geqrf(A), "matrix_exp": lambda: LA.matrix_exp(A / n),
    }
    whole = {name: call() for name, call in calls.items()}
    monkeypatch.setattr(runtimes, "LAUNCH_LIMIT", 100)
    for name, call in calls.items():
        for got, expected in zip(torch.utils._pytree.tree_leaves(call()), torch.utils._pytree.tree_leaves(whole[name])):
            assert got.shape == expected.shape and torch.equal(got, expected), name


def test_larger_matrices_use_torch_linalg(device):
    A = batch_of((3,), 6, torch.float32, rng).to(device)
    torch.testing.assert_close(LA.inv(A), torch.linalg.inv(A))
    torch.testing.assert_close(LA.det(A), torch.linalg.det(A))


def test_compiles_without_graph_breaks(device, monkeypatch):
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    torch._dynamo.reset()

    def f(A):
        return LA.inv(A) @ A + LA.det(A)[..., None, None] + LA.inv_ex(A).inverse

    A = batch_of((5,), 3, torch.float32, rng).to(device).requires_grad_()
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(A)
    y.sum().backward()
    assert {"inverse_small", "det_small"} <= set(launched), "the compiled graph runs the kernels"
    torch.testing.assert_close(y, f(A))
    with pytest.raises(torch.linalg.LinAlgError):
        compiled(torch.zeros(2, 3, 3, device=device))


def test_opcheck(device):
    supported(device, torch.float64)
    A = batch_of((4,), 3, torch.float64, rng).to(device)
    torch.library.opcheck(torch.ops.mpslinalg.inv_small_ex, (A, ""))
    torch.library.opcheck(torch.ops.mpslinalg.det_small, (A,))
