"""QR: ``qr``, ``geqrf``, ``householder_product``.

Kernels (``metal/qr.metal``), LAPACK's sgeqr2 / cgeqr2 and sorg2r / cung2r:

- ``geqrf_small``: m, n <= N (N = 8, 16, 32, and 64 where the tile fits 32 KiB:
  real types), a team of N threads per matrix holding it in threadgroup memory
  by columns, thread c owning column c; a barrier a step.
- ``householder_small``: Q from the reflectors, a thread per column of Q, no
  barrier.

``qr`` is the two launches. Larger matrices take torch's geqrf and orgqr on the
same device until the blocked kernels exist (issue 5).

Gradients: ``qr`` by torch's formula (``linalg_qr_backward``) on mpslinalg's
triangular solve; ``householder_product`` by differentiating the product of
reflectors, recomputed with torch operations in the backward pass; ``geqrf``
has none, as in torch.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, triangular
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import groups_for, launch, pieces

SIZES = (8, 16, 32, 64)
TEAMS = {8: 8, 16: 4, 32: 2, 64: 1}  # teams per threadgroup: 64 threads

GEQRF_SMALL = Kernel(
    function="geqrf_small",
    source="qr.metal",
    args=(Buffer("a", const=True), Buffer("qr"), Buffer("tau"), Scalar("m"), Scalar("n"), Scalar("count")),
    instances=tuple({"N": n} for n in SIZES),
    group_size=lambda N: N * TEAMS[N],
    template=lambda N: (N, TEAMS[N]),
    shared=lambda N: [Shared("tiles", "T", TEAMS[N] * N * (N + 1)), Shared("taus", "T", TEAMS[N] * N)],
)

HOUSEHOLDER_SMALL = Kernel(
    function="householder_small",
    source="qr.metal",
    args=(
        Buffer("a", const=True), Buffer("tau", const=True), Buffer("q"),
        Scalar("m"), Scalar("n"), Scalar("k"), Scalar("count"),
    ),
    instances=GEQRF_SMALL.instances,
    group_size=GEQRF_SMALL.group_size,
    template=GEQRF_SMALL.template,
    shared=lambda N: [Shared("tiles", "T", TEAMS[N] * N * (N + 1))],
)

def small_size(kernel: Kernel, m: int, n: int, dtype: torch.dtype) -> int:
    """The N of ``kernel``'s instance for m x n, or 0 if none applies."""
    size = next((s for s in SIZES if max(m, n) <= s), 0)
    return size if size and kernel.exists(dtype, N=size) else 0


# --- custom ops: the kernels and their fake implementations ---


def _geqrf_body(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = _checks.resolved(A)
    *batch, m, n = a.shape
    k = min(m, n)
    count = a.shape[:-2].numel()
    size = small_size(GEQRF_SMALL, m, n, a.dtype)
    if count == 0 or k == 0:
        return a.clone(), a.new_zeros((*batch, k))
    if not size:
        return torch.geqrf(a)
    flat = a.reshape(count, m, n)
    packed = torch.empty_like(flat)
    tau = a.new_empty((count, k))
    for start, stop in pieces(count):
        launch(
            GEQRF_SMALL, groups_for(stop - start, TEAMS[size]),
            flat[start:stop], packed[start:stop], tau[start:stop], m, n, stop - start, N=size,
        )
    return packed.reshape(a.shape), tau.reshape(*batch, k)


_geqrf_op = torch.library.custom_op("mpslinalg::geqrf", mutates_args=())(_geqrf_body)


@_geqrf_op.register_fake
def _(A):
    return torch.empty_like(A, memory_format=torch.contiguous_format), A.new_empty((*A.shape[:-2], min(A.shape[-2:])))


def _householder_body(A: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    a, t = _checks.resolved(A), _checks.resolved(tau)
    *batch, m, n = a.shape
    k = t.shape[-1]
    count = a.shape[:-2].numel()
    size = small_size(HOUSEHOLDER_SMALL, m, n, a.dtype)
    if count == 0 or n == 0:
        return torch.empty_like(a)
    if not size:
        return torch.linalg.householder_product(a, t)
    q = torch.empty(count, m, n, dtype=a.dtype, device=a.device)
    flat_a, flat_tau = a.reshape(count, m, n), t.reshape(count, k)
    for start, stop in pieces(count):
        launch(
            HOUSEHOLDER_SMALL, groups_for(stop - start, TEAMS[size]),
            flat_a[start:stop], flat_tau[start:stop], q[start:stop], m, n, k, stop - start, N=size,
        )
    return q.reshape(a.shape)


_householder_op = torch.library.custom_op("mpslinalg::householder_product", mutates_args=())(_householder_body)


@_householder_op.register_fake
def _(A, tau):
    return torch.empty_like(A, memory_format=torch.contiguous_format)


def _reflector_product(A: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """H_0 ... H_{k-1} I[:, :n] in torch operations (differentiable by autograd): the
    backward of householder_product recomputes it, one reflector at a time."""
    m, n = A.shape[-2:]
    rows = torch.arange(m, device=A.device)[:, None]
    Q = torch.eye(m, n, dtype=A.dtype, device=A.device).expand(*A.shape[:-2], m, n)
    for j in reversed(range(tau.shape[-1])):
        v = torch.where(rows > j, A[..., :, j : j + 1], (rows == j).to(A.dtype))
        Q = Q - tau[..., j, None, None] * v @ (v.mH @ Q)
    return Q


def _householder_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _householder_backward(ctx, grad):
    A, tau = ctx.saved_tensors
    with torch.enable_grad():
        A_, tau_ = A.detach().requires_grad_(), tau.detach().requires_grad_()
        Q = _reflector_product(A_, tau_)
        grad_A, grad_tau = torch.autograd.grad(Q, (A_, tau_), grad)
    return grad_A, grad_tau


_householder_op.register_autograd(_householder_backward, setup_context=_householder_setup)


def _qr_body(A: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q, R) of A as torch.linalg.qr(A, mode): geqrf, then Q from its reflectors."""
    m, n = A.shape[-2:]
    k = min(m, n)
    packed, tau = _geqrf_body(A)
    R = packed[..., : (m if mode == "complete" else k), :].triu()
    if mode == "r":
        return A.new_empty(0), R
    if mode == "complete" and m > n:
        reflectors = torch.nn.functional.pad(packed, (0, m - n))
    else:
        reflectors = packed[..., :, :k]
    return _householder_body(reflectors.contiguous(), tau), R


def _qr_fake(A, mode):
    m, n = A.shape[-2:]
    k = min(m, n)
    columns, rows = (m, m) if mode == "complete" else (k, k)
    Q = A.new_empty(0) if mode == "r" else A.new_empty((*A.shape[:-2], m, columns))
    return Q, A.new_empty((*A.shape[:-2], rows, n))


_qr_op = torch.library.custom_op("mpslinalg::qr", mutates_args=())(_qr_body)
_qr_op.register_fake(_qr_fake)


def _qr_setup(ctx, inputs, output):
    ctx.mode = inputs[1]
    ctx.save_for_backward(*output)


def _qr_backward(ctx, grad_Q, grad_R):
    """torch's linalg_qr_backward; R^-H by mpslinalg's triangular solve."""
    Q, R = ctx.saved_tensors
    if ctx.mode == "r":
        raise RuntimeError(
            "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
            "Please use linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr."
        )
    m, n = Q.shape[-2], R.shape[-1]
    if ctx.mode == "complete" and m > n:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    M = torch.zeros(*Q.shape[:-2], Q.shape[-1], R.shape[-2], dtype=Q.dtype, device=Q.device)
    if grad_R is not None:
        M = M + grad_R @ R.mH
    if grad_Q is not None:
        M = M - Q.mH @ grad_Q
    if m >= n:
        upper = M.triu()
        symmetric = upper + upper.mH
        symmetric = symmetric - torch.diag_embed(symmetric.diagonal(dim1=-2, dim2=-1).real.to(Q.dtype) * 0.5)
        b = Q @ symmetric
        if grad_Q is not None:
            b = b + grad_Q
        return _right_solve_adjoint(R, b), None
    # m < n: only R's leading m x m block enters the Q-part of the gradient.
    X = -M
    skew = (X - X.mH).tril()
    if skew.is_complex():
        skew = skew - torch.diag_embed(1j * skew.diagonal(dim1=-2, dim2=-1).imag * 0.5)
    grad_A = torch.nn.functional.pad(_right_solve_adjoint(R[..., :, :m], Q @ skew), (0, n - m))
    if grad_R is not None:
        grad_A = grad_A + Q @ grad_R
    return grad_A, None


def _right_solve_adjoint(R: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """B R^-H for upper triangular R: X R^H = B, R^H lower."""
    return triangular.solve_triangular(R.mH, B, upper=False, left=False)


_qr_op.register_autograd(_qr_backward, setup_context=_qr_setup)


# --- public functions ---


def geqrf(A: torch.Tensor, *, out=None):
    """``(a, tau)``: A's QR factorization in LAPACK's packed form, like ``torch.geqrf``:
    R on and above the diagonal of ``a``, the Householder vectors below it
    (H_j = I - tau_j v_j v_j^H, v_j[j] = 1), ``tau`` ``(*, min(m, n))``. Not
    differentiable, as in torch."""
    if not _dispatch.has_kernels(A):
        return torch.geqrf(A, out=out)
    if A.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    _checks.floating("torch.geqrf", A)
    if A.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("the derivative for 'geqrf' is not implemented.")
    packed, tau = _dispatch.call(torch.ops.mpslinalg.geqrf, _geqrf_body, A)
    return torch.return_types.geqrf(_checks.into_each(out, (packed, tau)))


def householder_product(A: torch.Tensor, tau: torch.Tensor, *, out=None) -> torch.Tensor:
    """The first n columns of H_0 ... H_{k-1} (m x n), the reflectors as :func:`geqrf`
    leaves them in A (m x n, m >= n >= k = tau.shape[-1]), like
    ``torch.linalg.householder_product``. Differentiable in A and tau."""
    if not _dispatch.has_kernels(A):
        return torch.linalg.householder_product(A, tau, out=out)
    if A.dim() >= 2 and A.dtype != tau.dtype:  # the meta kernel words this one differently
        raise RuntimeError(
            f"torch.linalg.householder_product: tau dtype {_checks.type_name(tau.dtype)} "
            f"does not match input dtype {_checks.type_name(A.dtype)}"
        )
    torch.linalg.householder_product(A.to("meta"), tau.to("meta"))  # torch's errors for shapes and dtypes
    _checks.same_device(A, tau)
    return _checks.into(out, _dispatch.call(torch.ops.mpslinalg.householder_product, _householder_body, A, tau))


def qr(A: torch.Tensor, mode: str = "reduced", *, out=None):
    """``(Q, R)`` with A = Q R, like ``torch.linalg.qr``: Householder QR, R's diagonal
    of either sign as LAPACK leaves it. ``mode``: 'reduced' (Q m x k, R k x n, k =
    min(m, n)), 'complete' (Q m x m, R m x n) or 'r' (R only, Q empty).
    Differentiable as torch's: 'reduced', and 'complete' when m <= n."""
    if not _dispatch.has_kernels(A):
        return torch.linalg.qr(A, mode=mode, out=out)
    torch.linalg.qr(A.to("meta"), mode=mode)  # torch's errors for the mode, shapes and dtypes
    Q, R = _dispatch.call(torch.ops.mpslinalg.qr, _qr_body, A, mode)
    return torch.return_types.linalg_qr(_checks.into_each(out, (Q, R)))
