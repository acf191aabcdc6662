"""``python -m mpslinalg check``: every public function on the best runtime, against SciPy.

Each row runs one function on a fixed batch of matrices with a known condition
number and prints LAPACK's scaled residual for it (see mpslinalg.testing), its
threshold, pass/fail and the time of the call. Exit status 1 if any row fails.

``check --kernels`` compiles every kernel instance the runtime can launch, then runs
a battery of calls that launches each of them at least once, every call judged by
its LAPACK ratio against SciPy, and prints a row per instance: its compile time,
status (pass, FAIL: it did not compile or its pipeline is too small, a call that
launched it failed, or no call launched it) and the error. Exit status 1 if any
instance is not a pass. It is the command that proves the kernels on a Mac.
"""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from dataclasses import dataclass, replace
from typing import Callable, Iterator

import numpy as np
import scipy.linalg
import torch

import mpslinalg as LA

from . import eig_family, eigh_family, runtimes, svd_family, testing
from ._dispatch import TORCH, backends, use_backend
from .inverse import SMALL
from .lu_family import SIZES as LU_SIZES
from .qr_family import GEQRF_SMALL, small_size as qr_small_size
from . import expm_family
from .expm_family import matrix_exp


@dataclass
class Row:
    function: str
    dtype: str
    shape: str
    ratio: float
    threshold: float
    seconds: float
    via: str = "kernel"  # or torch.linalg

    @property
    def passed(self) -> bool:
        return bool(self.ratio < self.threshold)


def best_runtime() -> tuple[str, torch.device, contextlib.AbstractContextManager]:
    """The runtime check uses: Metal, else CUDA, else OpenCL, else torch.linalg on the CPU."""
    status = backends()
    if status["metal"].usable:
        return "metal", torch.device("mps"), contextlib.nullcontext()
    if status["cuda"].usable:
        return "cuda", torch.device("cuda"), contextlib.nullcontext()
    if status["opencl"].usable:
        return "opencl", torch.device("cpu"), use_backend("opencl")
    return "torch.linalg (no kernel runtime usable)", torch.device("cpu"), use_backend("torch")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _timed(device: torch.device, call: Callable):
    call()  # compile and warm up
    _synchronize(device)
    start = time.perf_counter()
    result = call()
    _synchronize(device)
    return result, time.perf_counter() - start


def _singular_info_ratio(A: torch.Tensor) -> float:
    """0 if inv_ex reports info = 2 for the rank-one [[1, 2], [2, 4]] batch, as LAPACK does; else 1/eps."""
    _, info = LA.inv_ex(A)
    return 0.0 if bool((info.cpu() == 2).all()) else 1 / testing.eps(A.dtype)


def _normal(rng, shape, dtype: torch.dtype) -> torch.Tensor:
    """Standard normal entries from ``rng`` (complex: both parts), so that every run
    checks the same matrices."""
    z = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.is_complex else 0)
    return torch.from_numpy(np.asarray(z)).to(dtype)


def _inverse_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """inv, inv_ex and det on the fused kernel's sizes and the LU kernels past them."""
    for n in _cases((1, 2, 3, 4, 8), quick):
        A = testing.batch_of((1000,), n, dtype, rng, cond=1e3).to(device)
        shape = "1000x%dx%d" % (n, n)
        for name, call, ratio in [
            ("inv", lambda: LA.inv(A), lambda X: testing.inv_ratio(A, X)),
            ("inv_ex", lambda: LA.inv_ex(A).inverse, lambda X: testing.inv_ratio(A, X)),
            ("det", lambda: LA.det(A), lambda d: testing.det_ratio(A, d)),
        ]:
            result, seconds = _timed(device, call)
            via = "fused kernel" if n <= SMALL else "LU kernels"
            yield Row(name, str(dtype).removeprefix("torch."), shape, ratio(result), testing.THRESHOLD, seconds, via)


def _singular_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """inv_ex's info on a rank-one batch."""
    singular = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=dtype).expand(16, 2, 2).to(device)
    _, seconds = _timed(device, lambda: LA.inv_ex(singular))
    yield Row("inv_ex info", str(dtype).removeprefix("torch."), "16x2x2 rank 1", _singular_info_ratio(singular), 1.0, seconds)


def _cases(cases, quick: bool):
    """A family's cases, or only its first with ``check --quick``."""
    return list(cases)[:1] if quick else cases


def _triangular_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    name = str(dtype).removeprefix("torch.")
    for n, k, (upper, left, unit) in _cases([
        (5, 3, (False, True, False)),
        (16, 8, (False, True, True)),
        (64, 64, (False, True, False)),
        (32, 5, (True, False, False)),
        (100, 10, (True, True, True)),
    ], quick):
        count = 200
        A = torch.from_numpy(np.array([testing.triangle(n, 10.0, rng, dtype.is_complex, upper, unit) for _ in range(count)])).to(dtype).to(device)
        shape = (count, n, k) if left else (count, k, n)
        B = _normal(rng, shape, dtype).to(device)
        X, seconds = _timed(device, lambda: LA.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit))
        flags = ("upper" if upper else "lower") + (" left" if left else " right") + (" unit" if unit else "")
        ratio = testing.solve_ratio(A, X, B, upper, left, unit)
        yield Row("solve_triangular", name, f"{count}x{n}x{n} {k} rhs {flags}", ratio, testing.THRESHOLD, seconds)
    L = torch.from_numpy(np.array([testing.triangle(48, 10.0, rng, dtype.is_complex, False, False) for _ in range(200)])).to(dtype).to(device)
    X, seconds = _timed(device, lambda: LA.tril_inverse(L))
    yield Row("tril_inverse", name, "200x48x48", testing.inv_ratio(L, X), testing.THRESHOLD, seconds)
    if not dtype.is_complex:
        A = torch.from_numpy(rng.standard_normal((2, 256, 4, 64)) * 0.1).to(dtype).to(device)
        out, seconds = _timed(device, lambda: LA.solve_tril(A, output_dtype=dtype))
        yield Row("solve_tril", name, "2x256x4x64", _solve_tril_ratio(A, out), testing.THRESHOLD, seconds)


def _lu_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """lu_factor (sget01), lu_solve in its four forms and solve (sget02), inv (sget03),
    det, on the small kernel's sizes and on the blocked path."""
    name = str(dtype).removeprefix("torch.")
    for count, m, n in _cases([(500, 8, 8), (500, 32, 32), (200, 64, 64), (200, 40, 25), (200, 25, 40), (4, 200, 200), (2, 300, 150)], quick):
        A = testing.batch_of((count,), n, dtype, rng, cond=1e3) if m == n else _normal(rng, (count, m, n), dtype)
        A = A.to(device)
        via = "small kernel" if max(m, n) <= LU_SIZES[-1] else "blocked"
        (LU, pivots, _), seconds = _timed(device, lambda: LA.lu_factor_ex(A))
        shape = f"{count}x{m}x{n}"
        yield Row("lu_factor_ex", name, shape, testing.lu_ratio(A, LU, pivots), testing.THRESHOLD, seconds, via)
        if m != n:
            continue
        B = _normal(rng, (count, n, 8), dtype).to(device)
        for left, adjoint in [(True, False), (True, True), (False, False), (False, True)]:
            rhs = B if left else B.mT
            X, seconds = _timed(device, lambda: LA.lu_solve(LU, pivots, rhs, left=left, adjoint=adjoint))
            flags = ("left" if left else "right") + (" adjoint" if adjoint else "")
            ratio = testing.general_solve_ratio(A, X, rhs, left, adjoint)
            yield Row("lu_solve", name, f"{shape} 8 rhs {flags}", ratio, testing.THRESHOLD, seconds, via)
        X, seconds = _timed(device, lambda: LA.solve(A, B))
        yield Row("solve", name, f"{shape} 8 rhs", testing.general_solve_ratio(A, X, B), testing.THRESHOLD, seconds, via)
        X, seconds = _timed(device, lambda: LA.inv(A))
        yield Row("inv", name, shape, testing.inv_ratio(A, X), testing.THRESHOLD, seconds, via)
        # Singular values 2 .. 1/2 (det near 1 at every n, away from over- and underflow).
        D = testing.batch_of((count,), n, dtype, rng, cond=4, scale=2).to(device)
        d, seconds = _timed(device, lambda: LA.det(D))
        yield Row("det", name, shape, testing.det_ratio(D, d), testing.THRESHOLD, seconds, via)


def _qr_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """qr in its reduced and complete modes: sqrt01's residual and sqrt02's orthogonality."""
    name = str(dtype).removeprefix("torch.")
    for count, m, n in _cases([(500, 8, 8), (500, 32, 32), (200, 32, 20), (200, 20, 32), (4, 100, 60), (2, 60, 100), (1, 700, 300)], quick):
        A = _normal(rng, (count, m, n), dtype).to(device)
        via = "small kernels" if qr_small_size(GEQRF_SMALL, m, n, dtype) else "blocked"
        for mode in ("reduced", "complete"):
            (Q, R), seconds = _timed(device, lambda: LA.qr(A, mode=mode))
            residual, orthogonality = testing.qr_ratios(A.cpu(), Q.cpu(), R.cpu())
            shape = f"{count}x{m}x{n} {mode}"
            yield Row("qr", name, shape + " residual", residual, testing.THRESHOLD, seconds, via)
            yield Row("qr", name, shape + " orthogonality", orthogonality, testing.THRESHOLD, seconds, via)
    # sqrt03: ||op(Q) C - ormqr(C)||_1 / (m ||C||_1 eps), Q formed by householder_product;
    # blocked (150 x 70), or with --quick on the small kernels (the panel kernels' instances
    # take a minute and a half to compile on a 2-core CPU).
    m, k = (24, 16) if quick else (150, 70)
    packed, tau = LA.geqrf(_normal(rng, (2, m, k), dtype).to(device))
    Q = torch.from_numpy(testing.exact(LA.householder_product(torch.nn.functional.pad(packed, (0, m - k)), tau)))
    for left, transpose in ((True, False), (True, True), (False, False), (False, True)):
        C = _normal(rng, (2, m, 40) if left else (2, 40, m), dtype).to(device)
        X, seconds = _timed(device, lambda: LA.ormqr(packed, tau, C, left, transpose))
        op = Q.mH if transpose else Q
        c = torch.from_numpy(testing.exact(C))
        expected = op @ c if left else c @ op
        error = torch.linalg.matrix_norm(torch.from_numpy(testing.exact(X)) - expected, 1)
        ratio = (error / (m * torch.linalg.matrix_norm(c, 1) * testing.eps(dtype))).max().item()
        flags = ("left" if left else "right") + (" Q^H" if transpose else " Q")
        yield Row("ormqr", name, f"2x{m}x{k} {flags}", ratio, testing.THRESHOLD, seconds, "small kernels" if quick else "blocked")


def _svd_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """svd: sbdt01's residual, sort01's orthogonality of U and V, and the singular values
    against SciPy's; pinv by its first Moore-Penrose condition, ||A X A - A||_1 /
    (max(m, n) ||A||_1^2 ||X||_1 eps), the rounding of the product itself."""
    name = str(dtype).removeprefix("torch.")
    for count, m, n in _cases([(4096, 3, 3), (500, 8, 8), (50, 32, 32), (20, 64, 64), (20, 100, 30), (20, 30, 100)], quick):
        A = _normal(rng, (count, m, n), dtype).to(device)
        k = min(m, n)
        via = "a thread" if k <= 3 else "registers" if svd_family._pair_size(k, dtype) else "threadgroup"
        via += " a matrix" + (", QR first" if m != n else "")
        (U, S, Vh), seconds = _timed(device, lambda: LA.svd(A))
        ratios = testing.svd_ratios(A.cpu(), U.cpu(), S.cpu(), Vh.cpu())
        for what, ratio in zip(("residual", "U orthogonality", "V orthogonality", "singular values"), ratios):
            yield Row("svd", name, f"{count}x{m}x{n} {what}", ratio, testing.THRESHOLD, seconds, via)
        X, seconds = _timed(device, lambda: LA.pinv(A))
        a, x = torch.from_numpy(testing.exact(A)), torch.from_numpy(testing.exact(X))
        norm = lambda M: torch.linalg.matrix_norm(M, 1)
        error = norm(a @ x @ a - a) / (max(m, n) * norm(a) ** 2 * norm(x) * testing.eps(dtype))
        yield Row("pinv", name, f"{count}x{m}x{n} AXA = A", error.max().item(), testing.THRESHOLD, seconds, via)


def _cholesky_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """cholesky (spot01), cholesky_solve (spot02) and cholesky_inverse (spot03's
    ||I - X A||_1 / (n ||A||_1 ||X||_1 eps)) on the kernel's sizes and the recursion."""
    name = str(dtype).removeprefix("torch.")
    for count, n in _cases([(1000, 3), (500, 8), (200, 64), (4, 200)], quick):
        A = testing.hermitian_batch((count,), n, dtype, rng, cond=1e3).to(device)
        via = "small kernel" if n <= 64 else "recursive"
        shape = f"{count}x{n}x{n}"
        for upper in (True, False):  # the lower factor last: the solves below take it
            L, seconds = _timed(device, lambda: LA.cholesky(A, upper=upper))
            yield Row("cholesky", name, shape + (" upper" if upper else ""), testing.cholesky_ratio(A, L, upper),
                      testing.THRESHOLD, seconds, via)
        A = L @ L.mH  # the matrix L stands for, as stored
        B = _normal(rng, (count, n, 8), dtype).to(device)
        X, seconds = _timed(device, lambda: LA.cholesky_solve(B, L))
        yield Row("cholesky_solve", name, f"{shape} 8 rhs", testing.general_solve_ratio(A, X, B), testing.THRESHOLD, seconds, via)
        X, seconds = _timed(device, lambda: LA.cholesky_inverse(L))
        yield Row("cholesky_inverse", name, shape, testing.inv_ratio(A, X), testing.THRESHOLD, seconds, via)


def _eigh_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """eigh: ssyt21's residual and orthogonality, the eigenvalues against SciPy's, on
    positive-definite and indefinite matrices; eigvalsh's eigenvalues."""
    name = str(dtype).removeprefix("torch.")
    for count, n in _cases([(4096, 3), (500, 8), (50, 32), (20, 64), (2, 100)], quick):
        for definite in (True, False):
            A = testing.hermitian_batch((count,), n, dtype, rng, cond=1e3, definite=definite).to(device)
            via = "a thread" if n <= 4 else "registers" if eigh_family._pair_size(n, dtype) else "SVD"
            shape = f"{count}x{n}x{n} " + ("definite" if definite else "indefinite")
            (w, V), seconds = _timed(device, lambda: LA.eigh(A))
            ratios = testing.eigh_ratios(A, w, V)
            for what, ratio in zip(("residual", "orthogonality", "eigenvalues"), ratios):
                yield Row("eigh", name, f"{shape} {what}", ratio, testing.THRESHOLD, seconds, via)
            w, seconds = _timed(device, lambda: LA.eigvalsh(A))
            yield Row("eigvalsh", name, shape, testing.eigh_ratios(A, w, None)[2], testing.THRESHOLD, seconds, via)


def _eig_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """eig: sget22's residual, the unit norms and the eigenvalues against SciPy's within
    their condition numbers, on non-normal matrices (cgeev's path for complex dtypes,
    sgeev's real arithmetic for real ones); eigvals' eigenvalues."""
    name = str(dtype).removeprefix("torch.")
    for count, n in _cases([(4096, 3), (500, 8), (50, 32), (20, 64), (2, 100)], quick):
        A = testing.nonnormal_batch((count,), n, dtype, rng, cond=100.0).to(device)
        via = "a thread" if n <= eig_family.KERNEL_SIZES_UP_TO else "LAPACK"
        shape = f"{count}x{n}x{n}"
        (w, V), seconds = _timed(device, lambda: eig_family.eig(A))
        for what, ratio in zip(("residual", "normalisation", "eigenvalues"), testing.eig_ratios(A, w, V)):
            yield Row("eig", name, f"{shape} {what}", ratio, testing.THRESHOLD, seconds, via)
        w, seconds = _timed(device, lambda: eig_family.eigvals(A))
        yield Row("eigvals", name, shape, testing.eig_ratios(A, w, None)[2], testing.THRESHOLD, seconds, via)


def matrix_exp_reference(A: torch.Tensor) -> np.ndarray:
    """exp of each matrix of A as stored. For float32 and complex64, SciPy's expm in
    float64/complex128. For float64 and complex128 SciPy's own rounding is as large as the
    error being judged (its ratio below reached 40 at n = 3 and 300 at n = 2, whose
    explicit formula it takes, where 34-digit mpmath put ours under 1), so there the
    reference is Taylor's series of degree 18 at A / 2^s, ||A / 2^s||_1 <= 1/2 (truncation
    below 2^-19 / 19! relative), squared s times, in numpy's long double (x86's 64-bit
    significand: 2^11 times float64's precision; tests/test_matrix_exp.py checks it against
    mpmath)."""
    a = testing.exact(A)
    if a.size == 0:
        return a
    n = a.shape[-1]
    if A.dtype in (torch.float32, torch.complex64):
        return np.array([scipy.linalg.expm(m) for m in a.reshape(-1, n, n)]).reshape(a.shape)
    wide = np.clongdouble if np.iscomplexobj(a) else np.longdouble
    x = a.astype(wide)
    norm = testing.norm1(a)
    squarings = np.ceil(np.log2(np.maximum(norm, 1e-300) / 0.5)).clip(0).astype(np.int64)
    x = x / (2.0 ** squarings).astype(np.longdouble)[..., None, None]
    identity = np.eye(n, dtype=wide)
    taylor = identity + x / 18  # Horner: I + x (I + x/2 (I + ... (I + x/18)))
    for k in range(17, 0, -1):
        taylor = identity + (x @ taylor) / k
    for step in range(int(squarings.max(initial=0))):
        taylor = np.where((step < squarings)[..., None, None], taylor @ taylor, taylor)
    return taylor


def matrix_exp_ratio(A: torch.Tensor, X: torch.Tensor) -> float:
    """max over the batch of ||X - exp(A)||_1 / (n max(1, ||A||_1) ||exp(A)||_1 eps).

    The scale is what scaling and squaring attains: the Pade approximant of A / 2^s is
    backward stable (its backward error at most eps, Higham 2005), and exp's relative
    condition number is ||A|| for normal A (Van Loan 1977), at least ||A|| for any; each
    of the s squarings doubles the error before it and adds n eps of its own products,
    with 2^s < 2 ||A||_1 / theta_max. So n eps max(1, ||A||_1) times a constant, judged
    against LAPACK's THRESHOLD as the other ratios (on Gaussian matrices of norms 1e-6 to
    80, ours stayed below 1.5, torch's own below 1.5 too)."""
    a = testing.exact(A)
    n = a.shape[-1]
    if a.size == 0:
        return 0.0
    reference = matrix_exp_reference(A)
    residual = testing.norm1(testing.exact(X) - reference)
    scale = n * np.maximum(1, testing.norm1(a)) * testing.norm1(reference) * testing.eps(A.dtype)
    return testing.scaled_ratio(residual.astype(np.float64), scale.astype(np.float64), A.dtype)


def _expm_batch(rng, count: int, n: int, dtype: torch.dtype, smallest: float, largest: float) -> torch.Tensor:
    """Gaussian matrices with 1-norms spread log-uniformly from ``smallest`` to ``largest``."""
    A = _normal(rng, (count, n, n), dtype).to(torch.complex128 if dtype.is_complex else torch.float64)
    norms = torch.linalg.matrix_norm(A, 1)
    target = torch.from_numpy(10 ** rng.uniform(np.log10(smallest), np.log10(largest), count))
    return (A * (target / torch.where(norms > 0, norms, 1))[:, None, None]).to(dtype)


def _matrix_exp_rows(device: torch.device, dtype: torch.dtype, rng, quick: bool) -> Iterator[Row]:
    """matrix_exp against SciPy (long double for float64 and complex128) on norms up to 80,
    where exp still fits float32: the squaring kernel's sizes, and the products past them."""
    name = str(dtype).removeprefix("torch.")
    for count, n in _cases([(1000, 4), (200, 16), (50, 32), (20, 64), (4, 100)], quick):
        A = _expm_batch(rng, count, n, dtype, 1e-3, 80.0).to(device)
        X, seconds = _timed(device, lambda: matrix_exp(A))
        squared = expm_family._square_size(n, dtype, device)
        via = "squaring kernel" if squared else "products"
        yield Row("matrix_exp", name, f"{count}x{n}x{n} norms 1e-3..80", matrix_exp_ratio(A, X), testing.THRESHOLD, seconds, via)


# Each family of rows with the functions it checks (``check -k`` skips the others).
ROW_FAMILIES = (
    (("inv", "inv_ex", "det"), _inverse_rows),
    (("solve_triangular", "tril_inverse", "solve_tril"), _triangular_rows),
    (("lu_factor_ex", "lu_solve", "solve", "inv", "det"), _lu_rows),
    (("qr", "ormqr"), _qr_rows),
    (("svd", "pinv"), _svd_rows),
    (("cholesky", "cholesky_solve", "cholesky_inverse"), _cholesky_rows),
    (("eigh", "eigvalsh"), _eigh_rows),
    (("eig", "eigvals"), _eig_rows),
    (("inv_ex info",), _singular_rows),
    (("matrix_exp",), _matrix_exp_rows),
)


def rows(device: torch.device, dtypes: tuple[torch.dtype, ...], quick: bool = False, pattern: str = "",
         progress=None) -> Iterator[Row]:
    """The rows of every family and dtype, as each is computed: with ``quick`` only each
    family's first case, with ``pattern`` only the functions whose names contain it. A
    terminal ``progress`` shows which family runs (the first call of each compiles)."""
    rng = np.random.default_rng(2024)
    chosen = [(f, family) for f, family in ROW_FAMILIES if any(pattern in function for function in f)]
    start = time.perf_counter()
    total = len(dtypes) * len(chosen)
    for d, dtype in enumerate(dtypes):
        for i, (functions, family) in enumerate(chosen):
            if progress is not None:
                done = d * len(chosen) + i
                bar = "#" * (20 * done // total)
                elapsed = int(time.perf_counter() - start)
                print(f"\r[{bar:<20}] family {done + 1} of {total}, {elapsed // 60} min {elapsed % 60:02d} s: "
                      f"{', '.join(functions)} {str(dtype).removeprefix('torch.')}", end="", file=progress, flush=True)
            for row in family(device, dtype, rng, quick):
                if pattern in row.function:
                    if progress is not None:
                        print("\r\033[K", end="", file=progress, flush=True)  # the row takes the line
                    yield row


def main(quick: bool = False, pattern: str = "") -> int:
    """Print the title and header, then each row as it is computed, then the count."""
    name, device, selected = best_runtime()
    dtypes = (torch.float32, torch.complex64) + ((torch.float64, torch.complex128) if device.type != "mps" else ())
    print(f"mpslinalg {LA.__version__} check on {name} ({device}), torch {torch.__version__}")
    print(f"{'function':<17} {'dtype':<11} {'shape':<34} {'via':<13} {'ratio':>10} {'< thresh':>9} {'result':>6} {'time ms':>9}",
          flush=True)
    passed = failed = 0
    with selected:
        for row in rows(device, dtypes, quick, pattern, sys.stderr if sys.stderr.isatty() else None):
            if name.startswith("torch.linalg"):  # no kernel ran
                row = replace(row, via="torch.linalg")
            verdict = "pass" if row.passed else "FAIL"
            passed, failed = passed + row.passed, failed + (not row.passed)
            print(
                f"{row.function:<17} {row.dtype:<11} {row.shape:<34} {row.via:<13} {row.ratio:>10.3g} {row.threshold:>9.3g} "
                f"{verdict:>6} {row.seconds * 1e3:>9.3f}", flush=True,
            )
    print(f"{passed} passed, {failed} failed: {_verified(name, device)}")
    return 1 if failed or not passed else 0


def _verified(name: str, device: torch.device) -> str:
    """What the rows verified, in words, for the last line."""
    if name.startswith("torch.linalg"):
        return "no kernel runtime is usable here; the rows ran torch.linalg (python -m mpslinalg info says why)"
    if device.type == "cpu":
        return (f"mpslinalg's kernels on the {name} runtime (the tests' runtime on a CPU); CPU tensors in "
                "your code go to torch.linalg unless MPSLINALG_BACKEND=opencl")
    return f"mpslinalg's kernels on the {name} runtime, on {device} tensors"


# --- check --kernels: every instance compiled and run ---

# A call of the battery: (function, what it is called on, the call, returning its ratio).
Call = tuple[str, str, Callable[[], float]]


@dataclass
class KernelRow:
    """One instance: its compile, and the battery's calls that launched it."""

    instance: str
    kernel: str
    compile_seconds: float = 0.0
    error: str = ""  # why it cannot run, or the first call that failed
    calls: int = 0
    worst: float = 0.0  # the largest ratio of those calls

    @property
    def status(self) -> str:
        if self.error:
            return "FAIL"
        return "pass" if self.calls else "not run"


def _square(rng, batch: tuple, n: int, dtype: torch.dtype, device) -> torch.Tensor:
    return testing.batch_of(batch, n, dtype, rng, cond=10.0).to(device)


def _plu_ratio(A: torch.Tensor, P: torch.Tensor, L: torch.Tensor, U: torch.Tensor) -> float:
    """sget01 on linalg.lu's factors: ||P L U - A||_1 / (n ||A||_1 eps)."""
    a = testing.exact(A)
    residual = testing.norm1(testing.exact(P) @ testing.exact(L) @ testing.exact(U) - a)
    return testing.scaled_ratio(residual, max(a.shape[-1], 1) * testing.norm1(a) * testing.eps(A.dtype), A.dtype)


def _triangles(rng, count: int, n: int, dtype: torch.dtype, upper: bool, unit: bool, device) -> torch.Tensor:
    """Triangular matrices of condition number 10 (random ones are exponentially ill-conditioned)."""
    shape = (count, n, n)
    return torch.from_numpy(np.array([testing.triangle(n, 10.0, rng, dtype.is_complex, upper, unit) for _ in range(count)]).reshape(shape)).to(dtype).to(device)


def _square_calls(rng, A: torch.Tensor, B: torch.Tensor) -> Iterator[Call]:
    """Every function that takes square A (batch, n, n) and right-hand sides B (batch, n, k)."""
    batch, n = A.shape[0], A.shape[-1]
    shape = "x".join(map(str, A.shape))
    tall = torch.cat((A, A), -2)
    # Singular values 2 .. 1/2: det near 1 at every n, away from over- and underflow.
    D = testing.batch_of((batch,), n, A.dtype, rng, cond=4, scale=2).to(A.device)
    yield "inv_ex", shape, lambda: testing.inv_ratio(A, LA.inv_ex(A).inverse)
    yield "det", shape, lambda: testing.det_ratio(D, LA.det(D))
    yield "lu_factor_ex", shape, lambda: testing.lu_ratio(A, *LA.lu_factor_ex(A)[:2])
    yield "lu_factor_ex", f"{shape} stacked twice", lambda: testing.lu_ratio(tall, *LA.lu_factor_ex(tall)[:2])
    yield "lu", shape, lambda: _plu_ratio(A, *LA.lu(A))
    yield "solve", f"{shape} {B.shape[-1]} rhs", lambda: testing.general_solve_ratio(A, LA.solve(A, B), B)
    yield "solve", f"{shape} {B.shape[-1]} rhs, right", lambda: testing.general_solve_ratio(A, LA.solve(A, B.mT, left=False), B.mT, False)
    for left in (True, False):  # lu_solve_small's four cases (the transposed and conjugated instances)
        for adjoint in (False, True):
            rhs = B if left else B.mT.contiguous()
            yield "lu_solve", f"{shape} {B.shape[-1]} rhs{'' if left else ', right'}{', adjoint' if adjoint else ''}", (
                lambda rhs=rhs, left=left, adjoint=adjoint: testing.general_solve_ratio(
                    A, LA.lu_solve(*LA.lu_factor(A), rhs, left=left, adjoint=adjoint), rhs, left, adjoint))
    for upper in (False, True):
        for unit in (False, True):
            T = _triangles(rng, batch, n, A.dtype, upper, unit, A.device)
            for k in (1, 8, 16, 40):
                rhs = torch.cat((B,) * 5, -1)[..., :k]
                flags = f"{'upper' if upper else 'lower'}{' unit' if unit else ''}"
                yield "solve_triangular", f"{shape} {k} rhs {flags}", lambda T=T, rhs=rhs, upper=upper, unit=unit: (
                    testing.solve_ratio(T, LA.solve_triangular(T, rhs, upper=upper, unitriangular=unit), rhs, upper, True, unit)
                )
    L = _triangles(rng, batch, n, A.dtype, False, False, A.device)
    yield "tril_inverse", shape, lambda: testing.inv_ratio(L, LA.tril_inverse(L))
    yield "qr", shape, lambda: max(testing.qr_ratios(A, *LA.qr(A)))
    yield "qr", f"{shape} stacked twice, complete", lambda: max(testing.qr_ratios(tall, *LA.qr(tall, mode="complete")))
    P = testing.hermitian_batch((batch,), n, A.dtype, rng).to(A.device)  # positive definite, condition 10
    yield "cholesky", shape, lambda: testing.cholesky_ratio(P, LA.cholesky(P))
    H = testing.hermitian_batch((batch,), n, A.dtype, rng, definite=False).to(A.device)
    yield "eigh", f"{shape} indefinite", lambda: max(testing.eigh_ratios(H, *LA.eigh(H)))
    yield "eigvalsh", f"{shape} upper", lambda: testing.eigh_ratios(H, LA.eigvalsh(H.mH, UPLO="U"), None)[2]
    yield "svd", shape, lambda: max(testing.svd_ratios(A, *LA.svd(A)))
    yield "svd", f"{shape} stacked twice, full", lambda: max(testing.svd_ratios(tall, *LA.svd(tall, full_matrices=True)))
    if n:
        yield "ormqr", f"{shape} {B.shape[-1]} rhs", lambda: _ormqr_ratio(A, B)


def _ormqr_ratio(A: torch.Tensor, C: torch.Tensor) -> float:
    """sqrt03: ||Q^H C - ormqr(C)||_1 / (m ||C||_1 eps), Q from householder_product."""
    packed, tau = LA.geqrf(A)
    q, c = testing.exact(LA.householder_product(packed, tau)), testing.exact(C)
    x = testing.exact(LA.ormqr(packed, tau, C, True, True))
    residual = testing.norm1(np.conj(np.swapaxes(q, -1, -2)) @ c - x)
    return testing.scaled_ratio(residual, A.shape[-2] * testing.norm1(c) * testing.eps(A.dtype), A.dtype)


def _panel_calls(A: torch.Tensor) -> Iterator[Call]:
    """The blocked factorizations of a tall (m, 40) panel."""
    shape = "x".join(map(str, A.shape))
    yield "lu_factor_ex", shape, lambda: testing.lu_ratio(A, *LA.lu_factor_ex(A)[:2])
    yield "qr", shape, lambda: max(testing.qr_ratios(A, *LA.qr(A)))


# Orders that reach every instance, and no more (the battery runs in CI, on the CPU): the
# fused n <= 4 kernels, the small kernels' sizes (16, 32, 64 exactly for the triangular
# fast path) and between them (5, 12, 17, 33), the blocked paths (65).
KERNEL_SIZES = (1, 2, 3, 4, 5, 12, 16, 17, 32, 33, 64, 65)
PANEL_ROWS = (300, 600, 1100, 2100, 4200)  # the LU and QR panels' shapes, by height


def kernel_battery(device: torch.device, dtype: torch.dtype) -> Iterator[Call]:
    """Calls on ``device`` that launch every instance of ``dtype``'s kernels, each judged by
    its LAPACK ratio (the int32 permutation kernel comes with ``lu``). The smaller
    instances that a device whose pipelines allow fewer threads takes (``thread_limit``)
    are launched by repeating the calls that choose among them under the limit."""
    rng = np.random.default_rng(2024)
    for n in KERNEL_SIZES:
        A = _square(rng, (3,), n, dtype, device)
        yield from _square_calls(rng, A, _normal(rng, (3, n, 8), dtype).to(device))
    tiny = _square(rng, (1000,), 3, dtype, device)  # many threadgroups, the last part-full
    yield "svd", "1000x3x3", lambda: max(testing.svd_ratios(tiny, *LA.svd(tiny)))
    covariances = tiny @ tiny.mH
    yield "eigh", "1000x3x3", lambda: max(testing.eigh_ratios(covariances, *LA.eigh(covariances)))
    many = _square(rng, (16,), 65, dtype, device)  # the blocked LU in row-major order
    yield "lu_factor_ex", "16x65x65", lambda: testing.lu_ratio(many, *LA.lu_factor_ex(many)[:2])
    for m in PANEL_ROWS:  # with 1024 threads where they fit, and as where only 256 do
        A = _normal(rng, (1, m, 40), dtype).to(device)
        yield from _panel_calls(A)
        yield from _limited(256, _panel_calls(A))
    A = _square(rng, (1,), 65, dtype, device)  # svd_jacobi's 512 threads, where 1024 do not fit
    yield from _limited(512, [("svd", "1x65x65", lambda: max(testing.svd_ratios(A, *LA.svd(A))))])
    if not dtype.is_complex:
        for chunk in (16, 32, 64):
            A = torch.from_numpy(rng.standard_normal((2, 3 * chunk, 2, chunk)) * 0.1).to(dtype).to(device)
            yield "solve_tril", f"2x{3 * chunk}x2x{chunk}", lambda A=A: _solve_tril_ratio(A, LA.solve_tril(A, output_dtype=A.dtype))
    # eig_small: cgeev's path for complex dtypes, sgeev's for real ones (pairs a +- ib and,
    # at odd n, a real eigenvalue), over more than one threadgroup.
    for n in (6, 7):
        general = testing.nonnormal_batch((150,), n, dtype, rng, cond=10.0).to(device)
        yield "eig", f"150x{n}x{n}", lambda general=general: _eig_ratio(general, *LA.eig(general))
    for n in KERNEL_SIZES:  # matrix_exp: every N of the squaring kernel (norms past theta_7: squarings), products past them
        A = _expm_batch(rng, 3, n, dtype, 5.0, 20.0).to(device)
        yield "matrix_exp", f"3x{n}x{n}", lambda A=A: matrix_exp_ratio(A, matrix_exp(A))


def _eig_ratio(A: torch.Tensor, w: torch.Tensor, V: torch.Tensor) -> float:
    """The largest of eig's ratios (testing.eig_ratios); for real A infinity unless the
    eigenpairs have sgeev's structure (testing.real_eig_structure)."""
    ratio = max(testing.eig_ratios(A, w, V))
    return ratio if A.is_complex() or testing.real_eig_structure(w, V) is not None else float("inf")


def _limited(threads: int, calls) -> Iterator[Call]:
    """``calls`` with routes chosen as where pipelines allow at most ``threads`` threads."""
    for function, shape, call in calls:

        def limited(call=call):
            with runtimes.thread_limit(threads):
                return call()

        yield function, f"{shape} (at most {threads} threads)", limited


def _solve_tril_ratio(A: torch.Tensor, out: torch.Tensor) -> float:
    """``out``, (I + A)^-1 per chunk of BT rows for strictly lower A in the [B, T, H, BT]
    layout, against float64: the error in units of BT eps max |reference|."""
    batch, T, heads, chunk = A.shape
    chunks = lambda M: M.cpu().double().view(batch, T // chunk, chunk, heads, chunk).permute(0, 1, 3, 2, 4)
    reference = TORCH.inv(torch.eye(chunk, dtype=torch.float64) + chunks(A).tril(-1))
    return (chunks(out) - reference).abs().max().item() / (chunk * testing.eps(A.dtype) * reference.abs().max().item())


def check_kernels(runtime: runtimes.Runtime, device: torch.device, dtypes, progress=sys.stderr) -> list[KernelRow]:
    """Every instance of ``dtypes`` that ``runtime`` can launch: compiled (and timed), then
    run by the battery; a row each."""
    rows = {i.host_name: KernelRow(i.host_name, i.kernel.function) for i in runtime.instances() if i.scalar.dtype in dtypes or i.scalar.dtype == torch.int32}
    instances = [i for i in runtime.instances() if i.host_name in rows]
    for count, instance in enumerate(instances, 1):
        row = rows[instance.host_name]
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", runtimes.FallbackWarning)  # the row says it
            try:
                runtime.compiled(instance, device)
            except runtimes.KernelUnavailable as unavailable:
                row.error = str(unavailable).split(": ", 1)[-1]
        row.compile_seconds = time.perf_counter() - start
        print(f"\rcompiled {count}/{len(instances)} {instance.host_name:<60}", end="", file=progress, flush=True)
    print(file=progress)
    launched: set[str] = set()
    real_launch = runtime.launch

    def recording(instance, *args):
        real_launch(instance, *args)
        launched.add(instance.host_name)

    runtime.launch = recording
    try:
        for dtype in dtypes:
            for function, shape, call in kernel_battery(device, dtype):
                launched.clear()
                name = f"{function} {str(dtype).removeprefix('torch.')} {shape}"
                print(f"\rrunning {name:<70}", end="", file=progress, flush=True)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", runtimes.FallbackWarning)
                    try:
                        ratio, failure = call(), ""
                    except Exception as error:  # a failing call fails every instance it launched
                        ratio, failure = float("nan"), f"{name}: {type(error).__name__}: {error}"
                if not failure and not ratio < testing.THRESHOLD:
                    failure = f"{name}: ratio {ratio:.3g}"
                for host_name in launched:
                    row = rows[host_name]
                    row.calls += 1
                    row.worst = max(row.worst, ratio) if ratio == ratio else ratio
                    row.error = row.error or failure
    finally:
        del runtime.launch  # the class's own again
    print(file=progress)
    return list(rows.values())


def main_kernels() -> int:
    name, device, selected = best_runtime()
    if name.startswith("torch.linalg"):
        print(f"mpslinalg {LA.__version__}: no kernel runtime is usable here: {backends()}")
        return 1
    runtime = runtimes.for_device(device)
    print(f"mpslinalg {LA.__version__} kernel check on {name} ({device}), torch {torch.__version__}, "
          f"{len(runtime.instances())} instances", flush=True)
    with selected:
        table = check_kernels(runtime, device, runtime.dtypes)
    print(f"{'kernel':<24} {'instance':<44} {'compile ms':>10} {'status':>7} {'calls':>5} {'worst ratio':>11}  error")
    for row in table:
        print(f"{row.kernel:<24} {row.instance:<44} {row.compile_seconds * 1e3:>10.1f} {row.status:>7} {row.calls:>5} "
              f"{row.worst:>11.3g}  {row.error}")
    failed = sum(row.status != "pass" for row in table)
    print(f"{len(table) - failed} of {len(table)} instances passed" + (f", {failed} did not" if failed else ""))
    return 1 if failed else 0
