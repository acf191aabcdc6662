"""eigh and eigvalsh against SciPy and torch, with LAPACK's ratios (ssyt21):
||A - V diag(w) V^H||_1 / (n ||A||_1 eps) and ||I - V^H V||_1 / (n eps) below 15, and the
eigenvalues within n ||A||_1 eps of SciPy's."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpslinalg as LA
from conftest import supported
from mpslinalg import eigh_family, svd_family
from mpslinalg.testing import THRESHOLD, eigh_ratios, hermitian_batch, with_junk

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
rng = np.random.default_rng(31)
# eigh_tiny's n <= 4, eigh_pairs' N = 8, 16, 32, 64 (complex: 16) below and at N, the SVD's past
# them (svd_pairs to 32, svd_jacobi above).
SIZES = [1, 2, 3, 4, 5, 8, 16, 17, 32, 33, 64, 65]


def check_eigh(A, w, V, upper=False):
    real = A.real.dtype if A.is_complex() else A.dtype
    assert w.shape == A.shape[:-1] and w.dtype == real and V.shape == A.shape and V.dtype == A.dtype
    w = w.cpu()
    assert (w[..., :-1] <= w[..., 1:]).all()
    ratios = eigh_ratios(A.cpu(), w, V.cpu(), upper)
    assert max(ratios) < THRESHOLD, ratios


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("UPLO", ["L", "U"])
def test_eigh_matches_lapack(device, n, UPLO, dtype):
    supported(device, dtype)
    A = torch.cat((hermitian_batch((2,), n, dtype, rng, cond=1e3), hermitian_batch((2,), n, dtype, rng, cond=1e3, definite=False)))
    X = with_junk(A, UPLO == "U", rng).to(device)
    w, V = LA.eigh(X, UPLO=UPLO)
    check_eigh(A, w, V)
    torch.testing.assert_close(LA.eigvalsh(X, UPLO=UPLO), w, rtol=0, atol=0)


def spectrum(kind: str, n: int, log_cond: float) -> np.ndarray:
    """LAPACK's kinds of eigenvalue distributions, largest magnitude 1."""
    cond = 10.0**log_cond
    i = np.arange(n)
    if kind == "graded":
        return cond ** (-i / max(n - 1, 1))
    if kind == "clustered":  # all but one at 1/cond (slatms MODE 1)
        return np.where(i == 0, 1.0, 1 / cond)
    if kind == "repeated":
        return np.repeat([1.0, -0.5, 0.25], (n + 2) // 3)[:n]
    if kind == "one tiny":  # slatms MODE 2
        return np.where(i == n - 1, 1 / cond, 1.0)
    return np.linspace(-1, 1, n)  # "indefinite"


@given(
    n=st.integers(0, 40), batch=st.sampled_from([(), (1,), (3,), (2, 2), (0,)]), complex_=st.booleans(),
    kind=st.sampled_from(["graded", "clustered", "repeated", "one tiny", "indefinite"]), log_cond=st.floats(0, 6),
    log_scale=st.floats(-30, 35), sign=st.sampled_from([1.0, -1.0]), upper=st.booleans(),
)
def test_eigh_spectra_and_scales(device, n, batch, complex_, kind, log_cond, log_scale, sign, upper):
    """LAPACK's kinds of spectra at scales 1e-30 .. 1e35, the smallest eigenvalue a normal
    float32 number (Apple GPUs may flush subnormals)."""
    dtype = torch.complex64 if complex_ else torch.float32
    values = sign * 10.0**log_scale * spectrum(kind, n, log_cond)
    A = hermitian_batch(batch, n, dtype, rng, eigenvalues=values)
    w, V = LA.eigh(with_junk(A, upper, rng).to(device), UPLO="U" if upper else "L")
    check_eigh(A, w, V)


def test_positive_definite_keeps_relative_accuracy(device):
    """No shift where A is positive definite: a graded matrix's tiny eigenvalues keep their
    relative accuracy (LAPACK's have only n eps ||A||)."""
    d = 10.0 ** -np.arange(0, 24, 3, dtype=np.float64)
    A = torch.from_numpy(np.diag(d) + 1e-3 * np.sqrt(np.outer(d, d)) * (np.ones((8, 8)) - np.eye(8))).float()
    w = LA.eigvalsh(A.to(device)).cpu().double().numpy()
    # The reference to 40 digits (LAPACK's in float64 has an absolute error of 1e-16).
    mpmath = pytest.importorskip("mpmath")
    with mpmath.workdps(40):
        reference = np.array(sorted(float(x) for x in mpmath.mp.eigsy(mpmath.matrix(A.double().tolist()))[0]))
    assert np.max(np.abs(w - reference) / reference) < 100 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("n", [2, 3, 10, 40])
def test_nonfinite_input_gives_nan(device, n):
    for bad in (float("nan"), float("inf")):
        A = torch.eye(n, device=device)
        A[n - 1, 0] = bad
        w, V = LA.eigh(A)
        assert w.isnan().all() and V.isnan().all()


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 0), (0, 0)])
def test_empty_matches_torch(device, shape):
    A = torch.zeros(shape)
    for got, expected in zip(LA.eigh(A.to(device)), torch.linalg.eigh(A)):
        assert got.shape == expected.shape and got.dtype == expected.dtype
    assert LA.eigvalsh(A.to(device)).shape == torch.linalg.eigvalsh(A).shape


def test_errors_match_torch(device):
    for A, kwargs in [(torch.ones(3), {}), (torch.ones(2, 3), {}), (torch.eye(2), {"UPLO": "X"}), (torch.ones(2, 3), {"UPLO": "X"}),
                      (torch.eye(2, dtype=torch.int32), {})]:
        for function in ("eigh", "eigvalsh"):
            with pytest.raises((RuntimeError, NotImplementedError)) as expected:
                getattr(torch.linalg, function)(A, **kwargs)
            with pytest.raises(expected.type) as got:
                getattr(LA, function)(A.to(device), **kwargs)
            # torch names the device's kernel ("linalg_eigh_cuda" not implemented for 'Int').
            assert str(got.value).replace(device.type, "") == str(expected.value).replace("cpu", "")
    torch.testing.assert_close(LA.eigvalsh(torch.eye(2, device=device), UPLO="u"), torch.ones(2, device=device))


def test_views_and_out(device):
    A = hermitian_batch((4,), 9, torch.complex64, rng)
    for view in (A.mT, A.conj(), A[::2], torch.stack((A, A), -1)[..., 0]):
        w, V = LA.eigh(view.to(device))
        check_eigh(view.resolve_conj(), w, V)
    w, V = torch.empty(0, device=device), torch.empty(0, dtype=A.dtype, device=device)
    result = LA.eigh(A.to(device), out=(w, V))
    assert result.eigenvalues.data_ptr() == w.data_ptr() and result.eigenvectors.data_ptr() == V.data_ptr()
    out = torch.empty(0, device=device)
    assert LA.eigvalsh(A.to(device), out=out).data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, w)


def launches(monkeypatch, *modules):
    """The kernels the calls launch, by name, through the modules' ``launch``."""
    launched = []
    for module in modules:
        real = module.launch
        monkeypatch.setattr(module, "launch", lambda kernel, *a, real=real, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    return launched


def test_covariances_by_the_million_route(device, monkeypatch):
    """3 x 3 matrices run eigh_tiny, a thread a matrix, one launch; eigvalsh too."""
    launched = launches(monkeypatch, eigh_family, svd_family)
    X = torch.from_numpy(rng.standard_normal((5000, 3, 10))).float()
    A = (X @ X.mT).to(device)
    w, V = LA.eigh(A)
    assert launched == ["eigh_tiny"]
    check_eigh(A, w, V)
    torch.testing.assert_close(LA.eigvalsh(A), w, rtol=0, atol=0)
    assert launched == ["eigh_tiny"] * 2


@pytest.mark.parametrize("n, dtype", [(5, torch.float32), (33, torch.float32), (64, torch.float32), (65, torch.float32),
                                      (16, torch.complex64), (17, torch.complex64), (32, torch.complex64),
                                      (129, torch.float32), (33, torch.complex64)])
def test_routes(device, monkeypatch, n, dtype):
    """eigh_pairs, one launch, to n = 64 (32 complex, V in threadgroup memory from 17);
    then, real only, the SVD's Jacobi on the Cholesky factor (or the shifted matrix);
    from BLOCKS_FROM block Jacobi, whose every kernel is eigh_pairs on the pairs of
    blocks."""
    from mpslinalg import cholesky_family

    supported(device, dtype)
    launched = launches(monkeypatch, eigh_family, svd_family, cholesky_family)
    A = hermitian_batch((2,), n, dtype, rng, cond=10.0)
    LA.eigh(A.to(device))
    if n <= (32 if dtype.is_complex else 64):
        assert launched == ["eigh_pairs"]
    elif n >= eigh_family.BLOCKS_FROM[dtype.is_complex]:
        assert len(launched) > 1 and set(launched) == {"eigh_pairs"}
    else:
        assert "eigh_pairs" not in launched and launched[-1] in ("svd_pairs", "svd_jacobi")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("definite", [True, False])
def test_block_jacobi_matches_lapack(device, dtype, definite):
    """Past eigh_pairs' sizes: two-sided block Jacobi (padding included: n not a multiple
    of the block), both triangles, a batch, a graded spectrum and a repeated one."""
    supported(device, dtype)
    n = eigh_family.BLOCKS_FROM[dtype.is_complex] + 5
    A = torch.cat((hermitian_batch((2,), n, dtype, rng, cond=1e3, definite=definite),
                   hermitian_batch((1,), n, dtype, rng, eigenvalues=spectrum("repeated", n, 0))))
    for upper in (False, True):
        w, V = LA.eigh(with_junk(A, upper, rng).to(device), UPLO="U" if upper else "L")
        check_eigh(A, w, V)
        torch.testing.assert_close(LA.eigvalsh(with_junk(A, upper, rng).to(device), UPLO="U" if upper else "L"), w)


def test_block_jacobi_nonfinite_gives_nan(device):
    A = torch.eye(eigh_family.BLOCKS_FROM[False], device=device)
    A[5, 0] = float("nan")
    w, V = LA.eigh(A)
    assert w.isnan().all() and V.isnan().all()


# --- gradients ---


def distinct(shape, n, dtype):
    """Hermitian matrices with eigenvalues well apart: the eigenvectors' derivatives exist."""
    return hermitian_batch(shape, n, dtype, rng, eigenvalues=np.linspace(-2, 3, n))


def gauge_invariant(A):
    w, V = LA.eigh(A)
    return w, V.abs(), V @ torch.diag_embed(torch.arange(A.shape[-1], device=A.device).to(A.dtype)) @ V.mH


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("n", [1, 3, 5, 20])
def test_eigh_gradient(device, n, dtype):
    supported(device, dtype)
    A = distinct((2,), n, dtype).to(device).requires_grad_()
    hermitian = lambda f: lambda A: f(A + A.mH)  # torch's gradcheck_wrapper_hermitian_input
    assert torch.autograd.gradcheck(hermitian(gauge_invariant), (A,), fast_mode=n > 5)
    assert torch.autograd.gradcheck(hermitian(LA.eigvalsh), (A,), fast_mode=n > 5)


def torch_gauge_invariant(A):
    w, V = torch.linalg.eigh(A)
    return w, V.abs(), V @ torch.diag_embed(torch.arange(A.shape[-1]).to(A.dtype)) @ V.mH


def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_gradients_and_tangents_match_torch(device, dtype):
    supported(device, dtype)
    A = distinct((3,), 6, dtype)
    dA = torch.randn_like(A)
    loss = lambda f: lambda A: sum(x.real.sum() + x.abs().square().sum() for x in as_tuple(f(A)))  # noqa: E731
    for ours, theirs in [(gauge_invariant, torch_gauge_invariant), (LA.eigvalsh, torch.linalg.eigvalsh)]:
        torch.testing.assert_close(torch.func.grad(loss(ours))(A.to(device)).cpu(), torch.func.grad(loss(theirs))(A))
        got, expected = torch.func.jvp(ours, (A.to(device),), (dA.to(device),))[1], torch.func.jvp(theirs, (A,), (dA,))[1]
        for g, e in zip(as_tuple(got), as_tuple(expected)):
            torch.testing.assert_close(g.cpu(), e)
    # The eigenvectors' own tangents, turned to torch's signs (phases).
    w, V = torch.linalg.eigh(A)
    (w_ours, V_ours), (dw, dV) = torch.func.jvp(LA.eigh, (A.to(device),), (dA.to(device),))
    phase = (V_ours.cpu().mH @ V).diagonal(dim1=-2, dim2=-1)
    phase = phase / phase.abs()
    expected = torch.func.jvp(torch.linalg.eigh, (A,), (dA,))[1]
    torch.testing.assert_close(dw.cpu(), expected[0])
    torch.testing.assert_close(dV.cpu() * phase.unsqueeze(-2), expected[1])


def test_phase_dependent_loss_raises_as_torch(device):
    """A loss that changes with an eigenvector's phase raises torch's error. Re + Im of one
    entry v: its derivative along the phase is Re v - Im v, not zero whatever phase the
    kernel chose (Re v alone has none where v is real, as a normalisation may make it:
    the test then passed or failed by the random matrix)."""
    A = distinct((), 4, torch.complex128).to(device).requires_grad_()
    for eigh in (LA.eigh, torch.linalg.eigh):
        w, V = eigh(A)
        with pytest.raises(RuntimeError, match="linalg_eigh_backward: The eigenvectors in the complex case are specified up to"):
            (V[0, 0].real + V[0, 0].imag).backward()


def test_vmap_matches_torch(device):
    A = distinct((3, 2), 5, torch.float64)
    torch.testing.assert_close(torch.func.vmap(LA.eigvalsh)(A.to(device)).cpu(), torch.func.vmap(torch.linalg.eigvalsh)(A))
    w, V = torch.func.vmap(LA.eigh)(A.to(device))
    check_eigh(A, w, V)


def test_compiles_without_graph_breaks(device, monkeypatch):
    torch._dynamo.reset()
    launched = launches(monkeypatch, eigh_family)
    A = distinct((3,), 6, torch.float32).to(device).requires_grad_()

    def f(A):
        w, V = LA.eigh(A)
        return w.sum() + (V @ V.mH).sum() + LA.eigvalsh(A.detach()).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(A)
    y.backward()
    torch.testing.assert_close(y, f(A))
    assert "eigh_pairs" in launched, "the compiled graph runs the kernels"


@pytest.mark.parametrize("A", [torch.eye(3, dtype=torch.float64), torch.zeros(3, 3, dtype=torch.float64)], ids=["identity", "zero"])
def test_eigvalsh_gradient_at_repeated_eigenvalues_is_torch(device, A):
    # The eigenvectors' cotangent is None, not zeros over zero gaps (NaN before).
    X = A.to(device).requires_grad_()
    Y = A.clone().requires_grad_()
    expected = torch.autograd.grad(torch.linalg.eigvalsh(Y).sum(), Y)[0]
    torch.testing.assert_close(torch.autograd.grad(LA.eigvalsh(X).sum(), X)[0].cpu(), expected)
    torch.testing.assert_close(torch.autograd.grad(LA.eigh(X)[0].sum(), X)[0].cpu(), expected)
