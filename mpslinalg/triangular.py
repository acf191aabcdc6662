"""Triangular solves and inverses: ``solve_triangular``, ``tril_inverse``, ``solve_tril``.

Kernels (``metal/triangular.metal``):

- ``trsm_rows``: n <= 64, a thread per row of a block of 8 right-hand sides, the
  final row of each step broadcast through threadgroup memory.
- ``trsm_small``: n <= 32 with more than 8 right-hand sides, one threadgroup per
  system and block of 32 of them, A's triangle staged once, a thread per column.
  (On the H200, 10^4 complex64 systems: n = 64, k = 8 took 0.32 ms by rows and
  0.90 by columns; n = 32, k = 64, 0.93 by rows and 0.32 by columns.)
- ``trsm_by_inverse``, the Gated DeltaNet fast path: real, lower or upper, n in
  {16, 32, 64}, k >= 8 (float64 at n = 64: k <= 16): inv(A) formed in threadgroup
  memory (16 x 16 diagonal blocks in registers, then doubling steps as tiled
  products), applied to the right-hand sides as a product by register tiles.
- Larger n: blocked TRSM with inverted diagonal blocks of 64 rows (one batched
  inverse, then X_j = inv(A_jj) (B_j - A_j,<j X_<j)), so that most flops are
  ``torch.matmul``: two products per block row.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, _sharding
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import launch

SIZES = (16, 32, 64)
# Right-hand sides per threadgroup in trsm_small: a SIMD group. Systems of 33 to 64
# rows go to trsm_by_inverse or trsm_rows (a thread a row), so trsm_small stops at 32.
SMALL_SIZES = (16, 32)
SMALL_GROUP = 32
# The inverse-based kernels run a team of N threads per matrix (N for the diagonal
# blocks; the products' register tiles then hold 8 to 32 outputs, few loads per
# multiply-add), several teams to a threadgroup for small N. Measured on the H200:
# teams of 2N or 4N threads were 20-60 % slower (but see _trsm_team).
# trsm_by_inverse's panel halves its teams at N = 32, to stay in 32 KiB.
TEAMS = {16: 8, 32: 4, 64: 1}
TRSM_TEAMS = {16: 8, 32: 2, 64: 1}

# N for which trsm_by_inverse applies the inverted halves of A by block substitution
# instead of the whole inverse, whose last doubling step costs as much as the solve.
HALVES = (32, 64)
# Right-hand sides per panel of trsm_by_inverse (KC), by N: the fewest that cover k,
# so that k = 8 or 16 does not pay for a wider product. A team takes PANELS_PER_TEAM
# panels of the widest kind (one system's inverse serves them all), or one narrower.
PANEL_WIDTHS = {16: (8, 16), 32: (8, 16, 32), 64: (8, 16, 32)}
PANELS_PER_TEAM = {16: 4, 32: 2, 64: 2}


def _trsm_team(N: int, KC: int) -> int:
    """Threads per team of trsm_by_inverse: at N = 64 panels of 16 or more right-hand
    sides go faster with 2N (more SIMD groups per SM: 465 vs 556 us at k = 64 on the
    H200), the narrowest with N (207 vs 257 us at k = 8)."""
    return 2 * N if N == 64 and KC > 8 else N


TRSM_SMALL = Kernel(
    function="trsm_small",
    source="triangular.metal",
    args=(Buffer("a", const=True), Buffer("b", const=True), Buffer("x"), Scalar("n"), Scalar("k"), Scalar("a_stride")),
    instances=tuple({"N": n, "UPPER": u, "UNIT": d} for n in SMALL_SIZES for u in (0, 1) for d in (0, 1)),
    group_size=SMALL_GROUP,
    template=lambda N, UPPER, UNIT: (N, bool(UPPER), bool(UNIT), SMALL_GROUP),
    shared=lambda N, UPPER, UNIT: [
        Shared("lower", "T", N * (N + 1) // 2), Shared("columns", "T", N * (SMALL_GROUP + 1)),
    ],
)


def _columns_per_team(N: int, KC: int) -> int:
    return KC * PANELS_PER_TEAM[N] if KC == PANEL_WIDTHS[N][-1] else KC


def _panel_width(n: int, k: int) -> int:
    return next((w for w in PANEL_WIDTHS[n] if k <= w), PANEL_WIDTHS[n][-1])


ROWS_BLOCK = 8  # right-hand sides per threadgroup of trsm_rows, in each thread's registers

TRSM_ROWS = Kernel(
    function="trsm_rows",
    source="triangular.metal",
    args=(Buffer("a", const=True), Buffer("b", const=True), Buffer("x"), Scalar("n"), Scalar("k"), Scalar("a_stride")),
    instances=tuple({"N": n, "UPPER": u, "UNIT": d} for n in SIZES for u in (0, 1) for d in (0, 1)),
    group_size=lambda N, UPPER, UNIT: N,
    template=lambda N, UPPER, UNIT: (N, bool(UPPER), bool(UNIT), ROWS_BLOCK),
    shared=lambda N, UPPER, UNIT: [Shared("solved", "T", 2 * ROWS_BLOCK)],
)

TRSM_BY_INVERSE = Kernel(
    function="trsm_by_inverse",
    source="triangular.metal",
    args=(
        Buffer("a", const=True), Buffer("b", const=True), Buffer("x"),
        Scalar("n"), Scalar("k"), Scalar("a_stride"), Scalar("upper"), Scalar("unit"), Scalar("teams"),
    ),
    instances=tuple({"N": n, "KC": kc} for n in SIZES for kc in PANEL_WIDTHS[n]),
    group_size=lambda N, KC: _trsm_team(N, KC) * TRSM_TEAMS[N],
    template=lambda N, KC: (N, KC, _columns_per_team(N, KC), _trsm_team(N, KC), TRSM_TEAMS[N], N in HALVES),
    shared=lambda N, KC: [
        Shared("l", "T", TRSM_TEAMS[N] * N * (N + 1)),
        Shared("panel", "T", TRSM_TEAMS[N] * N * KC),
    ],
    dtypes=(torch.float32, torch.float64),
)

TRIL_INVERSE_SMALL = Kernel(
    function="tril_inverse_small",
    source="triangular.metal",
    args=(Buffer("a", const=True), Buffer("inverse"), Scalar("n"), Scalar("count"), Scalar("unit")),
    instances=tuple({"N": n} for n in SIZES),
    group_size=lambda N: N * TEAMS[N],
    template=lambda N: (N, N, TEAMS[N]),
    shared=lambda N: [Shared("l", "T", TEAMS[N] * N * (N + 1))],
    dtypes=(torch.float32, torch.float64),
)

SOLVE_TRIL_CHUNKS = Kernel(
    function="solve_tril_chunks",
    source="triangular.metal",
    args=(
        Buffer("a", const=True), Buffer("inverse"), Buffer("chunks", "int", const=True),
        Scalar("heads"), Scalar("count"), Scalar("sequence"),
    ),
    instances=tuple({"N": n} for n in SIZES),
    group_size=lambda N: N * TEAMS[N],
    template=lambda N: (N, N, TEAMS[N]),
    shared=lambda N: [Shared("l", "T", TEAMS[N] * N * (N + 1))],
    dtypes=(torch.float32, torch.float64),
)


def _size_for(n: int) -> int:
    return next(size for size in SIZES if n <= size)


# --- the solve, for left solves on contiguous (batch, n, n) A and (batch, n, k) B ---


# The small kernels index within one system's n x k right-hand sides in 32-bit int
# (64-bit products in their inner loops cost the H200 a fifth of its speed at n = 64):
# wider systems go in pieces of columns.
INDEX_LIMIT = 2**31


def _solve_left(A: torch.Tensor, B: torch.Tensor, upper: bool, unit: bool) -> torch.Tensor:
    """X with A X = B, in B's shape; A is (*, n, n) of B's batch or of one matrix, B
    (*, n, k), both contiguous (taken as they lie: a reshape costs host time on every
    call)."""
    *_, n, k = B.shape
    batch = B.shape[:-2].numel()
    X = torch.empty_like(B)
    if batch == 0 or n == 0 or k == 0:
        return X
    if n <= SIZES[-1] and n * k >= INDEX_LIMIT:  # the kernels index a system's n x k in int
        step = (INDEX_LIMIT - 1) // n
        return torch.cat([_solve_left(A, B[..., c : c + step].contiguous(), upper, unit) for c in range(0, k, step)], -1)
    a_stride = 0 if A.shape[:-2].numel() == 1 else n * n
    width = _panel_width(n, k) if n in SIZES else 0
    if k >= 8 and TRSM_BY_INVERSE.exists(A.dtype, N=n, KC=width):
        teams = batch * -(-k // _columns_per_team(n, width))
        launch(TRSM_BY_INVERSE, -(-teams // TRSM_TEAMS[n]), A, B, X, n, k, a_stride, int(upper), int(unit), teams, N=n, KC=width)
    elif n <= SIZES[-1]:
        size = _size_for(n)
        if k > ROWS_BLOCK and TRSM_SMALL.exists(A.dtype, N=size, UPPER=int(upper), UNIT=int(unit)):
            blocks = -(-k // SMALL_GROUP)
            launch(TRSM_SMALL, batch * blocks, A, B, X, n, k, a_stride, N=size, UPPER=int(upper), UNIT=int(unit))
        else:
            blocks = -(-k // ROWS_BLOCK)
            launch(TRSM_ROWS, batch * blocks, A, B, X, n, k, a_stride, N=size, UPPER=int(upper), UNIT=int(unit))
    else:
        X = _solve_blocked(A.reshape(-1, n, n), B.reshape(batch, n, k), upper, unit).view(B.shape)
    return X


# Rows of the diagonal blocks of the blocked solve. Applying an inverse loses accuracy
# as the block's condition grows: with blocks of 512 the solves with an LU's U (n = 300,
# kappa 1e3) had residual ratios 5-10x LAPACK's; with 64 they are within 1.3x of it.
PANEL_ROWS = SIZES[-1]


def _lower_inverse(L: torch.Tensor, unit: bool) -> torch.Tensor:
    """inv(tril(L)) of contiguous (batch, m, m) L, reading its lower triangle only.

    Small m is one kernel; larger m recurses on halves, T21 = -T22 L21 T11, both
    halves of equal size in one batched call, so each level is a few launches.
    """
    batch, m, _ = L.shape
    size = _size_for(max(m, 1)) if m <= SIZES[-1] else 0
    if TRIL_INVERSE_SMALL.exists(L.dtype, N=size):
        inverse = torch.empty_like(L)
        launch(TRIL_INVERSE_SMALL, -(-batch // TEAMS[size]), L, inverse, m, batch, int(unit), N=size)
        return inverse
    if size:  # no tril_inverse_small (complex): solve L X = I
        eye = torch.eye(m, dtype=L.dtype, device=L.device).expand(batch, m, m).contiguous()
        return _solve_left(L, eye, upper=False, unit=unit)
    half = (m // 2 + SIZES[-1] - 1) // SIZES[-1] * SIZES[-1] if m > 2 * SIZES[-1] else m // 2
    L11, L22 = L[:, :half, :half], L[:, half:, half:]
    if m == 2 * half:
        T11, T22 = _lower_inverse(torch.cat([L11, L22]).contiguous(), unit).split(batch)
    else:
        T11, T22 = _lower_inverse(L11.contiguous(), unit), _lower_inverse(L22.contiguous(), unit)
    T21 = -(T22 @ (L[:, half:, :half] @ T11))
    top = torch.cat([T11, T11.new_zeros(batch, half, m - half)], dim=2)
    return torch.cat([top, torch.cat([T21, T22], dim=2)], dim=1)


def _solve_blocked(A: torch.Tensor, B: torch.Tensor, upper: bool, unit: bool) -> torch.Tensor:
    """Recursive TRSM with inverted diagonal blocks (MAGMA's trsm inverts its blocks too):
    the inverses of all diagonal blocks of PANEL_ROWS come from one batched
    _lower_inverse (an upper block's as the transpose of its transpose's); then the
    block rows are halved: X1 = A11^-1 B1, B2 -= A21 X1, X2 = A22^-1 B2 (upper: from the
    bottom). One product a block and one an internal node, as the block-by-block
    substitution, but the updates are the largest products the recursion allows (that
    one's 64-row products with the whole solved part ran the H200 at a fraction of its
    speed)."""
    n = A.shape[-1]
    nb = min(PANEL_ROWS, n)
    edges = list(range(0, n, nb)) + [n]
    full = n // nb

    def block(j: int) -> torch.Tensor:
        rows = slice(edges[j], edges[j + 1])
        return A[:, rows, rows].mT if upper else A[:, rows, rows]

    if n == nb and not upper:  # one diagonal block: A itself, with no copy
        blocks = A
    else:
        blocks = torch.cat([block(j) for j in range(full)]).contiguous()
    inverses = list(_lower_inverse(blocks, unit).split(A.shape[0]))
    if n % nb:
        inverses.append(_lower_inverse(block(full).contiguous(), unit))
    if upper:
        inverses = [inverse.mT for inverse in inverses]
    batch = B.shape[0]
    R = B.clone()  # the right-hand sides as the solved block rows update them
    X = torch.empty_like(B)

    def solve(lo: int, hi: int) -> None:  # block rows [lo, hi)
        if hi - lo == 1:
            rows = slice(edges[lo], edges[hi])
            torch.bmm(inverses[lo].expand(batch, -1, -1), R[:, rows], out=X[:, rows])
            return
        mid = (lo + hi) // 2
        (a, b), (c, d) = ((mid, hi), (lo, mid)) if upper else ((lo, mid), (mid, hi))  # solved first, then
        solve(a, b)
        solved, rest = slice(edges[a], edges[b]), slice(edges[c], edges[d])
        R[:, rest].baddbmm_(A[:, rest, solved].expand(batch, -1, -1), X[:, solved], alpha=-1)
        solve(c, d)

    solve(0, len(edges) - 1)
    return X


@_dispatch.answered_by(
    lambda A, B, upper, left, unit: _dispatch.TORCH.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit)
)
def _solve_triangular_body(A: torch.Tensor, B: torch.Tensor, upper: bool, left: bool, unitriangular: bool) -> torch.Tensor:
    """X with op(A) X = B (left) or X op(A) = B, batch dims already broadcast between A and B
    except that A may have a single batch element."""
    A, B = _checks.resolved(A), _checks.resolved(B)
    if B.numel() == 0:
        return torch.empty_like(B)
    if not left:  # X A = B  <=>  A^T X^T = B^T
        A, B, upper = A.mT.contiguous(), B.mT.contiguous(), not upper
    X = _solve_left(A, B, upper, unitriangular)
    return X if left else X.mT.contiguous()


_solve_triangular = torch.library.custom_op("mpslinalg::solve_triangular", mutates_args=())(_solve_triangular_body)


@_solve_triangular.register_fake
def _(A, B, upper, left, unitriangular):
    return torch.empty_like(B, memory_format=torch.contiguous_format)


def _project(G: torch.Tensor, upper: bool, unit: bool) -> torch.Tensor:
    """The part of a gradient that lies on the referenced triangle of A."""
    offset = 1 if unit else 0
    return G.triu(offset) if upper else G.tril(-offset)


def _solve(A, B, upper, left, unit):
    """The differentiable solve, on A's and B's broadcast batch dims."""
    return _solve_op(*_broadcast(A, B), upper, left, unit)


def _solve_vjp(A, X, grad, upper, left, unit):
    grad_B = _solve(A.mH, grad, not upper, left, unit)
    grad_A = -(grad_B @ X.mH) if left else -(X.mH @ grad_B)
    return _project(grad_A, upper, unit), grad_B


def _solve_jvp(A, X, dA, dB, upper, left, unit):
    dA = _project(dA, upper, unit)
    return _solve(A, dB - (dA @ X if left else X @ dA), upper, left, unit)


def _setup(ctx, inputs, output):
    A, _, upper, left, unit = inputs
    ctx.save_for_backward(A, output)
    ctx.flags = (upper, left, unit)


def _backward(ctx, grad):
    A, X = ctx.saved_tensors
    grad_A, grad_B = _solve_vjp(A, X, grad, *ctx.flags)
    return _sum_to(grad_A, A.shape), grad_B, None, None, None


def _sum_to(G: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """G summed over the batch dims that broadcasting added to a tensor of ``shape``."""
    if G.shape == shape:
        return G
    return G.reshape(-1, *shape).sum(0) if G.numel() else G.new_zeros(shape)


_solve_triangular.register_autograd(_sharding.mixable(_backward), setup_context=_setup)


@_solve_triangular.register_vmap
def _(info, in_dims, A, B, upper, left, unit):
    # The vmap dimension becomes the first batch dim; an unbatched operand broadcasts against it.
    A = A if in_dims[0] is None else A.movedim(in_dims[0], 0)
    B = B if in_dims[1] is None else B.movedim(in_dims[1], 0)
    if in_dims[1] is None:
        B = B.expand(A.shape[0], *B.shape)
    if in_dims[0] is None:
        A = A.expand(B.shape[0], *A.shape)
    # Line the vmap dims up: A gets B's rank (size-1 dims after the vmap dim) and vice versa.
    A = A.reshape(A.shape[0], *[1] * (B.dim() - A.dim()), *A.shape[1:])
    B = B.reshape(B.shape[0], *[1] * (A.dim() - B.dim()), *B.shape[1:])
    batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    A, B = A.expand(*batch, *A.shape[-2:]), B.expand(*batch, *B.shape[-2:])
    return torch.ops.mpslinalg.solve_triangular(A, B, upper, left, unit), 0


class _Solve(torch.autograd.Function):
    """The op with forward mode and torch.func transforms (see inverse._Inverse)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A, B, upper, left, unit):
        return torch.ops.mpslinalg.solve_triangular(A, B, upper, left, unit)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _setup(ctx, inputs, output)
        ctx.save_for_forward(inputs[0], output)

    backward = staticmethod(_backward)

    @staticmethod
    def jvp(ctx, dA, dB, *_):
        A, X = ctx.saved_tensors
        dA = torch.zeros_like(A) if dA is None else dA
        dB = torch.zeros_like(X) if dB is None else dB
        return _solve_jvp(A, X, dA, dB, *ctx.flags)


def _solve_op(A, B, upper, left, unit):
    op = torch.ops.mpslinalg.solve_triangular
    return _dispatch.call(op, _solve_triangular_body, A, B, upper, left, unit, function=_Solve)


def _broadcast(A: torch.Tensor, B: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A and B on their common batch shape; an A with one batch element stays unexpanded."""
    if A.shape[:-2] == B.shape[:-2]:  # the common case, without broadcast_shapes' host cost
        return A, B
    batch = _checks.broadcast_batch(B.shape[:-2], A.shape[:-2])
    B = B.expand(*batch, *B.shape[-2:])
    if A.shape[:-2] != batch and A.shape[:-2].numel() != 1:
        A = A.expand(*batch, *A.shape[-2:])
    return A, B


# --- public functions ---


def _check_solve(A: torch.Tensor, B: torch.Tensor, left: bool) -> None:
    api = "linalg.solve_triangular"
    if A.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor A must have at least 2 dimensions.")
    if B.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 2 dimensions.")
    _checks.square(api, A)
    _checks.system(api, A, B, left)


def solve_triangular(
    A: torch.Tensor,
    B: torch.Tensor,
    *,
    upper: bool,
    left: bool = True,
    unitriangular: bool = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Solves A X = B (left) or X A = B for triangular A, like ``torch.linalg.solve_triangular``.

    Real solves with n in {16, 32, 64} and at least 8 right-hand sides take the
    Gated DeltaNet fast path (the inverse of A by blocks, applied as a matrix
    product; float64 at n = 64 up to 16 of them, where its panels fit threadgroup
    memory); n above 64 is blocked, most of its work in ``torch.matmul``.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL); only the triangle named by ``upper`` is read.
        B: ``(*, n, k)`` (left) or ``(*, k, n)``; batch dims broadcast with A's.
        upper: whether A is upper (True) or lower (False) triangular.
        left: solve A X = B (True) or X A = B (False).
        unitriangular: take A's diagonal as ones.
        out: optional output tensor.

    Returns:
        X, B's (broadcast) shape. A zero on the diagonal gives inf/NaN in X, as
        torch does; there is no error. Differentiable in A and B, in reverse and
        forward mode.

    Raises:
        RuntimeError: torch's, for mismatched shapes or dtypes.

    Example:
        >>> A = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
        >>> B = torch.tensor([[2.0], [3.0]])
        >>> LA.solve_triangular(A, B, upper=False)
        tensor([[1.],
                [2.]])
    """
    if _dispatch.kernel_runtime(A) is None:
        return _dispatch.TORCH.solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular, out=out)
    _check_solve(A, B, left)
    if not _dispatch.has_kernels(A, B):
        return _dispatch.TORCH.solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular, out=out)
    _checks.out_without_grad("linalg_solve_triangular", out, A, B)
    return _checks.into(out, _solve(A, B, upper, left, unitriangular))


def tril_inverse(A: torch.Tensor, *, unitriangular: bool = False) -> torch.Tensor:
    """The inverse of lower-triangular matrices (torch has no such function: it is
    ``torch.linalg.solve_triangular(A, I, upper=False)``).

    Real n <= 64 form it by blocks in one kernel (LAPACK's strtri); other sizes
    and complex types solve A X = I.

    Args:
        A: ``(*, n, n)``: only its lower triangle is read.
        unitriangular: take A's diagonal as ones.

    Returns:
        ``(*, n, n)``, lower triangular. Differentiable.

    Example:
        >>> LA.tril_inverse(torch.tensor([[2.0, 0.0], [1.0, 1.0]]))
        tensor([[ 0.5000,  0.0000],
                [-0.5000,  1.0000]])
    """
    _checks.square("mpslinalg.tril_inverse", A)
    runtime = _dispatch.kernel_runtime(A)
    if (
        runtime is None
        or _dispatch.needs_forward_mode(A)
        or A.shape[-1] > SIZES[-1]
        or not TRIL_INVERSE_SMALL.exists(A.dtype, N=_size_for(max(A.shape[-1], 1)))
        or A.dtype not in runtime.dtypes
    ):
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        return solve_triangular(A, eye.expand_as(A), upper=False, unitriangular=unitriangular)
    return _dispatch.call(torch.ops.mpslinalg.tril_inverse, _tril_inverse_body, A, unitriangular)


def _tril_inverse_by_torch(A: torch.Tensor, unitriangular: bool) -> torch.Tensor:
    eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device).expand_as(A)
    return _dispatch.TORCH.solve_triangular(A, eye, upper=False, unitriangular=unitriangular)


@_dispatch.answered_by(_tril_inverse_by_torch)
def _tril_inverse_body(A: torch.Tensor, unitriangular: bool) -> torch.Tensor:
    a = _checks.resolved(A)
    if a.numel() == 0:
        return torch.empty_like(a)
    n = a.shape[-1]
    return _lower_inverse(a.reshape(-1, n, n), unitriangular).reshape(a.shape)


_tril_inverse = torch.library.custom_op("mpslinalg::tril_inverse", mutates_args=())(_tril_inverse_body)


@_tril_inverse.register_fake
def _(A, unitriangular):
    return torch.empty_like(A, memory_format=torch.contiguous_format)


def _tril_inverse_setup(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.unit = inputs[1]


def _tril_inverse_backward(ctx, grad):
    (X,) = ctx.saved_tensors
    Xh = X.mH
    return _project(-(Xh @ grad @ Xh), upper=False, unit=ctx.unit), None


_tril_inverse.register_autograd(_sharding.mixable(_tril_inverse_backward), setup_context=_tril_inverse_setup)


def _chunk_table(T: int, batch: int, chunk: int, cu_seqlens: torch.Tensor | None, device) -> torch.Tensor:
    """(first row, rows) of every chunk, int32 on ``device``: fixed chunks of each sequence
    of the batch, or of each variable-length sequence of cu_seqlens, which must run from
    0 to T. Built with tensor ops; cu_seqlens costs one synchronisation (its ends and
    chunk count), as in FLA."""
    if cu_seqlens is None:
        starts = torch.arange(0, T, chunk, device=device)
        firsts = (torch.arange(batch, device=device)[:, None] * T + starts).reshape(-1)
        rows = (T - starts).clamp(max=chunk).repeat(batch)
    else:
        bounds = cu_seqlens.to(device=device, dtype=torch.int64)
        counts = (bounds[1:] - bounds[:-1] + chunk - 1) // chunk
        first, last, total = torch.stack([bounds[0], bounds[-1], counts.sum()]).tolist()
        if first != 0 or last != T:
            raise ValueError(f"solve_tril: cu_seqlens must run from 0 to T = {T}")
        sequence = torch.repeat_interleave(torch.arange(counts.numel(), device=device), counts, output_size=total)
        starts = torch.repeat_interleave(counts.cumsum(0) - counts, counts, output_size=total)
        index = torch.arange(total, device=device) - starts
        firsts = bounds[sequence] + index * chunk
        rows = (bounds[sequence + 1] - firsts).clamp(max=chunk)
    return torch.stack([firsts, rows], dim=1).to(torch.int32)


def solve_tril(
    A: torch.Tensor, cu_seqlens: torch.Tensor | None = None, output_dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``(I + A)^-1`` per chunk, compatible with flash-linear-attention's ``solve_tril``.

    Args:
        A: ``[B, T, H, BT]``, BT in {16, 32, 64}: row t of head h holds row
            ``t % BT`` of the chunk's ``BT x BT`` matrix, strictly lower (the rest
            is ignored), e.g. ``beta * K K^T`` masked, in a Gated DeltaNet forward.
        cu_seqlens: optional ``[N + 1]`` offsets of variable-length sequences packed
            along T (then B = 1); every sequence is cut into chunks of BT from its
            start, its last chunk possibly shorter.
        output_dtype: dtype of the result (computed in float32).

    Returns:
        ``[B, T, H, BT]``: row t of head h holds row ``t % BT`` of ``(I + A_c)^-1``,
        lower triangular with a unit diagonal, zeros above it. Differentiable in A
        (reverse mode: ``dA = -tril_-1(X^T G X^T)`` per chunk).

    In a Gated DeltaNet chunk forward it replaces ``fla.ops.utils.solve_tril``:
    ``A = solve_tril(A, cu_seqlens)``, then ``w = A @ (beta * k)`` and
    ``u = A @ (beta * v)`` per chunk. Runs one threadgroup per (chunk, head).

    Example:
        >>> A = torch.zeros(1, 64, 2, 16)  # [batch, tokens, heads, chunk]: strictly lower chunks
        >>> out = LA.solve_tril(A)
        >>> out.shape, torch.equal(out[0, :16, 0], torch.eye(16))
        (torch.Size([1, 64, 2, 16]), True)
    """
    if A.dim() != 4 or A.shape[-1] not in SIZES:
        raise ValueError(f"solve_tril: A must be [B, T, H, BT] with BT in {SIZES}, got {tuple(A.shape)}")
    batch, T, heads, chunk = A.shape
    if cu_seqlens is not None and batch != 1:
        raise ValueError(f"solve_tril: with cu_seqlens the batch size must be 1, got {batch}")
    if _dispatch.kernel_runtime(A) is None:
        return _solve_tril_reference(A.float(), _chunk_table(T, batch, chunk, cu_seqlens, A.device)).to(output_dtype)
    if _dispatch.needs_forward_mode(A):
        raise NotImplementedError("mpslinalg.solve_tril has no forward-mode derivative; use tril_inverse on the chunks")
    compute = torch.float64 if A.dtype == torch.float64 else torch.float32
    # Fixed-length chunks need no table: the kernel finds them from T, and the call
    # launches nothing but the kernel.
    if cu_seqlens is not None:
        table = _chunk_table(T, batch, chunk, cu_seqlens, A.device)
    else:
        table = torch.empty(0, 2, dtype=torch.int32, device=A.device)
    return _dispatch.call(torch.ops.mpslinalg.solve_tril, _solve_tril_body, A.to(compute), table).to(output_dtype)


def _solve_tril_by_torch(A: torch.Tensor, chunks: torch.Tensor) -> torch.Tensor:
    batch, T, _, size = A.shape
    return _solve_tril_reference(A, chunks if chunks.numel() else _chunk_table(T, batch, size, None, A.device))


@_dispatch.answered_by(_solve_tril_by_torch)
def _solve_tril_body(A: torch.Tensor, chunks: torch.Tensor) -> torch.Tensor:
    """(I + A)^-1 per chunk of ``chunks`` (first row, rows), or, if it is empty, of the
    chunks of BT rows of each of A's B sequences of T rows."""
    a = A.contiguous()
    inverse = torch.empty_like(a)  # the chunks cover every row
    batch, T, heads, size = a.shape
    sequence = 0 if chunks.numel() else T
    count = (chunks.shape[0] if chunks.numel() else batch * -(-T // size)) * heads
    if count:
        launch(SOLVE_TRIL_CHUNKS, -(-count // TEAMS[size]), a, inverse, chunks, heads, count, sequence, N=size)
    return inverse


_solve_tril_op = torch.library.custom_op("mpslinalg::solve_tril", mutates_args=())(_solve_tril_body)


@_solve_tril_op.register_fake
def _(A, chunks):
    return torch.empty_like(A, memory_format=torch.contiguous_format)


def _chunk_rows(chunks: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For every chunk, the flat row index of each of its ``size`` rows (clamped) and
    whether that row belongs to the chunk (a short last chunk of a sequence)."""
    offsets = torch.arange(size, device=chunks.device)
    inside = offsets < chunks[:, 1:2]
    return torch.where(inside, chunks[:, :1] + offsets, chunks[:, :1]).long(), inside


def _solve_tril_backward(ctx, grad):
    X, chunks = ctx.saved_tensors
    return _solve_tril_gradient(X, grad, chunks), None


@_sharding.on_local_shards  # index_put has no DTensor rule; sequences are independent
def _solve_tril_gradient(X: torch.Tensor, grad: torch.Tensor, chunks: torch.Tensor) -> torch.Tensor:
    # X = (I + A)^-1 per chunk: dA = -tril_-1(X^T G X^T) per chunk, A strictly lower.
    # Chunks are gathered into (chunks, H, BT, BT), rows outside a short chunk as zeros,
    # which leaves each chunk's own block of the product unchanged.
    batch, T, heads, size = X.shape
    if chunks.numel() == 0:
        chunks = _chunk_table(T, batch, size, None, X.device)
    index, inside = _chunk_rows(chunks, size)
    mask = inside[:, :, None, None]

    def gather(M):
        return (M.reshape(batch * T, heads, size)[index] * mask).permute(0, 2, 1, 3)

    Xc, Gc = gather(X), gather(grad)
    dA = -(Xc.mT @ Gc @ Xc.mT).tril(-1)
    # Rows outside a short chunk add zeros to its first row: no boolean indexing, whose
    # element count would synchronise with the device.
    out = torch.zeros(batch * T, heads, size, dtype=grad.dtype, device=grad.device)
    out.index_put_((index.reshape(-1),), (dA.permute(0, 2, 1, 3) * mask).reshape(-1, heads, size), accumulate=True)
    return out.reshape(X.shape)


def _solve_tril_setup(ctx, inputs, output):
    ctx.save_for_backward(output, inputs[1])


_solve_tril_op.register_autograd(_sharding.mixable(_solve_tril_backward), setup_context=_solve_tril_setup)


def _solve_tril_reference(A: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """torch.linalg per chunk, for CPU tensors on the torch backend."""
    batch, T, heads, chunk = A.shape
    flat = A.reshape(batch * T, heads, chunk)
    out = torch.zeros_like(flat)
    eye = torch.eye(chunk, dtype=A.dtype, device=A.device)
    for first, rows in table.tolist():
        block = flat[first : first + rows].transpose(0, 1)[..., :rows]  # heads x rows x rows
        L = eye[:rows, :rows] + block.tril(-1)
        out[first : first + rows, :, :rows] = _dispatch.TORCH.solve_triangular(L, eye[:rows, :rows].expand_as(L), upper=False, unitriangular=True).transpose(0, 1)
    return out.reshape(A.shape)
