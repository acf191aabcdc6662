"""General eigenproblems: ``eig``, ``eigvals``.

Kernel (``metal/eig.metal``, ``eig_small``): LAPACK's geev for batches of small
matrices, a thread per matrix. Both paths scale by a power of two and balance
(xgebal's scaling) and reduce to Hessenberg form by Householder reflectors
(xgehd2, Q accumulated as xunghr/xorghr). Complex input then follows cgeev: the
single-shift QR algorithm (clahqr) and back substitution on the triangular Schur
form (ctrevc). Real input follows sgeev in real arithmetic: Francis's double-shift
QR to the real Schur form (slahqr, each 2 x 2 block in slanv2's standard form) and
strevc's back substitution on the quasi-triangular form, so that a real eigenvalue
has an imaginary part of exactly 0 and a real eigenvector, and complex ones come in
adjacent, exactly conjugate pairs a + ib, a - ib (b > 0) with exactly conjugate
eigenvectors, as sgeev's wr, wi and vr. Eigenvectors are normalised as cgeev's
(unit 2-norm, largest component real and positive).

n > KERNEL_SIZES_UP_TO runs torch.linalg.eig on the CPU (LAPACK), as torch's CUDA
eig does; a copy to the host and back.

No host synchronisation on the kernel path: non-finite input, and a QR iteration
that does not converge (the limit of clahqr and slahqr, 30 max(10, n) iterations), give NaN
eigenvalues and eigenvectors where torch raises.

Gradients: torch's ``linalg_eig_backward`` (with its error for a complex loss that
depends on the eigenvectors' phases) and forward mode by its transpose, in matrix
products and our solve.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, _sharding, lu_family
from ._kernel import Buffer, Kernel, Scalar
from .runtimes import batches, groups_for, launch

GROUP = 64  # matrices (threads) per threadgroup
# The kernel is a thread per matrix, O(10 n^3) operations each: past this size
# LAPACK on the CPU (torch's own route on CUDA) is the better choice for now.
KERNEL_SIZES_UP_TO = 64

EIG_SMALL = Kernel(
    function="eig_small",
    source="eig.metal",
    args=(Buffer("h"), Buffer("z"), Buffer("w"), Buffer("work"), Scalar("n"), Scalar("vectors"), Scalar("count")),
    instances=({"GROUP": GROUP},),
    group_size=GROUP,
    template=lambda GROUP: (GROUP,),
    # Every floating dtype (the default): complex ones run cgeev's path, real ones
    # sgeev's, with z and w the complex outputs as pairs of reals (torch.view_as_real).
)

_COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def _complex_dtype(dtype: torch.dtype) -> torch.dtype:
    return _COMPLEX.get(dtype, dtype)


def _by_torch(A: torch.Tensor, vectors: bool):
    """torch.linalg.eig on the CPU (LAPACK's geev), back on A's device, with the
    kernel's normalisation (sgeev leaves a real eigenvector's sign as it comes)."""
    host = A.detach().cpu()
    if not vectors:
        return _dispatch.TORCH.eigvals(host).to(A.device), A.new_empty(0, dtype=_complex_dtype(A.dtype))
    w, V = _dispatch.TORCH.eig(host)
    top = V.abs().argmax(-2, keepdim=True)
    largest = V.gather(-2, top)
    V = V * (largest.conj() / largest.abs().clamp_min(torch.finfo(largest.real.dtype).tiny))
    return w.to(A.device), V.to(A.device)


@_dispatch.answered_by(_by_torch)
def _eig_body(A: torch.Tensor, vectors: bool) -> tuple[torch.Tensor, torch.Tensor]:
    *batch, n, _ = A.shape
    count = A.shape[:-2].numel()
    dtype = _complex_dtype(A.dtype)
    if n > KERNEL_SIZES_UP_TO:
        return _by_torch(A, vectors)
    # The kernel's workspace: a copy of A (overwritten).
    H = torch.empty((count, n, n), dtype=A.dtype, device=A.device)
    H.copy_(A.reshape(count, n, n))
    # The outputs in their own shapes (forward mode rejects outputs that are views).
    w = A.new_empty((*batch, n), dtype=dtype)
    V = A.new_empty((*batch, n, n) if vectors else (0,), dtype=dtype)
    if A.is_complex():  # cgeev: the solution, an eigenvector, the balancing
        work = A.new_empty((count, 3 * n))
    else:  # sgeev: 6n reals (a pair's complex solution, an eigenvector, the balancing, column norms), Z
        work = A.new_empty((count, 6 * n + (n * n if vectors else 0)))
    if count and n:
        ws, Vs = w.view(count, n), V.view(count, n * n) if vectors else V
        if not A.is_complex():  # the complex outputs as pairs of reals
            ws, Vs = torch.view_as_real(ws), torch.view_as_real(Vs) if vectors else Vs.new_empty(0, dtype=A.dtype)
        for matrices, tensors in batches(count, H, Vs, ws, work):
            launch(EIG_SMALL, groups_for(matrices, GROUP), *tensors, n, int(vectors), matrices, GROUP=GROUP)
    return w, V


_eig_op = torch.library.custom_op("mpslinalg::eig", mutates_args=())(_eig_body)


@_eig_op.register_fake
def _(A, vectors):
    dtype = _complex_dtype(A.dtype)
    return A.new_empty(A.shape[:-1], dtype=dtype), A.new_empty(A.shape if vectors else (0,), dtype=dtype)


@_eig_op.register_vmap
def _(info, in_dims, A, vectors):
    w, V = torch.ops.mpslinalg.eig(A.movedim(in_dims[0], 0), vectors)
    return (w, V), (0, 0 if vectors else None)


def _eig_vjp(A: torch.Tensor, w: torch.Tensor, V: torch.Tensor, gw, gV, check_phase: bool = True) -> torch.Tensor:
    """torch's linalg_eig_backward: gA = V^-H (diag(gw) + P / conj(E)) V^H, with
    P = V^H gV - V^H V Re(diag(V^H gV)) (the projection that unit-norm eigenvectors
    ask for) and E_ij = w_j - w_i; real A takes the real part."""
    if gw is None and gV is None:
        return None  # no output reaches the loss (gradients are not materialised)
    n = w.shape[-1]
    eye = torch.eye(n, dtype=torch.bool, device=w.device)
    if gV is None:
        inner = torch.diag_embed(gw)
    else:
        VhgV = V.mH @ gV
        diagonal = VhgV.diagonal(dim1=-2, dim2=-1)
        # As torch, only on concrete tensors: a traced (fake) one has no values to check.
        concrete = type(diagonal) is torch.Tensor
        if check_phase and concrete and not torch.allclose(diagonal.imag, torch.zeros_like(diagonal.imag), rtol=1e-2, atol=1e-2):
            raise RuntimeError(
                "linalg_eig_backward: The eigenvectors in the complex case are specified up to multiplication "
                "by e^{i phi}. The specified loss function depends on this quantity, so it is ill-defined."
            )
        VhgV = VhgV - V.mH @ (V * diagonal.real.unsqueeze(-2))
        gaps = (w.unsqueeze(-2) - w.unsqueeze(-1)).conj()
        inner = VhgV / torch.where(eye, torch.ones_like(gaps), gaps)
        if gw is not None:
            inner = torch.where(eye, torch.diag_embed(gw), inner)
    gA = lu_family.solve(V.mH, inner @ V.mH)
    return gA if A.is_complex() else gA.real


def _eig_setup(ctx, inputs, output):
    ctx.set_materialize_grads(False)  # an unused output's gradient is None (see svd_family._svd_setup)
    _dispatch.save(ctx, inputs[0], *output)


def _eig_backward(ctx, gw, gV, check_phase=True):
    A, w, V = ctx.saved_tensors
    return _eig_vjp(A, w, V, gw, gV, check_phase), None


_eig_op.register_autograd(_sharding.mixable(_eig_backward), setup_context=_eig_setup)
_Eig = _dispatch.with_transposed_jvp(
    torch.ops.mpslinalg.eig, _eig_setup, _eig_backward,
    transposed=lambda ctx, gw, gV: _eig_backward(ctx, gw, gV, check_phase=False),
)


def _kernels_apply(api: str, A: torch.Tensor) -> bool:
    """Whether A runs on mpslinalg's kernels; raises torch's errors for a non-square A
    (an integer A goes to torch, which words its own error)."""
    runtime = _dispatch.kernel_runtime(A)
    if runtime is None or A.dtype not in runtime.dtypes:
        return False
    _checks.square(api, A)
    return True


def eig(A: torch.Tensor, *, out=None):
    """Eigenvalues and eigenvectors of square matrices, like ``torch.linalg.eig``:
    A V = V diag(w), complex even for real A.

    Each eigenvector has unit 2-norm and its largest component real and positive
    (LAPACK's cgeev's normalisation); the eigenvalues are in the order the QR
    algorithm finds them on the Schur form's diagonal, not sorted (torch promises no
    order either). For real A, as LAPACK's sgeev: a real eigenvalue has an imaginary
    part of exactly 0 and a real eigenvector; complex ones come in adjacent, exactly
    conjugate pairs, the positive imaginary part first, whose eigenvectors are exact
    conjugates. n <= 64 runs one kernel a call, a thread per matrix; larger n runs
    LAPACK on the CPU.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL); any batch dims and strides.
        out: optional ``(eigenvalues, eigenvectors)`` tensors to write into.

    Returns:
        ``(eigenvalues, eigenvectors)``: ``(*, n)`` and ``(*, n, n)`` complex (the
        eigenvectors as columns). Where torch raises for non-finite input, the
        kernel gives NaN (no host synchronisation), as it does for a matrix whose
        QR iteration does not converge. Gradients are torch's, with its error for a
        loss that depends on the eigenvectors' phases.

    Raises:
        RuntimeError: torch's, for a non-square or integer A.

    Example:
        >>> w, V = LA.eig(torch.tensor([[0.0, -1.0], [1.0, 0.0]]))  # a rotation
        >>> torch.allclose(w.imag.abs(), torch.ones(2))
        True
        >>> A = torch.tensor([[0.0, -1.0], [1.0, 0.0]], dtype=torch.complex64)
        >>> torch.allclose(A @ V, V * w, atol=1e-6)
        True
    """
    if not _kernels_apply("linalg.eig", A):
        return _dispatch.TORCH.eig(A, out=out)
    _checks.out_without_grad("linalg_eig", out, A)
    w, V = _dispatch.call(torch.ops.mpslinalg.eig, _eig_body, A, True, function=_Eig)
    return torch.return_types.linalg_eig(_checks.into_each(out, (w, V)))


def eigvals(A: torch.Tensor, *, out=None) -> torch.Tensor:
    """The eigenvalues of square matrices, like ``torch.linalg.eigvals``: ``eig``'s
    kernel without the eigenvectors (their gradient takes them: a differentiable
    call computes both).

    Args:
        A: ``(*, n, n)``, as for ``eig``.
        out: optional tensor to write the result into.

    Returns:
        ``(*, n)`` complex, in ``eig``'s order (for real A: real eigenvalues with an
        imaginary part of exactly 0, so that ``w.imag == 0`` selects them, and exactly
        conjugate pairs); NaN for non-finite input.

    Raises:
        RuntimeError: torch's, for a non-square or integer A.

    Example:
        >>> LA.eigvals(torch.tensor([[2.0, 0.0], [0.0, 3.0]]))
        tensor([2.+0.j, 3.+0.j])
    """
    if not _kernels_apply("linalg.eigvals", A):
        return _dispatch.TORCH.eigvals(A, out=out)
    _checks.out_without_grad("linalg_eigvals", out, A)
    differentiable = (torch.is_grad_enabled() and A.requires_grad) or _dispatch.needs_forward_mode(A)
    w = _dispatch.call(torch.ops.mpslinalg.eig, _eig_body, A, differentiable, function=_Eig)[0]
    return _checks.into(out, w)
