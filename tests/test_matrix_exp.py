"""matrix_exp against SciPy's expm in float64/complex128 (long double for float64 and
complex128 results), with the ratio ||X - exp(A)||_1 / (n max(1, ||A||_1) ||exp(A)||_1 eps)
below LAPACK's THRESHOLD (``mpslinalg.check.matrix_exp_ratio`` says why that scale); on
exponentials known exactly (diagonal, nilpotent, rotation generators); and against torch
for shapes, errors, NaN and gradients."""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpslinalg as LA
from conftest import supported
from mpslinalg import expm_family as family
from mpslinalg.check import matrix_exp_ratio, matrix_exp_reference
from mpslinalg import matrix_exp
from mpslinalg.testing import THRESHOLD, eps, exact, hermitian_batch, norm1

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
DOUBLE = (torch.float64, torch.complex128)
rng = np.random.default_rng(41)
# The squaring kernel's N = 4 .. 64 (complex: 32) below and at N, and the products past them.
SIZES = [2, 3, 4, 5, 8, 16, 17, 32, 33, 64, 65]
# exp(80) = 5.5e34: the largest norms whose exponentials fit float32 with room for n.
NORMS = [1e-6, 0.3, 2.0, 8.0, 30.0, 80.0]
# long double of 64-bit significand or more (x86, aarch64 Linux): the float64 reference.
WIDE_LONG_DOUBLE = np.finfo(np.longdouble).eps < 1e-18


def needs_reference(dtype):
    if dtype in DOUBLE and not WIDE_LONG_DOUBLE:
        pytest.skip("long double is float64 here: no reference for float64 results")


def gaussian(shape, n, dtype, norms):
    """Gaussian matrices of the given 1-norms (one for each matrix of ``shape``, or one for all)."""
    count = int(np.prod(shape, dtype=np.int64))
    a = rng.standard_normal((count, n, n)) + (1j * rng.standard_normal((count, n, n)) if dtype.is_complex else 0)
    scale = np.broadcast_to(np.asarray(norms, dtype=np.float64), (count,))
    a = a * (scale / np.maximum(norm1(a), 1e-300))[:, None, None] if n else a
    return torch.from_numpy(a.reshape(*shape, n, n)).to(dtype)


def check(A, X):
    assert X.shape == A.shape and X.dtype == A.dtype and X.device == A.device
    ratio = matrix_exp_ratio(A.cpu(), X.cpu())
    assert ratio < THRESHOLD, ratio


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", SIZES)
def test_matches_scipy(device, n, dtype):
    supported(device, dtype)
    needs_reference(dtype)
    A = gaussian((len(NORMS),), n, dtype, NORMS).to(device)
    check(A, matrix_exp(A))


@given(
    n=st.integers(0, 40), batch=st.sampled_from([(), (1,), (3,), (2, 2), (0,)]), complex_=st.booleans(),
    log_norm=st.floats(-6, math.log10(80)), hermitian=st.booleans(),
)
def test_shapes_dtypes_and_scale(device, n, batch, complex_, log_norm, hermitian):
    dtype = torch.complex64 if complex_ else torch.float32
    norm = 10**log_norm
    if hermitian:  # eigenvalues spread over [-norm, norm]: exp from e^-norm to e^norm
        A = hermitian_batch(batch, n, dtype, rng, eigenvalues=np.linspace(-norm, norm, n))
    else:
        A = gaussian(batch, n, dtype, norm)
    check(A.to(device), matrix_exp(A.to(device)))


def to_mpmath(z) -> mpmath.mpc:
    """A long double (or its complex) exactly: through its shortest round-trip digits."""
    return mpmath.mpc(mpmath.mpf(np.format_float_scientific(np.real(z), unique=True)),
                      mpmath.mpf(np.format_float_scientific(np.imag(z), unique=True)))


def test_long_double_reference_matches_mpmath():
    """The float64 tests' reference (Taylor in long double) is within a hundredth of the
    ratio's unit of 34-digit mpmath: its own error does not count in the ratios."""
    if not WIDE_LONG_DOUBLE:
        pytest.skip("long double is float64 here")
    mpmath.mp.dps = 34
    for dtype in DOUBLE:
        for n in (2, 3, 6):
            A = gaussian((3,), n, dtype, [0.5, 10.0, 80.0])
            for a, reference in zip(exact(A), matrix_exp_reference(A)):
                E = mpmath.expm(mpmath.matrix(a.tolist()))
                error = max(sum(abs(E[i, j] - to_mpmath(reference[i, j])) for i in range(n)) for j in range(n))
                scale = max(sum(abs(E[i, j]) for i in range(n)) for j in range(n))
                unit = n * max(1.0, float(norm1(a))) * eps(dtype)
                assert float(error / scale) < 0.01 * unit, (n, float(error / scale) / unit)


# --- exponentials known exactly ---


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [2, 7, 33, 70])
def test_diagonal_is_the_exponential_of_its_entries(device, n, dtype):
    """exp(diag(d)) = diag(e^d): off the diagonal exactly zero (every product and the solve
    meet only exact zeros there), each e^d_i within the ratio's bound of its own value."""
    supported(device, dtype)
    needs_reference(dtype)
    d = rng.uniform(-80, 80, (3, n))
    if dtype.is_complex:
        d = d + 1j * rng.uniform(-80, 80, (3, n))
    A = torch.diag_embed(torch.from_numpy(d).to(dtype))
    X = matrix_exp(A.to(device)).cpu()
    assert not (X - torch.diag_embed(X.diagonal(dim1=-2, dim2=-1))).any()
    got = exact(X.diagonal(dim1=-2, dim2=-1))
    stored = exact(A.diagonal(dim1=-2, dim2=-1))
    wide = np.clongdouble if dtype.is_complex else np.longdouble
    expected = np.exp(stored.astype(wide))
    bound = n * np.maximum(1, norm1(exact(A)))[:, None] * eps(dtype)
    assert (np.abs(got - expected) / np.abs(expected) / bound).max() < THRESHOLD


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [2, 4, 9, 20, 40])
def test_nilpotent_is_a_finite_series(device, n, dtype):
    """exp(N) = sum_{k<n} N^k / k! for strictly upper triangular N: the strictly lower part
    of the result exactly zero and its diagonal exactly one (zeros and ones survive every
    product and the triangular solve), the rest within the ratio."""
    supported(device, dtype)
    needs_reference(dtype)
    N = torch.triu(gaussian((4,), n, dtype, [1e-3, 1.0, 10.0, 80.0]), 1)
    X = matrix_exp(N.to(device)).cpu()
    assert not torch.tril(X, -1).any()
    assert (X.diagonal(dim1=-2, dim2=-1) == 1).all()
    wide = np.clongdouble if dtype.is_complex else np.longdouble
    a = exact(N).astype(wide)
    series, power = np.zeros_like(a), np.broadcast_to(np.eye(n, dtype=wide), a.shape).copy()
    for k in range(n):
        series, power = series + power / math.factorial(k), power @ a
    residual = norm1(exact(X) - series)
    ratio = residual / (n * np.maximum(1, norm1(exact(N))) * norm1(series) * eps(dtype))
    assert ratio.max() < THRESHOLD, ratio


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [2, 3, 8, 17, 40, 66])
def test_rotation_generators_give_rotations(device, n, dtype):
    """Real: a permuted block diagonal of theta_k [[0, -1], [1, 0]] (an exact permutation
    similarity) gives the rotations by theta_k; complex: i diag(theta) gives diag(e^(i
    theta)). Up to 80 radians: within the ratio, and orthogonal (unitary) to
    n max(1, ||A||_1) eps."""
    supported(device, dtype)
    needs_reference(dtype)
    wide = np.clongdouble if dtype.is_complex else np.longdouble
    theta = np.array([0.0, 1e-6, 1.0, np.pi, 80.0])
    theta = np.resize(rng.permutation(theta), n)
    stored = torch.from_numpy(theta).to(dtype).real.numpy().astype(np.float64)  # theta as A holds it
    if dtype.is_complex:
        A = torch.diag_embed(torch.from_numpy(1j * stored)).to(dtype)
        expected = np.diag(np.exp(1j * stored.astype(np.longdouble)))
    else:
        a = np.zeros((n, n))
        expected = np.eye(n, dtype=wide)
        for k in range(0, n - 1, 2):
            t = stored[k]
            a[k, k + 1], a[k + 1, k] = -t, t
            c, s = np.cos(np.longdouble(t)), np.sin(np.longdouble(t))
            expected[k:k + 2, k:k + 2] = [[c, -s], [s, c]]
        order = rng.permutation(n)  # P A P^T, exactly
        A = torch.from_numpy(a[order][:, order]).to(dtype)
        expected = expected[order][:, order]
    X = matrix_exp(A.to(device)).cpu()
    x, a = exact(X), exact(A)
    unit = n * max(1.0, float(norm1(a))) * eps(dtype)
    assert float(norm1(x - expected) / norm1(expected)) / unit < THRESHOLD
    orthogonality = float(norm1(np.eye(n) - np.conj(x.T) @ x)) / unit
    assert orthogonality < THRESHOLD


# --- per-matrix choices, batches, the squaring kernel ---


def test_degree_and_squarings_are_chosen_per_matrix():
    """Higham's degrees and squarings for norms about each theta, NaN and zero (no
    squarings), each matrix's independent of the others in its batch."""
    for dtype, degrees in ((torch.float32, family.SINGLE_DEGREES), (torch.float64, family.DOUBLE_DEGREES)):
        thetas = [theta for _, theta in degrees]
        norms, expected_index, expected_squarings = [0.0, float("nan")], [0, 0], [0, 0]
        for k, theta in enumerate(thetas):
            norms += [0.99 * theta, 1.01 * theta]
            expected_index += [k, min(k + 1, len(thetas) - 1)]
            expected_squarings += [0, 0 if k < len(thetas) - 1 else 1]
        norms += [1.01 * 2**10 * thetas[-1], 0.99 * 2**10 * thetas[-1]]
        expected_index += [len(thetas) - 1] * 2
        expected_squarings += [11, 10]
        A = torch.stack([gaussian((), 3, dtype, norm if norm == norm else 1.0) for norm in norms])
        A[1, 0, 0] = float("nan")
        index, squarings, finite = family._scaling(A)
        assert index.tolist() == expected_index and squarings.tolist() == expected_squarings
        assert finite.tolist() == [True, False] + [True] * (len(norms) - 2)
        alone = [family._scaling(A[k:k + 1]) for k in range(len(norms))]
        assert [int(i) for i, _, _ in alone] == expected_index and [int(s) for _, s, _ in alone] == expected_squarings


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("n", [3, 17, 40, 70])
def test_batched_equals_one_at_a_time(device, n, dtype):
    """Each matrix's result does not depend on its batch: norms from 1e-5 to 80 side by
    side take their own degrees and squarings. Bit for bit on the CPU where the kernel
    squares (every step then works matrix by matrix: a batch-wide s would show); elsewhere,
    as batched products may round otherwise, within twice the ratio's bound."""
    norms = [1e-5, 0.3, 1.0, 3.0, 30.0, 80.0]
    A = gaussian((len(norms),), n, dtype, norms).to(device)
    together = matrix_exp(A)
    alone = torch.stack([matrix_exp(A[k]) for k in range(len(norms))])
    if device.type == "cpu" and (family._fused_size(n, dtype, device) or family._square_size(n, dtype, device)):
        assert torch.equal(together, alone)
    else:
        x, y = exact(together), exact(alone)
        difference = norm1(x - y) / (n * np.maximum(1, norm1(exact(A))) * norm1(y) * eps(dtype))
        assert difference.max() < 2 * THRESHOLD, difference


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("N", family.SQUARE_SIZES)
def test_squaring_kernel(device, monkeypatch, N, dtype):
    """expm_square squares each matrix its own number of times (0 to 6, matrices of a
    threadgroup's teams mixed), at n = N and below; a matrix squared 0 times is left as
    it was, bit for bit."""
    supported(device, dtype)
    if not family.EXPM_SQUARE.exists(dtype, N=N):
        pytest.skip(f"no {dtype} instance of N = {N}")
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(k["N"]), real(kernel, *a, **k)))
    for n in (N // 2 + 1, N):
        count = 2 * family.SQUARE_TEAMS[N] + 3  # a part-full last threadgroup
        # I + G, ||G||_1 = 0.2: X^64 stays within 1.2^64 and needs no cancellation.
        X = torch.eye(n, dtype=dtype) + gaussian((count,), n, dtype, 0.2)
        squarings = torch.from_numpy(rng.integers(0, 7, count)).to(torch.int32)
        squarings[0] = 0
        launched.clear()
        got = family._square(X.to(device, copy=True), squarings.to(device)).cpu()  # in place
        assert launched == [N]
        wide = exact(X)
        for k in range(count):  # each squaring doubles the error before it and adds n eps of its own
            expected = np.linalg.matrix_power(wide[k], 2 ** int(squarings[k]))
            error = norm1(exact(got[k]) - expected) / norm1(expected)
            assert error < THRESHOLD * n * 2 ** int(squarings[k]) * eps(dtype), (k, error)
            if squarings[k] == 0:
                assert torch.equal(got[k], X[k])


def test_kernel_choice(device, monkeypatch):
    """The whole exponential in one kernel (expm_small) up to n = 16; past it the
    squaring kernel's N for each n and dtype, and the batched products past N = 64
    (float) and 32 (complex). Each route's matrices agree with the others' to within
    the ratio."""
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch",
                        lambda kernel, *a, **k: (launched.append((kernel.function, k["N"])), real(kernel, *a, **k)))
    fused, square = "expm_small", "expm_square"
    cases = [(torch.float32, 2, [(fused, 8)]), (torch.float32, 8, [(fused, 8)]), (torch.float32, 9, [(fused, 16)]),
             (torch.complex64, 16, [(fused, 16)]), (torch.float32, 17, [(square, 32)]), (torch.float32, 33, [(square, 64)]),
             (torch.float32, 65, []), (torch.complex64, 32, [(square, 32)]), (torch.complex64, 33, [])]
    for dtype, n, expected in cases:
        launched.clear()
        A = gaussian((2,), n, dtype, 20.0).to(device)
        X = matrix_exp(A)
        assert [k for k in launched if k[0] in (fused, square)] == expected, (dtype, n, launched)
        check(A, X)
        with monkeypatch.context() as others:  # the composed route, then the products
            others.setattr(family, "_fused_size", lambda *_: 0)
            check(A, matrix_exp(A))
            others.setattr(family, "_square_size", lambda *_: 0)
            check(A, matrix_exp(A))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("N", family.FUSED_SIZES)
def test_fused_kernel_mixes_degrees_and_squarings(device, N, dtype):
    """expm_small: every degree and 0 to 10 squarings among the teams of one threadgroup
    (Gaussian matrices of norms 1e-6 to 80; skew-Hermitian ones, whose exponentials are
    unitary, of norms up to 2000), a part-full last threadgroup, n = N and below: within
    the ratio, and each matrix as it is alone (bit for bit on the CPU: no team's steps
    depend on another's)."""
    supported(device, dtype)
    needs_reference(dtype)
    if not family.EXPM_SMALL.exists(dtype, N=N):
        pytest.skip(f"no {dtype} instance of N = {N}")
    teams = family.lu_family.TEAMS[N]
    for n in (N // 2 + 1, N):
        count = 2 * teams + 3
        gaussians = gaussian((count - count // 2,), n, dtype, np.geomspace(1e-6, 80.0, count - count // 2))
        G = gaussian((count // 2,), n, dtype, 1.0)
        skew = (G - G.mH) * torch.from_numpy(np.geomspace(100.0, 2000.0, count // 2)).to(G.real.dtype)[:, None, None]
        A = torch.cat((gaussians, skew))[torch.from_numpy(rng.permutation(count))].to(device)
        assert family._fused_size(n, dtype, A.device) == N
        X = matrix_exp(A)
        check(A, X)
        if device.type == "cpu":
            assert torch.equal(X[1:2], matrix_exp(A[1:2])) and torch.equal(X[-1:], matrix_exp(A[-1:]))


# Python-level ways of reading a device value on the host: each synchronises with the device.
SYNCHRONISING = ("item", "__bool__", "__int__", "__float__", "__index__", "tolist", "nonzero")


def forbid_host_reads(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("host synchronisation")

    for name in SYNCHRONISING:
        monkeypatch.setattr(torch.Tensor, name, refuse)
    monkeypatch.setattr(torch, "nonzero", refuse)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_no_host_synchronisation(device, monkeypatch, dtype):
    """The kernel path reads nothing back to the host: every way of doing so from Python
    raises while it runs. The products past the kernel's sizes take max(s) on the host,
    and the same guard catches it (so the guard can fail)."""
    largest = 64 if not dtype.is_complex else 32
    inputs = [gaussian((5,), n, dtype, [1e-4, 0.5, 2.0, 10.0, 60.0]).to(device) for n in (2, 5, 16, largest)]
    inputs.append(inputs[0].clone().fill_(float("nan")))
    expected = [matrix_exp(A) for A in inputs]  # compiled and warm
    beyond = gaussian((2,), largest + 1, dtype, 10.0).to(device)
    with monkeypatch.context() as patched:
        forbid_host_reads(patched)
        got = [matrix_exp(A) for A in inputs]
        with pytest.raises(AssertionError, match="host synchronisation"):
            matrix_exp(beyond)
    for X, Y in zip(got, expected):
        assert torch.equal(X.isnan(), Y.isnan()) and torch.equal(X.nan_to_num(), Y.nan_to_num())


# --- behaviour as torch's ---


def test_errors_match_torch(device):
    bad = [torch.ones(3), torch.ones(2, 3), torch.ones(4, 2, 3), torch.ones(2, 2, dtype=torch.int64), torch.ones(2, 2, dtype=torch.bool)]
    for A in bad:
        with pytest.raises(RuntimeError) as expected:
            torch.linalg.matrix_exp(A)
        with pytest.raises(type(expected.value)) as got:
            matrix_exp(A.to(device))
        assert str(got.value) == str(expected.value)


def test_other_dtypes_and_cpu_tensors_go_to_torch(device, monkeypatch):
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    A = gaussian((2,), 5, torch.float32, 10.0)
    half = (A / 20).to(torch.float16)  # torch's float16 exponential is NaN at norm 10
    if device.type == "cpu":  # float16 has no kernels: torch's own answer
        expected = torch.linalg.matrix_exp(half)
        assert expected.isfinite().all() and torch.equal(matrix_exp(half), expected) and not launched
    with LA.use_backend("torch"):  # CPU tensors without the OpenCL backend: torch's
        assert torch.equal(matrix_exp(A), torch.linalg.matrix_exp(A)) and not launched
    matrix_exp(A.to(device))
    assert launched == ["expm_small"]


@pytest.mark.parametrize("shape", [(0, 3, 3), (2, 0, 0), (0, 0), (0, 1, 1), (3, 1, 1), (1, 1), (2, 3, 1, 1)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty_and_scalar_matrices_match_torch(device, shape, dtype):
    """No matrices, 0 x 0 ones, and 1 x 1 ones (the scalar exponential, as torch's)."""
    supported(device, dtype)
    A = torch.from_numpy(rng.uniform(-80, 80, shape)).to(dtype)
    got, expected = matrix_exp(A.to(device)).cpu(), torch.linalg.matrix_exp(A)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("n", [3, 40, 70])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nan_and_inf_propagate_as_torch(device, n, dtype):
    """A matrix with an infinite or NaN entry gives NaN throughout, as torch's; its batch
    neighbours are unaffected; huge norms (s near 128 in float32) end without a hang: in
    exp's zero where it underflows (-1e30 I), or in inf or NaN where it overflows."""
    supported(device, dtype)
    inf, nan = float("inf"), float("nan")
    A = gaussian((6,), n, dtype, 5.0)
    A[0, 0, 1], A[1, n - 1, 0], A[2, 1, 1] = inf, -inf, nan
    A[3] = 1e30 * torch.eye(n, dtype=dtype)
    A[4] = -1e30 * torch.eye(n, dtype=dtype)
    A[4, 0, 0] = 0
    got, expected = matrix_exp(A.to(device)).cpu(), torch.linalg.matrix_exp(A)
    assert torch.equal(got.isnan(), expected.isnan()) and got[:3].isnan().all()
    assert torch.equal(got[4], expected[4])  # e_1 e_1^T: every other entry underflows to 0
    check(A[5:], got[5:])


def test_views_match_contiguous(device):
    A = gaussian((4,), 12, torch.complex64, 10.0)
    for view in (A.mT, A.conj(), A.mH, A[::2], torch.stack((A, A), -1)[..., 0]):
        assert torch.equal(matrix_exp(view.to(device)), matrix_exp(view.resolve_conj().resolve_neg().contiguous().to(device)))


def test_meta_tensors():
    A = torch.empty(3, 5, 5, device="meta")
    assert torch.ops.mpslinalg.matrix_exp(A).shape == A.shape
    assert matrix_exp(A).shape == A.shape  # torch's for the meta device


# --- the theta constants and the Pade coefficients ---


def pade_exact(m):
    return [Fraction(math.factorial(2 * m - k) * math.factorial(m), math.factorial(2 * m) * math.factorial(k) * math.factorial(m - k))
            for k in range(m + 1)]


def backward_error_series(m, terms):
    """|c_k| of h_{2m+1}(x) = log(e^-x r_m(x)) = sum_k c_k x^k (Higham 2005, eq. 2.4), exact."""
    b = pade_exact(m)

    def log_series(g):  # log g for g(0) = 1: (log g)' = g' / g, term by term
        derivative = [(k + 1) * (g[k + 1] if k + 1 < len(g) else 0) for k in range(terms)]
        quotient = []
        for k in range(terms):
            quotient.append(derivative[k] - sum(g[j] * quotient[k - j] for j in range(1, min(k, m) + 1)))
        return [Fraction(0)] + [quotient[k - 1] / k for k in range(1, terms + 1)]

    p, q = log_series(b), log_series([c * (-1) ** k for k, c in enumerate(b)])
    c = [x - y for x, y in zip(p, q)]
    c[1] -= 1
    assert not any(c[: 2 * m + 1]) and c[2 * m + 1]  # r_m matches exp to order 2m exactly
    return [abs(x) for x in c]


@pytest.mark.parametrize("u,degrees", [(2.0**-24, family.SINGLE_DEGREES), (2.0**-53, family.DOUBLE_DEGREES)])
def test_thetas_are_highams(u, degrees):
    """theta_m = the largest x with h~_{2m+1}(x) / x <= u, h~ the series of |c_k| (Higham
    2005, sec. 2; 150 terms, as his), found by bisection: Higham's values to 1e-7."""
    mpmath.mp.dps = 40
    for m, theta in degrees:
        c = [mpmath.mpf(x.numerator) / x.denominator for x in backward_error_series(m, 150)]

        def bound(x):
            return sum(c[k] * x ** (k - 1) for k in range(2 * m + 1, len(c)))

        low, high = mpmath.mpf(0), mpmath.mpf(theta) * 2
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if bound(middle) <= u else (low, middle)
        assert abs(float(low) / theta - 1) < 1e-7, (m, float(low), theta)


@pytest.mark.parametrize("m", [3, 5, 7, 9, 13])
def test_pade_coefficients(m):
    assert family._pade_coefficients(m) == [float(b) for b in pade_exact(m)]


# --- gradients ---


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("n,norm", [(1, 2.0), (2, 0.5), (3, 6.0), (5, 20.0)])
def test_gradcheck(device, n, norm, dtype):
    """Reverse and forward mode through the kernels, on norms that take squarings."""
    supported(device, dtype)
    A = gaussian((2,), n, dtype, norm).to(device).requires_grad_()
    assert torch.autograd.gradcheck(matrix_exp, (A,), check_forward_ad=True)
    if n <= 3:
        assert torch.autograd.gradgradcheck(matrix_exp, (A,))


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_gradients_and_tangents_match_torch(device, dtype):
    A = gaussian((2,), 6, dtype, 4.0)
    dA = torch.randn_like(A)
    loss = lambda f: lambda A: (f(A) * f(A).conj()).real.sum() + f(A).real.sum()
    got = torch.func.grad(loss(matrix_exp))(A.to(device))
    torch.testing.assert_close(got.cpu(), torch.func.grad(loss(torch.linalg.matrix_exp))(A))
    got = torch.func.jvp(matrix_exp, (A.to(device),), (dA.to(device),))[1]
    torch.testing.assert_close(got.cpu(), torch.func.jvp(torch.linalg.matrix_exp, (A,), (dA,))[1])


def test_vmap_and_dual_numbers_match_torch(device):
    A = gaussian((3, 2), 4, torch.float64, 3.0)
    torch.testing.assert_close(torch.func.vmap(matrix_exp)(A.to(device)).cpu(), torch.linalg.matrix_exp(A))
    import torch.autograd.forward_ad as fwAD

    dA = torch.randn_like(A)
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(matrix_exp(fwAD.make_dual(A.to(device), dA.to(device)))).tangent
    torch.testing.assert_close(tangent.cpu(), torch.func.jvp(torch.linalg.matrix_exp, (A,), (dA,))[1])


def test_compiles_without_graph_breaks(device, monkeypatch):
    torch._dynamo.reset()
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    A = gaussian((3,), 6, torch.float32, 8.0).to(device).requires_grad_()

    def f(A):
        return matrix_exp(A).sum() + matrix_exp(A.detach() * 2).abs().sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(A)
    y.backward()
    torch.testing.assert_close(y, f(A))
    assert "expm_small" in launched, "the compiled graph runs the kernels"


# --- the Metal source check ---


def test_metal_source_of_the_squaring_kernel():
    """tests/test_metal_source.py checks every instance of the modules mpslinalg imports;
    until mpslinalg exports matrix_exp, this checks expm_square's the same way."""
    pytest.importorskip("clang.cindex")
    from metal_check import metal_errors

    from mpslinalg.runtimes import RUNTIMES

    metal = RUNTIMES["metal"]
    instances = [i for i in metal.instances() if i.kernel is family.EXPM_SQUARE]
    assert {i.host_name for i in instances} == {f"expm_square_{d}_n{N}" for d in ("float32", "complex64") for N in family.SQUARE_SIZES
                                                if N <= 32 or d == "float32"}
    for instance in instances:
        assert metal_errors(metal.source(instance), {instance.host_name}) == []
        assert instance.kernel.shared_bytes(instance.scalar.dtype, **dict(instance.values)) <= 32 * 1024
        assert instance.group_size <= 1024 and instance.group_size % 32 == 0
