"""Hermitian eigenproblems: ``eigh``, ``eigvalsh``.

H, the Hermitian matrix of the triangle read (the diagonal's real part, as
LAPACK's ssyevd / cheevd), is scaled by a power of two (exact: inputs near
the ends of the float range neither overflow nor underflow) and then
decomposed by the SVD family's one-sided Jacobi (``metal/svd.metal``, LAPACK's
sgesvj), whose V is the product of its rotations, orthonormal to working
precision:

- positive definite H (its Cholesky factorization H = L L^H completes:
  covariances, Gram matrices): L^H = U S V^H, so H = V S^2 V^H, Veselic and
  Hari's method, which keeps the eigenvalues' relative accuracy where a
  diagonal scaling makes H well conditioned (LAPACK's have only n eps ||H||);
- else B = H + sigma I, sigma the smallest shift that Gershgorin's theorem
  proves positive semidefinite: B = V S V^H, and the eigenvalues S - sigma
  have an absolute error of a few eps ||H||, as LAPACK's.

Non-finite input gives NaN. Eigenvalues are ascending; each
eigenvector is unique up to its sign (a phase for complex matrices), and
repeated eigenvalues' up to a unitary mix of their eigenspace: as torch,
mpslinalg does not normalise them.

Gradients: torch's ``linalg_eig_backward`` and ``linalg_eig_jvp`` for Hermitian
input (with its error for a complex loss that depends on the eigenvectors'
phases), in matrix products.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, cholesky_family, svd_family


def _hermitian(A: torch.Tensor, upper: bool) -> torch.Tensor:
    """The Hermitian matrix of A's lower (``upper``: upper) triangle, contiguous."""
    return svd_family._hermitian_from_lower(A.mH if upper else A).contiguous()


def _spectrum(A: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A's eigenvalues (*, n), as the module says, and Vh of the SVD that gave them
    (count, n, n; its rows in descending order of the eigenvalues), None for no elements."""
    H = _hermitian(A, upper)
    n = H.shape[-1]
    count = H.shape[:-2].numel()
    real = H.real.dtype if H.is_complex() else H.dtype
    if count == 0 or n == 0:
        return H.new_empty(H.shape[:-1], dtype=real), None
    H = H.view(count, n, n)
    largest = H.abs().amax(dim=(-2, -1))
    e = torch.frexp(largest).exponent
    e = torch.where(torch.isfinite(largest) & (largest > 0), e, 0)
    down = svd_family._power_of_two(-e, real)
    H = H * (down[0] * down[1])[:, None, None]
    L, info = cholesky_family._cholesky_ex_body(H, False, "")
    definite = (info == 0)[:, None, None]
    diagonal = H.diagonal(dim1=-2, dim2=-1).real
    radius = H.abs().sum(-1) - diagonal.abs()  # Gershgorin: every eigenvalue >= a_ii - radius_i
    sigma = torch.clamp(radius - diagonal, min=0).amax(-1)
    shifted = H + torch.diag_embed(sigma[:, None].expand(count, n).to(H.dtype))
    # H = L L^H = V S^2 V^H where L^H = U S V^H; else H + sigma I = V S V^H.
    _, S, Vh = svd_family._svd_body(torch.where(definite, L.mH, shifted), False)
    S = S.flip(-1)
    half = svd_family._power_of_two(e, real)  # 2^e as two factors, one for each S of S^2
    squared = (S * half[0][:, None]) * (S * half[1][:, None])
    w = torch.where(definite[..., 0], squared, (S - sigma[:, None]) * (half[0] * half[1])[:, None])
    return w.reshape(A.shape[:-1]), Vh


def _eigh_by_torch(A: torch.Tensor, upper: bool):
    return _dispatch.TORCH.eigh(A, UPLO="U" if upper else "L")


@_dispatch.answered_by(_eigh_by_torch)
def _eigh_body(A: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    w, Vh = _spectrum(A, upper)
    if Vh is None:
        return w, torch.empty(A.shape, dtype=A.dtype, device=A.device)  # no elements
    V = Vh.mH.flip(-1)  # ascending, as w
    nonfinite = torch.isnan(w).reshape(V.shape[:-1]).any(-1)
    V = torch.where(nonfinite[:, None, None], torch.nan, V)  # no eigenvectors for non-finite input
    return w, _checks.resolved(V).reshape(A.shape)


_eigh_op = torch.library.custom_op("mpslinalg::eigh", mutates_args=())(_eigh_body)


@_eigh_op.register_fake
def _(A, upper):
    real = A.real.dtype if A.is_complex() else A.dtype
    return A.new_empty(A.shape[:-1], dtype=real), torch.empty_like(A, memory_format=torch.contiguous_format)


@_eigh_op.register_vmap
def _(info, in_dims, A, upper):
    return torch.ops.mpslinalg.eigh(A.movedim(in_dims[0], 0), upper), (0, 0)


@_dispatch.answered_by(lambda A, upper: _dispatch.TORCH.eigvalsh(A, UPLO="U" if upper else "L"))
def _eigvalsh_body(A: torch.Tensor, upper: bool) -> torch.Tensor:
    return _spectrum(A, upper)[0]


_eigvalsh_op = torch.library.custom_op("mpslinalg::eigvalsh", mutates_args=())(_eigvalsh_body)


@_eigvalsh_op.register_fake
def _(A, upper):
    return A.new_empty(A.shape[:-1], dtype=A.real.dtype if A.is_complex() else A.dtype)


@_eigvalsh_op.register_vmap
def _(info, in_dims, A, upper):
    return torch.ops.mpslinalg.eigvalsh(A.movedim(in_dims[0], 0), upper), 0


def _gaps(w: torch.Tensor) -> torch.Tensor:
    """E_ij = w_j - w_i, with ones on the diagonal (torch's Econj for Hermitian input)."""
    E = w.unsqueeze(-2) - w.unsqueeze(-1)
    eye = torch.eye(w.shape[-1], dtype=torch.bool, device=w.device)
    return torch.where(eye, torch.ones_like(E), E)


def _with_diagonal(M: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    eye = torch.eye(M.shape[-1], dtype=torch.bool, device=M.device)
    return torch.where(eye, torch.diag_embed(d.to(M.dtype)), M)


def _eigh_vjp(w, V, gw, gV, check_phase=True):
    """torch's linalg_eig_backward for Hermitian A: V (skew(V^H gV) / E + diag(gw)) V^H."""
    if gV is None:
        return (V * gw.to(V.dtype).unsqueeze(-2)) @ V.mH
    VhgV = V.mH @ gV
    if V.is_complex() and check_phase:
        imaginary = VhgV.diagonal(dim1=-2, dim2=-1).imag
        if not torch.allclose(imaginary, torch.zeros_like(imaginary), rtol=1e-2, atol=1e-2):
            raise RuntimeError(
                "linalg_eigh_backward: The eigenvectors in the complex case are specified up to multiplication "
                "by e^{i phi}. The specified loss function depends on this quantity, so it is ill-defined."
            )
    inner = 0.5 * (VhgV - VhgV.mH) / _gaps(w).to(V.dtype)
    if gw is not None:
        inner = _with_diagonal(inner, gw)
    return V @ inner @ V.mH


def _eigh_jvp(w, V, dA):
    """torch's linalg_eig_jvp for Hermitian A: with dP = V^H dA V, dw = Re diag(dP) and
    dV = V (dP / E with a zero diagonal)."""
    dP = V.mH @ dA @ V
    dw = dP.diagonal(dim1=-2, dim2=-1)
    dw = dw.real if dw.is_complex() else dw
    dX = _with_diagonal(dP / _gaps(w).to(dP.dtype), torch.zeros_like(dw))
    return dw.contiguous(), V @ dX  # forward mode wants tangents laid out as the outputs


def _eigh_setup(ctx, inputs, output):
    _dispatch.save(ctx, *output)


def _eigh_backward(ctx, gw, gV):
    w, V = ctx.saved_tensors
    return _eigh_vjp(w, V, gw, gV), None


_eigh_op.register_autograd(_eigh_backward, setup_context=_eigh_setup)
_Eigh = _dispatch.with_transposed_jvp(
    torch.ops.mpslinalg.eigh, _eigh_setup, _eigh_backward,
    jvp=lambda ctx, dA, _upper: _eigh_jvp(*ctx.saved_tensors, dA),
)


def _upper(UPLO: str) -> bool:
    if UPLO not in ("L", "l", "U", "u"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return UPLO in ("U", "u")


def _kernels_apply(api: str, A: torch.Tensor, UPLO: str) -> bool:
    """Whether A runs on mpslinalg's kernels; raises torch.linalg's errors for bad input."""
    runtime = _dispatch.kernel_runtime(A)
    if runtime is None or A.dtype not in runtime.dtypes:
        return False
    _checks.square(api, A)
    _upper(UPLO)
    return True


def _differentiable(A: torch.Tensor) -> bool:
    return (torch.is_grad_enabled() and A.requires_grad) or _dispatch.needs_forward_mode(A)


def eigh(A: torch.Tensor, UPLO: str = "L", *, out=None):
    """Eigenvalues (ascending, real) and orthonormal eigenvectors of Hermitian
    matrices, like ``torch.linalg.eigh``: ``(*, n, n)`` -> ``(eigenvalues (*, n),
    eigenvectors (*, n, n))`` with A = V diag(w) V^H.

    Only the triangle ``UPLO`` names ('L' or 'U') is read, and of the diagonal
    only the real part. float32 and complex64 (float64 and complex128 on CUDA
    and OpenCL), any batch dims and strides. Each eigenvector is unique up to its
    sign (phase), as torch's. Gradients are torch's, and fail as torch's for a
    complex loss that depends on the eigenvectors' phases; they are not defined
    where eigenvalues repeat.
    """
    if not _kernels_apply("linalg.eigh", A, UPLO):
        return _dispatch.TORCH.eigh(A, UPLO=UPLO, out=out)
    _checks.out_without_grad("_linalg_eigh", out, A)
    w, V = _dispatch.call(torch.ops.mpslinalg.eigh, _eigh_body, A, _upper(UPLO), function=_Eigh)
    return torch.return_types.linalg_eigh(_checks.into_each(out, (w, V)))


def eigvalsh(A: torch.Tensor, UPLO: str = "L", *, out=None) -> torch.Tensor:
    """The eigenvalues of Hermitian matrices, ascending, like ``torch.linalg.eigvalsh``.
    Its gradient takes the eigenvectors, so a differentiable call runs ``eigh``."""
    if not _kernels_apply("linalg.eigh", A, UPLO):  # torch's checks name eigh
        return _dispatch.TORCH.eigvalsh(A, UPLO=UPLO, out=out)
    _checks.out_without_grad("_linalg_eigh", out, A)
    if _differentiable(A):
        w = _dispatch.call(torch.ops.mpslinalg.eigh, _eigh_body, A, _upper(UPLO), function=_Eigh)[0]
    else:
        w = _dispatch.call(torch.ops.mpslinalg.eigvalsh, _eigvalsh_body, A, _upper(UPLO))
    return _checks.into(out, w)
