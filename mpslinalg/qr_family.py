"""QR: ``qr``, ``geqrf``, ``householder_product``, ``ormqr``.

Kernels (``metal/qr.metal``), LAPACK's sgeqr2 / cgeqr2 and sorg2r / cung2r:

- ``geqrf_small``, ``householder_small``, ``qr_small``: m, n <= N (N = 8, 16, 32,
  64), a team of N threads per matrix, thread c holding column c in registers;
  the reflectors are shared through threadgroup memory, a barrier a step.
  ``qr_small`` forms Q in the same launch (one read of A, one write of Q and R).
- ``geqrf_panel``: sgeqr2 on a panel of up to 32 columns of a matrix of any
  height in device memory, a threadgroup per matrix.

Larger matrices are factored blocked, as sgeqrf / sorgqr / sormqr: each panel's
reflectors are gathered into the compact WY form H_0 ... H_{b-1} = I - V T V^H
(slarft) and applied to the rest of the matrix by matrix products (slarfb).
``qr`` is geqrf, then Q from its reflectors.

Gradients: ``qr`` by torch's formula (``linalg_qr_backward``) on mpslinalg's
triangular solve; ``householder_product`` by differentiating Q recomputed as
``ormqr`` applied to I; ``ormqr`` by autograd through its matrix products and
triangular solves; ``geqrf`` has none, as in torch.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, _sharding, triangular
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import batches, fits, groups_for, launch

SIZES = (8, 16, 32, 64)
TEAMS = {8: 8, 16: 4, 32: 2, 64: 1}  # teams per threadgroup: 64 threads

def _tile(N: int) -> list[Shared]:
    """Each team's reflectors, their taus and a step's alpha and beta (qr.metal's
    small_tile): column j from its block's first row on, blocks of 8 columns."""
    rb = min(N, 8)
    blocks = N // rb
    return [Shared("tiles", "T", TEAMS[N] * (rb * blocks * N - rb * rb * blocks * (blocks - 1) // 2 + N + 2))]


GEQRF_SMALL = Kernel(
    function="geqrf_small",
    source="qr.metal",
    args=(Buffer("a", const=True), Buffer("qr"), Buffer("tau"), Scalar("m"), Scalar("n"), Scalar("count")),
    instances=tuple({"N": n} for n in SIZES),
    group_size=lambda N: N * TEAMS[N],
    template=lambda N: (N, TEAMS[N]),
    shared=_tile,
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
    shared=_tile,
)

QR_SMALL = Kernel(
    function="qr_small",
    source="qr.metal",
    args=(
        Buffer("a", const=True), Buffer("q"), Buffer("r"),
        Scalar("m"), Scalar("n"), Scalar("q_columns"), Scalar("r_rows"), Scalar("count"),
    ),
    instances=GEQRF_SMALL.instances,
    group_size=GEQRF_SMALL.group_size,
    template=GEQRF_SMALL.template,
    shared=_tile,
)

PANEL_WIDTH = 32  # a SIMD group's lanes: one column each
PANEL_GROUPS = (64, 256, 1024)  # threads per matrix, chosen by the panel's height

GEQRF_PANEL = Kernel(
    function="geqrf_panel",
    source="qr.metal",
    args=(Buffer("a"), Buffer("tau"), Scalar("m"), Scalar("n"), Scalar("j0"), Scalar("w")),
    instances=tuple({"GROUP": g} for g in PANEL_GROUPS),
    group_size=lambda GROUP: GROUP,
    template=lambda GROUP: (GROUP,),
    shared=lambda GROUP: [Shared("partials", "T", GROUP), Shared("sums", "R", GROUP // 32)],
)


def small_size(kernel: Kernel, m: int, n: int, dtype: torch.dtype) -> int:
    """The N of ``kernel``'s instance for m x n, or 0 if none applies."""
    largest = max(m, n)
    for size in SIZES:
        if largest <= size:
            return size if kernel.exists(dtype, N=size) else 0
    return 0


# --- custom ops: the kernels and their fake implementations ---


def _geqrf_packed(a: torch.Tensor, keep: bool) -> tuple[torch.Tensor, torch.Tensor, list]:
    """(packed, tau) of geqrf for resolved a, and with ``keep`` the blocked route's
    panels (V, T) (an empty list on the small kernel's route)."""
    *batch, m, n = a.shape
    k = min(m, n)
    count = a.shape[:-2].numel()
    if count == 0 or k == 0:
        return a.clone(), a.new_zeros((*batch, k)), []
    size = small_size(GEQRF_SMALL, m, n, a.dtype)
    tau = torch.empty((*batch, k), dtype=a.dtype, device=a.device)  # in its own shape, as packed
    if size:
        packed = torch.empty_like(a)
        for matrices, tensors in batches(count, a, packed, tau):
            launch(GEQRF_SMALL, groups_for(matrices, TEAMS[size]), *tensors, m, n, matrices, N=size)
        return packed, tau, []
    packed = a.reshape(count, m, n).clone()
    panels = _geqrf_blocked(packed, tau.view(count, k), _panel_group(m, a.dtype, a.device), keep)
    return packed.view(a.shape), tau, panels


@_dispatch.answered_by(lambda A: _dispatch.TORCH.geqrf(A))
def _geqrf_body(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    packed, tau, _ = _geqrf_packed(_checks.resolved(A), keep=False)
    return packed, tau


def _panel_group(m: int, dtype: torch.dtype, device: torch.device) -> int:
    """Threads per matrix for the panel kernel on m rows: the fewest with at most two
    rows each (batches fill the device with matrices), else the most that launch (64
    always do)."""
    groups = [g for g in PANEL_GROUPS if g == PANEL_GROUPS[0] or fits(GEQRF_PANEL, dtype, device, GROUP=g)]
    return next((g for g in groups if m <= 2 * g), groups[-1])


def _geqrf_blocked(a: torch.Tensor, tau: torch.Tensor, group: int, keep: bool = False) -> list:
    """sgeqrf in place on a (count x m x n): the panel kernel on each PANEL_WIDTH
    columns, then the panel's H^H applied to the columns right of it (slarfb).
    ``keep``: the panels' (V, T) of _compact_wy, which Q's sorgqr needs again."""
    count, m, n = a.shape
    k = min(m, n)
    panels = []
    for j0 in range(0, k, PANEL_WIDTH):
        w = min(PANEL_WIDTH, k - j0)
        launch(GEQRF_PANEL, count, a, tau, m, n, j0, w, GROUP=group)
        if j0 + w < n or keep:
            V, T = _compact_wy(a, tau, j0)
            if keep:
                panels.append((V, T))
        if j0 + w < n:
            C = a[:, j0:, j0 + w :]
            C.baddbmm_(V, T.mH @ (V.mH @ C), alpha=-1)
    return panels


def _compact_wy(a: torch.Tensor, tau: torch.Tensor, j0: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(V, T) with H_j0 ... H_{j0+w-1} = I - V T V^H on rows j0.. for the panel of
    (up to) PANEL_WIDTH reflectors from column j0 of a (*, mn, k), tau (*, k): V the
    reflectors with v_j[j] = 1 and zeros above, T upper triangular (slarft, forward,
    columnwise). LAPACK's recurrence T[:j, j] = -tau_j T[:j, :j] V[:, :j]^H v_j,
    T[j, j] = tau_j, is T = (I + D U)^-1 D for D = diag(tau) and U the strictly
    upper part of V^H V: one triangular solve with a unit diagonal, exact where
    some tau_j = 0 (their columns of T are zero) unlike T^-1 = D^-1 + U."""
    t = tau[..., j0 : j0 + PANEL_WIDTH]
    w = t.shape[-1]
    # Fresh tensors written in place where that saves an op a panel (a large QR's
    # launches are what bound it); autograd (ormqr's and the references' gradients)
    # sees only ops whose backward needs no value they overwrite.
    V = a[..., j0:, j0 : j0 + w].tril(-1)
    V.diagonal(dim1=-2, dim2=-1).fill_(1)
    unit = (V.mH @ V).triu_(1) * t.unsqueeze(-1)
    unit.diagonal(dim1=-2, dim2=-1).fill_(1)
    return V, triangular.solve_triangular(unit, torch.diag_embed(t), upper=True, unitriangular=True)


_geqrf_op = torch.library.custom_op("mpslinalg::geqrf", mutates_args=())(_geqrf_body)


@_geqrf_op.register_fake
def _(A):
    return torch.empty_like(A, memory_format=torch.contiguous_format), A.new_empty((*A.shape[:-2], min(A.shape[-2:])))


def _leading(info, x: torch.Tensor, dim: int | None) -> torch.Tensor:
    """x with vmap's dimension first (x repeated where it has none): the ops take batches."""
    return x.expand(info.batch_size, *x.shape) if dim is None else x.movedim(dim, 0)


@_geqrf_op.register_vmap
def _(info, in_dims, A):
    return torch.ops.mpslinalg.geqrf(_leading(info, A, in_dims[0])), (0, 0)


@_dispatch.answered_by(lambda A, tau: _dispatch.TORCH.householder_product(A, tau))
def _householder_body(A: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    a, t = _checks.resolved(A), _checks.resolved(tau)
    *batch, m, n = a.shape
    k = t.shape[-1]
    count = a.shape[:-2].numel()
    if count == 0 or n == 0:
        return torch.empty_like(a)
    size = small_size(HOUSEHOLDER_SMALL, m, n, a.dtype)
    flat_a, flat_tau = a.reshape(count, m, n), t.reshape(count, k)
    if not size:
        return _householder_blocked(flat_a, flat_tau).reshape(a.shape)
    q = torch.empty(count, m, n, dtype=a.dtype, device=a.device)
    for matrices, tensors in batches(count, flat_a, flat_tau, q):
        launch(HOUSEHOLDER_SMALL, groups_for(matrices, TEAMS[size]), *tensors, m, n, k, matrices, N=size)
    return q.reshape(a.shape)


def _householder_blocked(a: torch.Tensor, tau: torch.Tensor, panels: list | None = None) -> torch.Tensor:
    """sorgqr: Q (count x m x n) from I by the panels' I - V T V^H, last panel first;
    a panel starting at column j0 only touches Q[j0:, j0:] (the columns left of it
    are still those of I there). ``panels``: their (V, T), if geqrf kept them."""
    count, m, n = a.shape
    q = torch.eye(m, n, dtype=a.dtype, device=a.device).expand(count, m, n).contiguous()
    starts = range(0, tau.shape[-1], PANEL_WIDTH)
    for index, j0 in reversed(list(enumerate(starts))):
        V, T = panels[index] if panels else _compact_wy(a, tau, j0)
        Q = q[:, j0:, j0:]
        Q.baddbmm_(V, T @ (V.mH @ Q), alpha=-1)
    return q


_householder_op = torch.library.custom_op("mpslinalg::householder_product", mutates_args=())(_householder_body)


@_householder_op.register_fake
def _(A, tau):
    return torch.empty_like(A, memory_format=torch.contiguous_format)


@_householder_op.register_vmap
def _(info, in_dims, A, tau):
    return torch.ops.mpslinalg.householder_product(_leading(info, A, in_dims[0]), _leading(info, tau, in_dims[1])), 0


def _householder_reference(A: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """householder_product in differentiable torch operations (compact WY panels): its
    derivatives are this function's."""
    identity = torch.eye(*A.shape[-2:], dtype=A.dtype, device=A.device).expand(A.shape)
    return _apply_reflectors(A, tau, identity, left=True, transpose=False)


def _householder_setup(ctx, inputs, output):
    _dispatch.save(ctx, *inputs)


def _householder_backward(ctx, grad):
    A, tau = ctx.saved_tensors
    if tau.shape[-1] == 0:  # no reflectors: Q is I's first n columns whatever A is, no gradient (torch's too)
        return None, None
    with torch.enable_grad():
        A_, tau_ = A.detach().requires_grad_(), tau.detach().requires_grad_()
        return torch.autograd.grad(_householder_reference(A_, tau_), (A_, tau_), grad)


def _householder_functorch_backward(ctx, grad):
    # torch.func forbids requires_grad_ inside its transforms; AOTAutograd, tracing the
    # op's backward under torch.compile, takes no functorch transform of a custom op.
    # No reflectors: zeros, which the transposed VJP (the JVP) can take the VJP of.
    A, tau = ctx.saved_tensors
    if tau.shape[-1] == 0:
        return torch.zeros_like(A), torch.zeros_like(tau)
    return torch.func.vjp(_householder_reference, A, tau)[1](grad)


_householder_op.register_autograd(_sharding.mixable(_householder_backward), setup_context=_householder_setup)
# The JVP is the transposed VJP, as qr's: torch.func.jvp of the reference, nested in the
# JVP of a dual tensor's forward mode, would be a second forward-mode level, which torch
# does not support; torch.func.vjp of the VJP needs none.
_Householder = _dispatch.with_transposed_jvp(
    torch.ops.mpslinalg.householder_product, _householder_setup, _householder_functorch_backward,
)


@_dispatch.answered_by(lambda A, mode: _dispatch.TORCH.qr(A, mode=mode))
def _qr_body(A: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q, R) of A as torch.linalg.qr(A, mode): geqrf, then Q from its reflectors."""
    m, n = A.shape[-2:]
    k = min(m, n)
    size = small_size(QR_SMALL, m, n, A.dtype)
    if size:
        return _qr_small(_checks.resolved(A), mode, size)
    packed, tau, panels = _geqrf_packed(_checks.resolved(A), keep=mode != "r")
    R = packed[..., : (m if mode == "complete" else k), :].triu()
    if mode == "r":
        return A.new_empty(0), R
    if mode == "complete" and m > n:
        reflectors = torch.nn.functional.pad(packed, (0, m - n))
    else:
        reflectors = packed[..., :, :k]
    if not panels:
        return _householder_body(reflectors.contiguous(), tau), R
    # The blocked route: Q by geqrf's own (V, T), which sorgqr would form again.
    count = A.shape[:-2].numel()
    flat = reflectors.reshape(count, *reflectors.shape[-2:])
    return _householder_blocked(flat, tau.view(count, k), panels).view(reflectors.shape), R


def _qr_small(a: torch.Tensor, mode: str, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    *batch, m, n = a.shape
    k = min(m, n)
    count = a.shape[:-2].numel()
    q_columns = m if mode == "complete" else k
    r_rows = m if mode == "complete" else k
    # In their own shapes: a reshape costs host time on every call.
    Q = a.new_empty(0) if mode == "r" else torch.empty((*batch, m, q_columns), dtype=a.dtype, device=a.device)
    R = torch.empty((*batch, r_rows, n), dtype=a.dtype, device=a.device)
    if count and k:
        for matrices, tensors in batches(count, a, Q, R):  # mode "r": Q empty, each piece's too
            launch(QR_SMALL, groups_for(matrices, TEAMS[size]), *tensors,
                   m, n, 0 if mode == "r" else q_columns, r_rows, matrices, N=size)
    elif Q.numel():
        Q.copy_(torch.eye(m, q_columns, dtype=a.dtype, device=a.device))  # an m x 0 A's complete Q
    return Q, R


def _qr_fake(A, mode):
    m, n = A.shape[-2:]
    k = min(m, n)
    columns, rows = (m, m) if mode == "complete" else (k, k)
    Q = A.new_empty(0) if mode == "r" else A.new_empty((*A.shape[:-2], m, columns))
    return Q, A.new_empty((*A.shape[:-2], rows, n))


_qr_op = torch.library.custom_op("mpslinalg::qr", mutates_args=())(_qr_body)
_qr_op.register_fake(_qr_fake)


@_qr_op.register_vmap
def _(info, in_dims, A, mode):
    Q, R = torch.ops.mpslinalg.qr(_leading(info, A, in_dims[0]), mode)
    return (Q, R), (None if mode == "r" else 0, 0)  # mode 'r': Q is one empty tensor


def _qr_setup(ctx, inputs, output):
    ctx.mode = inputs[1]
    _dispatch.save(ctx, *output)


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


_qr_op.register_autograd(_sharding.mixable(_qr_backward), setup_context=_qr_setup)
_Qr = _dispatch.with_transposed_jvp(torch.ops.mpslinalg.qr, _qr_setup, _qr_backward)


# --- public functions ---


def geqrf(A: torch.Tensor, *, out=None):
    """A's QR factorization in LAPACK's packed form, like ``torch.geqrf``.

    Args:
        A: ``(*, m, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL).
        out: optional ``(a, tau)`` tensors to write into.

    Returns:
        ``(a, tau)``: R on and above the diagonal of ``a`` ``(*, m, n)``, the
        Householder vectors below it (H_j = I - tau_j v_j v_j^H, v_j[j] = 1), and
        ``tau`` ``(*, min(m, n))``. Not differentiable, as in torch.

    Example:
        >>> A = torch.tensor([[3.0, 1.0], [4.0, 2.0]])
        >>> packed, tau = LA.geqrf(A)
        >>> Q = LA.householder_product(packed, tau)
        >>> torch.allclose(Q @ packed.triu(), A)
        True
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.geqrf(A, out=out)
    _checks.out_without_grad("geqrf", out, A)
    if A.dim() < 2:
        raise RuntimeError("torch.geqrf: input must have at least 2 dimensions.")
    _checks.floating("torch.geqrf", A)
    if A.requires_grad and torch.is_grad_enabled():
        raise NotImplementedError("the derivative for 'geqrf' is not implemented.")
    packed, tau = _dispatch.call(torch.ops.mpslinalg.geqrf, _geqrf_body, A)
    if out is None:
        return torch.return_types.geqrf((packed, tau))
    return torch.return_types.geqrf(tuple(
        _checks.into(o, r, castable=("torch.geqrf", name)) for o, r, name in zip(out, (packed, tau), ("a", "tau"))
    ))


def householder_product(A: torch.Tensor, tau: torch.Tensor, *, out=None) -> torch.Tensor:
    """The product of Householder reflectors, like
    ``torch.linalg.householder_product``: the first n columns of H_0 ... H_{k-1}.

    Args:
        A: ``(*, m, n)``, m >= n >= k, the reflectors below the diagonal as
            ``geqrf`` leaves them.
        tau: ``(*, k)``, their scalars.
        out: optional tensor to write the result into.

    Returns:
        ``(*, m, n)``, orthonormal columns. Differentiable in A and tau.

    Raises:
        RuntimeError: torch's, for m < n, k > n or mismatched batch shapes.

    Example:
        >>> A = torch.tensor([[3.0, 1.0], [4.0, 2.0], [0.0, 5.0]])
        >>> Q = LA.householder_product(*LA.geqrf(A))  # the first 2 columns of the 3 x 3 Q
        >>> torch.allclose(Q.mT @ Q, torch.eye(2), atol=1e-6)
        True
    """
    if not _dispatch.has_kernels(A, tau):
        return _dispatch.TORCH.householder_product(A, tau, out=out)
    _checks.out_without_grad("linalg_householder_product", out, A, tau)
    if A.dim() >= 2 and A.dtype != tau.dtype:  # the meta kernel words this one differently
        raise RuntimeError(
            f"torch.linalg.householder_product: tau dtype {_checks.type_name(tau.dtype)} "
            f"does not match input dtype {_checks.type_name(A.dtype)}"
        )
    if not _checks.householder_shapes_fit(A, tau):  # torch's own errors (a meta call costs ~40 us of host time)
        _dispatch.TORCH.householder_product(A.to("meta"), tau.to("meta"))
    Q = _dispatch.call(torch.ops.mpslinalg.householder_product, _householder_body, A, tau, function=_Householder)
    return _checks.into(out, Q, castable=("torch.linalg.householder_product", "result"))


def ormqr(A: torch.Tensor, tau: torch.Tensor, C: torch.Tensor, left: bool = True, transpose: bool = False, *, out=None):
    """Multiplies by Q from its reflectors without forming it, like ``torch.ormqr``
    (LAPACK's sormqr / cunmqr): op(Q) C or C op(Q).

    Each panel of reflectors is applied as I - V T V^H by matrix products.

    Args:
        A: ``(*, mn, k)``, the reflectors as ``geqrf`` leaves them (mn = C's rows
            if ``left`` else its columns).
        tau: ``(*, k)``.
        C: ``(*, m, n)``.
        left: op(Q) C (True) or C op(Q).
        transpose: op(Q) = Q^H (True) or Q.
        out: optional tensor to write the result into.

    Returns:
        C's shape. Differentiable in A, tau and C.

    Raises:
        RuntimeError: torch's, for mismatched shapes.

    Example:
        >>> A = torch.tensor([[3.0, 1.0], [4.0, 2.0]])
        >>> packed, tau = LA.geqrf(A)
        >>> C = torch.eye(2)
        >>> torch.allclose(LA.ormqr(packed, tau, C), LA.householder_product(packed, tau))  # Q C
        True
    """
    if not _dispatch.has_kernels(A, tau, C):
        return _dispatch.TORCH.ormqr(A, tau, C, left, transpose, out=out)
    _checks.out_without_grad("ormqr", out, A, tau, C)
    _ormqr_checks(A, tau, C, left)
    if out is not None and out.dtype != A.dtype:  # torch's message, its missing space included
        raise RuntimeError(
            f"torch.ormqr: Expected input and result to have the same dtype, but input has dtype"
            f"{_checks.type_name(A.dtype)} and result has dtype {_checks.type_name(out.dtype)}"
        )
    return _checks.into(out, _apply_reflectors(A, tau, C, left, transpose))


def _ormqr_checks(A: torch.Tensor, tau: torch.Tensor, C: torch.Tensor, left: bool) -> None:
    """torch.ormqr's checks of shapes and dtypes as its CPU kernel makes them, in its
    order and words: its meta kernel orders and words them otherwise, and lets through a
    tau whose length is not min(C's rows (left) or columns, A's columns), which the CPU
    kernel refuses."""
    if A.dim() < 2:
        raise RuntimeError("torch.ormqr: input must have at least 2 dimensions.")
    if C.dim() < 2:
        raise RuntimeError("torch.ormqr: other must have at least 2 dimensions.")
    side = -2 if left else -1
    if C.size(side) != A.size(-2):
        raise RuntimeError(f"torch.ormqr: other.shape[{side}] must be equal to input.shape[-2]")
    if tau.size(-1) != min(C.size(side), A.size(-1)):  # size, not shape: torch's IndexError for a 0-d tau
        raise RuntimeError(f"torch.ormqr: tau.shape[-1] must be equal to min(other.shape[{side}], input.shape[-1])")
    for name, x in (("tau", tau), ("other", C)):
        if x.dim() != A.dim() - (name == "tau"):
            expected = "have one dimension less than" if name == "tau" else "have the same number of dimensions as"
            raise RuntimeError(
                f"torch.ormqr: Expected {name} to {expected} input, but got {name}.ndim equal to {x.dim()} "
                f"and input.ndim is equal to {A.dim()}"
            )
    for name, x in (("tau", tau), ("other", C)):
        batch = x.shape[: A.dim() - 2]
        if A.dim() > 2 and batch != A.shape[:-2]:
            raise RuntimeError(
                f"torch.ormqr: Expected batch dimensions of {name} to be equal to input.shape[:-2], but got {list(batch)}"
            )
    for name, x in (("tau", tau), ("other", C)):
        if x.dtype != A.dtype:
            raise RuntimeError(
                f"torch.ormqr: Expected input and {name} to have the same dtype, but input has dtype"
                f"{_checks.type_name(A.dtype)} and {name} has dtype {_checks.type_name(x.dtype)}"
            )


def _apply_reflectors(A: torch.Tensor, tau: torch.Tensor, C: torch.Tensor, left: bool, transpose: bool) -> torch.Tensor:
    k = tau.shape[-1]
    panels = range(0, k, PANEL_WIDTH)
    # Q^H C and C Q take H_0 first, Q C and C Q^H take it last. The rows (columns)
    # a panel leaves alone are joined to the ones it changes, not written over, so
    # that autograd sees every step.
    for j0 in panels if left == transpose else reversed(panels):
        V, T = _compact_wy(A, tau, j0)
        if transpose:
            T = T.mH
        if left:
            rest = C[..., j0:, :]
            C = torch.cat((C[..., :j0, :], rest - V @ (T @ (V.mH @ rest))), dim=-2)
        else:
            rest = C[..., :, j0:]
            C = torch.cat((C[..., :, :j0], rest - (rest @ V) @ T @ V.mH), dim=-1)
    return C if k else C.clone()


def qr(A: torch.Tensor, mode: str = "reduced", *, out=None):
    """The QR factorization, like ``torch.linalg.qr``: A = Q R by Householder
    reflections, R's diagonal of either sign as LAPACK leaves it.

    Args:
        A: ``(*, m, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL).
        mode: 'reduced' (Q ``(*, m, k)``, R ``(*, k, n)``, k = min(m, n)),
            'complete' (Q ``(*, m, m)``, R ``(*, m, n)``) or 'r' (R only, Q empty).
        out: optional ``(Q, R)`` tensors to write into.

    Returns:
        ``(Q, R)``. Differentiable as torch's: 'reduced', and 'complete' when
        m <= n.

    Raises:
        RuntimeError: torch's, for an unknown mode, or in backward where torch's
            formula does not apply.

    Example:
        >>> A = torch.tensor([[3.0, 1.0], [4.0, 2.0]])
        >>> Q, R = LA.qr(A)
        >>> torch.allclose(Q @ R, A) and torch.allclose(Q.mT @ Q, torch.eye(2), atol=1e-6)
        True
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.qr(A, mode=mode, out=out)
    _checks.out_without_grad("linalg_qr", out, A)
    if A.dim() < 2 or mode not in ("reduced", "complete", "r"):  # torch's errors (a meta call costs ~90 us)
        _dispatch.TORCH.qr(A.to("meta"), mode=mode)
    Q, R = _dispatch.call(torch.ops.mpslinalg.qr, _qr_body, A, mode, function=_Qr)
    return torch.return_types.linalg_qr(_checks.into_each(out, (Q, R)))
