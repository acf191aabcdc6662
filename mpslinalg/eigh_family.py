"""Hermitian eigenproblems: ``eigh``, ``eigvalsh``.

Kernels (``metal/eigh.metal``): two-sided cyclic Jacobi on the Hermitian matrix
of the triangle read (the diagonal's real part, as LAPACK's ssyevd / cheevd),
scaled by a power of two on the device, sorted there, one launch per call:

- ``eigh_tiny``: n <= 4, a thread per matrix, in registers (covariances,
  normals, inertia tensors);
- ``eigh_pairs``: n <= 64 (32 complex), a team of N / 2 lanes per matrix, each
  lane two columns of A and V in registers (V in threadgroup memory at N = 64 and
  complex N = 32), A's rows kept in its columns' order so that every rotation of
  rows touches fixed registers.

Their relative stopping test keeps a positive definite matrix's eigenvalues to
relative accuracy (Demmel and Veselic); eigvalsh skips the eigenvectors.

n >= BLOCKS_FROM (129, 33 complex): two-sided block Jacobi (``_by_blocks``), its
work in matrix products and in eigh_pairs on pairs of blocks; eigenvalues to
n eps ||H||, as LAPACK's.

n >= DIVISION_FROM (256): QDWH's spectral divide and conquer (``qdwh``), splits
in QR, Cholesky and matrix products down to blocks eigh_pairs takes; eigenvalues
to n eps ||H|| (backward stable), a host synchronisation or two a split.

Between (65..128, real only): H is scaled by a power of two (exact: inputs
near the ends of the float range neither overflow nor underflow) and then
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

from . import _checks, _dispatch, _sharding, cholesky_family, qdwh, svd_family
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import batches, groups_for, launch

_ARGS = (Buffer("a", const=True), Buffer("w", "R"), Buffer("v"))
_FLAGS = (Scalar("upper"), Scalar("vectors"), Scalar("count"))

TINY_SIZES = (1, 2, 3, 4)
TINY_GROUP = 64  # matrices per threadgroup

EIGH_TINY = Kernel(
    function="eigh_tiny",
    source="eigh.metal",
    args=_ARGS + _FLAGS,
    instances=tuple({"N": n} for n in TINY_SIZES),
    group_size=TINY_GROUP,
    template=lambda N: (N, TINY_GROUP),
)

PAIR_SIZES = (8, 16, 32, 64)  # N: matrices up to N x N, N / 2 lanes each


def _v_shared(dtype: torch.dtype, N: int) -> bool:
    """Whether eigh_pairs keeps V in threadgroup memory: where four columns of N a lane
    (A's two and V's two) would not fit in registers (N = 64; complex N = 32)."""
    return N > 32 or (dtype.is_complex and N > 16)


def _pair_group(N: int, VS: int) -> int:
    return 32 if VS else 64  # threads a threadgroup: one SIMD group where V is in memory


EIGH_PAIRS = Kernel(
    function="eigh_pairs",
    source="eigh.metal",
    args=_ARGS + (Scalar("n"),) + _FLAGS,
    instances=tuple({"N": n, "VS": vs} for n in PAIR_SIZES for vs in (0, 1)),
    group_size=_pair_group,
    template=lambda N, VS: (N, _pair_group(N, VS), bool(VS)),
    shared=lambda N, VS: [Shared("vs", "T", N * N * _pair_group(N, VS) // (N // 2) if VS else 1)],
    # Complex N = 64 would spill A's columns alone.
    where=lambda dtype, N, VS: bool(VS) == _v_shared(dtype, N) and (N <= 32 or not dtype.is_complex),
)


def _pair_size(n: int, dtype: torch.dtype) -> int:
    """The N of the eigh_pairs instance for n x n, or 0 if none applies (a loop and a
    table read: every call asks)."""
    for size in PAIR_SIZES:
        if n <= size and _PAIR_DTYPES[dtype, size]:
            return size
    return 0


# (dtype, N) -> whether eigh_pairs has that instance (the declaration decides).
_PAIR_DTYPES = {(dtype, size): EIGH_PAIRS.exists(dtype, N=size, VS=int(_v_shared(dtype, size)))
                for dtype in EIGH_PAIRS.dtypes for size in PAIR_SIZES}


def _by_jacobi(A: torch.Tensor, upper: bool, vectors: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(w, V) of (*, n, n) A by eigh_tiny or eigh_pairs, in A's batch shape (V a
    placeholder unless ``vectors``), or None where neither applies."""
    *batch, n, _ = A.shape
    count = A.shape[:-2].numel()
    size = n if n <= TINY_SIZES[-1] else _pair_size(n, A.dtype)
    if not size:
        return None
    A = _checks.resolved(A)
    w = torch.empty((*batch, n), dtype=_checks.real_dtype(A.dtype), device=A.device)
    V = torch.empty_like(A) if vectors else A.new_empty(0)  # the kernel writes no V then
    for matrices, head in batches(count, A, w, V):
        flags = (int(upper), int(vectors), matrices)
        if n <= TINY_SIZES[-1]:
            launch(EIGH_TINY, groups_for(matrices, TINY_GROUP), *head, *flags, N=n)
        else:
            vs = int(_v_shared(A.dtype, size))
            launch(EIGH_PAIRS, groups_for(matrices, _pair_group(size, vs) // (size // 2)), *head, n, *flags, N=size, VS=vs)
    return w, V


def _hermitian(A: torch.Tensor, upper: bool) -> torch.Tensor:
    """The Hermitian matrix of A's lower (``upper``: upper) triangle, contiguous."""
    return svd_family._hermitian_from_lower(A.mH if upper else A).contiguous()


def _scaled_hermitian(A: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(H 2^-e, e): the Hermitian matrices of (count, n, n) A's triangle, scaled by a power
    of two (exact) so that their largest entry lies in [1/2, 1); e = 0 for zero or
    non-finite ones."""
    H = _hermitian(A, upper)
    real = _checks.real_dtype(H.dtype)
    largest = H.abs().amax(dim=(-2, -1))
    e = torch.frexp(largest).exponent
    e = torch.where(torch.isfinite(largest) & (largest > 0), e, 0)
    down = svd_family._power_of_two(-e, real)
    return H * (down[0] * down[1])[:, None, None].to(H.dtype), e


def _nan_where_nonfinite(w: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """V, NaN for the matrices whose eigenvalues hold a NaN (non-finite input has no
    eigenvectors), for the routes of torch ops (the kernels write the NaN themselves)."""
    return torch.where(torch.isnan(w).any(-1)[:, None, None], torch.nan, V)


def _by_svd(A: torch.Tensor, upper: bool, vectors: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(w, V) of (count, n, n) A as the module says for larger n (V None unless ``vectors``)."""
    H, e = _scaled_hermitian(A, upper)
    count, n, _ = H.shape
    real = _checks.real_dtype(H.dtype)
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
    if not vectors:
        return w, None
    return w, _nan_where_nonfinite(w, Vh.mH.flip(-1))  # V ascending, as w


# Block Jacobi for n past eigh_pairs: blocks of BLOCK columns, pairs of them (2 BLOCK <=
# eigh_pairs' largest N) diagonalised by the kernel, the rotations applied by matmul.
BLOCK = {False: 32, True: 8}  # by is_complex
BLOCK_SWEEPS = 20
BLOCKS_FROM = {False: 129, True: 33}  # n from which _by_blocks runs (below: _by_svd), by is_complex


def _next_round(slots: int) -> torch.Tensor:
    """The gather that moves ``slots`` (even, >= 4) blocks to the next round of the
    round-robin ordering, pairs being slots (2k, 2k + 1): slot 0 stays, the others move
    one place around the circle (eigh.metal's next_round_rows, on blocks)."""
    half = slots // 2
    source = list(range(slots))
    source[2] = 1
    for i in range(2, half):
        source[2 * i] = 2 * i - 2
    for i in range(half - 1):
        source[2 * i + 1] = 2 * i + 3
    source[2 * half - 1] = 2 * half - 2
    return torch.tensor(source)


def _by_blocks(A: torch.Tensor, upper: bool, vectors: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(w, V) of (count, n, n) A by two-sided block Jacobi: H (scaled by a power of two)
    is padded to an even number of blocks of BLOCK columns, kept in the order of its
    block slots; each round diagonalises the diagonal 2 BLOCK x 2 BLOCK block of every
    slot pair by eigh_pairs (W_k) and applies them, H <- J^H H J and V <- V J with J the
    block diagonal of the W_k, in matrix products; then the blocks move to the next
    round. A sweep is every pair once; the iteration stops after the first sweep whose
    every off-diagonal |h_pq| is below max(tol sqrt(|h_pp h_qq|), eps max|h_ii|) (one
    host synchronisation a sweep; none, and all BLOCK_SWEEPS, while a CUDA graph
    captures).
    Eigenvalues to n eps ||H|| as LAPACK's; the padding's diagonal lies above every
    eigenvalue (Gershgorin), so that it sorts last and is dropped."""
    H, e = _scaled_hermitian(A, upper)
    count, n, _ = H.shape
    real = _checks.real_dtype(H.dtype)
    b = BLOCK[H.is_complex()]
    slots = -(-n // b)
    slots += slots % 2
    N = slots * b
    pad = torch.full((N - n,), float(n + 1), dtype=real, device=H.device)  # > every |eigenvalue| (entries < 1)
    H = torch.nn.functional.pad(H, (0, N - n, 0, N - n))
    H[:, n:, n:] = torch.diag(pad).to(H.dtype)
    V = torch.eye(N, dtype=H.dtype, device=H.device).expand(count, N, N).clone() if vectors else None
    pairs = slots // 2
    move = (_next_round(slots)[:, None] * b + torch.arange(b)).reshape(-1).to(H.device) if slots >= 4 else None
    tolerance = (N ** 0.5) * torch.finfo(real).eps / 2
    capturing = H.is_cuda and torch.cuda.is_current_stream_capturing()
    for sweep in range(BLOCK_SWEEPS):
        for _ in range(slots - 1):
            blocks = H.view(count, pairs, 2 * b, pairs, 2 * b).diagonal(dim1=1, dim2=3)  # (count, 2b, 2b, pairs)
            diagonal_blocks = blocks.permute(0, 3, 1, 2).reshape(count * pairs, 2 * b, 2 * b)
            W = _by_jacobi(diagonal_blocks, False, True)[1].view(count, pairs, 2 * b, 2 * b)
            # W's columns come sorted by eigenvalue; taken so, the slots' contents would
            # swap halves and the round-robin ordering would not meet every pair (the
            # iteration stalls). The b columns with most of their weight in the top slot
            # stay there, the rest in the bottom one: W near the identity by blocks.
            weight = (W[..., :b, :].abs() ** 2).sum(-2)
            W = torch.gather(W, -1, weight.argsort(-1, descending=True)[..., None, :].expand_as(W))
            # J^H H J: the columns of each slot pair, then its rows.
            H = (H.view(count, N, pairs, 2 * b).transpose(1, 2) @ W).transpose(1, 2).reshape(count, N, N)
            H = (W.mH @ H.view(count, pairs, 2 * b, N)).reshape(count, N, N)
            if vectors:
                V = (V.view(count, N, pairs, 2 * b).transpose(1, 2) @ W).transpose(1, 2).reshape(count, N, N)
            if move is not None:
                H = H[:, move][:, :, move]
                if vectors:
                    V = V[:, :, move]
        if not capturing:
            d = H.diagonal(dim1=-2, dim2=-1).real.abs()
            largest = torch.where(d == n + 1, 0, d).amax(-1)[:, None, None]  # the padding's excepted
            # Relative to the diagonal, as the kernels' test, down to the rounding that
            # the products leave (a fraction of u max|h_ii|; below it nothing moves).
            bound = torch.maximum(tolerance * torch.sqrt(d[..., :, None] * d[..., None, :]), torch.finfo(real).eps * largest)
            off = H.abs() - torch.diag_embed(d)
            if not bool((off > bound).any()):  # NaN: stops (and NaN comes out)
                break
    w = H.diagonal(dim1=-2, dim2=-1).real
    w, order = torch.sort(w, dim=-1)
    w = w[:, :n]
    up = svd_family._power_of_two(e, real)
    w = w * (up[0] * up[1])[:, None]
    if not vectors:
        return w, None
    V = torch.gather(V, 2, order[:, None, :n].expand(count, N, n))[:, :n]
    # The rounds' products leave V's columns orthonormal to about (rounds x sweeps) eps:
    # one Newton-Schulz step toward the nearest orthonormal matrix squares that.
    return w, _nan_where_nonfinite(w, 1.5 * V - 0.5 * (V @ (V.mH @ V)))


# n from which _by_division runs (below: _by_blocks). A first choice, not measured on a GPU:
# block Jacobi's rounds of launches grow as (n / BLOCK)^2 a sweep, the divide and conquer's
# splits as n / 64, each a few QRs; past a few hundred columns the splits should win.
DIVISION_FROM = 256


def _leaf(H: torch.Tensor, vectors: bool):
    """The Jacobi kernels' answer for the blocks they take (n <= 64, 32 complex), else None."""
    return _by_jacobi(H, False, vectors) if H.shape[-1] <= TINY_SIZES[-1] or _pair_size(H.shape[-1], H.dtype) else None


def _whole(H: torch.Tensor, vectors: bool):
    """Any Hermitian block (both triangles held) by the Jacobi routes."""
    found = _leaf(H, vectors)
    if found is None:
        found = (_by_blocks if H.shape[-1] >= BLOCKS_FROM[H.is_complex()] else _by_svd)(H, False, vectors)
    return found


def _by_division(A: torch.Tensor, upper: bool, vectors: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(w, V) of (count, n, n) A by QDWH's spectral divide and conquer (``qdwh``), H
    scaled by a power of two; non-finite input gives NaN (one host synchronisation)."""
    H, e = _scaled_hermitian(A, upper)
    if not bool(torch.isfinite(H).all()):
        w = torch.full(H.shape[:-1], torch.nan, dtype=_checks.real_dtype(H.dtype), device=H.device)
        return w, torch.full_like(H, torch.nan) if vectors else None
    found = [qdwh.eigh_by_division(h, _leaf, _whole, vectors) for h in H]
    up = svd_family._power_of_two(e, _checks.real_dtype(H.dtype))
    w = torch.stack([w for w, _ in found]) * (up[0] * up[1])[:, None]
    return w, torch.stack([V for _, V in found]) if vectors else None


def _spectrum(A: torch.Tensor, upper: bool, vectors: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A's eigenvalues (*, n) and, if ``vectors``, its eigenvectors (*, n, n)."""
    n = A.shape[-1]
    count = A.shape[:-2].numel()
    if count == 0 or n == 0:
        real = _checks.real_dtype(A.dtype)
        return A.new_empty(A.shape[:-1], dtype=real), torch.empty(A.shape, dtype=A.dtype, device=A.device)
    if n < BLOCKS_FROM[A.is_complex()]:
        found = _by_jacobi(A, upper, vectors)  # in A's shape: a reshape costs host time on every call
        if found is not None:
            return found[0], found[1] if vectors else None
    flat = A.reshape(count, n, n)
    route = _by_division if n >= DIVISION_FROM else _by_blocks if n >= BLOCKS_FROM[A.is_complex()] else _by_svd
    w, V = route(flat, upper, vectors)
    return w.reshape(A.shape[:-1]), _checks.resolved(V).reshape(A.shape) if vectors else None


def _eigh_by_torch(A: torch.Tensor, upper: bool):
    return _dispatch.TORCH.eigh(A, UPLO="U" if upper else "L")


@_dispatch.answered_by(_eigh_by_torch)
def _eigh_body(A: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return _spectrum(A, upper, True)


_eigh_op = torch.library.custom_op("mpslinalg::eigh", mutates_args=())(_eigh_body)


@_eigh_op.register_fake
def _(A, upper):
    real = _checks.real_dtype(A.dtype)
    return A.new_empty(A.shape[:-1], dtype=real), torch.empty_like(A, memory_format=torch.contiguous_format)


@_eigh_op.register_vmap
def _(info, in_dims, A, upper):
    return torch.ops.mpslinalg.eigh(A.movedim(in_dims[0], 0), upper), (0, 0)


@_dispatch.answered_by(lambda A, upper: _dispatch.TORCH.eigvalsh(A, UPLO="U" if upper else "L"))
def _eigvalsh_body(A: torch.Tensor, upper: bool) -> torch.Tensor:
    return _spectrum(A, upper, False)[0]


_eigvalsh_op = torch.library.custom_op("mpslinalg::eigvalsh", mutates_args=())(_eigvalsh_body)


@_eigvalsh_op.register_fake
def _(A, upper):
    return A.new_empty(A.shape[:-1], dtype=_checks.real_dtype(A.dtype))


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
    if gw is None and gV is None:
        return None  # no output reaches the loss (gradients are not materialised)
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
    ctx.set_materialize_grads(False)  # an unused output's gradient is None (see svd_family._svd_setup)
    _dispatch.save(ctx, *output)


def _eigh_backward(ctx, gw, gV):
    w, V = ctx.saved_tensors
    return _eigh_vjp(w, V, gw, gV), None


_eigh_op.register_autograd(_sharding.mixable(_eigh_backward), setup_context=_eigh_setup)
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
    """Eigenvalues and eigenvectors of Hermitian matrices, like
    ``torch.linalg.eigh``: A = V diag(w) V^H.

    Each eigenvector is unique up to its sign (a phase for complex A), and
    repeated eigenvalues' up to a rotation of their eigenspace; as torch, they are
    not normalised. n <= 64 (32 complex) runs one two-sided Jacobi kernel, which
    keeps a positive-definite matrix's eigenvalues to relative accuracy.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL); any batch dims and strides. Only the triangle ``UPLO`` names is
            read, and of the diagonal only the real part.
        UPLO: 'L' (the lower triangle) or 'U'.
        out: optional ``(eigenvalues, eigenvectors)`` tensors to write into.

    Returns:
        ``(eigenvalues, eigenvectors)``: ``(*, n)`` real, ascending, and ``(*, n, n)``
        orthonormal columns. NaN for non-finite input. Gradients are torch's; they
        are not defined where eigenvalues repeat.

    Raises:
        RuntimeError: torch's, for a non-square A, a bad UPLO, or, in backward, a
            complex loss that depends on the eigenvectors' phases.

    Example:
        >>> A = torch.tensor([[2.0, 1.0], [1.0, 2.0]])
        >>> w, V = LA.eigh(A)
        >>> w
        tensor([1., 3.])
        >>> torch.allclose(V @ torch.diag(w) @ V.mT, A)
        True
    """
    if not _kernels_apply("linalg.eigh", A, UPLO):
        return _dispatch.TORCH.eigh(A, UPLO=UPLO, out=out)
    _checks.out_without_grad("_linalg_eigh", out, A)
    w, V = _dispatch.call(torch.ops.mpslinalg.eigh, _eigh_body, A, _upper(UPLO), function=_Eigh)
    return torch.return_types.linalg_eigh(_checks.into_each(out, (w, V)))


def eigvalsh(A: torch.Tensor, UPLO: str = "L", *, out=None) -> torch.Tensor:
    """The eigenvalues of Hermitian matrices, like ``torch.linalg.eigvalsh``.

    The same kernels as ``eigh`` without the eigenvectors; its gradient takes
    the eigenvectors, so a differentiable call runs ``eigh``.

    Args:
        A: ``(*, n, n)``, as for ``eigh``: only the triangle ``UPLO`` names is read.
        UPLO: 'L' or 'U'.
        out: optional tensor to write the result into.

    Returns:
        ``(*, n)``, real, ascending.

    Raises:
        RuntimeError: torch's, for a non-square A or a bad UPLO.

    Example:
        >>> LA.eigvalsh(torch.tensor([[2.0, 1.0], [1.0, 2.0]]))
        tensor([1., 3.])
    """
    if not _kernels_apply("linalg.eigh", A, UPLO):  # torch's checks name eigh
        return _dispatch.TORCH.eigvalsh(A, UPLO=UPLO, out=out)
    _checks.out_without_grad("_linalg_eigh", out, A)
    if _differentiable(A):
        w = _dispatch.call(torch.ops.mpslinalg.eigh, _eigh_body, A, _upper(UPLO), function=_Eigh)[0]
    else:
        w = _dispatch.call(torch.ops.mpslinalg.eigvalsh, _eigvalsh_body, A, _upper(UPLO))
    return _checks.into(out, w)
