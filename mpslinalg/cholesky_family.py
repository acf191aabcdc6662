"""Cholesky: ``cholesky``, ``cholesky_ex``, ``cholesky_solve``, ``cholesky_inverse``.

Kernels (``metal/cholesky.metal``), LAPACK's spotf2 / cpotf2 and spotrf: ``cholesky_small``
factors n <= N (N = 4 ... 64) in threadgroup memory, a team of N threads per matrix.
Larger matrices are factored right-looking in steps of 64 columns, as LAPACK's spotrf
(``_factor``): ``potf2_block`` factors the diagonal block (spotf2, one threadgroup),
``trsm_panel`` solves the panel below it (strsm, a thread per row), and one product takes
the trailing update (where the work is).
``info`` is LAPACK's, computed on the device: the order of the first leading minor that
is not positive definite (a pivot <= 0 or NaN).

``cholesky_solve`` solves with L and L^H (mpslinalg's triangular solves);
``cholesky_inverse`` is W^H W with W = L^-1 (``tril_inverse``).

Gradients are torch's formulas (``cholesky_backward``, ``cholesky_jvp``,
``cholesky_solve_backward``, ``cholesky_inverse_backward``) in mpslinalg's ops.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, _sharding, triangular
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import batches, fits, groups_for, launch

SIZES = (4, 8, 16, 32, 64)
TEAMS = {4: 16, 8: 8, 16: 4, 32: 2, 64: 1}  # teams per threadgroup: 64 threads


def _packed_triangle(N: int) -> int:
    return N * (N + 1) // 2


CHOLESKY_SMALL = Kernel(
    function="cholesky_small",
    source="cholesky.metal",
    args=(Buffer("a", const=True), Buffer("l"), Buffer("info", "int"), Scalar("n"), Scalar("count")),
    instances=tuple({"N": n} for n in SIZES),
    group_size=lambda N: N * TEAMS[N],
    template=lambda N: (N, TEAMS[N]),
    shared=lambda N: [Shared("triangles", "T", TEAMS[N] * _packed_triangle(N))],
)


def _leaf_size(dtype: torch.dtype, device: torch.device) -> int:
    """The largest N of cholesky_small for dtype that the device can run: the
    recursion's leaves. (None running, the launch raises KernelUnavailable and the
    op is answered by torch.)"""
    largest = None
    for N in reversed(SIZES):  # largest first, lazily: every call asks
        if CHOLESKY_SMALL.exists(dtype, N=N):
            if fits(CHOLESKY_SMALL, dtype, device, N=N):
                return N
            largest = largest or N
    return largest


def _factor_small(a: torch.Tensor, N: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, info) of contiguous (*, n, n) a, n <= N, by the kernel, in a's shape (a
    reshape costs host time on every call)."""
    *batch, n, _ = a.shape
    count = a.shape[:-2].numel()
    L = torch.empty_like(a)
    info = torch.empty(batch, dtype=torch.int32, device=a.device)
    for size, tensors in batches(count, a, L, info):
        launch(CHOLESKY_SMALL, groups_for(size, TEAMS[N]), *tensors, n, size, N=N)
    return L, info


# spotrf's steps: potf2_block's block of N columns and its rows' LANES threads;
# trsm_panel's rows a threadgroup.
STEP_BLOCK = 64
STEP_LANES = 4
PANEL_ROWS = 64

POTF2_BLOCK = Kernel(
    function="potf2_block",
    source="cholesky.metal",
    args=(
        Buffer("w", const=True), Buffer("l"), Buffer("info", "int"),
        Scalar("n"), Scalar("k"), Scalar("step"), Scalar("count"),
    ),
    instances=({"N": STEP_BLOCK},),
    group_size=lambda N: N * STEP_LANES,
    template=lambda N: (N, STEP_LANES),
    shared=lambda N: [Shared("triangle", "T", _packed_triangle(N))],
)

TRSM_PANEL = Kernel(
    function="trsm_panel",
    source="cholesky.metal",
    args=(Buffer("w", const=True), Buffer("l"), Scalar("n"), Scalar("k"), Scalar("parts")),
    instances=({"N": STEP_BLOCK},),
    group_size=lambda N: PANEL_ROWS,
    template=lambda N: (N, PANEL_ROWS),
    shared=lambda N: [Shared("triangle", "T", _packed_triangle(N))],
)


def _factor(a: torch.Tensor, leaf: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, info) of contiguous (*, n, n) a from its lower triangle, in a's shape: the kernel, or
    LAPACK's right-looking spotrf in steps of STEP_BLOCK columns, three launches a step:
    potf2_block factors the diagonal block into L, trsm_panel solves the panel below it,
    L21 = A21 L11^-H, into L (by substitution, across threadgroups), and one product takes
    the trailing update of the working copy W, A22 - L21 L21^H (on the whole square; the
    upper part is never read). W starts as the first update's output: the first step
    reads a."""
    n = a.shape[-1]
    if n <= leaf:
        return _factor_small(a, next(N for N in SIZES if n <= N))
    count = a.shape[:-2].numel()
    N = STEP_BLOCK
    source = a.reshape(count, n, n)
    W = torch.empty_like(source)
    L = torch.zeros_like(source)
    steps = -(-n // N)
    failures = torch.empty(steps, count, dtype=torch.int32, device=a.device)  # the order within each block
    for step in range(steps):
        k, end = step * N, min(n, (step + 1) * N)
        launch(POTF2_BLOCK, count, source, L, failures, n, k, step, count, N=N)
        if end < n:
            parts = -(-(n - end) // PANEL_ROWS)
            launch(TRSM_PANEL, count * parts, source, L, n, k, parts, N=N)
            panel = L[:, end:, k:end]
            trailing = W[:, end:, end:]
            if step == 0:
                torch.baddbmm(source[:, end:, end:], panel, panel.mH, alpha=-1, out=trailing)
            else:
                trailing.baddbmm_(panel, panel.mH, alpha=-1)
            source = W
    # info: the first failing step's order plus its offset (later steps fail too, on
    # the NaN or the indefinite block that a failure leaves).
    failed = failures.T
    step = (failed > 0).to(torch.int32).argmax(-1, keepdim=True)
    first = failed.gather(-1, step)
    return L.view(a.shape), torch.where(first > 0, first + step.to(torch.int32) * N, 0).view(a.shape[:-2])


def raise_if_not_positive_definite(api: str, info: torch.Tensor, batched: bool) -> None:
    """cholesky's error for the first matrix that is not positive definite."""
    _checks.raise_for_first_failure(api, info, batched, lambda order: (
        "The factorization could not be completed because the input is not positive-definite "
        f"(the leading minor of order {order} is not positive-definite)."))


# --- custom ops ---


def _cholesky_ex_by_torch(A: torch.Tensor, upper: bool, check_errors: str) -> tuple[torch.Tensor, torch.Tensor]:
    L, info = _dispatch.TORCH.cholesky_ex(A, upper=upper)
    if check_errors:
        raise_if_not_positive_definite(check_errors, info, batched=A.dim() > 2)
    return L, info


@_dispatch.answered_by(_cholesky_ex_by_torch)
def _cholesky_ex_body(A: torch.Tensor, upper: bool, check_errors: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, info); ``check_errors`` names the API whose error non-positive-definite input
    raises (inside the op, so that torch.compile traces cholesky without a graph break)."""
    n = A.shape[-1]
    count = A.shape[:-2].numel()
    if count == 0 or n == 0:
        info = torch.zeros(A.shape[:-2], dtype=torch.int32, device=A.device)
        return torch.empty(A.shape, dtype=A.dtype, device=A.device), info
    X = _checks.resolved(A.mH if upper else A)  # upper: the lower triangle of A^H
    L, info = _factor(X, _leaf_size(A.dtype, A.device))
    if upper:
        L = L.mH.contiguous()
    if check_errors:
        raise_if_not_positive_definite(check_errors, info, batched=A.dim() > 2)
    return L, info


_cholesky_ex_op = torch.library.custom_op("mpslinalg::cholesky_ex", mutates_args=())(_cholesky_ex_body)


@_cholesky_ex_op.register_fake
def _(A, upper, check_errors):
    return torch.empty_like(A, memory_format=torch.contiguous_format), A.new_empty(A.shape[:-2], dtype=torch.int32)


@_cholesky_ex_op.register_vmap
def _(info, in_dims, A, upper, check_errors):
    return torch.ops.mpslinalg.cholesky_ex(A.movedim(in_dims[0], 0), upper, check_errors), (0, 0)


def _lower(L: torch.Tensor, upper: bool) -> torch.Tensor:
    """The lower-triangular factor: L, or U^H."""
    return L.mH if upper else L


def _cholesky_vjp(L: torch.Tensor, gL: torch.Tensor, upper: bool) -> torch.Tensor:
    """torch's cholesky_backward: L^-H Phi(L^H gL) L^-1, Phi the lower triangle with
    its diagonal halved, made Hermitian."""
    L, gL = _lower(L, upper), _lower(gL, upper)
    P = (L.mH @ gL).tril()
    P = 0.5 * (P + P.tril(-1).mH)
    P = triangular._solve(L.mH, P, True, True, False)
    return triangular._solve(L, P, False, False, False)


def _cholesky_jvp(L: torch.Tensor, dA: torch.Tensor, upper: bool) -> torch.Tensor:
    """torch's cholesky_jvp: dL = L Phi(L^-1 dA L^-H), Phi the lower triangle with its
    diagonal halved."""
    L = _lower(L, upper)
    X = triangular._solve(L, dA, False, True, False)
    X = triangular._solve(L.mH, X, True, False, False)
    X = X.tril() - 0.5 * torch.diag_embed(X.diagonal(dim1=-2, dim2=-1))
    dL = L @ X
    return dL.mH.contiguous() if upper else dL  # laid out as the output


def _cholesky_setup(ctx, inputs, output):
    ctx.mark_non_differentiable(output[1])
    ctx.upper = inputs[1]
    _dispatch.save(ctx, output[0])


def _cholesky_backward(ctx, gL, _g_info):
    (L,) = ctx.saved_tensors
    return _cholesky_vjp(L, gL, ctx.upper), None, None


_cholesky_ex_op.register_autograd(_sharding.mixable(_cholesky_backward), setup_context=_cholesky_setup)
_Cholesky = _dispatch.with_transposed_jvp(
    torch.ops.mpslinalg.cholesky_ex, _cholesky_setup, _cholesky_backward,
    jvp=lambda ctx, dA, _upper, _check: (_cholesky_jvp(ctx.saved_tensors[0], dA, ctx.upper), None),
)


@_dispatch.answered_by(lambda B, L, upper: _dispatch.TORCH.cholesky_solve(B, L, upper))
def _cholesky_solve_body(B: torch.Tensor, L: torch.Tensor, upper: bool) -> torch.Tensor:
    """A^-1 B with A = L L^H (U^H U where ``upper``), batch dims broadcast."""
    lower = _lower(L, upper)
    Y = triangular._solve_triangular_body(*triangular._broadcast(lower, B), False, True, False)
    return triangular._solve_triangular_body(*triangular._broadcast(lower.mH, Y), True, True, False)


_cholesky_solve_op = torch.library.custom_op("mpslinalg::cholesky_solve", mutates_args=())(_cholesky_solve_body)


@_cholesky_solve_op.register_fake
def _(B, L, upper):
    batch = torch.broadcast_shapes(B.shape[:-2], L.shape[:-2])
    return B.new_empty((*batch, *B.shape[-2:]))


def _cholesky_solve_vjp(L, X, gX, upper):
    """torch's cholesky_solve_backward: gB = A^-1 gX and, with C = gB X^H + X gB^H,
    gL = -C L (-U C where ``upper``); neither is projected on a triangle, as torch's."""
    gB = _cholesky_solve(gX, L, upper)
    C = gB @ X.mH
    C = C + C.mH
    return gB, -(L @ C) if upper else -(C @ L)


def _cholesky_solve_setup(ctx, inputs, output):
    ctx.upper = inputs[2]
    ctx.shapes = (inputs[0].shape, inputs[1].shape)
    _dispatch.save(ctx, inputs[1], output)


def _cholesky_solve_backward(ctx, gX):
    L, X = ctx.saved_tensors
    gB, gL = _cholesky_solve_vjp(L, X, gX, ctx.upper)
    # Summed over the batch dims that broadcasting added.
    return gB.sum_to_size(ctx.shapes[0]), gL.sum_to_size(ctx.shapes[1]), None


_cholesky_solve_op.register_autograd(_sharding.mixable(_cholesky_solve_backward), setup_context=_cholesky_solve_setup)


def _cholesky_solve_jvp(ctx, dB, dL, _upper):
    """torch's cholesky_solve_jvp: dX = A^-1 (dB - dA X) with dA = dL L^H + L dL^H
    (dU^H U + U^H dU where ``upper``). Explicit: the backward's own cholesky_solve would
    make the transposed VJP recurse."""
    L, X = ctx.saved_tensors
    rhs = torch.zeros_like(X) if dB is None else dB
    if dL is not None:
        lower, d_lower = _lower(L, ctx.upper), _lower(dL, ctx.upper)
        rhs = rhs - (d_lower @ (lower.mH @ X) + lower @ (d_lower.mH @ X))
    return _cholesky_solve(rhs, L, ctx.upper)


_CholeskySolve = _dispatch.with_transposed_jvp(
    torch.ops.mpslinalg.cholesky_solve, _cholesky_solve_setup, _cholesky_solve_backward, jvp=_cholesky_solve_jvp
)


def _cholesky_solve(B: torch.Tensor, L: torch.Tensor, upper: bool) -> torch.Tensor:
    return _dispatch.call(torch.ops.mpslinalg.cholesky_solve, _cholesky_solve_body, B, L, upper, function=_CholeskySolve)


@_dispatch.answered_by(lambda L, upper: _dispatch.TORCH.cholesky_inverse(L, upper))
def _cholesky_inverse_body(L: torch.Tensor, upper: bool) -> torch.Tensor:
    """(L L^H)^-1 = W^H W with W = L^-1 (U^-1 U^-H, W = U^-H, where ``upper``)."""
    lower = _checks.resolved(_lower(L, upper))
    if lower.numel() == 0:
        return torch.empty_like(lower)
    W = triangular.tril_inverse(lower)
    return W.mH @ W


_cholesky_inverse_op = torch.library.custom_op("mpslinalg::cholesky_inverse", mutates_args=())(_cholesky_inverse_body)


@_cholesky_inverse_op.register_fake
def _(L, upper):
    return torch.empty_like(L, memory_format=torch.contiguous_format)


@_cholesky_inverse_op.register_vmap
def _(info, in_dims, L, upper):
    return torch.ops.mpslinalg.cholesky_inverse(L.movedim(in_dims[0], 0), upper), 0


def _cholesky_inverse_setup(ctx, inputs, output):
    ctx.upper = inputs[1]
    _dispatch.save(ctx, inputs[0], output)


def _cholesky_inverse_backward(ctx, grad):
    """torch's cholesky_inverse_backward: with C = X (G + G^H) X, gL = -C L (-U C where ``upper``)."""
    L, X = ctx.saved_tensors
    C = X @ ((grad + grad.mH) @ X)
    return -(L @ C) if ctx.upper else -(C @ L), None


_cholesky_inverse_op.register_autograd(_sharding.mixable(_cholesky_inverse_backward), setup_context=_cholesky_inverse_setup)
_CholeskyInverse = _dispatch.with_transposed_jvp(
    torch.ops.mpslinalg.cholesky_inverse, _cholesky_inverse_setup, _cholesky_inverse_backward
)


# --- public functions ---


def _cholesky_ex(A: torch.Tensor, upper: bool, check_errors: str):
    return _dispatch.call(torch.ops.mpslinalg.cholesky_ex, _cholesky_ex_body, A, upper, check_errors, function=_Cholesky)


def cholesky_ex(A: torch.Tensor, *, upper: bool = False, check_errors: bool = False, out=None):
    """The Cholesky factor of Hermitian positive-definite matrices and LAPACK's
    ``info``, like ``torch.linalg.cholesky_ex``.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL). Only the lower triangle is read (the upper with ``upper``),
            and of the diagonal only the real part. Any batch dims and strides.
        upper: return U = L^H, with A = U^H U, instead of L.
        check_errors: raise ``torch.linalg.LinAlgError`` for a matrix that is not
            positive definite (synchronises with the device).
        out: optional ``(L, info)`` tensors to write the result into.

    Returns:
        ``(L, info)``: ``info`` (int32, batch shape) is 0 for success, else the
        order of the first leading minor that is not positive definite (NaN
        counts as not positive, as LAPACK's test); L's columns before that
        order are then the factor's, the rest unspecified (LAPACK's is partly
        factored too). No host synchronisation.

    Gradients (reverse and forward mode) are torch's.

    Example:
        >>> L, info = LA.cholesky_ex(torch.tensor([[1.0, 2.0], [2.0, 1.0]]))
        >>> info  # the leading minor of order 2 is not positive definite
        tensor(2, dtype=torch.int32)
    """
    if not _dispatch.square_kernels_apply("linalg.cholesky", A):  # torch's checks name cholesky
        return _dispatch.TORCH.cholesky_ex(A, upper=upper, check_errors=check_errors, out=out)
    _checks.out_without_grad("linalg_cholesky_ex", out, A)
    L, info = _cholesky_ex(A, upper, "linalg.cholesky_ex" if check_errors else "")
    return torch.return_types.linalg_cholesky_ex(_checks.into_each(out, (L, info)))


def cholesky(A: torch.Tensor, *, upper: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
    """The Cholesky factor of Hermitian positive-definite matrices, like
    ``torch.linalg.cholesky``.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL). Only the lower triangle is read (the upper with ``upper``), and
            of the diagonal only the real part. Any batch dims and strides.
        upper: return U = L^H, with A = U^H U, instead of L.
        out: optional tensor to write the result into.

    Returns:
        L ``(*, n, n)``, lower triangular with a positive real diagonal, A = L L^H
        (U, upper triangular, with ``upper``). Gradients (reverse and forward mode)
        are torch's.

    Raises:
        torch.linalg.LinAlgError: with torch's message for a matrix that is not
            positive definite; the check synchronises with the device
            (``cholesky_ex`` does not).

    Example:
        >>> A = torch.tensor([[4.0, 2.0], [2.0, 3.0]])
        >>> LA.cholesky(A)
        tensor([[2.0000, 0.0000],
                [1.0000, 1.4142]])
    """
    if not _dispatch.square_kernels_apply("linalg.cholesky", A):
        return _dispatch.TORCH.cholesky(A, upper=upper, out=out)
    _checks.out_without_grad("linalg_cholesky_ex", out, A)
    return _checks.into(out, _cholesky_ex(A, upper, "linalg.cholesky")[0])


def _check_cholesky_solve(B: torch.Tensor, L: torch.Tensor) -> None:
    """torch.cholesky_solve's errors, in its order (torch names B "b" and L "u" or "A")."""
    for name, X in (("b", B), ("u", L)):
        if X.dim() < 2:
            raise RuntimeError(f"{name} should have at least 2 dimensions, but has {X.dim()} dimensions instead")
    if B.dtype != L.dtype:
        raise RuntimeError(
            f"Expected b and A to have the same dtype, but found b of type {_checks.type_name(B.dtype)} "
            f"and A of type {_checks.type_name(L.dtype)} instead."
        )
    if L.shape[-1] != L.shape[-2]:
        raise RuntimeError(f"A must be batches of square matrices, but they are {L.shape[-2]} by {L.shape[-1]} matrices")
    if L.shape[-1] != B.shape[-2]:
        raise RuntimeError(
            f"Incompatible matrix sizes for cholesky_solve: each A matrix is {L.shape[-1]} by {L.shape[-1]} "
            f"but each b matrix is {B.shape[-2]} by {B.shape[-1]}"
        )
    _checks.broadcast_batch(B.shape[:-2], L.shape[:-2])


def cholesky_solve(B: torch.Tensor, L: torch.Tensor, upper: bool = False, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """Solves A X = B for A = L L^H from its Cholesky factor, like
    ``torch.cholesky_solve``.

    Args:
        B: ``(*, n, k)`` right-hand sides.
        L: ``(*, n, n)`` factor: only its lower triangle is read (the upper with
            ``upper``). Batch dims broadcast with B's.
        upper: L is the upper factor U, A = U^H U.
        out: optional tensor to write the result into.

    Returns:
        X ``(*, n, k)``. Gradients are torch's, in B and in L (not projected on
        the triangle).

    Raises:
        RuntimeError: torch's, for mismatched shapes or dtypes.

    Example:
        >>> A = torch.tensor([[4.0, 2.0], [2.0, 3.0]])
        >>> B = torch.tensor([[2.0], [1.0]])
        >>> X = LA.cholesky_solve(B, LA.cholesky(A))
        >>> torch.allclose(A @ X, B)
        True
    """
    if not (_dispatch.has_kernels(L, B) and L.dtype in _dispatch.kernel_runtime(L).dtypes):
        return _dispatch.TORCH.cholesky_solve(B, L, upper, out=out)
    _check_cholesky_solve(B, L)
    _checks.out_without_grad("cholesky_solve", out, B, L)
    return _checks.into(out, _cholesky_solve(B, L, upper))


def cholesky_inverse(L: torch.Tensor, upper: bool = False, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The inverse of A = L L^H from its Cholesky factor, like
    ``torch.cholesky_inverse``.

    Args:
        L: ``(*, n, n)``, the factor: only its lower triangle is read (the upper with
            ``upper``).
        upper: L is the upper factor U, A = U^H U.
        out: optional tensor (of a dtype A's casts to) to write the result into.

    Returns:
        (L L^H)^-1 (U^-1 U^-H with ``upper``), ``(*, n, n)``, Hermitian. Gradients
        are torch's in reverse mode; in forward mode the transpose of them (torch's
        own forward mode is wrong, pytorch/pytorch#196682).

    Example:
        >>> A = torch.tensor([[4.0, 2.0], [2.0, 3.0]])
        >>> X = LA.cholesky_inverse(LA.cholesky(A))
        >>> torch.allclose(X @ A, torch.eye(2), atol=1e-6)
        True
    """
    if not _dispatch.has_kernels(L) or L.dtype not in _dispatch.kernel_runtime(L).dtypes:
        return _dispatch.TORCH.cholesky_inverse(L, upper, out=out)
    _checks.square("cholesky_inverse", L)
    _checks.out_without_grad("cholesky_inverse", out, L)
    X = _dispatch.call(torch.ops.mpslinalg.cholesky_inverse, _cholesky_inverse_body, L, upper, function=_CholeskyInverse)
    return _checks.into(out, X, castable=("cholesky_inverse", "result"))
