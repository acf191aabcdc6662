"""Inverse and determinant: ``inv``, ``inv_ex``, ``det``.

Matrices up to 4 x 4 run in one fused kernel (``metal/inverse.metal``) that
factors each matrix with partial pivoting and solves in registers, one thread
per matrix. Larger matrices call torch.linalg until the LU family lands.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import groups_for, launch

SMALL = 4  # the largest n the fused kernels handle
GROUP = 128  # matrices (= threads) per threadgroup


def _tile_stride(N: int) -> int:
    """N*N rounded up to odd, so threads reading their own matrix hit distinct banks."""
    return N * N + 1 - (N * N) % 2


def _tile(N: int) -> list[Shared]:
    return [Shared("tile", "T", GROUP * _tile_stride(N))]


INVERSE_SMALL = Kernel(
    function="inverse_small",
    source="inverse.metal",
    args=(Buffer("a", const=True), Buffer("inverse"), Buffer("info", "int"), Scalar("batch")),
    instances=tuple({"N": n} for n in range(1, SMALL + 1)),
    group_size=GROUP,
    template=lambda N: (N, GROUP, _tile_stride(N)),
    shared=_tile,
)

DET_SMALL = Kernel(
    function="det_small",
    source="inverse.metal",
    args=(Buffer("a", const=True), Buffer("det"), Scalar("batch")),
    instances=INVERSE_SMALL.instances,
    group_size=GROUP,
    template=INVERSE_SMALL.template,
    shared=_tile,
)


# --- custom ops: the kernels, their fake (meta) implementations and gradients ---


@torch.library.custom_op("mpslinalg::inv_small_ex", mutates_args=())
def _inv_small_ex(A: torch.Tensor, check_errors: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse, info); if ``check_errors`` names an API, raise its error for singular input.

    The check lives inside the op so that ``torch.compile(fullgraph=True)``
    traces ``inv`` without a graph break on the data-dependent error.
    """
    a = _checks.resolved(A)
    n = a.shape[-1]
    inverse = torch.empty_like(a)
    if n == 0:
        return inverse, torch.zeros(a.shape[:-2], dtype=torch.int32, device=a.device)
    info = torch.empty(a.shape[:-2], dtype=torch.int32, device=a.device)  # the kernel writes all
    batch = info.numel()
    if batch > 0:
        launch(INVERSE_SMALL, groups_for(batch, GROUP), a, inverse, info, batch, N=n)
    if check_errors:
        _checks.raise_if_singular(check_errors, info, batched=a.dim() > 2)
    return inverse, info


@_inv_small_ex.register_fake
def _(A, check_errors):
    return torch.empty_like(A, memory_format=torch.contiguous_format), A.new_empty(A.shape[:-2], dtype=torch.int32)


def _inv_setup(ctx, inputs, output):
    ctx.save_for_backward(output[0])


def _inv_backward(ctx, grad, _grad_info):
    (X,) = ctx.saved_tensors
    Xh = X.mH
    return -(Xh @ grad @ Xh), None


_inv_small_ex.register_autograd(_inv_backward, setup_context=_inv_setup)


@torch.library.custom_op("mpslinalg::det_small", mutates_args=())
def _det_small(A: torch.Tensor) -> torch.Tensor:
    a = _checks.resolved(A)
    n = a.shape[-1]
    if n == 0:
        return torch.ones(a.shape[:-2], dtype=a.dtype, device=a.device)
    det = torch.empty(a.shape[:-2], dtype=a.dtype, device=a.device)
    batch = det.numel()
    if batch > 0:
        launch(DET_SMALL, groups_for(batch, GROUP), a, det, batch, N=n)
    return det


@_det_small.register_fake
def _(A):
    return A.new_empty(A.shape[:-2])


def _det_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output)


def _det_backward(ctx, grad):
    # d det / dA = det * A^-H. At an exactly singular A torch's backward returns 0
    # (it solves with zero pivots replaced by eps against a zero right-hand
    # side); so does this one, wherever the factorization found a zero pivot.
    A, det = ctx.saved_tensors
    inverse, info = torch.ops.mpslinalg.inv_small_ex(A, "")
    scale = (grad * det.conj())[..., None, None]
    return torch.where((info == 0)[..., None, None], scale * inverse.mH, 0)


_det_small.register_autograd(_det_backward, setup_context=_det_setup)


# --- public functions ---


def _small_kernel_applies(api: str, A: torch.Tensor) -> bool:
    """Whether A takes the fused kernel; raises torch.linalg's errors for bad input."""
    runtime = _dispatch.kernel_runtime(A)
    if runtime is None:
        return False
    _checks.square(api, A)
    _checks.floating(api, A)
    return A.shape[-1] <= SMALL and A.dtype in runtime.dtypes


def inv_ex(A: torch.Tensor, *, check_errors: bool = False):
    """Inverse of square matrices and LAPACK-style ``info``, like ``torch.linalg.inv_ex``.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA
            and OpenCL). Any batch dims; conjugate views and any strides.
        check_errors: raise ``torch.linalg.LinAlgError`` for singular input
            (synchronises with the device).

    Returns:
        ``(inverse, info)``: ``info`` (int32, batch shape) is 0 for success and
        i > 0 when U[i, i] of the pivoted LU is exactly zero; ``inverse`` then
        holds inf/NaN as torch's does. No host synchronisation.

    n <= 4 runs the fused kernel; larger n calls ``torch.linalg.inv_ex`` until
    mpslinalg's LU family lands.
    """
    if not _small_kernel_applies("linalg.inv", A):
        return torch.linalg.inv_ex(A, check_errors=check_errors)
    inverse, info = torch.ops.mpslinalg.inv_small_ex(A, "linalg.inv_ex" if check_errors else "")
    return torch.return_types.linalg_inv_ex((inverse, info))


def inv(A: torch.Tensor) -> torch.Tensor:
    """Inverse of square matrices, like ``torch.linalg.inv``.

    Raises ``torch.linalg.LinAlgError`` with torch's message when a matrix is
    singular, which synchronises with the device; ``inv_ex`` does not. Gradient:
    ``-A^-H G A^-H``. n <= 4 runs the fused kernel; larger n calls
    ``torch.linalg.inv`` until mpslinalg's LU family lands.
    """
    if not _small_kernel_applies("linalg.inv", A):
        return torch.linalg.inv(A)
    return torch.ops.mpslinalg.inv_small_ex(A, "linalg.inv")[0]


def det(A: torch.Tensor) -> torch.Tensor:
    """Determinant of square matrices, like ``torch.linalg.det``.

    ``(*, n, n)`` -> ``(*)``, the product of U's diagonal and the pivot parity;
    ``det`` of a 0 x 0 matrix is 1. Gradient ``g * conj(det) * A^-H``, and 0 at
    an exactly singular matrix, as torch's. n <= 4 runs the fused kernel; larger
    n calls ``torch.linalg.det`` until mpslinalg's LU family lands.
    """
    if not _small_kernel_applies("linalg.det", A):
        return torch.linalg.det(A)
    return torch.ops.mpslinalg.det_small(A)
