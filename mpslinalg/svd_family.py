"""SVD: ``svd``, ``svdvals``, ``pinv``, ``lstsq``, ``matrix_rank``.

Kernels (``metal/svd.metal``), LAPACK's sgesvj / cgesvj (one-sided Jacobi),
which keeps the relative accuracy of small singular values:

- ``svd_tiny``: n <= 3, a thread per matrix, in registers (camera geometry:
  Kabsch, homographies, polar decompositions).
- ``svd_pairs``: n <= 32 (16 complex), a team of N / 2 lanes per matrix, each
  lane the two columns of X and V it rotates in registers, the round-robin
  ordering by shuffles.
- ``svd_jacobi``: larger n, a threadgroup per matrix, the n / 2 pairs of each
  round of the round-robin ordering on its SIMD groups, columns in device memory.

From POLAR_FROM (256) columns, QDWH's polar decomposition A = U_p H and H's
eigendecomposition by the spectral divide and conquer (``qdwh``) instead, in QR,
Cholesky and matrix products: backward stable (singular values to k eps S_max),
without Jacobi's relative accuracy for the small singular values of graded
matrices, which svd_jacobi keeps below the crossover.

All take square matrices. As sgejsv, a tall matrix is first factored by QR
(mpslinalg's) and its R decomposed, U = Q U_R, and the complete Q gives
``full_matrices``' extra columns; a wide matrix is decomposed as its conjugate
transpose. Every matrix is scaled by a power of two (exact; by svd_tiny and
svd_pairs themselves for square matrices) so that its largest entry lies in
[1/2, 1): inputs near the ends of the float range neither overflow nor underflow. The iteration stops on the device, when a sweep rotates nothing
(or after 30), so non-finite input gives NaN, never a hang or a host sync.

Gradients: torch's ``svd_backward`` (and its complex phase check), ``pinv`` by
torch's ``pinv_backward`` (the formula, not the SVD), ``lstsq`` through pinv,
all in matrix products.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, _sharding, qr_family
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import batches, fits, groups_for, launch

TINY_SIZES = (1, 2, 3)
TINY_GROUP = 64  # matrices per threadgroup

SVD_TINY = Kernel(
    function="svd_tiny",
    source="svd.metal",
    args=(Buffer("a", const=True), Buffer("u"), Buffer("s", "R"), Buffer("w"), Scalar("count")),
    instances=tuple({"N": n} for n in TINY_SIZES),
    group_size=TINY_GROUP,
    template=lambda N: (N, TINY_GROUP),
)

PAIR_SIZES = (8, 16, 32)  # N: matrices up to N x N, N / 2 lanes each
PAIR_GROUP = 64

SVD_PAIRS = Kernel(
    function="svd_pairs",
    source="svd.metal",
    args=(Buffer("a", const=True), Buffer("u"), Buffer("s", "R"), Buffer("w"), Scalar("n"), Scalar("count")),
    instances=tuple({"N": n} for n in PAIR_SIZES),
    group_size=PAIR_GROUP,
    template=lambda N: (N, PAIR_GROUP),
    # Four columns of N a lane in registers: complex N = 32 would spill.
    where=lambda dtype, N: not dtype.is_complex or N <= 16,
)

JACOBI_GROUPS = (512, 1024)  # threads per matrix, by the number of column pairs (fewer go to svd_pairs)

SVD_JACOBI = Kernel(
    function="svd_jacobi",
    source="svd.metal",
    args=(
        Buffer("a"), Buffer("v"), Buffer("norms", "R"), Buffer("u"), Buffer("s", "R"), Buffer("w"), Scalar("n"),
    ),
    instances=tuple({"GROUP": g} for g in JACOBI_GROUPS),
    group_size=lambda GROUP: GROUP,
    template=lambda GROUP: (GROUP,),
    shared=lambda GROUP: [Shared("flags", "int", 1), Shared("partial", "R", GROUP // 32)],
)


def _jacobi_group(n: int, dtype: torch.dtype, device: torch.device) -> int:
    """Threads for n columns: a SIMD group for each of up to n / 2 pairs a round, or
    fewer where the pipeline allows no more (a Metal pipeline's limit falls with the
    registers its kernel uses): the SIMD groups then take the pairs in turns."""
    pairs = (n + 1) // 2
    wanted = next((g for g in JACOBI_GROUPS if pairs <= g // 32), JACOBI_GROUPS[-1])
    candidates = [g for g in reversed(JACOBI_GROUPS) if g <= wanted]
    # None fitting, the launch raises KernelUnavailable and the op is answered by torch.
    return next((g for g in candidates if fits(SVD_JACOBI, dtype, device, GROUP=g)), wanted)


def _pair_size(n: int, dtype: torch.dtype) -> int:
    """The N of the svd_pairs instance for n x n, or 0 if none applies (a loop and a
    table read: every call asks)."""
    for size in PAIR_SIZES:
        if n <= size and _PAIR_DTYPES[dtype, size]:
            return size
    return 0


# (dtype, N) -> whether svd_pairs has that instance (the declaration decides).
_PAIR_DTYPES = {(dtype, size): SVD_PAIRS.exists(dtype, N=size) for dtype in SVD_PAIRS.dtypes for size in PAIR_SIZES}


def _scales_itself(n: int, dtype: torch.dtype) -> bool:
    """Whether n x n matrices go to a kernel that scales them on the device and reads and
    writes them as they are (svd_tiny, svd_pairs: launches short enough for the host's
    work around them to count)."""
    return n <= TINY_SIZES[-1] or _pair_size(n, dtype) > 0


def _svd_square(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U, S, Vh) of contiguous (*, n, n) X in its batch shape (a reshape costs host
    time on every call), scaled as the module says unless ``_scales_itself``; U
    contiguous there, its transpose otherwise."""
    *batch, n, _ = X.shape
    count = X.shape[:-2].numel()
    s = torch.empty((*batch, n), dtype=_checks.real_dtype(X.dtype), device=X.device)
    if n <= TINY_SIZES[-1]:
        u, w = torch.empty_like(X), torch.empty_like(X)
        for matrices, tensors in batches(count, X, u, s, w):
            launch(SVD_TINY, groups_for(matrices, TINY_GROUP), *tensors, matrices, N=n)
        return u, s, w
    if (size := _pair_size(n, X.dtype)):
        u, w = torch.empty_like(X), torch.empty_like(X)
        per_group = PAIR_GROUP // (size // 2)
        for matrices, tensors in batches(count, X, u, s, w):
            launch(SVD_PAIRS, groups_for(matrices, per_group), *tensors, n, matrices, N=size)
        return u, s, w
    if n >= POLAR_FROM:
        U, S, Vh = _svd_by_polar(X.reshape(count, n, n))
        return U.reshape(X.shape), S.reshape(s.shape), Vh.reshape(X.shape)
    a = X.mT.contiguous()  # rows: X's columns
    u, w, v = torch.empty_like(a), torch.empty_like(a), torch.empty_like(a)
    norms = torch.empty_like(s)
    for matrices, tensors in batches(count, a, v, norms, u, s, w):
        launch(SVD_JACOBI, matrices, *tensors, n, GROUP=_jacobi_group(n, X.dtype, X.device))
    return u.mT, s, w


# n from which square matrices go to QDWH's polar decomposition and the spectral divide
# and conquer (``qdwh``; below: svd_jacobi, with its relative accuracy). Not yet measured
# on a GPU against svd_jacobi, one threadgroup a matrix (2.1 s at n = 1024 on an H100).
POLAR_FROM = 256


def _svd_by_polar(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(U, S, Vh) of (count, n, n) X by ``qdwh.svd_by_polar``, in X's batch shape;
    non-finite matrices give NaN (one host synchronisation)."""
    from . import eigh_family, qdwh

    if not bool(torch.isfinite(X).all()):
        nan = torch.full_like(X, torch.nan)
        return nan, torch.full(X.shape[:-1], torch.nan, dtype=_checks.real_dtype(X.dtype), device=X.device), nan.clone()
    return qdwh.svd_by_polar(X, eigh_family._leaf, eigh_family._whole)


def _power_of_two(e: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """2^e as two factors, each in range for exponents of any float (2^e alone is not:
    2^149 overflows float32)."""
    half = torch.div(e, 2, rounding_mode="floor")
    return torch.exp2(half.to(dtype)), torch.exp2((e - half).to(dtype))


@_dispatch.answered_by(lambda A, full_matrices: _dispatch.TORCH.svd(A, full_matrices=full_matrices))
def _svd_body(A: torch.Tensor, full_matrices: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    *batch, m, n = A.shape
    k = min(m, n)
    real = _checks.real_dtype(A.dtype)
    count = A.shape[:-2].numel()
    wide = m < n
    rows, columns = (n, m) if wide else (m, n)  # of X, the matrix decomposed: rows >= columns
    if count == 0 or k == 0:
        U = torch.eye(m, m if full_matrices else k, dtype=A.dtype, device=A.device).expand(*batch, -1, -1)
        Vh = torch.eye(n if full_matrices else k, n, dtype=A.dtype, device=A.device).expand(*batch, -1, -1)
        # Copies: contiguous() of an expanded empty batch is the view itself, which an
        # autograd.Function's output under forward mode may not be.
        return U.clone(memory_format=torch.contiguous_format), A.new_zeros((*batch, k), dtype=real), Vh.clone(
            memory_format=torch.contiguous_format)
    X = _checks.resolved(A.mH if wide else A)
    if rows == columns and _scales_itself(columns, A.dtype):
        return _svd_square(X)
    X = X.reshape(count, rows, columns)
    # Scaled by 2^-e with max |x_ij| in [1/2, 1); zero and non-finite matrices as they are.
    # Not where R's SVD kernel scales itself: our QR is scale-invariant (sgeqrf's scaled
    # norms), and the dozen elementwise launches cost more than the kernels at small n.
    scaling = not _scales_itself(columns, A.dtype)
    if scaling:
        largest = X.abs().amax(dim=(-2, -1))
        e = torch.frexp(largest).exponent
        e = torch.where(torch.isfinite(largest) & (largest > 0), e, 0)
        down = _power_of_two(-e, real)
        X = X * down[0][:, None, None] * down[1][:, None, None]
    if rows > columns:  # sgejsv's QR preconditioning: the SVD of R
        Q, R = qr_family._qr_body(X, "complete" if full_matrices else "reduced")
        U_R, S, Vh = _svd_square(R[:, :columns].contiguous())
        U = Q[..., :columns] @ U_R
        if full_matrices:
            U = torch.cat((U, Q[..., columns:]), dim=-1)
    else:
        U, S, Vh = _svd_square(X)
    if scaling:
        up = _power_of_two(e, real)
        S = S * up[0][:, None] * up[1][:, None]
    if wide:  # X = A^H = U S Vh, so A = Vh^H S U^H
        U, Vh = Vh.mH, U.mH
    U = U.reshape(*batch, m, U.shape[-1])
    Vh = Vh.reshape(*batch, Vh.shape[-2], n)
    return _checks.resolved(U), S.reshape(*batch, k), _checks.resolved(Vh)


_svd_op = torch.library.custom_op("mpslinalg::svd", mutates_args=())(_svd_body)


@_svd_op.register_fake
def _(A, full_matrices):
    *batch, m, n = A.shape
    k = min(m, n)
    real = _checks.real_dtype(A.dtype)
    u_columns, v_rows = (m, n) if full_matrices else (k, k)
    return A.new_empty((*batch, m, u_columns)), A.new_empty((*batch, k), dtype=real), A.new_empty((*batch, v_rows, n))


@_svd_op.register_vmap
def _(info, in_dims, A, full_matrices):
    return torch.ops.mpslinalg.svd(A.movedim(in_dims[0], 0), full_matrices), (0, 0, 0)


def _skew(M: torch.Tensor) -> torch.Tensor:
    return M - M.mH


def _svd_vjp(U, S, Vh, gU, gS, gVh, check_phase=True):
    """torch's svd_backward on the thin factors (linalg-contracts 2.7); ``check_phase``:
    its error for a loss that depends on the singular vectors' complex phases."""
    if gU is None and gS is None and gVh is None:
        return None  # no output reaches the loss (gradients are not materialised)
    m, n = U.shape[-2], Vh.shape[-1]
    k = S.shape[-1]
    U, Vh = U[..., :k], Vh[..., :k, :]
    gU = None if gU is None else gU[..., :k]
    gVh = None if gVh is None else gVh[..., :k, :]
    if gU is None and gVh is None:
        return U @ (gS.unsqueeze(-1) * Vh) if m >= n else (U * gS.unsqueeze(-2)) @ Vh
    J = None if gU is None else _skew(U.mH @ gU)
    K = None if gVh is None else _skew(Vh @ gVh.mH)
    if U.is_complex() and check_phase:
        imag_J = torch.zeros_like(S) if J is None else J.diagonal(dim1=-2, dim2=-1).imag
        imag_K = torch.zeros_like(S) if K is None else K.diagonal(dim1=-2, dim2=-1).imag
        if not torch.allclose(imag_J, -imag_K, rtol=1e-2, atol=1e-2):
            raise RuntimeError(
                "svd_backward: The singular vectors in the complex case are specified up to multiplication "
                "by e^{i phi}. The specified loss function depends on this phase term, making it ill-defined."
            )
    S2 = S * S
    E = S2.unsqueeze(-2) - S2.unsqueeze(-1)
    E.diagonal(dim1=-2, dim2=-1).fill_(1)
    if J is not None and K is not None:
        gA = (J * S.unsqueeze(-2) + S.unsqueeze(-1) * K) / E
    elif J is not None:
        gA = J / E * S.unsqueeze(-2)
    else:
        gA = S.unsqueeze(-1) * K / E
    if gS is not None:
        gA = gA + torch.diag_embed(gS.to(gA.dtype))
    if U.is_complex() and J is not None and K is not None:
        gA = gA + torch.diag_embed(J.diagonal(dim1=-2, dim2=-1) / (2 * S))
    if m > n and gU is not None:
        gA = U @ gA
        gU_over_S = gU / S.unsqueeze(-2)
        gA = (gA + gU_over_S - U @ (U.mH @ gU_over_S)) @ Vh
    elif m < n and gVh is not None:
        gA = gA @ Vh
        gVh_over_S = gVh / S.unsqueeze(-1)
        gA = U @ (gA + gVh_over_S - (gVh_over_S @ Vh.mH) @ Vh)
    else:
        gA = U @ (gA @ Vh)
    return gA


def _svd_setup(ctx, inputs, output):
    # Outputs a loss does not use reach the backward as None, not zeros: svdvals' and
    # S-only losses take the formula's U diag(gS) Vh, finite where singular values
    # repeat (zeros would divide 0 by their zero gaps, NaN).
    ctx.set_materialize_grads(False)
    _dispatch.save(ctx, *output)


def _svd_backward(ctx, gU, gS, gVh):
    U, S, Vh = ctx.saved_tensors
    return _svd_vjp(U, S, Vh, gU, gS, gVh), None


_svd_op.register_autograd(_sharding.mixable(_svd_backward), setup_context=_svd_setup)


def _svd_even_phases(ctx, tangents):
    """Complex singular vectors are unique up to a phase e^{i phi} shared by u_j and
    v_j, so a tangent is unique up to i phi' (u_j, v_j); torch's JVP splits it evenly,
    Im(u_j^H du_j) = Im(dvh_j v_j), and so does this."""
    U, S, Vh = ctx.saved_tensors
    dU, dS, dVh = tangents
    if not U.is_complex():
        return tangents
    k = S.shape[-1]
    u_part = (U.conj() * dU).sum(-2)[..., :k].imag
    v_part = (dVh * Vh.conj()).sum(-1)[..., :k].imag
    shift = 0.5j * (v_part - u_part)
    dU = dU + U * torch.nn.functional.pad(shift, (0, U.shape[-1] - k)).unsqueeze(-2)
    dVh = dVh - torch.nn.functional.pad(shift, (0, Vh.shape[-2] - k)).unsqueeze(-1) * Vh
    return dU, dS, dVh


# The JVP transposes the VJP at zero cotangents, where the phase check has nothing to
# say, and a vmapped tangent could not take it.
_Svd = _dispatch.with_transposed_jvp(
    torch.ops.mpslinalg.svd, _svd_setup, _svd_backward,
    transposed=lambda ctx, gU, gS, gVh: (_svd_vjp(*ctx.saved_tensors, gU, gS, gVh, check_phase=False), None),
    finish=_svd_even_phases,
)


def _svd(A: torch.Tensor, full_matrices: bool):
    return _dispatch.call(torch.ops.mpslinalg.svd, _svd_body, A, full_matrices, function=_Svd)


SVD_DRIVERS = ("gesvd", "gesvdj", "gesvda")


def _check_driver(A: torch.Tensor, driver: str | None) -> None:
    """torch takes ``driver`` on CUDA only (cuSOLVER's); there every driver name
    it knows runs the same Jacobi kernels."""
    if driver is None:
        return
    if A.device.type != "cuda":
        raise RuntimeError(
            "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER backend."
        )
    if driver not in SVD_DRIVERS:
        raise RuntimeError(f"torch.linalg.svd: unknown driver {driver!r}; expected one of {SVD_DRIVERS} or None")


def svd(A: torch.Tensor, full_matrices: bool = True, *, driver=None, out=None):
    """The singular value decomposition, like ``torch.linalg.svd``:
    A = U diag(S) Vh by one-sided Jacobi (LAPACK's sgesvj), which computes small
    singular values to high relative accuracy.

    Singular vectors are unique up to a sign (a phase for complex) per singular
    value. Non-finite input gives NaN (as torch on CUDA).

    Args:
        A: ``(*, m, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL).
        full_matrices: U ``(*, m, m)`` and Vh ``(*, n, n)`` (True), or k = min(m, n)
            columns and rows of them.
        driver: accepted (CUDA only, as torch) and changes nothing.
        out: optional ``(U, S, Vh)`` tensors to write into.

    Returns:
        ``(U, S, Vh)``: S ``(*, k)`` real, descending; U and Vh with orthonormal
        columns and rows, also where A is rank-deficient. Gradients as torch's.

    Raises:
        RuntimeError: in backward, torch's, for a complex loss that depends on the
            singular vectors' phases.

    Example:
        >>> A = torch.tensor([[3.0, 0.0], [0.0, -2.0]])
        >>> U, S, Vh = LA.svd(A)
        >>> S
        tensor([3., 2.])
        >>> torch.allclose(U @ torch.diag(S) @ Vh, A)
        True
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.svd(A, full_matrices=full_matrices, driver=driver, out=out)
    _checks.out_without_grad("_linalg_svd", out, A)
    if A.dim() < 2:  # torch's error; dtypes with kernels and any shape of >= 2 dims have none
        _dispatch.TORCH.svd(A.to("meta"), full_matrices=full_matrices)
    _check_driver(A, driver)
    U, S, Vh = _svd(A, full_matrices)
    return torch.return_types.linalg_svd(_checks.into_each(out, (U, S, Vh)))


def svdvals(A: torch.Tensor, *, driver=None, out=None) -> torch.Tensor:
    """The singular values, like ``torch.linalg.svdvals``.

    Args:
        A: ``(*, m, n)``.
        driver: accepted (CUDA only, as torch) and changes nothing.
        out: optional tensor to write the result into.

    Returns:
        ``(*, min(m, n))``, real, descending. Differentiable.

    Example:
        >>> LA.svdvals(torch.tensor([[3.0, 0.0], [0.0, -2.0]]))
        tensor([3., 2.])
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.svdvals(A, driver=driver, out=out)
    _checks.out_without_grad("_linalg_svd", out, A)
    if A.dim() < 2:
        _dispatch.TORCH.svdvals(A.to("meta"))
    _check_driver(A, driver)
    return _checks.into(out, _svd(A, False)[1])


def _cutoff(S: torch.Tensor, atol, rtol, m: int, n: int) -> torch.Tensor:
    """pinv's and matrix_rank's tolerance max(atol, rtol * sigma_max), per matrix (4.6);
    atol and rtol are None or tensors of S's dtype (see _tolerance)."""
    eps = torch.finfo(S.dtype).eps
    largest = S[..., :1] if S.shape[-1] else torch.zeros_like(S[..., :1])
    if atol is None:  # the common call: one product, no tensors made of numbers
        return largest * (max(m, n) * eps) if rtol is None else rtol.unsqueeze(-1) * largest
    if rtol is None:
        rtol = torch.full((), max(m, n) * eps, dtype=S.dtype, device=S.device)
        if atol is not None:
            rtol = torch.where(atol > 0, torch.zeros_like(rtol), rtol)
    return torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * largest)


def _hermitian_from_lower(A: torch.Tensor) -> torch.Tensor:
    """The Hermitian matrix whose lower triangle is A's (torch's hermitian=True reads no other)."""
    lower = A.tril(-1)
    diagonal = A.diagonal(dim1=-2, dim2=-1).real.to(A.dtype) if A.is_complex() else A.diagonal(dim1=-2, dim2=-1)
    return lower + lower.mH + torch.diag_embed(diagonal)


def _pinv_body(A: torch.Tensor, atol: torch.Tensor | None, rtol: torch.Tensor | None) -> torch.Tensor:
    m, n = A.shape[-2:]
    U, S, Vh = _svd(A, False)
    keep = S > _cutoff(S, atol, rtol, m, n)
    inverse = torch.where(keep, S.reciprocal(), 0)  # 1/0 = inf where not kept, never chosen
    return (Vh.mH * inverse.unsqueeze(-2).to(A.dtype)) @ U.mH


_pinv_op = torch.library.custom_op("mpslinalg::pinv", mutates_args=())(_pinv_body)


@_pinv_op.register_fake
def _(A, atol, rtol):
    return A.new_empty((*A.shape[:-2], A.shape[-1], A.shape[-2]))


@_pinv_op.register_vmap
def _(info, in_dims, A, atol, rtol):
    A = A.movedim(in_dims[0], 0) if in_dims[0] is not None else A.expand(info.batch_size, *A.shape)
    # A batched tolerance is one per vmapped matrix: it broadcasts over A's own batch dims.
    spread = lambda x, d: x if x is None or d is None else x.movedim(d, 0).reshape(-1, *[1] * (A.dim() - 3))
    return torch.ops.mpslinalg.pinv(A, spread(atol, in_dims[1]), spread(rtol, in_dims[2])), 0


def _pinv_vjp(A: torch.Tensor, X: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """torch's pinv_backward: the gradient of A from that of X = A^+ (linalg-contracts 2.8)."""
    m, n = A.shape[-2:]
    if m <= n:
        K = g.mH @ X
        KXh = K @ X.mH
        return -(X @ K).mH + KXh - A @ (X @ KXh) + (X.mH @ X) @ (g.mH - K @ A)
    K = X @ g.mH
    XXh = X @ X.mH
    return -(K @ X).mH + (g.mH - A @ K) @ XXh + X.mH @ K - X.mH @ (K @ (X @ A))


def _pinv_setup(ctx, inputs, output):
    _dispatch.save(ctx, inputs[0], output)


def _pinv_backward(ctx, g):
    A, X = ctx.saved_tensors
    return _pinv_vjp(A, X, g), None, None


_pinv_op.register_autograd(_sharding.mixable(_pinv_backward), setup_context=_pinv_setup)
_Pinv = _dispatch.with_transposed_jvp(torch.ops.mpslinalg.pinv, _pinv_setup, _pinv_backward)


def _tolerance(x, A: torch.Tensor) -> torch.Tensor | None:
    """atol, rtol or rcond as a tensor on A's device: a Python number by a fill, not a
    copy from the host (which a CUDA graph cannot capture)."""
    real = _checks.real_dtype(A.dtype)
    if x is None:
        return None
    if isinstance(x, (int, float)):
        return torch.full((), x, dtype=real, device=A.device)
    return torch.as_tensor(x, dtype=real, device=A.device)


def pinv(A: torch.Tensor, *, atol=None, rtol=None, hermitian: bool = False, out=None) -> torch.Tensor:
    """The Moore-Penrose pseudoinverse, like ``torch.linalg.pinv``: V diag(1 / S) U^H
    over the singular values above max(atol, rtol * S_max).

    Args:
        A: ``(*, m, n)``.
        atol: absolute tolerance (float or tensor broadcast to the batch).
        rtol: relative tolerance (default max(m, n) eps where atol is not positive).
        hermitian: A is Hermitian (only its lower triangle is read, as torch).
        out: optional tensor to write the result into.

    Returns:
        ``(*, n, m)``. Differentiable by torch's formula where the rank does not
        change.

    Example:
        >>> A = torch.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])  # rank 1
        >>> X = LA.pinv(A)
        >>> torch.allclose(A @ X @ A, A, atol=1e-5)
        True
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.pinv(A, atol=atol, rtol=rtol, hermitian=hermitian, out=out)
    _checks.out_without_grad("linalg_pinv", out, A)
    if not _checks.tolerance_call_fits(A, hermitian, atol, rtol):  # torch's errors (a meta pinv costs ~1 ms)
        _dispatch.TORCH.pinv(A.to("meta"), hermitian=hermitian)
    if hermitian:  # the values of the lower triangle; torch's gradient, which takes A whole
        A = A + (_hermitian_from_lower(A) - A).detach()
    X = _dispatch.call(torch.ops.mpslinalg.pinv, _pinv_body, A, _tolerance(atol, A), _tolerance(rtol, A), function=_Pinv)
    return _checks.into(out, X, castable=("linalg.pinv", "result"))


def matrix_rank(A: torch.Tensor, *, atol=None, rtol=None, hermitian: bool = False, out=None) -> torch.Tensor:
    """The numerical rank, like ``torch.linalg.matrix_rank``: the number of singular
    values above max(atol, rtol * S_max).

    Args:
        A: ``(*, m, n)``.
        atol: absolute tolerance (float or tensor broadcast to the batch).
        rtol: relative tolerance (default max(m, n) eps where atol is not positive).
        hermitian: A is Hermitian (only its lower triangle is read).
        out: optional tensor to write the result into.

    Returns:
        ``(*)`` int64.

    Example:
        >>> LA.matrix_rank(torch.tensor([[1.0, 2.0], [2.0, 4.0]]))
        tensor(1)
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.matrix_rank(A, atol=atol, rtol=rtol, hermitian=hermitian, out=out)
    if not _checks.tolerance_call_fits(A, hermitian, atol, rtol):  # torch's errors (a meta call costs ~0.7 ms)
        _dispatch.TORCH.matrix_rank(A.to("meta"), hermitian=hermitian)
    if hermitian:
        A = _hermitian_from_lower(A)
    m, n = A.shape[-2:]
    S = svdvals(A)
    rank = (S > _cutoff(S, _tolerance(atol, A), _tolerance(rtol, A), m, n)).sum(-1)
    return _checks.into(out, rank, castable=("torch.linalg.matrix_rank", "result"))


DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A: torch.Tensor, B: torch.Tensor, rcond: float | None = None, *, driver: str | None = None):
    """The least-squares, minimum-norm solution of A X = B, like
    ``torch.linalg.lstsq``.

    Every driver solves through the SVD: singular values at most rcond * S_max
    count as zero, so rank-deficient systems get the minimum-norm solution
    whatever the driver (torch's gels does not).

    Args:
        A: ``(*, m, n)``.
        B: ``(*, m, k)`` (or ``(*, m)``); batch dims broadcast.
        rcond: the relative cut-off (default max(m, n) eps).
        driver: which fields to fill, as torch fills them: 'gelsy' (default on the
            CPU), 'gels' (default elsewhere), 'gelsd', 'gelss'.

    Returns:
        ``(solution, residuals, rank, singular_values)``: rank for all but gels,
        singular values for gelsd / gelss, residuals (squared column norms of
        A X - B) where m > n and, except for gels, every matrix has full rank (for
        gelsd / gelss that test synchronises with the device, as torch's).
        Differentiable by torch's formula (through the pseudoinverse).

    Raises:
        RuntimeError: torch's, for mismatched shapes or an unknown driver.

    Example:
        >>> A = torch.tensor([[1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
        >>> b = torch.tensor([[1.0], [2.0], [3.0]])  # on the line 1 + x
        >>> torch.allclose(LA.lstsq(A, b).solution, torch.ones(2, 1), atol=1e-5)
        True
    """
    if not _dispatch.has_kernels(A, B):
        return _dispatch.TORCH.lstsq(A, B, rcond=rcond, driver=driver)
    _check_lstsq(A, B, driver)
    driver = driver or ("gelsy" if A.device.type == "cpu" else "gels")
    vector = B.dim() == A.dim() - 1
    Bm = B.unsqueeze(-1) if vector else B
    m, n = A.shape[-2:]
    batch = _checks.broadcast_batch(A.shape[:-2], Bm.shape[:-2])
    A = A.expand(*batch, m, n)
    Bm = Bm.expand(*batch, m, Bm.shape[-1])
    real = _checks.real_dtype(A.dtype)
    rtol = _tolerance(max(m, n) * torch.finfo(real).eps if rcond is None else rcond, A)
    X = _dispatch.call(torch.ops.mpslinalg.pinv, _pinv_body, A, None, rtol, function=_Pinv) @ Bm
    rank = torch.empty(0, dtype=torch.int64, device=A.device)  # gels reports none
    singular_values = A.new_empty(0, dtype=real)
    if driver != "gels":
        S = svdvals(A.detach())
        rank = (S > rtol * S[..., :1]).sum(-1) if S.shape[-1] else torch.zeros(batch, dtype=torch.int64, device=A.device)
        if driver in ("gelsd", "gelss"):
            singular_values = S
    residuals = X.real.flatten()[:0]  # none; but from X, so that autograd sees it as torch's
    if m > n and driver != "gelsy" and (driver == "gels" or bool((rank == n).all())):
        residuals = (A @ X - Bm).abs().square().sum(-2)
    return torch.return_types.linalg_lstsq((X.squeeze(-1) if vector else X, residuals, rank, singular_values))


def _check_lstsq(A: torch.Tensor, B: torch.Tensor, driver: str | None) -> None:
    """torch.linalg.lstsq's errors."""
    if A.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if A.dtype != B.dtype:
        raise RuntimeError(
            "torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
            f"input's dtype {_checks.type_name(A.dtype)} and other's dtype {_checks.type_name(B.dtype)}"
        )
    if not 0 <= A.dim() - B.dim() <= 1:
        raise RuntimeError(
            "torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and (input.dim() - other.dim()) <= 1"
        )
    vector = B.dim() == A.dim() - 1
    if B.dim() < 1 or (B.shape[-1 if vector else -2] != A.shape[-2]):
        raise RuntimeError(
            "torch.linalg.lstsq: input.size(-2) should match other.size(-2)"
            if not vector else "torch.linalg.lstsq: input.size(-2) should match other.size(-1)"
        )
    if driver is not None and driver not in DRIVERS:
        raise RuntimeError(
            "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)"
        )
    if driver not in (None, "gels") and A.device.type == "cuda":
        raise RuntimeError("torch.linalg.lstsq: `driver` other than `gels` is not supported on CUDA")
