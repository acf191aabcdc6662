"""``python -m mpslinalg check``: every public function on the best runtime, against SciPy.

Each row runs one function on a fixed batch of matrices with a known condition
number and prints LAPACK's scaled residual for it (see mpslinalg.testing), its
threshold, pass/fail and the time of the call. Exit status 1 if any row fails.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np
import torch

import mpslinalg as LA

from . import svd_family, testing
from ._dispatch import TORCH, backends, use_backend
from .inverse import SMALL
from .lu_family import SIZES as LU_SIZES
from .qr_family import GEQRF_SMALL, small_size as qr_small_size


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


def rows(device: torch.device, dtypes: tuple[torch.dtype, ...]) -> list[Row]:
    rng = np.random.default_rng(2024)
    results = []
    for dtype in dtypes:
        for n in (1, 2, 3, 4, 8):
            A = testing.batch_of((1000,), n, dtype, rng, cond=1e3).to(device)
            shape = "1000x%dx%d" % (n, n)
            for name, call, ratio in [
                ("inv", lambda: LA.inv(A), lambda X: testing.inv_ratio(A, X)),
                ("inv_ex", lambda: LA.inv_ex(A).inverse, lambda X: testing.inv_ratio(A, X)),
                ("det", lambda: LA.det(A), lambda d: testing.det_ratio(A, d)),
            ]:
                result, seconds = _timed(device, call)
                via = "fused kernel" if n <= SMALL else "LU kernels"
                results.append(Row(name, str(dtype).removeprefix("torch."), shape, ratio(result), testing.THRESHOLD, seconds, via))
        results += _triangular_rows(device, dtype, rng)
        results += _lu_rows(device, dtype, rng)
        results += _qr_rows(device, dtype, rng)
        results += _svd_rows(device, dtype, rng)
        singular = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=dtype).expand(16, 2, 2).to(device)
        _, seconds = _timed(device, lambda: LA.inv_ex(singular))
        results.append(Row("inv_ex info", str(dtype).removeprefix("torch."), "16x2x2 rank 1", _singular_info_ratio(singular), 1.0, seconds))
    return results


def _triangular_rows(device: torch.device, dtype: torch.dtype, rng) -> list[Row]:
    results = []
    name = str(dtype).removeprefix("torch.")
    for n, k, (upper, left, unit) in [
        (5, 3, (False, True, False)),
        (16, 8, (False, True, True)),
        (64, 64, (False, True, False)),
        (32, 5, (True, False, False)),
        (100, 10, (True, True, True)),
    ]:
        count = 200
        A = torch.from_numpy(np.array([testing.triangle(n, 10.0, rng, dtype.is_complex, upper, unit) for _ in range(count)])).to(dtype).to(device)
        shape = (count, n, k) if left else (count, k, n)
        B = _normal(rng, shape, dtype).to(device)
        X, seconds = _timed(device, lambda: LA.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit))
        flags = ("upper" if upper else "lower") + (" left" if left else " right") + (" unit" if unit else "")
        ratio = testing.solve_ratio(A, X, B, upper, left, unit)
        results.append(Row("solve_triangular", name, f"{count}x{n}x{n} {k} rhs {flags}", ratio, testing.THRESHOLD, seconds))
    L = torch.from_numpy(np.array([testing.triangle(48, 10.0, rng, dtype.is_complex, False, False) for _ in range(200)])).to(dtype).to(device)
    X, seconds = _timed(device, lambda: LA.tril_inverse(L))
    results.append(Row("tril_inverse", name, "200x48x48", testing.inv_ratio(L, X), testing.THRESHOLD, seconds))
    if not dtype.is_complex:
        # (I + A)^-1 for strictly lower A per chunk of 64 rows, [B, T, H, BT]: the error
        # against float64, in units of n * eps * max |reference|.
        A = torch.from_numpy(rng.standard_normal((2, 256, 4, 64)) * 0.1).to(dtype).to(device)
        blocks = A.view(2, 4, 64, 4, 64).permute(0, 1, 3, 2, 4).double().cpu().tril(-1)
        reference = TORCH.inv(torch.eye(64, dtype=torch.float64) + blocks)
        out, seconds = _timed(device, lambda: LA.solve_tril(A, output_dtype=dtype))
        got = out.cpu().double().view(2, 4, 64, 4, 64).permute(0, 1, 3, 2, 4)
        ratio = (got - reference).abs().max().item() / (64 * testing.eps(dtype) * reference.abs().max().item())
        results.append(Row("solve_tril", name, "2x256x4x64", ratio, testing.THRESHOLD, seconds))
    return results


def _lu_rows(device: torch.device, dtype: torch.dtype, rng) -> list[Row]:
    """lu_factor (sget01), lu_solve in its four forms and solve (sget02), inv (sget03),
    det, on the small kernel's sizes and on the blocked path."""
    results = []
    name = str(dtype).removeprefix("torch.")
    for count, m, n in [(500, 8, 8), (500, 32, 32), (200, 64, 64), (200, 40, 25), (200, 25, 40), (4, 200, 200), (2, 300, 150)]:
        A = testing.batch_of((count,), n, dtype, rng, cond=1e3) if m == n else _normal(rng, (count, m, n), dtype)
        A = A.to(device)
        via = "small kernel" if max(m, n) <= LU_SIZES[-1] else "blocked"
        (LU, pivots, _), seconds = _timed(device, lambda: LA.lu_factor_ex(A))
        shape = f"{count}x{m}x{n}"
        results.append(Row("lu_factor_ex", name, shape, testing.lu_ratio(A, LU, pivots), testing.THRESHOLD, seconds, via))
        if m != n:
            continue
        B = _normal(rng, (count, n, 8), dtype).to(device)
        for left, adjoint in [(True, False), (True, True), (False, False), (False, True)]:
            rhs = B if left else B.mT
            X, seconds = _timed(device, lambda: LA.lu_solve(LU, pivots, rhs, left=left, adjoint=adjoint))
            flags = ("left" if left else "right") + (" adjoint" if adjoint else "")
            ratio = testing.general_solve_ratio(A, X, rhs, left, adjoint)
            results.append(Row("lu_solve", name, f"{shape} 8 rhs {flags}", ratio, testing.THRESHOLD, seconds, via))
        X, seconds = _timed(device, lambda: LA.solve(A, B))
        results.append(Row("solve", name, f"{shape} 8 rhs", testing.general_solve_ratio(A, X, B), testing.THRESHOLD, seconds, via))
        X, seconds = _timed(device, lambda: LA.inv(A))
        results.append(Row("inv", name, shape, testing.inv_ratio(A, X), testing.THRESHOLD, seconds, via))
        # Singular values 2 .. 1/2 (det near 1 at every n, away from over- and underflow).
        D = testing.batch_of((count,), n, dtype, rng, cond=4, scale=2).to(device)
        d, seconds = _timed(device, lambda: LA.det(D))
        results.append(Row("det", name, shape, testing.det_ratio(D, d), testing.THRESHOLD, seconds, via))
    return results


def _qr_rows(device: torch.device, dtype: torch.dtype, rng) -> list[Row]:
    """qr in its reduced and complete modes: sqrt01's residual and sqrt02's orthogonality."""
    results = []
    name = str(dtype).removeprefix("torch.")
    for count, m, n in [(500, 8, 8), (500, 32, 32), (200, 32, 20), (200, 20, 32), (4, 100, 60), (2, 60, 100), (1, 700, 300)]:
        A = _normal(rng, (count, m, n), dtype).to(device)
        via = "small kernels" if qr_small_size(GEQRF_SMALL, m, n, dtype) else "blocked"
        for mode in ("reduced", "complete"):
            (Q, R), seconds = _timed(device, lambda: LA.qr(A, mode=mode))
            residual, orthogonality = testing.qr_ratios(A.cpu(), Q.cpu(), R.cpu())
            shape = f"{count}x{m}x{n} {mode}"
            results.append(Row("qr", name, shape + " residual", residual, testing.THRESHOLD, seconds, via))
            results.append(Row("qr", name, shape + " orthogonality", orthogonality, testing.THRESHOLD, seconds, via))
    # sqrt03: ||op(Q) C - ormqr(C)||_1 / (m ||C||_1 eps), Q formed by householder_product.
    m, k = 150, 70
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
        results.append(Row("ormqr", name, f"2x{m}x{k} {flags}", ratio, testing.THRESHOLD, seconds, "blocked"))
    return results


def _svd_rows(device: torch.device, dtype: torch.dtype, rng) -> list[Row]:
    """svd: sbdt01's residual, sort01's orthogonality of U and V, and the singular values
    against SciPy's; pinv by its first Moore-Penrose condition, ||A X A - A||_1 /
    (max(m, n) ||A||_1^2 ||X||_1 eps), the rounding of the product itself."""
    results = []
    name = str(dtype).removeprefix("torch.")
    for count, m, n in [(4096, 3, 3), (500, 8, 8), (50, 32, 32), (20, 64, 64), (20, 100, 30), (20, 30, 100)]:
        A = _normal(rng, (count, m, n), dtype).to(device)
        k = min(m, n)
        via = "a thread" if k <= 3 else "registers" if svd_family._pair_size(k, dtype) else "threadgroup"
        via += " a matrix" + (", QR first" if m != n else "")
        (U, S, Vh), seconds = _timed(device, lambda: LA.svd(A))
        ratios = testing.svd_ratios(A.cpu(), U.cpu(), S.cpu(), Vh.cpu())
        for what, ratio in zip(("residual", "U orthogonality", "V orthogonality", "singular values"), ratios):
            results.append(Row("svd", name, f"{count}x{m}x{n} {what}", ratio, testing.THRESHOLD, seconds, via))
        X, seconds = _timed(device, lambda: LA.pinv(A))
        a, x = torch.from_numpy(testing.exact(A)), torch.from_numpy(testing.exact(X))
        norm = lambda M: torch.linalg.matrix_norm(M, 1)
        error = norm(a @ x @ a - a) / (max(m, n) * norm(a) ** 2 * norm(x) * testing.eps(dtype))
        results.append(Row("pinv", name, f"{count}x{m}x{n} AXA = A", error.max().item(), testing.THRESHOLD, seconds, via))
    return results


def main() -> int:
    name, device, selected = best_runtime()
    with selected:
        dtypes = (torch.float32, torch.complex64) + ((torch.float64, torch.complex128) if device.type != "mps" else ())
        table = rows(device, dtypes)
    if name.startswith("torch.linalg"):  # no kernel ran
        table = [replace(row, via="torch.linalg") for row in table]
    print(f"mpslinalg {LA.__version__} check on {name} ({device}), torch {torch.__version__}")
    print(f"{'function':<17} {'dtype':<11} {'shape':<32} {'via':<13} {'ratio':>10} {'< thresh':>9} {'result':>6} {'time ms':>9}")
    for row in table:
        verdict = "pass" if row.passed else "FAIL"
        print(
            f"{row.function:<17} {row.dtype:<11} {row.shape:<32} {row.via:<13} {row.ratio:>10.3g} {row.threshold:>9.3g} "
            f"{verdict:>6} {row.seconds * 1e3:>9.3f}"
        )
    failed = sum(not row.passed for row in table)
    print(f"{len(table) - failed} passed, {failed} failed")
    return 1 if failed else 0
