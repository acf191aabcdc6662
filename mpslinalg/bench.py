"""``python -m mpslinalg.bench [family ...]``: mpslinalg against torch.linalg and peers, in one run.

Every row is timed in the same process on the same device, so comparisons hold
whatever the machine is doing. Time is per call, the median over repeats of a
loop of back-to-back calls (so a call's host overhead counts when it exceeds
the device time); "graph" rows replay the same calls from a CUDA graph, which
leaves the device time alone. Effective bandwidth counts each input byte read
once and each output byte written once; the fraction is of the device's
memory bandwidth (vendor figure, with a measured device-to-device copy beside it).

Families: inv, triangular, lu, qr, svd, cholesky, eigh, matrix_exp. Peers, where importable: CuPy
(``cupy.linalg.inv``), JAX (``jnp.linalg.qr``, ``svd``, ``eigh``), fla-core
(``fla.ops.utils.solve_tril``) and kornia (``inverse_transformation`` of rigid
poses). A table per family goes to stdout (``--markdown``, ``--json``: also to
files); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import importlib.metadata
import json
import os
import re
import signal
import statistics
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Callable
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile, record_function

import mpslinalg as LA

from . import eigh_family, runtimes
from ._kernel import Buffer
from .check import _synchronize, best_runtime

# The row each case's speed-up is measured against.
BASELINES = (
    "torch.linalg.inv",
    "torch.linalg.inv_ex",
    "torch.linalg.solve_triangular",
    "torch.linalg.lu_factor",
    "torch.linalg.lu_factor_ex",
    "torch.linalg.lu_solve",
    "torch.linalg.det",
    "torch.linalg.qr",
    "torch.geqrf",
    "torch.linalg.svd",
    "torch.linalg.cholesky",
    "torch.linalg.cholesky_ex",
    "torch.cholesky_solve",
    "torch.linalg.eigh",
    "torch.linalg.eigvalsh",
    "torch.linalg.eig",
    "torch.linalg.eigvals",
    "torch.linalg.matrix_exp",
)

# Vendor memory bandwidths, bytes/s, by the start of torch.cuda.get_device_name().
PEAK_BANDWIDTH = {
    "NVIDIA H200": 4.8e12,
    "NVIDIA H100 80GB HBM3": 3.35e12,
    "NVIDIA A100-SXM4-80GB": 2.04e12,
}


@dataclass
class Result:
    family: str
    case: str
    implementation: str
    seconds: float
    bytes: int
    host: float | None = None  # the host's time until the call returned (latency rows)
    kernels: int | None = None  # device kernels the call launched (latency rows: CUDA; the CPU's mpslinalg launches)
    ops: int | None = None  # torch ops outside those launches that run on the device (CPU latency rows)
    products: float | None = None  # large rows: the share of LAPACK's flop count done in matrix products
    ratio: float | None = None  # large rows: LAPACK's test ratio of the result (below testing.THRESHOLD)

    @property
    def bandwidth(self) -> float:
        return self.bytes / self.seconds if self.seconds else 0.0


def time_per_call(device: torch.device, call: Callable, loop: int = 20, repeats: int = 7, warmup: int = 3) -> float:
    for _ in range(warmup):
        call()
    _synchronize(device)
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(loop):
                call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / loop)
        else:
            begin = time.perf_counter()
            for _ in range(loop):
                call()
            _synchronize(device)
            samples.append((time.perf_counter() - begin) / loop)
    return statistics.median(samples)


def time_graph_replay(call: Callable, loop: int = 20, repeats: int = 7) -> float | None:
    """Per-call device time of ``call`` replayed from a CUDA graph; None if it cannot be captured."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # thread_local: a capture in the global mode fails the CUDA calls that another
            # library's threads make meanwhile (JAX's, which then stay failed).
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                for _ in range(loop):
                    call()
    except Exception:
        return None
    if any("Graph is empty" in str(w.message) for w in caught):
        return None  # the call ran on a stream of its own (CuPy): nothing was captured
    return time_per_call(torch.device("cuda"), graph.replay, loop=1, repeats=repeats) / loop


class Progress:
    """A bar over the families on stderr, with the case being timed: rewritten in place
    on a terminal, a line per case elsewhere (CI logs)."""

    def __init__(self, families: list[str], stream=sys.stderr):
        self.families, self.stream = families, stream
        self.done, self.cases, self.start = 0, 0, time.perf_counter()
        self.results: list[Result] = []  # every row measured so far
        self.terminal = stream.isatty()

    def case(self, family: str, case: str) -> None:
        self.cases += 1
        width = 20
        filled = width * self.done // len(self.families)
        line = (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{len(self.families)} families, "
            f"{self.cases} cases, {time.perf_counter() - self.start:.0f} s: {family} {case}"
        )
        self.stream.write(f"\r{line[:120]:120}" if self.terminal else line + "\n")
        self.stream.flush()

    def family_done(self) -> None:
        self.done += 1
        if self.terminal and self.done == len(self.families):
            self.stream.write("\n")


_progress: Progress | None = None
_only: re.Pattern | None = None  # bench latency --only


def measure(
    family: str, case: str, rows: list[tuple[str, Callable, int]], device: torch.device, graph: bool = True, **timing
) -> list[Result]:
    """A row per (name, call, bytes), and on CUDA (unless ``graph`` is False: calls of
    seconds) a "(graph)" row beside each call that a CUDA graph can capture, so that
    every implementation is also timed without its host overhead."""
    if _progress is not None:
        _progress.case(family, case)
    results = []
    for name, call, nbytes in rows:
        results.append(Result(family, case, name, time_per_call(device, call, **timing), nbytes))
        # JAX launches on streams of its own, which a capture under torch's global
        # capture mode leaves in an error state for every later JAX call.
        if graph and device.type == "cuda" and not name.startswith("jax."):
            replay = time_graph_replay(call, **timing)
            if replay is not None:
                results.append(Result(family, case, name + " (graph)", replay, nbytes))
    if _progress is not None:
        _progress.results += results
    return results


def peers(device: torch.device) -> dict[str, Callable]:
    """Other libraries' batched inverse a user might pick, where importable."""
    found = {}
    if device.type == "cuda":
        try:
            import cupy

            found["cupy.linalg.inv"] = lambda A: cupy.linalg.inv(cupy.asarray(A))
        except ImportError:
            pass
    return found


def bench_inv(device: torch.device, batch: int) -> list[Result]:
    results = []
    for dtype, n in [(torch.float32, 3), (torch.float32, 4), (torch.complex64, 4)]:
        generator = torch.Generator(device).manual_seed(0)
        # Random with a dominant diagonal: distinct, well-conditioned matrices.
        A = torch.randn(batch, n, n, dtype=dtype, device=device, generator=generator)
        A = A + 2 * n * torch.eye(n, dtype=dtype, device=device)
        item = A.element_size()
        matrix_bytes = batch * n * n * item
        case = f"{batch} x {n}x{n} {str(dtype).removeprefix('torch.')}"
        rows: list[tuple[str, Callable, int]] = [
            ("mpslinalg.inv_ex", lambda: LA.inv_ex(A), 2 * matrix_bytes + 4 * batch),
            ("mpslinalg.inv", lambda: LA.inv(A), 2 * matrix_bytes + 4 * batch),
            ("torch.linalg.inv_ex", lambda: torch.linalg.inv_ex(A), 2 * matrix_bytes + 4 * batch),
            ("torch.linalg.inv", lambda: torch.linalg.inv(A), 2 * matrix_bytes + 4 * batch),
            ("mpslinalg.det", lambda: LA.det(A), matrix_bytes + batch * item),
            ("torch.linalg.det", lambda: torch.linalg.det(A), matrix_bytes + batch * item),
        ]
        rows += [(name, (lambda f=f: f(A)), 2 * matrix_bytes) for name, f in peers(device).items()]
        results += measure("inv", case, rows, device)
    poses = rigid_poses(batch, device)
    nbytes = 2 * poses.numel() * poses.element_size()
    rows = [
        ("mpslinalg.inv_ex", lambda: LA.inv_ex(poses), nbytes + 4 * batch),
        ("torch.linalg.inv_ex", lambda: torch.linalg.inv_ex(poses), nbytes + 4 * batch),
    ]
    if (kornia_inverse := _kornia_inverse_transformation()) is not None:
        rows.append(("kornia inverse_transformation (rigid only)", lambda: kornia_inverse(poses), nbytes))
    results += measure("inv", f"{batch} x 4x4 float32 rigid poses", rows, device)
    return results


def rigid_poses(count: int, device: torch.device) -> torch.Tensor:
    """``count`` 4x4 rigid transforms [R t; 0 1], R from random unit quaternions."""
    generator = torch.Generator(device).manual_seed(4)
    w, x, y, z = torch.nn.functional.normalize(torch.randn(4, count, device=device, generator=generator), dim=0)
    R = torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], dim=-1).view(count, 3, 3)
    T = torch.eye(4, device=device).repeat(count, 1, 1)
    T[:, :3, :3] = R
    T[:, :3, 3] = torch.randn(count, 3, device=device, generator=generator)
    return T


def _kornia_inverse_transformation():
    """kornia's inverse of rigid 4x4 poses (R^T, -R^T t: no general inverse), where importable."""
    try:
        from kornia.geometry.linalg import inverse_transformation

        return inverse_transformation
    except Exception:  # kornia missing, or failing to import beside this torch
        return None


def _fla_solve_tril():
    try:
        from fla.ops.utils import solve_tril

        return solve_tril
    except Exception:  # fla-core missing, or without Triton / a GPU
        return None


def _fla_like_chunks(batch, T, heads, chunk, device):
    """A as flash-linear-attention builds it: beta * K K^T of normalised keys, strictly
    lower in each chunk, [B, T, H, BT]; and the float64 reference (I + A)^-1 per chunk."""
    generator = torch.Generator(device).manual_seed(0)
    k = torch.nn.functional.normalize(torch.randn(batch, T, heads, 64, device=device, generator=generator), dim=-1)
    beta = torch.rand(batch, T, heads, device=device, generator=generator)
    kc = k.view(batch, T // chunk, chunk, heads, 64)
    blocks = torch.einsum("bnihd,bnjhd->bnhij", kc, kc) * beta.view(batch, T // chunk, chunk, heads).transpose(2, 3)[..., None]
    blocks = blocks.tril(-1)
    A = blocks.permute(0, 1, 3, 2, 4).reshape(batch, T, heads, chunk).contiguous()
    eye = torch.eye(chunk, dtype=torch.float64, device=device)
    reference = torch.linalg.inv(eye + blocks.double()).permute(0, 1, 3, 2, 4).reshape(batch, T, heads, chunk)
    return A, blocks, reference


def bench_triangular(device: torch.device, batch: int) -> list[Result]:
    results = []
    systems = 16384 if device.type != "cpu" else 256
    for n in (16, 32, 64):
        for k in (8, 16, 64):
            generator = torch.Generator(device).manual_seed(n * k)
            A = (torch.randn(systems, n, n, device=device, generator=generator) / n**0.5 + 2 * torch.eye(n, device=device)).tril()
            B = torch.randn(systems, n, k, device=device, generator=generator)
            case = f"{systems} x lower {n}x{n}, {k} rhs"
            nbytes = 4 * systems * (n * n + 2 * n * k)
            rows = [
                ("mpslinalg.solve_triangular", lambda: LA.solve_triangular(A, B, upper=False), nbytes),
                ("torch.linalg.solve_triangular", lambda: torch.linalg.solve_triangular(A, B, upper=False), nbytes),
            ]
            results += measure("triangular", case, rows, device)
    fla = _fla_solve_tril() if device.type == "cuda" else None
    B_, T, H = (8, 8192, 16) if device.type != "cpu" else (1, 512, 2)
    for chunk in (16, 32, 64):
        A, blocks, reference = _fla_like_chunks(B_, T, H, chunk, device)
        case = f"(I+A)^-1 B={B_} T={T} H={H} BT={chunk}"
        nbytes = 2 * A.numel() * 4
        square = (torch.eye(chunk, device=device) + blocks).reshape(-1, chunk, chunk)
        eye = torch.eye(chunk, device=device).expand_as(square)
        rows = [
            ("mpslinalg.solve_tril", lambda: LA.solve_tril(A)),
            ("torch.linalg.solve_triangular", lambda: torch.linalg.solve_triangular(square, eye, upper=False, unitriangular=True)),
        ]
        if fla is not None:
            rows.append(("fla solve_tril", lambda: fla(A)))
        for name, call in rows:
            if name != "torch.linalg.solve_triangular":
                name += f" (max error {(call().double() - reference).abs().max().item():.1e})"
            results += measure("triangular", case, [(name, call, nbytes)], device)
    if device.type != "cpu":
        n = 4096
        generator = torch.Generator(device).manual_seed(1)
        A = (torch.randn(n, n, device=device, generator=generator) / n**0.5 + 2 * torch.eye(n, device=device)).tril()
        B = torch.randn(n, n, device=device, generator=generator)
        rows = [
            ("mpslinalg.solve_triangular", lambda: LA.solve_triangular(A, B, upper=False), 3 * n * n * 4),
            ("torch.linalg.solve_triangular", lambda: torch.linalg.solve_triangular(A, B, upper=False), 3 * n * n * 4),
        ]
        results += measure("triangular", "4096x4096 lower, 4096 rhs", rows, device, loop=3, repeats=3)
    return results


def bench_lu(device: torch.device, batch: int) -> list[Result]:
    """lu_factor, lu_solve (8 right-hand sides) and det on 10^4 small matrices, and
    lu_factor on single large ones; a case per function, each against its torch.linalg namesake."""
    results = []
    count = 10_000 if device.type != "cpu" else 256
    for dtype in (torch.complex64, torch.float32):
        kind = str(dtype).removeprefix("torch.")
        for n in (8, 16, 32, 64):
            generator = torch.Generator(device).manual_seed(n)
            A = torch.randn(count, n, n, dtype=dtype, device=device, generator=generator)
            B = torch.randn(count, n, 8, dtype=dtype, device=device, generator=generator)
            LU, pivots = torch.linalg.lu_factor(A)
            item = A.element_size()
            matrices, rhs = count * n * n * item, count * n * 8 * item
            shape = f"{count} x {n}x{n} {kind}"
            results += measure("lu", f"{shape} lu_factor", [
                ("mpslinalg.lu_factor_ex", lambda: LA.lu_factor_ex(A), 2 * matrices + 4 * count * (n + 1)),
                ("torch.linalg.lu_factor_ex", lambda: torch.linalg.lu_factor_ex(A), 2 * matrices + 4 * count * (n + 1)),
                ("mpslinalg.lu_factor", lambda: LA.lu_factor(A), 2 * matrices + 4 * count * n),
                ("torch.linalg.lu_factor", lambda: torch.linalg.lu_factor(A), 2 * matrices + 4 * count * n),
            ], device)
            results += measure("lu", f"{shape} lu_solve, 8 rhs", [
                ("mpslinalg.lu_solve", lambda: LA.lu_solve(LU, pivots, B), matrices + 4 * count * n + 2 * rhs),
                ("torch.linalg.lu_solve", lambda: torch.linalg.lu_solve(LU, pivots, B), matrices + 4 * count * n + 2 * rhs),
            ], device)
            results += measure("lu", f"{shape} det", [
                ("mpslinalg.det", lambda: LA.det(A), matrices + count * item),
                ("torch.linalg.det", lambda: torch.linalg.det(A), matrices + count * item),
            ], device)
    if device.type != "cpu":
        for dtype in (torch.complex64, torch.float32):
            for n in (1024, 4096):
                A = torch.randn(n, n, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(n))
                nbytes = 2 * A.numel() * A.element_size() + 4 * n
                results += measure("lu", f"{n}x{n} {str(dtype).removeprefix('torch.')} lu_factor", [
                    ("mpslinalg.lu_factor_ex", lambda: LA.lu_factor_ex(A), nbytes),
                    ("torch.linalg.lu_factor_ex", lambda: torch.linalg.lu_factor_ex(A), nbytes),
                ], device, loop=3, repeats=3)
    return results


def _jax(sample: torch.Tensor, function: str):
    """``jnp.linalg.<function>`` on a CUDA tensor (through DLPack, no copy), or None
    where JAX is missing or cannot run beside torch here. JAX must not preallocate
    the GPU's memory that torch already holds."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    try:
        import jax
        import jax.numpy as jnp

        kwargs = {"full_matrices": False} if function == "svd" else {}

        def call(A):
            return jax.block_until_ready(getattr(jnp.linalg, function)(jax.dlpack.from_dlpack(A), **kwargs))

        call(sample)
        return call
    except Exception:  # JAX missing, without a GPU, or failing beside torch
        return None


def bench_qr(device: torch.device, batch: int) -> list[Result]:
    """qr (reduced) on 10^4 small and tall matrices and single large ones, against
    torch.linalg.qr and, where importable, JAX's jnp.linalg.qr."""
    results = []
    count = 10_000 if device.type != "cpu" else 256
    jax_qr = _jax(torch.randn(4, 8, 8, device=device), "qr") if device.type == "cuda" else None
    for dtype in (torch.float32, torch.complex64):
        kind = str(dtype).removeprefix("torch.")
        for m, n in ((8, 8), (32, 32), (64, 64), (128, 32)):
            A = torch.randn(count, m, n, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(m))
            # torch.linalg.qr takes about 0.6 s a call here: few calls.
            results += measure("qr", f"{count} x {m}x{n} {kind}", _qr_cases(A, jax_qr), device, loop=1, repeats=3)
    if device.type != "cpu":
        for dtype in (torch.float32, torch.complex64):
            for n in (1024, 4096):
                A = torch.randn(n, n, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(n))
                results += measure("qr", f"{n}x{n} {str(dtype).removeprefix('torch.')}", _qr_cases(A, jax_qr), device, loop=1, repeats=3)
    return results


def _qr_cases(A: torch.Tensor, jax_qr) -> list:
    """qr and geqrf, ours against torch's (and JAX's qr), with the bytes each moves at
    least: A read, Q and R (or the packed factors) written."""
    m, n = A.shape[-2:]
    k = min(m, n)
    count = A.shape[:-2].numel()
    nbytes = count * (m * n + m * k + k * n) * A.element_size()
    rows = [
        ("mpslinalg.qr", lambda: LA.qr(A), nbytes),
        ("torch.linalg.qr", lambda: torch.linalg.qr(A), nbytes),
        ("mpslinalg.geqrf", lambda: LA.geqrf(A), 2 * A.numel() * A.element_size()),
        ("torch.geqrf", lambda: torch.geqrf(A), 2 * A.numel() * A.element_size()),
    ]
    if jax_qr is not None:
        rows.append(("jax.numpy.linalg.qr", lambda: jax_qr(A), nbytes))
    return rows


def bench_svd(device: torch.device, batch: int) -> list[Result]:
    """svd (reduced) on 2^20 3x3 matrices (geometry), 10^4 small ones, 10^3 tall 256x64 and
    single 1024x1024, 8192x1024 and 4096x4096 ones (and polar beside them), against torch.linalg.svd (its default driver, and gesvd on CUDA where a
    call takes under seconds) and, where importable, JAX. Each call of the slow peers
    takes seconds: one warm-up call, one timed, no graph rows."""
    results = []
    small = device.type == "cpu"
    cases = [(2**20 if not small else 4096, 3, 3), (10_000, 8, 8), (10_000, 32, 32), (10_000, 64, 64), (1000, 256, 64)]
    if not small:
        cases += [(1, 1024, 1024), (1, 8192, 1024), (1, 4096, 4096)]
    jax_svd = _jax(torch.randn(4, 8, 8, device=device), "svd") if device.type == "cuda" else None
    for dtype in (torch.float32, torch.complex64):
        kind = str(dtype).removeprefix("torch.")
        for count, m, n in cases:
            if small:
                count = min(count, 256)
            A = torch.randn(count, m, n, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(m))
            k = min(m, n)
            item = A.element_size()
            nbytes = count * (m * n + m * k + k * n) * item + count * k * item // (2 if dtype.is_complex else 1)
            rows = [
                ("mpslinalg.svd", lambda: LA.svd(A, full_matrices=False), nbytes),
                ("torch.linalg.svd", lambda: torch.linalg.svd(A, full_matrices=False), nbytes),
            ]
            if device.type == "cuda" and count * n <= 10_000 * 8:
                rows.append(("torch.linalg.svd driver=gesvd", lambda: torch.linalg.svd(A, full_matrices=False, driver="gesvd"), nbytes))
            if jax_svd is not None:
                rows.append(("jax.numpy.linalg.svd", lambda: jax_svd(A), nbytes))
            if count == 1:  # the polar decomposition by QDWH alone, beside the SVD built on it
                rows.append(("mpslinalg.polar", lambda: LA.polar(A), nbytes))
            shape = f"{count} x {m}x{n}" if count > 1 else f"{m}x{n}"
            results += measure("svd", f"{shape} {kind}", rows, device, graph=False, loop=1, repeats=1, warmup=1)
    return results


def _runs(call: Callable) -> bool:
    """Whether ``call`` completes: torch.linalg.eigh of 2^20 3x3 matrices asks the H200
    for 265 GiB."""
    try:
        call()
        return True
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return False


def bench_eigh(device: torch.device, batch: int) -> list[Result]:
    """eigh and eigvalsh on 2^20 3x3 covariances, 10^4 small matrices and single large
    ones, against torch.linalg and, where importable, JAX's jnp.linalg.eigh. Bytes: A
    read, the eigenvalues and eigenvectors written."""
    results = []
    small = device.type == "cpu"
    cases = [(2**20, 3), (10_000, 8), (10_000, 16), (10_000, 32), (10_000, 64)]
    jax_eigh = _jax(torch.randn(4, 8, 8, device=device), "eigh") if device.type == "cuda" else None
    # The single large matrices last: a run cut short by its time limit keeps both dtypes' batches.
    large = [] if small else [(dtype, 1, n) for n in (1024, 4096) for dtype in (torch.float32, torch.complex64)]
    for dtype, count, n in [(dtype, count, n) for dtype in (torch.float32, torch.complex64) for count, n in cases] + large:
        kind = str(dtype).removeprefix("torch.")
        count = min(count, 256) if small else count
        X = torch.randn(count, n, n, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(n))
        A = X @ X.mH / n if n == 3 else X + X.mH  # covariances; else indefinite
        item = A.element_size()
        nbytes = 2 * A.numel() * item + count * n * item // (2 if dtype.is_complex else 1)
        rows = [("mpslinalg.eigh", lambda: LA.eigh(A), nbytes), ("mpslinalg.eigvalsh", lambda: LA.eigvalsh(A), nbytes)]
        if _runs(lambda: torch.linalg.eigh(A)):
            rows += [("torch.linalg.eigh", lambda: torch.linalg.eigh(A), nbytes),
                     ("torch.linalg.eigvalsh", lambda: torch.linalg.eigvalsh(A), nbytes)]
        if jax_eigh is not None:
            rows.append(("jax.numpy.linalg.eigh", lambda: jax_eigh(A), nbytes))
        if eigh_family._by_jacobi(A[:1], False, False) is not None:  # the crossover to the larger n's route
            rows.append(("mpslinalg.eigh by the SVD", lambda: eigh_family._by_svd(A, False, True), nbytes))
        shape = f"{count} x {n}x{n}" if count > 1 else f"{n}x{n}"
        # torch's batched eigh takes seconds at 64x64: one call each. No graphs of
        # single large matrices either: after the captures at 1024 (ours, torch's syevd)
        # cuSOLVER failed (CUSOLVER_STATUS_EXECUTION_FAILED) on the H200; the block route syncs.
        slow = count * n >= 10_000 * 64 or n >= 1024
        timing = {"loop": 1, "repeats": 1, "warmup": 1} if slow else {"loop": 3, "repeats": 3}
        results += measure("eigh", f"{shape} {kind}", rows, device, graph=not slow, **timing)
    return results


def bench_eig(device: torch.device, batch: int) -> list[Result]:
    """eig and eigvals on 10^4 16x16 and 10^3 64x64 general matrices (and one 1024x1024,
    LAPACK's on both sides), against torch.linalg.eig (which on CUDA copies to the host
    and runs LAPACK) and, where importable, JAX's jnp.linalg.eig. Bytes: A read, the
    complex eigenvalues and eigenvectors written."""
    results = []
    small = device.type == "cpu"
    cases = [(10_000, 16), (1_000, 64)] + ([] if small else [(1, 1024)])
    jax_eig = _jax(torch.randn(4, 8, 8, device=device), "eig") if device.type == "cuda" else None
    for dtype in (torch.float32, torch.complex64):
        kind = str(dtype).removeprefix("torch.")
        for count, n in cases:
            count = min(count, 256) if small else count
            A = torch.randn(count, n, n, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(n))
            out_item = 8 if dtype == torch.float32 else A.element_size()  # complex64 out
            nbytes = A.numel() * A.element_size() + (count * n + A.numel()) * out_item
            rows = [("mpslinalg.eig", lambda: LA.eig(A), nbytes), ("mpslinalg.eigvals", lambda: LA.eigvals(A), nbytes),
                    ("torch.linalg.eig", lambda: torch.linalg.eig(A), nbytes),
                    ("torch.linalg.eigvals", lambda: torch.linalg.eigvals(A), nbytes)]
            if jax_eig is not None:
                rows.append(("jax.numpy.linalg.eig", lambda: jax_eig(A), nbytes))
            shape = f"{count} x {n}x{n}" if count > 1 else f"{n}x{n}"
            # torch's eig of a batch takes seconds (LAPACK on the host, a matrix at a time),
            # and syncs: one call each, no graphs.
            results += measure("eig", f"{shape} {kind}", rows, device, graph=False, loop=1, repeats=1, warmup=1)
    return results


def bench_cholesky(device: torch.device, batch: int) -> list[Result]:
    """cholesky (and cholesky_ex) on 10^4 small matrices and single large ones, against
    torch.linalg.cholesky. Bytes: A read, L written."""
    results = []
    small = device.type == "cpu"
    cases = [(10_000, 8), (10_000, 64)] + ([] if small else [(1, 1024), (1, 4096)])
    for dtype in (torch.float32, torch.complex64):
        kind = str(dtype).removeprefix("torch.")
        for count, n in cases:
            count = min(count, 256) if small else count
            X = torch.randn(count, n, n, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(n))
            A = X @ X.mH / n + torch.eye(n, dtype=dtype, device=device)
            nbytes = 2 * A.numel() * A.element_size()
            rows = [
                ("mpslinalg.cholesky_ex", lambda: LA.cholesky_ex(A), nbytes),
                ("torch.linalg.cholesky_ex", lambda: torch.linalg.cholesky_ex(A), nbytes),
                ("mpslinalg.cholesky", lambda: LA.cholesky(A), nbytes),
                ("torch.linalg.cholesky", lambda: torch.linalg.cholesky(A), nbytes),
            ]
            shape = f"{count} x {n}x{n}" if count > 1 else f"{n}x{n}"
            results += measure("cholesky", f"{shape} {kind}", rows, device, loop=5, repeats=5)
    return results


# issue 34's table: the LU family, Cholesky, triangular solves, QR, eigh and SVD on
# 10^4 small matrices (8 right-hand sides), each size and dtype one eager call.
LATENCY_TABLE = ("lu_factor_ex", "lu_solve", "solve", "det", "inv", "cholesky_ex", "solve_triangular", "qr", "eigh", "svd")
LATENCY_SIZES = (8, 16, 32)


def _latency_table(device: torch.device, random, eye) -> list[tuple[str, str, Callable, str, Callable]]:
    count = 10**4 if device.type != "cpu" else 16
    cases = []
    for dtype in (torch.float32, torch.complex64):
        for n in LATENCY_SIZES:
            A = random(count, n, n, dtype=dtype) + n**0.5 * eye(n, dtype)
            P = A @ A.mH / n + eye(n, dtype)
            H = A + A.mH
            L = A.tril()
            B = random(count, n, 8, dtype=dtype)
            LU, pivots = LA.lu_factor(A)
            calls = {
                "lu_factor_ex": lambda f, A=A: f(A), "det": lambda f, A=A: f(A), "inv": lambda f, A=A: f(A),
                "cholesky_ex": lambda f, P=P: f(P), "qr": lambda f, A=A: f(A), "eigh": lambda f, H=H: f(H),
                "svd": lambda f, A=A: f(A), "solve": lambda f, A=A, B=B: f(A, B),
                "lu_solve": lambda f, LU=LU, p=pivots, B=B: f(LU, p, B),
                "solve_triangular": lambda f, L=L, B=B: f(L, B, upper=False),
            }
            for name in LATENCY_TABLE:
                call, ours, theirs = calls[name], getattr(LA, name), getattr(torch.linalg, name)
                case = f"{count} x {n}x{n} {str(dtype).removeprefix('torch.')}" + (", 8 rhs" if "solve" in name else "")
                cases.append((name, case, lambda c=call, f=ours: c(f), f"torch.linalg.{name}", lambda c=call, f=theirs: c(f)))
    return cases


def _latency_cases(device: torch.device) -> list[tuple[str, str, Callable, str, Callable]]:
    """(function, case, mpslinalg's call, torch's function, torch's call): issue 34's table
    (LATENCY_TABLE), the small batched calls of a training step (issue 23's sizes) and
    one small case of every public function that launches kernels."""
    generator = torch.Generator(device).manual_seed(23)

    def random(*shape, dtype=torch.float32):
        return torch.randn(*shape, dtype=dtype, device=device, generator=generator)

    def eye(n, dtype=torch.float32):
        return torch.eye(n, dtype=dtype, device=device)

    cases = _latency_table(device, random, eye)
    count = 16384 if device.type != "cpu" else 256
    for n in (16, 32, 64):
        L, B = (random(count, n, n) / n**0.5 + 2 * eye(n)).tril(), random(count, n, 8)
        cases.append(("solve_triangular", f"{count} x {n}x{n}, 8 rhs", lambda L=L, B=B: LA.solve_triangular(L, B, upper=False),
                      "torch.linalg.solve_triangular", lambda L=L, B=B: torch.linalg.solve_triangular(L, B, upper=False)))
    for chunk in (16, 32, 64):
        A, blocks, _ = _fla_like_chunks(1, 4096 if device.type != "cpu" else 256, 16 if device.type != "cpu" else 2, chunk, device)
        square = (eye(chunk) + blocks).reshape(-1, chunk, chunk)
        identity = eye(chunk).expand_as(square)
        cases.append(("solve_tril", f"(I+A)^-1 {square.shape[0]} chunks, BT={chunk}", lambda A=A: LA.solve_tril(A),
                      "torch.linalg.solve_triangular", lambda S=square, I=identity: torch.linalg.solve_triangular(S, I, upper=False, unitriangular=True)))
    small = 1024 if device.type != "cpu" else 16
    S4, S3 = random(small, 4, 4) + 8 * eye(4), random(small, 3, 3) + 6 * eye(3)
    M = random(small, 32, 32) + 32**0.5 * eye(32)
    C = random(small, 32, 32, dtype=torch.complex64)
    P = M @ M.mT / 32 + eye(32)
    H = M + M.mT
    R = random(small, 32, 8)
    tall = random(small, 64, 16)
    LU, pivots = torch.linalg.lu_factor(M)
    Lc = torch.linalg.cholesky(P)
    Q, tau = torch.geqrf(tall)
    E4, E16, E32 = S4 / 8, M[..., :16, :16] / 16, M / 32  # norms about 1: a squaring or two
    for name, shape, a in (("inv_ex", "4x4", S4), ("inv_ex", "3x3", S3), ("inv", "4x4", S4), ("det", "4x4", S4),
                           ("inv", "32x32", M), ("det", "32x32", M), ("slogdet", "32x32", M), ("logdet", "32x32", P),
                           ("lu_factor", "32x32", M), ("lu_factor_ex", "32x32", M), ("lu", "32x32", M),
                           ("lu_factor", "32x32 complex64", C), ("qr", "32x32", M), ("svd", "32x32", M),
                           ("svdvals", "32x32", M), ("pinv", "32x32", M), ("matrix_rank", "32x32", M),
                           ("eigh", "32x32", H), ("eigvalsh", "32x32", H), ("cholesky", "32x32", P),
                           ("cholesky_ex", "32x32", P)):
        ours = getattr(LA, name)
        torch_name = "torch.logdet" if name == "logdet" else f"torch.linalg.{name}"
        theirs = torch.logdet if name == "logdet" else getattr(torch.linalg, name)
        cases.append((name, f"{small} x {shape}", lambda f=ours, a=a: f(a), torch_name, lambda f=theirs, a=a: f(a)))
    cases += [
        ("solve", f"{small} x 32x32, 8 rhs", lambda: LA.solve(M, R), "torch.linalg.solve", lambda: torch.linalg.solve(M, R)),
        ("solve_ex", f"{small} x 32x32, 8 rhs", lambda: LA.solve_ex(M, R), "torch.linalg.solve_ex", lambda: torch.linalg.solve_ex(M, R)),
        ("lu_solve", f"{small} x 32x32, 8 rhs", lambda: LA.lu_solve(LU, pivots, R), "torch.linalg.lu_solve", lambda: torch.linalg.lu_solve(LU, pivots, R)),
        ("cholesky_solve", f"{small} x 32x32, 8 rhs", lambda: LA.cholesky_solve(R, Lc), "torch.cholesky_solve", lambda: torch.cholesky_solve(R, Lc)),
        ("cholesky_inverse", f"{small} x 32x32", lambda: LA.cholesky_inverse(Lc), "torch.cholesky_inverse", lambda: torch.cholesky_inverse(Lc)),
        ("tril_inverse", f"{small} x 32x32", lambda: LA.tril_inverse(Lc), "torch.linalg.solve_triangular",
         lambda: torch.linalg.solve_triangular(Lc, eye(32).expand_as(Lc), upper=False)),
        ("lstsq", f"{small} x 64x16, 8 rhs", lambda: LA.lstsq(tall, tall[..., :8]), "torch.linalg.lstsq", lambda: torch.linalg.lstsq(tall, tall[..., :8])),
        ("geqrf", f"{small} x 64x16", lambda: LA.geqrf(tall), "torch.geqrf", lambda: torch.geqrf(tall)),
        ("householder_product", f"{small} x 64x16", lambda: LA.householder_product(Q, tau), "torch.linalg.householder_product",
         lambda: torch.linalg.householder_product(Q, tau)),
        ("ormqr", f"{small} x 64x16, 8 columns", lambda: LA.ormqr(Q, tau, tall[..., :8]), "torch.ormqr", lambda: torch.ormqr(Q, tau, tall[..., :8])),
        ("matrix_exp", f"{small} x 4x4", lambda: LA.matrix_exp(E4), "torch.linalg.matrix_exp", lambda: torch.linalg.matrix_exp(E4)),
        ("matrix_exp", f"{small} x 16x16", lambda: LA.matrix_exp(E16), "torch.linalg.matrix_exp", lambda: torch.linalg.matrix_exp(E16)),
        ("matrix_exp", f"{small} x 32x32", lambda: LA.matrix_exp(E32), "torch.linalg.matrix_exp", lambda: torch.linalg.matrix_exp(E32)),
        ("eig", f"{small} x 32x32", lambda: LA.eig(M), "torch.linalg.eig", lambda: torch.linalg.eig(M)),
        ("eigvals", f"{small} x 32x32", lambda: LA.eigvals(M), "torch.linalg.eigvals", lambda: torch.linalg.eigvals(M)),
        ("cond", f"{small} x 32x32", lambda: LA.cond(M), "torch.linalg.cond", lambda: torch.linalg.cond(M)),
        ("matrix_norm", f"{small} x 32x32, ord=2", lambda: LA.matrix_norm(M, ord=2), "torch.linalg.matrix_norm",
         lambda: torch.linalg.matrix_norm(M, ord=2)),
        ("matrix_power", f"{small} x 32x32, -2", lambda: LA.matrix_power(M, -2), "torch.linalg.matrix_power",
         lambda: torch.linalg.matrix_power(M, -2)),
        ("lu_unpack", f"{small} x 32x32", lambda: LA.lu_unpack(LU, pivots), "torch.lu_unpack", lambda: torch.lu_unpack(LU, pivots)),
        ("tensorinv", "32x(4x8)", lambda: LA.tensorinv(M[0].reshape(4, 8, 32), ind=2), "torch.linalg.tensorinv",
         lambda: torch.linalg.tensorinv(M[0].reshape(4, 8, 32), ind=2)),
        ("tensorsolve", "32x32", lambda: LA.tensorsolve(M[0], R[0, :, 0]), "torch.linalg.tensorsolve",
         lambda: torch.linalg.tensorsolve(M[0], R[0, :, 0])),
        # torch has no polar decomposition or Hermitian square root: its SVD / eigh and products stand in.
        ("polar", f"{small} x 32x32", lambda: LA.polar(M), "torch.linalg.svd", lambda: _polar_by_svd(M)),
        ("matrix_sqrth", f"{small} x 32x32", lambda: LA.matrix_sqrth(P), "torch.linalg.eigh", lambda: _sqrth_by_eigh(P)),
    ]
    return cases


def _polar_by_svd(A: torch.Tensor) -> torch.Tensor:
    U, _, Vh = torch.linalg.svd(A)
    return U @ Vh


def _sqrth_by_eigh(A: torch.Tensor) -> torch.Tensor:
    w, V = torch.linalg.eigh(A)
    return (V * w.clamp_min(0).sqrt()[..., None, :]) @ V.mH


def _kernels_launched(device: torch.device, call: Callable) -> int | None:
    """The device kernels one call launches (CUDA: the profiler's kernel records, CuPy's
    launches among them); None elsewhere."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        call()
        torch.cuda.synchronize()
    return sum(1 for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA)


# aten ops that launch nothing on a device: views, metadata, allocations.
NO_DEVICE_WORK = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::as_strided", "aten::view", "aten::_reshape_alias",
    "aten::reshape", "aten::slice", "aten::select", "aten::transpose", "aten::t", "aten::permute", "aten::expand",
    "aten::unsqueeze", "aten::squeeze", "aten::detach", "aten::alias", "aten::resolve_conj", "aten::resolve_neg",
    "aten::_conj", "aten::conj", "aten::mH", "aten::mT", "aten::adjoint", "aten::diagonal", "aten::narrow",
    "aten::split", "aten::unbind", "aten::lift_fresh", "aten::_unsafe_view", "aten::view_as_real",
    "aten::view_as_complex", "aten::numpy_T", "aten::contiguous", "aten::to", "aten::split_with_sizes",
    "aten::result_type", "aten::is_nonzero", "aten::unflatten", "aten::flatten", "aten::movedim", "aten::expand_as",
    "aten::chunk", "aten::type_as", "aten::clone", "aten::_to_copy", "aten::new_empty", "aten::new_empty_strided",
}
_LAUNCH = "mpslinalg launch"
# Matrix products: one device kernel each (cuBLAS's, MPS's GEMM), whatever the CPU's
# implementation calls under them (baddbmm copies its input there first).
MATMULS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addmm_", "aten::baddbmm_", "aten::addbmm"}


def _device_events(device: torch.device, call) -> tuple[int, list]:
    """(kernels, events): mpslinalg's launches in one call of ``call``, and the profiler's
    aten events outside them that run on the device (a composite op such as clone
    counts through the copy_ it makes; a matrix product counts as itself, not the ops
    the CPU's implementation runs under it)."""
    runtime = runtimes.for_device(device)
    launch = runtime.launch
    kernels = 0

    def counted(*args, **kwargs):
        nonlocal kernels
        kernels += 1
        with record_function(_LAUNCH):
            return launch(*args, **kwargs)

    with (mock.patch.object(runtime, "launch", counted),
          profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler):
        call()

    def within(event, names) -> bool:  # event itself or an op it runs under is one of names
        while event is not None:
            if event.name in names:
                return True
            event = event.cpu_parent
        return False

    return kernels, [e for e in profiler.events() if e.name.startswith("aten::") and not within(e, {_LAUNCH})
                     and not within(e.cpu_parent, MATMULS)
                     and (e.name in MATMULS or not e.cpu_children and e.name not in NO_DEVICE_WORK)]


def device_work(device: torch.device, call) -> tuple[int, list[str]]:
    """(kernels, names of the device ops) of one call of ``call`` (_device_events)."""
    kernels, events = _device_events(device, call)
    return kernels, [e.name for e in events]


def product_flops(events: list, complex_: bool) -> float:
    """Real flops of the matrix products among ``events`` (2 m k n each, a complex
    product 4 real ones), from their operands' shapes: mm and bmm take (a, b[, out]),
    the add forms (c, a, b, ...)."""
    total = 0.0
    for e in events:
        if e.name in MATMULS:
            shapes = e.input_shapes
            a, b = shapes[1:3] if e.name.startswith(("aten::add", "aten::badd")) else shapes[:2]
            batch = torch.Size(a[:-2]).numel()
            total += 2 * batch * a[-2] * a[-1] * b[-1] * (4 if complex_ else 1)
    return total


def bench_latency(device: torch.device, batch: int) -> list[Result]:
    """One call at a time, as a training step makes it: the time from the call to the end
    of its device work (a synchronisation before and after; median of 50), beside the
    host time alone (until the call returns) and the device kernels it launched (fewer
    calls than 50 where they would take more than LATENCY_BUDGET_S). On the
    CPU (the OpenCL runtime) the host time is mpslinalg's alone, as if its launches cost
    nothing (_stubbed_host_times), with its launches and the torch ops beside them that
    would run on a device (device_work); torch's row is its whole call there. Bytes:
    none counted (latency, not bandwidth)."""
    results, stubbed = [], []
    for function, case, ours, torch_name, theirs in _latency_cases(device):
        if _only is not None and not _only.search(f"{function} {case}"):
            continue
        if _progress is not None:
            _progress.case("latency", f"{function} {case}")
        for name, call in ((f"mpslinalg.{function}", ours), (torch_name, theirs)):
            if device.type == "cpu" and call is ours:
                for _ in range(3):  # compiles, with the real launches
                    call()
                launches, ops = device_work(device, call)
                row = Result("latency", f"{function} {case}", f"{name} {STUBBED}", 0.0, 0, host=0.0, kernels=launches,
                             ops=len(ops))
                stubbed.append((row, call))
            else:
                for _ in range(2):
                    call()
                _synchronize(device)
                begin = time.perf_counter()
                call()
                _synchronize(device)
                # 50 calls, fewer where one takes long (torch's batched QR: half a second a call).
                repeats = max(5, min(50, int(LATENCY_BUDGET_S / (time.perf_counter() - begin))))
                whole, host = [], []
                for _ in range(repeats):
                    _synchronize(device)
                    begin = time.perf_counter()
                    call()
                    returned = time.perf_counter()
                    _synchronize(device)
                    whole.append(time.perf_counter() - begin)
                    host.append(returned - begin)
                row = Result("latency", f"{function} {case}", name, statistics.median(whole), 0,
                             host=statistics.median(host), kernels=_kernels_launched(device, call))
            results.append(row)
            if _progress is not None:  # kept row by row: a run stopped by its time limit writes them
                _progress.results.append(row)
    if stubbed:
        for (row, _), host in zip(stubbed, _stubbed_host_times(device, [call for _, call in stubbed])):
            row.seconds = row.host = host
    return results


LATENCY_BUDGET_S = 1.0  # timed seconds a latency row may take, beyond its minimum of 5 calls
STUBBED = "(host, launches stubbed)"  # a CPU row's implementation ends so: not comparable with torch's
ON_THE_CPU = "(OpenCL on the CPU)"  # a large row's, likewise: the CPU's time, not a device's


def _stubbed_host_times(device: torch.device, calls: list[Callable], per_round: int = 50, rounds: int = 9) -> list[float]:
    """Each call's host time with its launches stubbed out: mpslinalg's own Python and
    torch's ops around its kernels, as if a launch cost nothing. The least of ``rounds``
    medians over ``per_round`` calls, the rounds taken in turn over all the calls, so
    that each call's rounds spread over the whole run: a shared CPU runs a process at
    half speed for seconds at a time, which one call's rounds back to back would all
    fall in. The stub runs no kernel (the OpenCL runtime's worker threads would spin
    on the cores the Python thread needs); it zeroes the int outputs (info, pivots), so
    that checks and permutations read valid values, and its own time is left out."""
    runtime = runtimes.for_device(device)
    time.sleep(0.1)  # the runtime's worker threads stop spinning
    inside = 0.0

    def stub(instance, groups, args, device):
        nonlocal inside
        begin = time.perf_counter()
        for arg, declared in zip(args, instance.kernel.args):
            if isinstance(declared, Buffer) and declared.element == "int" and not declared.const:
                arg.zero_()
        inside += time.perf_counter() - begin

    best = [float("inf")] * len(calls)
    gc.disable()  # as timeit: a collection now and then belongs to no one call
    try:
        with mock.patch.object(runtime, "launch", stub):
            for _ in range(rounds):
                for k, call in enumerate(calls):
                    samples = []
                    for _ in range(per_round):
                        inside = 0.0
                        begin = time.perf_counter()
                        call()
                        samples.append(time.perf_counter() - begin - inside)
                    best[k] = min(best[k], statistics.median(samples))
    finally:
        gc.enable()
    return best


LARGE_SIZES = (1024, 4096)
LARGE_TALL = (65536, 64)  # a tall panel alone: qr and lu_factor_ex


def _large_cases(device: torch.device):
    """(function, case, ours, torch's, LAPACK's real flop count, the result's LAPACK ratio,
    the share of the products' flops that LAPACK counts) of issues 35 and 36's single
    large matrices."""
    from . import testing

    g = torch.Generator(device).manual_seed(0)
    cases = []
    shapes = [(n, n, dtype) for n in LARGE_SIZES for dtype in (torch.float32, torch.complex64)]
    for m, n, dtype in shapes + [(*LARGE_TALL, torch.float32)]:
        c = 4 if dtype.is_complex else 1  # real flops of a complex multiply-add, over a real one's
        A = torch.randn(m, n, generator=g, device=device, dtype=dtype)
        case = f"{m}x{n} {str(dtype).removeprefix('torch.')}"
        k = min(m, n)
        lu_flops = c * 2 * (m * n * k - (m + n) * k * k / 2 + k**3 / 3)
        cases.append(("lu_factor_ex", case, lambda A=A: LA.lu_factor_ex(A), lambda A=A: torch.linalg.lu_factor_ex(A),
                      lu_flops, lambda out, A=A: testing.lu_ratio(A, out[0], out[1]), 1.0))
        qr_flops = c * 2 * (2 * m * n * n - 2 * n**3 / 3)  # geqrf, then orgqr's Q
        cases.append(("qr", case, lambda A=A: LA.qr(A),
                      lambda A=A: torch.linalg.qr(A), qr_flops, lambda out, A=A: max(testing.qr_ratios(A, *out)), 1.0))
        if m != n:
            continue
        S = A @ A.mH / n + torch.eye(n, device=device, dtype=dtype)
        T = torch.tril(A) + n**0.5 * torch.eye(n, device=device, dtype=dtype)
        # The trailing products fill whole squares, of which L's lower half is LAPACK's count.
        cases.append(("cholesky_ex", case, lambda S=S: LA.cholesky_ex(S), lambda S=S: torch.linalg.cholesky_ex(S),
                      c * n**3 / 3, lambda out, S=S: testing.cholesky_ratio(S, out[0]), 0.5))
        cases.append((
            "solve_triangular", f"{case}, {n} rhs", lambda T=T, A=A: LA.solve_triangular(T, A, upper=False),
            lambda T=T, A=A: torch.linalg.solve_triangular(T, A, upper=False), c * n**3,
            lambda out, T=T, A=A: testing.solve_ratio(T, out, A, False, True, False), 1.0,
        ))
        # The solves from torch's factors (the same for both), n right-hand sides.
        M = T @ T.mH / n
        LU, pivots = torch.linalg.lu_factor(M)
        cases.append((
            "lu_solve", f"{case}, {n} rhs", lambda LU=LU, p=pivots, A=A: LA.lu_solve(LU, p, A),
            lambda LU=LU, p=pivots, A=A: torch.linalg.lu_solve(LU, p, A), c * 2 * n**3,
            lambda out, M=M, A=A: testing.general_solve_ratio(M, out, A), 1.0,
        ))
        L = torch.linalg.cholesky(S)
        cases.append((
            "cholesky_solve", f"{case}, {n} rhs", lambda L=L, A=A: LA.cholesky_solve(A, L),
            lambda L=L, A=A: torch.cholesky_solve(A, L), c * 2 * n**3,
            lambda out, S=S, A=A: testing.general_solve_ratio(S, out, A), 1.0,
        ))
        if n > 1024 and device.type == "cpu":
            continue  # issue 36's QDWH routes at 4096: minutes a call on two cores
        # LAPACK's counts with vectors: ssyevd's 4/3 n^3 reduction + 8/3 n^3 of sormtr and
        # the divide and conquer's products, about 9 n^3; sgesdd's about 22 n^3; the
        # polar decomposition's from the SVD, 22 n^3 + 2 n^3.
        H = A + A.mH
        cases.append(("eigh", case, lambda H=H: LA.eigh(H), lambda H=H: torch.linalg.eigh(H), c * 9 * n**3,
                      lambda out, H=H: max(testing.eigh_ratios(H, *out)), 1.0))
        cases.append(("svd", case, lambda A=A: LA.svd(A), lambda A=A: torch.linalg.svd(A), c * 22 * n**3,
                      lambda out, A=A: max(testing.svd_ratios(A, *out)), 1.0))
        if hasattr(torch.linalg, "polar"):
            cases.append(("polar", case, lambda A=A: LA.polar(A), lambda A=A: torch.linalg.polar(A), c * 24 * n**3,
                          lambda out, A=A: max(testing.polar_ratios(A, *out)), 1.0))
    return cases


def bench_large(device: torch.device, batch: int) -> list[Result]:
    """Issue 35's single large matrices, one eager call as in latency (host time
    included; median of 5 after a call that compiles), beside torch.linalg's; with the
    call's kernels (CUDA: the profiler's; the CPU: mpslinalg's launches + the torch ops
    beside them that would run on a device), the share of LAPACK's flop count that ran
    in matrix products, and LAPACK's test ratio of the result. On the CPU (OpenCL) the
    times are the CPU's, not comparable with a device's; ``batch`` is unused."""
    results = []
    cpu = device.type == "cpu"
    family = "large on the CPU" if cpu else "large"  # a merged report keeps both
    for function, case, ours, theirs, flops, ratio_of, useful in _large_cases(device):
        if _only is not None and not _only.search(f"{function} {case}"):
            continue
        if _progress is not None:
            _progress.case(family, f"{function} {case}")
        torch_name = f"torch.{function}" if function == "cholesky_solve" else f"torch.linalg.{function}"
        for name, call in ((f"mpslinalg.{function}" + (f" {ON_THE_CPU}" if cpu else ""), ours), (torch_name, theirs)):
            out = call()
            samples = []
            for _ in range(5 if not cpu or call is ours else 1):  # torch's CPU call once: seconds at 4096
                _synchronize(device)
                begin = time.perf_counter()
                call()
                _synchronize(device)
                samples.append(time.perf_counter() - begin)
            row = Result(family, f"{function} {case}", name, statistics.median(samples), 0,
                         kernels=_kernels_launched(device, call))
            if call is ours:
                kernels, events = _device_events(device, call)
                if cpu:
                    row.kernels, row.ops = kernels, len(events)
                complex_ = "complex" in case
                row.products = useful * product_flops(events, complex_) / flops
                row.ratio = float(ratio_of(out))
            results.append(row)
            if _progress is not None:
                _progress.results.append(row)
    return results


def bench_matrix_exp(device: torch.device, batch: int) -> list[Result]:
    """matrix_exp on 10^4 small matrices and single large ones, against
    torch.linalg.matrix_exp. Entries N(0, (10 / n)^2): 1-norms near 8, two squarings in
    single precision. Bytes: A read, exp(A) written."""

    results = []
    small = device.type == "cpu"
    cases = [(10_000, 4), (10_000, 32)] + ([] if small else [(1, 256), (1, 1024)])
    for dtype in (torch.float32, torch.complex64):
        kind = str(dtype).removeprefix("torch.")
        for count, n in cases:
            count = min(count, 256) if small else count
            generator = torch.Generator(device).manual_seed(n)
            A = torch.randn(count, n, n, dtype=dtype, device=device, generator=generator) * (10 / n)
            nbytes = 2 * A.numel() * A.element_size()
            rows = [
                ("mpslinalg.matrix_exp", lambda: LA.matrix_exp(A), nbytes),
                ("torch.linalg.matrix_exp", lambda: torch.linalg.matrix_exp(A), nbytes),
            ]
            shape = f"{count} x {n}x{n}" if count > 1 else f"{n}x{n}"
            results += measure("matrix_exp", f"{shape} {kind}", rows, device, loop=5, repeats=5)
    return results


FAMILIES = {"inv": bench_inv, "triangular": bench_triangular, "lu": bench_lu, "qr": bench_qr, "svd": bench_svd,
            "cholesky": bench_cholesky, "eigh": bench_eigh, "eig": bench_eig, "latency": bench_latency,
            "matrix_exp": bench_matrix_exp, "large": bench_large}
# A run without names measures all families but these (minutes on the CPU at n = 4096).
NAMED_ONLY = ("large",)


def device_limits(device: torch.device) -> tuple[str, float | None, float | None]:
    """(device name, vendor bandwidth, measured copy bandwidth) in bytes/s."""
    if device.type != "cuda":
        return str(device), None, None
    name = torch.cuda.get_device_name(device)
    src = torch.empty(2**30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy = time_per_call(device, lambda: dst.copy_(src), loop=10)
    peak = next((bw for prefix, bw in PEAK_BANDWIDTH.items() if name.startswith(prefix)), None)
    return name, peak, 2 * src.numel() / copy


def _baseline(results: list[Result], r: Result) -> Result | None:
    """The torch.linalg row ``r`` is compared with: its namesake where the case has one
    (torch.linalg.lu_factor_ex for mpslinalg.lu_factor_ex), timed the same way (graph
    or not) where it can be."""
    if r.family == "latency":  # a case's one torch row, whichever function stands in
        return next((b for b in results if (b.family, b.case) == (r.family, r.case) and b.implementation.startswith("torch.")), None)
    graph = r.implementation.endswith(" (graph)")
    rows = [b for b in results if (b.family, b.case) == (r.family, r.case) and b.implementation.removesuffix(" (graph)") in BASELINES]
    function = r.implementation.removesuffix(" (graph)").split(" ")[0].rsplit(".", 1)[-1]
    namesakes = (f"torch.linalg.{function}", f"torch.{function}")  # torch.geqrf is not in torch.linalg
    rows = [b for b in rows if b.implementation.removesuffix(" (graph)") in namesakes] or rows
    return next((b for b in rows if b.implementation.endswith(" (graph)") == graph), rows[0] if rows else None)


# peer -> the distributions it comes in
PEERS = {"cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"), "jax": ("jax",), "fla-core": ("fla-core",), "kornia": ("kornia",)}


def versions() -> str:
    """torch's and the installed peers' versions."""
    found = [f"torch {torch.__version__}"]
    for peer, distributions in PEERS.items():
        for distribution in distributions:
            try:
                found.append(f"{peer} {importlib.metadata.version(distribution)}")
                break
            except importlib.metadata.PackageNotFoundError:
                pass
    return ", ".join(found)


def _threshold() -> float:
    from .testing import THRESHOLD

    return THRESHOLD


def markdown(results: list[Result], header: str, peak: float | None) -> str:
    """The header, then a table per family in the order they ran."""
    lines = [header]
    for family in dict.fromkeys(r.family for r in results):
        if family == "latency":
            lines += ["", "## latency", "", "One call at a time, from the call until its device work ends (host time included), "
                      "and the host's time until the call returns. Rows marked " + STUBBED + " (the CPU's OpenCL runtime): "
                      "mpslinalg's host time alone, its launches' time left out, its kernels and the torch ops beside them "
                      "that would run on a device (kernels + ops); torch's row there is its whole call on the CPU.", "",
                      "| case | implementation | vs torch | time (ms) | host (ms) | device kernels |", "|---|---|---|---|---|---|"]
            for r in results:
                if r.family == family:
                    base = _baseline(results, r)
                    speedup = f"{base.seconds / r.seconds:.2f}x" if base and not r.implementation.endswith(STUBBED) else ""
                    kernels = "" if r.kernels is None else str(r.kernels) + ("" if r.ops is None else f" + {r.ops}")
                    lines.append(f"| {r.case} | {r.implementation} | {speedup} | {r.seconds * 1e3:.4f} | {r.host * 1e3:.4f} | {kernels} |")
            continue
        if family.startswith("large"):
            lines += ["", f"## {family}", "", "One eager call of a single large matrix (host time included; a call's own "
                      "kernels: CUDA's from the profiler; on the CPU mpslinalg's launches + the torch ops beside them that "
                      "would run on a device). Products: the matrix products' flops over LAPACK's flop count "
                      "(Cholesky's: half of its trailing products', which fill whole squares; QR's compact WY forms and "
                      "applies T beside V, so that its products do more than LAPACK's count). Ratio: LAPACK's test "
                      "ratio of the result (sget01, sqrt01/02, spot01, strt02 style; below "
                      f"{_threshold():g} passes). On the CPU the times are OpenCL's on the CPU's cores.", "",
                      "| case | implementation | vs torch | time (ms) | kernels | products | ratio |", "|---|---|---|---|---|---|---|"]
            for r in results:
                if r.family == family:
                    base = _baseline(results, r)
                    speedup = f"{base.seconds / r.seconds:.2f}x" if base and r is not base else ""
                    kernels = "" if r.kernels is None else str(r.kernels) + ("" if r.ops is None else f" + {r.ops}")
                    products = "" if r.products is None else f"{100 * r.products:.0f}%"
                    ratio = "" if r.ratio is None else f"{r.ratio:.2g}"
                    lines.append(f"| {r.case} | {r.implementation} | {speedup} | {r.seconds * 1e3:.2f} | {kernels} | {products} | {ratio} |")
            continue
        lines += ["", f"## {family}", "", "| case | implementation | vs torch.linalg | time (ms) | % of peak | GB/s |", "|---|---|---|---|---|---|"]
        for r in results:
            if r.family != family:
                continue
            base = _baseline(results, r)
            speedup = f"{base.seconds / r.seconds:.1f}x" if base else ""
            fraction = f"{100 * r.bandwidth / peak:.0f}%" if peak else ""
            lines.append(f"| {r.case} | {r.implementation} | {speedup} | {r.seconds * 1e3:.4f} | {fraction} | {r.bandwidth / 1e9:.3g} |")
    return "\n".join(lines) + "\n"


@dataclass
class Comparison:
    """One mpslinalg function on one case, against torch.linalg and the fastest peer."""

    family: str
    case: str
    function: str  # mpslinalg.inv_ex
    eager: Result
    graph: Result | None
    torch_eager: Result | None
    torch_graph: Result | None
    peer: Result | None  # the fastest row of neither mpslinalg nor torch

    @property
    def name(self) -> str:
        """The function alone: inv_ex (of "mpslinalg.inv_ex (max error ...)")."""
        return self.function.split(" ")[0].removeprefix("mpslinalg.")

    @property
    def eager_ratio(self) -> float | None:
        return self.torch_eager.seconds / self.eager.seconds if self.torch_eager else None

    @property
    def graph_ratio(self) -> float | None:
        return self.torch_graph.seconds / self.graph.seconds if self.graph and self.torch_graph else None


def comparisons(results: list[Result]) -> list[Comparison]:
    """Every mpslinalg row timed eagerly, with its graph replay and its baselines."""
    found = []
    for r in results:
        # Rows of one route of a function ("mpslinalg.eigh by the SVD") serve crossovers, not users;
        # host times with stubbed launches compare with no torch row.
        if (not r.implementation.startswith("mpslinalg.") or r.implementation.endswith((" (graph)", STUBBED, ON_THE_CPU))
                or " by the " in r.implementation):
            continue
        same = [o for o in results if (o.family, o.case) == (r.family, r.case)]
        graph = next((g for g in same if g.implementation == r.implementation + " (graph)"), None)
        others = [o for o in same if not o.implementation.startswith(("mpslinalg.", "torch."))]
        torch_graph = _baseline(results, graph) if graph else None
        found.append(Comparison(
            r.family, r.case, r.implementation, r, graph, _baseline(results, r),
            torch_graph if torch_graph and torch_graph.implementation.endswith(" (graph)") else None,
            min(others, key=lambda o: o.seconds, default=None),
        ))
    return found


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2g}x" if x < 10 else f"{x:.0f}x"


def _ms(seconds: float) -> str:
    """Milliseconds in plain notation: three significant digits, no exponent."""
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:,.0f}"
    return f"{float(f'{ms:.3g}'):g}" if ms >= 1e-3 else f"{ms:.6f}".rstrip("0")


def _run_rows(runs: dict[str, list[str]] | None, setting: str, shown: set) -> list[tuple[str, str, str, str]]:
    """(families, device, date, software) of each run whose families the page shows."""
    rows = []
    for where, families in (runs or {setting: sorted(shown)}).items():
        families = [f for f in families if f in shown]
        if not families:
            continue
        device, _, rest = where.partition(" via ")
        parts = [p.strip() for p in rest.split(";")]
        date = next((p for p in parts if re.fullmatch(r"\d{4}-\d{2}-\d{2}", p)), "")
        software = "; ".join(p for p in parts if p and p != date and not p.startswith(("vendor bandwidth", "measured copy")))
        rows.append((", ".join(families), device, date, software))
    return rows


# What a family's table needs said beside it.
FAMILY_NOTES = {
    "qr": "torch.linalg.qr of a batch on CUDA loops over the batch's matrices (a cuSOLVER call each), hence the "
          "ratios in the thousands for 10^4 small matrices.",
}


def performance_page(results: list[Result], header: str, peak: float | None, figures: str,
                     runs: dict[str, list[str]] | None = None) -> str:
    """The users' performance page: a summary per family and the plots first, then the
    runs (device, date, software), how to read the tables, the cases where torch.linalg
    is faster, and per family a table with the ratios first. ``runs`` (a merged report's
    settings and their families) names each family's device."""
    setting = header.split("\n\n")[1].split(". Time per call")[0]
    found = comparisons(results)
    families = list(dict.fromkeys(c.family for c in found))
    shown = set(families)
    run_rows = _run_rows(runs, setting, shown)
    device_of = {f: device for fs, device, _, _ in run_rows for f in fs.split(", ")}
    eager = [c for c in found if c.eager_ratio is not None]
    faster = sum(c.eager_ratio >= 1 for c in eager)
    lines = [
        "# Performance", "",
        f"mpslinalg against torch.linalg on the same GPU in the same process, one eager call each: faster in "
        f"{faster} of {len(eager)} measured cases"
        + (f" (median {_ratio(statistics.median(c.eager_ratio for c in eager))} torch)." if eager else ".")
        + " These are the Metal kernels' sources compiled for CUDA: no Apple GPU has been measured yet.", "",
        "| family | measured on | cases | faster than torch | median x torch | best |", "|---|---|---|---|---|---|",
    ]
    for family in families:
        rows = [c for c in eager if c.family == family]
        if not rows:
            continue
        best = max(rows, key=lambda c: c.eager_ratio)
        lines.append(f"| [{family}](#{family}) | {device_of.get(family, '')} | {len(rows)} | "
                     f"{sum(c.eager_ratio >= 1 for c in rows)} | {_ratio(statistics.median(c.eager_ratio for c in rows))} | "
                     f"{_ratio(best.eager_ratio)} ({best.case}) |")
    missing = [f for f in FAMILIES if f != "latency" and f not in shown]
    if missing:
        lines += ["", f"Not measured on a GPU yet: {', '.join(missing)}."]
    lines += ["", "## Plots", ""]
    lines += [f"![{family}: mpslinalg against torch.linalg]({figures}/{family}.svg)" for family in families
              if any(c.family == family for c in eager)]
    lines += ["", "## Runs", "", "| families | device | date | software |", "|---|---|---|---|"]
    lines += [f"| {fs} | {device} | {date} | {software} |" for fs, device, date, software in run_rows]
    lines += [
        "", "## How to read the tables", "",
        "**x torch** is torch.linalg's time divided by mpslinalg's for the same call "
        "on the same device in the same process, so above 1x mpslinalg is faster. *Eager* is one call as a "
        "training step makes it, host work included (the median of back-to-back calls); *GPU time* replays "
        "the calls from a CUDA graph, which leaves the device's work alone (blank: not captured, for calls "
        "that synchronise or take seconds). **% of HBM** is the effective "
        "bandwidth (each input byte read and each output byte written once) as a fraction of the device's. "
        "Times in milliseconds.", "",
        "## When not to use mpslinalg (yet)", "",
        "The measured cases where one eager call of torch.linalg is faster (small batched LU calls lose to "
        "host work around the kernels; single large matrices to cuSOLVER's blocked algorithms):", "",
        "| function | case | x torch | mpslinalg, ms | torch.linalg, ms |", "|---|---|---|---|---|",
    ]
    losing = [c for c in found if c.eager_ratio is not None and c.eager_ratio < 1]
    for c in losing:
        lines.append(f"| `{c.name}` | {c.case} | {_ratio(c.eager_ratio)} | "
                     f"{_ms(c.eager.seconds)} | {_ms(c.torch_eager.seconds)} |")
    if not losing:
        lines.append("| none | | | | |")
    for family in families:
        lines += ["", f"## {family}", ""]
        if family in device_of:
            lines += [f"On {device_of[family]}." + (f" {FAMILY_NOTES[family]}" if family in FAMILY_NOTES else ""), ""]
        lines += ["| case | function | x torch, eager | x torch, GPU time | ms, eager | % of HBM | fastest other |",
                  "|---|---|---|---|---|---|---|"]
        for c in found:
            if c.family != family:
                continue
            best = min((x for x in (c.eager, c.graph) if x), key=lambda x: x.seconds)
            hbm = f"{100 * best.bandwidth / peak:.0f}%" if peak else ""
            peer = f"{c.peer.implementation} {_ms(c.peer.seconds)} ms" if c.peer else ""
            lines.append(f"| {c.case} | `{c.function.removeprefix('mpslinalg.')}` | {_ratio(c.eager_ratio)} | "
                         f"{_ratio(c.graph_ratio)} | {_ms(c.eager.seconds)} | {hbm} | {peer} |")
    return "\n".join(lines) + "\n"


def plot(results: list[Result], directory: str) -> list[str]:
    """A horizontal bar chart per family of the x torch ratios (eager and GPU time, log
    scale), written as ``directory/<family>.svg``; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    found = comparisons(results)
    written = []
    for family in dict.fromkeys(c.family for c in found):
        rows = [c for c in found if c.family == family and c.eager_ratio is not None]
        if not rows:
            continue
        labels = [f"{c.name}  {c.case}" for c in rows]
        y = list(range(len(rows)))[::-1]
        fig, ax = plt.subplots(figsize=(9, 0.9 + 0.34 * len(rows)))
        eager = ax.barh([v + 0.2 for v in y], [c.eager_ratio for c in rows], height=0.4, color="#1f77b4", label="eager call")
        ax.bar_label(eager, labels=[_ratio(c.eager_ratio) for c in rows], fontsize=8, padding=2)
        graph = [(v, c.graph_ratio) for v, c in zip(y, rows) if c.graph_ratio is not None]
        if graph:
            bars = ax.barh([v - 0.2 for v, _ in graph], [g for _, g in graph], height=0.4, color="#ff7f0e", label="GPU time (graph)")
            ax.bar_label(bars, labels=[_ratio(g) for _, g in graph], fontsize=8, padding=2)
        ax.margins(x=0.12)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_yticks(y, labels, fontsize=9)
        ax.set_xlabel("x torch.linalg (torch's time / mpslinalg's; right of the line: mpslinalg faster)")
        ax.set_title(f"{family}: mpslinalg against torch.linalg", loc="left")
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=9, frameon=False)
        ax.grid(axis="x", which="major", alpha=0.3)
        fig.tight_layout()
        path = os.path.join(directory, f"{family}.svg")
        fig.savefig(path, metadata={"Date": None})
        plt.close(fig)
        written.append(path)
    return written


def load(paths: list[str]) -> tuple[list[dict], list[Result]]:
    """The runs that ``write`` saved as JSON, and their results in order."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append(json.load(f))
    fields = set(Result.__dataclass_fields__)  # the JSON also holds the derived bandwidth
    return runs, [Result(**{k: v for k, v in r.items() if k in fields}) for run in runs for r in run["results"]]


def report(paths: list[str], page: str) -> int:
    """``--plot``: the performance page and its figures (beside it, in a folder of its
    name) from earlier runs' JSON."""
    runs, results = load(paths)
    directory = os.path.splitext(page)[0]
    plot(results, directory)
    with open(page, "w") as f:
        f.write(performance_page(results, runs[0]["header"], runs[0].get("peak"), os.path.basename(directory),
                                 runs[0].get("runs")))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpslinalg.bench", description=__doc__.splitlines()[0])
    # No choices= here: argparse checks an empty list against them, and fails the default.
    parser.add_argument("families", nargs="*", help=f"of {', '.join(FAMILIES)} (default: all but large)")
    parser.add_argument("--batch", type=int, help="matrices per case (default 2^20 on a GPU, 2^14 on the CPU)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--merge", nargs="+", metavar="JSON", help="measure nothing: one report of earlier runs' JSON files")
    parser.add_argument("--plot", nargs="+", metavar="JSON",
                        help="measure nothing: the performance page (--page) and its figures from earlier runs' JSON files")
    parser.add_argument("--page", default="docs/performance.md", help="where --plot writes the page (default: %(default)s)")
    parser.add_argument("--only", metavar="REGEX", help="latency: only the cases whose 'function case' this matches")
    args = parser.parse_args(argv)
    if args.plot:
        return report(args.plot, args.page)
    if args.merge:
        return merge(args.merge, args.markdown, args.json)
    if unknown := [f for f in args.families if f not in FAMILIES]:
        parser.error(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    runtime, device, selected = best_runtime()
    batch = args.batch or (2**20 if device.type != "cpu" else 2**14)
    name, peak, copy = device_limits(device)
    header = (
        f"# mpslinalg {LA.__version__} benchmark\n\n{name} via {runtime}"
        + (f", CUDA {torch.version.cuda}" if device.type == "cuda" else "")
        + f"; {versions()}; {time.strftime('%Y-%m-%d')}"
        + (f"; vendor bandwidth {peak / 1e12:.2f} TB/s" if peak else "")
        + (f", measured copy {copy / 1e12:.2f} TB/s" if copy else "")
        + ". Time per call (median of repeats of back-to-back calls); \"(graph)\": replayed from a CUDA graph;"
        + " GB/s: each input byte read and each output byte written once; % of peak: of the vendor bandwidth."
    )
    global _progress, _only
    _only = re.compile(args.only) if args.only else None
    families = args.families or [f for f in FAMILIES if f not in NAMED_ONLY]
    _progress = Progress(families)
    # A run stopped by a time limit (SIGTERM) keeps the rows it measured.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        with selected:
            for family in families:
                FAMILIES[family](device, batch)
                _progress.family_done()
    finally:
        write(_progress.results, header, peak, args.markdown, args.json)
    results = _progress.results
    print(markdown(results, header, peak))
    return 0


def merge(paths: list[str], markdown_path: str | None, json_path: str | None) -> int:
    """One report of runs that measured different families (each run's tables compare
    rows of one process): the first run's title and setting, and where the runs' settings
    differ a paragraph "Runs:" of each setting's families."""
    runs, results = load(paths)
    title, setting = runs[0]["header"].split("\n\n")[:2]
    by_setting: dict[str, list[str]] = {}
    for run in runs:  # a merged report keeps its runs' settings (its "runs"), so that it can be merged again
        own = {run["header"].split("\n\n")[1].split(". Time per call")[0]: list(dict.fromkeys(r["family"] for r in run["results"]))}
        for where, run_families in run.get("runs", own).items():
            families = by_setting.setdefault(where, [])
            families += [f for f in run_families if f not in families]
    header = f"{title}\n\n{setting}"
    if len(by_setting) > 1:
        header += "\n\nRuns: " + "; ".join(f"{', '.join(families)} on {where}" for where, families in by_setting.items()) + "."
    write(results, header, runs[0].get("peak"), markdown_path, json_path, by_setting)
    print(markdown(results, header, runs[0].get("peak")))
    return 0


def write(results: list[Result], header: str, peak: float | None, markdown_path: str | None, json_path: str | None,
          runs: dict[str, list[str]] | None = None) -> None:
    """The report as markdown and as JSON; a merged one's JSON also holds ``runs``, each
    setting's families."""
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(markdown(results, header, peak))
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"header": header, "peak": peak, "results": [asdict(r) | {"bandwidth": r.bandwidth} for r in results]}
                      | ({"runs": runs} if runs else {}), f, indent=1)


if __name__ == "__main__":
    raise SystemExit(main())
