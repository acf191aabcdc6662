"""Inverse and determinant: ``inv``, ``inv_ex``, ``det``.

Matrices up to 4 x 4 run in one fused kernel (``metal/inverse.metal``) that
factors each matrix with partial pivoting and solves in registers, one thread
per matrix; up to 32 x 32 in the LU family's fused solve (``solve_small``, a
team of threads per matrix, B = I). Larger matrices go through the LU family's
factorization and solves (``lu_family.py``).
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, _sharding, lu_family
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import batches, groups_for, launch

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


# --- custom ops: the kernels and their fake (meta) implementations ---

def _inv_ex_by_torch(A: torch.Tensor, check_errors: str) -> tuple[torch.Tensor, torch.Tensor]:
    inverse, info = _dispatch.TORCH.inv_ex(A)
    if check_errors:
        _checks.raise_if_singular(check_errors, info, batched=A.dim() > 2)
    return inverse, info


@_dispatch.answered_by(_inv_ex_by_torch)
def _inv_small_ex_body(A: torch.Tensor, check_errors: str) -> tuple[torch.Tensor, torch.Tensor]:
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
    size = 0 if n <= SMALL else lu_family.fused_size(n, a.dtype)
    # The tensors as they lie (batches takes any shape; a view costs host time on every call).
    for count, tensors in batches(a.shape[:-2].numel(), a, inverse, info):
        if n <= SMALL:
            launch(INVERSE_SMALL, groups_for(count, GROUP), *tensors, count, N=n)
        else:  # sgesv with B = I, in one launch (B's buffer is not read)
            a_part, inverse_part, info_part = tensors
            launch(lu_family.SOLVE_SMALL, groups_for(count, lu_family.TEAMS[size]), a_part, a_part, inverse_part,
                   info_part, n, n, count, 0, 1, N=size, TRANSPOSED=0)
    if check_errors:
        _checks.raise_if_singular(check_errors, info, batched=a.dim() > 2)
    return inverse, info


_inv_small_ex = torch.library.custom_op("mpslinalg::inv_small_ex", mutates_args=())(_inv_small_ex_body)


@_inv_small_ex.register_fake
def _(A, check_errors):
    return torch.empty_like(A, memory_format=torch.contiguous_format), A.new_empty(A.shape[:-2], dtype=torch.int32)


@_dispatch.answered_by(lambda A: _dispatch.TORCH.det(A))
def _det_small_body(A: torch.Tensor) -> torch.Tensor:
    a = _checks.resolved(A)
    n = a.shape[-1]
    if n == 0:
        return torch.ones(a.shape[:-2], dtype=a.dtype, device=a.device)
    det = torch.empty(a.shape[:-2], dtype=a.dtype, device=a.device)
    for count, tensors in batches(a.shape[:-2].numel(), a, det):
        launch(DET_SMALL, groups_for(count, GROUP), *tensors, count, N=n)
    return det


_det_small = torch.library.custom_op("mpslinalg::det_small", mutates_args=())(_det_small_body)


@_det_small.register_fake
def _(A):
    return A.new_empty(A.shape[:-2])


@_dispatch.answered_by(lambda A: _dispatch.TORCH.det(A))
def _det_lu_body(A: torch.Tensor) -> torch.Tensor:
    return lu_family.determinant(A, False)


_det_lu = torch.library.custom_op("mpslinalg::det_lu", mutates_args=())(_det_lu_body)
_det_lu.register_fake(lambda A: A.new_empty(A.shape[:-2]))


# Both ops take any batch dims, so vmap's dimension simply becomes the first of them.
@_inv_small_ex.register_vmap
def _(info, in_dims, A, check_errors):
    return torch.ops.mpslinalg.inv_small_ex(A.movedim(in_dims[0], 0), check_errors), (0, 0)


@_det_small.register_vmap
def _(info, in_dims, A):
    return torch.ops.mpslinalg.det_small(A.movedim(in_dims[0], 0)), 0


@_det_lu.register_vmap
def _(info, in_dims, A):
    return torch.ops.mpslinalg.det_lu(A.movedim(in_dims[0], 0)), 0


# --- derivatives, written with mpslinalg's own ops so that they run on the same GPU ---


def _inv_vjp(X: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    Xh = X.mH
    return -(Xh @ grad @ Xh)


def _inv_jvp(X: torch.Tensor, tangent: torch.Tensor) -> torch.Tensor:
    return -(X @ tangent @ X)


def _nonsingular_inverse(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """inv(A), 0 where A is exactly singular, and the mask of the regular matrices.

    No inf or NaN enters a product, nor, when this is itself differentiated
    (create_graph), the graph: the singular matrices are replaced by I first.
    """
    inverse, info = _inverse_any(A, "")
    regular = (info == 0)[..., None, None]
    if torch.is_grad_enabled() and A.requires_grad:
        identity = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        inverse = _inverse_any(torch.where(regular, A, identity), "")[0]
    return torch.where(regular, inverse, 0), regular


def _det_vjp(A: torch.Tensor, det: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    # d det / dA = det * A^-H. At an exactly singular A torch's first-order
    # backward returns 0 (it solves with zero pivots replaced by eps against a
    # zero right-hand side); so does this one, wherever the LU found a zero pivot.
    inverse, regular = _nonsingular_inverse(A)
    return torch.where(regular, (grad * det.conj())[..., None, None] * inverse.mH, 0)


def _det_jvp(A: torch.Tensor, det: torch.Tensor, tangent: torch.Tensor) -> torch.Tensor:
    # d det = det * tr(A^-1 dA); 0 at an exactly singular A, as the backward.
    inverse, _ = _nonsingular_inverse(A)
    return det * (inverse * tangent.mT).sum((-2, -1))


def _inv_setup(ctx, inputs, output):
    ctx.save_for_backward(output[0])


def _inv_backward(ctx, grad, _grad_info):
    return _inv_vjp(ctx.saved_tensors[0], grad), None


def _det_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], output)


def _det_backward(ctx, grad):
    return _det_vjp(*ctx.saved_tensors, grad)


_inv_small_ex.register_autograd(_sharding.mixable(_inv_backward), setup_context=_inv_setup)
_det_small.register_autograd(_sharding.mixable(_det_backward), setup_context=_det_setup)
_det_lu.register_autograd(_sharding.mixable(_det_backward), setup_context=_det_setup)


class _Inverse(torch.autograd.Function):
    """The op with its backward, plus forward mode and torch.func transforms, which
    custom ops lack (used where _dispatch.call finds them at work)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A, check_errors):
        return torch.ops.mpslinalg.inv_small_ex(A, check_errors)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(output[0])
        ctx.save_for_forward(output[0])

    backward = staticmethod(_inv_backward)

    @staticmethod
    def jvp(ctx, tangent, _check_errors):
        return _inv_jvp(ctx.saved_tensors[0], tangent), None


class _Determinant(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(A):
        return torch.ops.mpslinalg.det_small(A) if A.shape[-1] <= SMALL else torch.ops.mpslinalg.det_lu(A)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)
        ctx.save_for_forward(inputs[0], output)

    backward = staticmethod(_det_backward)

    @staticmethod
    def jvp(ctx, tangent):
        return _det_jvp(*ctx.saved_tensors, tangent)


def _inverse_ex(A: torch.Tensor, check_errors: str):
    return _dispatch.call(torch.ops.mpslinalg.inv_small_ex, _inv_small_ex_body, A, check_errors, function=_Inverse)


def _determinant(A: torch.Tensor) -> torch.Tensor:
    if A.shape[-1] <= SMALL:
        return _dispatch.call(torch.ops.mpslinalg.det_small, _det_small_body, A, function=_Determinant)
    return _dispatch.call(torch.ops.mpslinalg.det_lu, _det_lu_body, A, function=_Determinant)


# --- public functions ---


def _inverse_any(A: torch.Tensor, check_errors: str):
    n = A.shape[-1]
    if n <= SMALL or lu_family.fused_size(n, A.dtype):  # one launch
        return _inverse_ex(A, check_errors)
    return lu_family.lu_inverse_ex(A, check_errors)


def inv_ex(A: torch.Tensor, *, check_errors: bool = False, out=None):
    """Inverse of square matrices and LAPACK-style ``info``, like ``torch.linalg.inv_ex``.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA
            and OpenCL). Any batch dims; conjugate views and any strides.
        check_errors: raise ``torch.linalg.LinAlgError`` for singular input
            (synchronises with the device).
        out: optional ``(inverse, info)`` tensors to write the result into.

    Returns:
        ``(inverse, info)``: ``info`` (int32, batch shape) is 0 for success and
        i > 0 when U[i, i] of the pivoted LU is exactly zero; ``inverse`` then
        holds inf/NaN as torch's does. No host synchronisation.

    Gradients (reverse and forward mode) flow to ``inverse``: ``-A^-H G A^-H``.
    One launch up to n = 32 (n <= 4: a thread a matrix; above, the LU family's
    fused sgesv with B = I); larger n the LU factorization and its solves with
    B = I (as torch.linalg.inv_ex).

    Example:
        >>> X, info = LA.inv_ex(torch.tensor([[1.0, 2.0], [2.0, 4.0]]))
        >>> info  # U[1, 1] is zero: singular
        tensor(2, dtype=torch.int32)
    """
    if not _dispatch.square_kernels_apply("linalg.inv", A):
        return _dispatch.TORCH.inv_ex(A, check_errors=check_errors, out=out)
    _checks.out_without_grad("linalg_inv_ex", out, A)
    inverse, info = _inverse_any(A, "linalg.inv_ex" if check_errors else "")
    if out is not None:
        inverse, info = _checks.into(out[0], inverse), _checks.into(out[1], info)
    return torch.return_types.linalg_inv_ex((inverse, info))


def inv(A: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The inverse of square matrices, like ``torch.linalg.inv``.

    One launch up to n = 32 (the LU with partial pivoting and the solves with
    B = I fused); larger n the LU family's factorization and solves.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL).
        out: optional tensor to write the result into.

    Returns:
        ``(*, n, n)``. Gradient ``-A^-H G A^-H``.

    Raises:
        torch.linalg.LinAlgError: with torch's message where a matrix is singular;
            the check synchronises with the device (``inv_ex`` does not).

    Example:
        >>> LA.inv(torch.tensor([[2.0, 0.0], [0.0, 4.0]]))
        tensor([[0.5000, 0.0000],
                [0.0000, 0.2500]])
    """
    if not _dispatch.square_kernels_apply("linalg.inv", A):
        return _dispatch.TORCH.inv(A, out=out)
    _checks.out_without_grad("linalg_inv_ex", out, A)
    return _checks.into(out, _inverse_any(A, "linalg.inv")[0])


def det(A: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """The determinant of square matrices, like ``torch.linalg.det``.

    n <= 4 runs a fused kernel; larger n the LU family (the product of U's diagonal
    and the pivots' parity). The determinant of a 0 x 0 matrix is 1.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL).
        out: optional tensor to write the result into.

    Returns:
        ``(*)``, A's dtype. Gradient ``g * conj(det) * A^-H``, and 0 at an exactly
        singular matrix, as torch's first-order backward (torch's double backward
        there uses the adjugate; this one stays 0).

    Raises:
        RuntimeError: torch's, for a non-square A.

    Example:
        >>> LA.det(torch.tensor([[2.0, 1.0], [1.0, 3.0]]))
        tensor(5.)
    """
    if not _dispatch.square_kernels_apply("linalg.det", A):
        return _dispatch.TORCH.det(A, out=out)
    _checks.out_without_grad("_linalg_det", out, A)
    return _checks.into(out, _determinant(A))
