"""The LU family: ``lu_factor(_ex)``, ``lu``, ``lu_solve``, ``solve(_ex)``, ``slogdet``,
``logdet``, and ``inv``, ``inv_ex``, ``det`` above the fused kernels' 4 x 4.

Kernels (``metal/lu.metal``), LAPACK's sgetrf / cgetrf:

- ``lu_factor_small``: m, n <= 64, a team of N threads per matrix (N = 8, 16, 32,
  64, several teams per threadgroup), each thread a row in registers, pivots
  found by SIMD-group shuffles (and, for N = 64, one barrier a step).
- Larger matrices: blocked right-looking sgetrf. ``lu_factor_panel`` factors a
  panel of PANEL_WIDTH columns and up to 4096 rows (sgetrf2: sub-panels of 32
  bytes a row factored in registers, the rest of the panel updated from them;
  a few matrices go through a column-major copy, so that it reads columns);
  taller panels take ``lu_factor_tall_panel`` (a SIMD lane per column, every
  step in device memory). ``lu_block_row`` applies a panel's interchanges to
  the other columns (slaswp) and solves for the U block row (strsm), a thread
  per column; the trailing update is one ``torch.baddbmm``.
- ``lu_permutation``: LAPACK's interchanges as a row order, for the solves.
- n <= 32, fused, one launch a call: ``solve_small`` (sgesv: a team factors its
  matrix as ``lu_factor_small`` does, keeps L U in threadgroup memory and solves
  there by rows, a thread an element of every right-hand side; B = I for
  ``inv``), ``lu_solve_small`` (sgetrs from given factors) and
  ``determinant_small``. They keep no factors for a backward, so they serve the
  calls that record no derivative.

Otherwise solves are P, then the two triangular solves of the triangular family
on the packed LU, so they differentiate through it; det and slogdet are the
product of U's diagonal and the pivots' parity, computed on the device.
"""

from __future__ import annotations

import torch

from . import _checks, _dispatch, _sharding, triangular
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import LAUNCH_LIMIT, batches, fits, groups_for, launch

SIZES = (8, 16, 32, 64)
TEAMS = {8: 8, 16: 4, 32: 2, 64: 1}  # teams per threadgroup: 64 threads

LU_FACTOR_SMALL = Kernel(
    function="lu_factor_small",
    source="lu.metal",
    args=(
        Buffer("a", const=True), Buffer("lu"), Buffer("pivots", "int"), Buffer("info", "int"),
        Scalar("m"), Scalar("n"), Scalar("count"), Scalar("pivoting"),
    ),
    instances=tuple({"N": n} for n in SIZES),
    group_size=lambda N: N * TEAMS[N],
    template=lambda N: (N, TEAMS[N]),
    # A team of 64 spans two SIMD groups, which offer their best rows in two
    # double-buffered slots each (smaller teams need none); every team stages its
    # matrix, 32 columns at a time.
    shared=lambda N: [
        Shared("offered_values", "R", 4 * TEAMS[N]),
        Shared("offered_positions", "int", 4 * TEAMS[N]),
        Shared("offered_rows", "T", 4 * TEAMS[N] * N if N > 32 else 1),
        Shared("pivot_rows", "int", TEAMS[N] * N),
        Shared("staging", "T", TEAMS[N] * N * (min(N, 32) + 1)),
    ],
    # A complex128 row of 64 is 256 registers: that size takes the panel kernel.
    where=lambda dtype, N: not (dtype == torch.complex128 and N == 64),
)

# The fused solves: a team factors its matrix (or stages given factors) and keeps
# L U in threadgroup memory, and solves there by rows (a thread an element of
# every right-hand side).
SOLVE_SIZES = (8, 16, 32)
DETERMINANT_SIZES = (8, 16, 32)


def _solve_shared(N: int, factoring: bool) -> list[Shared]:
    # The whole matrix in a team's tile (as lu_factor_small stages it), and its row order.
    offers = [Shared("offered_values", "R", 1), Shared("offered_positions", "int", 1), Shared("offered_rows", "T", 1)]
    return [*(offers if factoring else ()), Shared("order", "int", TEAMS[N] * N),
            Shared("staging", "T", TEAMS[N] * N * (N + 1))]


SOLVE_SMALL = Kernel(
    function="solve_small",
    source="lu.metal",
    args=(
        Buffer("a", const=True), Buffer("b", const=True), Buffer("x"), Buffer("info", "int"),
        Scalar("n"), Scalar("k"), Scalar("count"), Scalar("b_stride"), Scalar("identity"),
    ),
    instances=tuple({"N": n, "TRANSPOSED": t} for n in SOLVE_SIZES for t in (0, 1)),
    group_size=lambda N, TRANSPOSED: N * TEAMS[N],
    template=lambda N, TRANSPOSED: (N, TEAMS[N], bool(TRANSPOSED)),
    shared=lambda N, TRANSPOSED: _solve_shared(N, True),
)

DETERMINANT_SMALL = Kernel(
    function="determinant_small",
    source="lu.metal",
    args=(Buffer("a", const=True), Buffer("det_or_sign"), Buffer("logabs", "R"), Scalar("n"), Scalar("count"),
          Scalar("logarithmic")),
    instances=tuple({"N": n} for n in DETERMINANT_SIZES),
    group_size=lambda N: N * TEAMS[N],
    template=lambda N: (N, TEAMS[N]),
    shared=lambda N: [Shared("offered_values", "R", 1), Shared("offered_positions", "int", 1),
                      Shared("offered_rows", "T", 1), Shared("pivot_rows", "int", TEAMS[N] * N),
                      Shared("staging", "T", TEAMS[N] * N * (N + 1))],
)

LU_SOLVE_SMALL = Kernel(
    function="lu_solve_small",
    source="lu.metal",
    args=(
        Buffer("lu", const=True), Buffer("pivots", "int", const=True), Buffer("b", const=True), Buffer("x"),
        Scalar("n"), Scalar("k"), Scalar("count"), Scalar("lu_stride"), Scalar("lu_by_columns"), Scalar("b_stride"),
        Scalar("left"),
    ),
    instances=tuple({"N": n, "TRANSPOSED": t, "CONJUGATED": c} for n in SOLVE_SIZES for t in (0, 1) for c in (0, 1)),
    group_size=lambda N, TRANSPOSED, CONJUGATED: N * TEAMS[N],
    template=lambda N, TRANSPOSED, CONJUGATED: (N, TEAMS[N], bool(TRANSPOSED), bool(CONJUGATED)),
    shared=lambda N, TRANSPOSED, CONJUGATED: _solve_shared(N, False),
    # Conjugating real factors changes nothing.
    where=lambda dtype, N, TRANSPOSED, CONJUGATED: dtype.is_complex or not CONJUGATED,
)

PANEL_WIDTH = 32  # a SIMD group's lanes (lu.metal's PANEL_WIDTH)
# (threads, rows a thread holds) of the register panel, by preference: a panel of h
# rows takes the first that holds them.
PANEL_SHAPES = ((256, 1), (1024, 1), (1024, 2), (1024, 4), (256, 2), (256, 4))

LU_FACTOR_PANEL = Kernel(
    function="lu_factor_panel",
    source="lu.metal",
    args=(
        Buffer("a"), Buffer("pivots", "int"), Buffer("info", "int"),
        Scalar("m"), Scalar("n"), Scalar("j0"), Scalar("w"), Scalar("pivoting"),
        Scalar("row_stride"), Scalar("column_stride"),
    ),
    instances=tuple({"GROUP": g, "ROWS": r} for g, r in PANEL_SHAPES),
    group_size=lambda GROUP, ROWS: GROUP,
    template=lambda GROUP, ROWS: (GROUP, ROWS),
    # Offers are double buffered; a sub-panel is at most 8 columns (32 bytes of
    # float32), and at most twice as many rows move as it has columns.
    shared=lambda GROUP, ROWS: [
        Shared("offered_values", "R", 2 * GROUP // 32),
        Shared("offered_positions", "int", 2 * GROUP // 32),
        Shared("offered_rows", "T", 2 * GROUP // 32 * 8),
        Shared("triangle", "T", 8 * 8),
        Shared("block_row", "T", 8 * PANEL_WIDTH),
        Shared("moved_from", "int", 16),
        Shared("moved_to", "int", 16),
    ],
)

TALL_PANEL_GROUPS = (256, 1024)

LU_FACTOR_TALL_PANEL = Kernel(
    function="lu_factor_tall_panel",
    source="lu.metal",
    args=LU_FACTOR_PANEL.args[:-2],
    instances=tuple({"GROUP": g} for g in TALL_PANEL_GROUPS),
    group_size=lambda GROUP: GROUP,
    template=lambda GROUP: (GROUP,),
    shared=lambda GROUP: [Shared("values", "R", GROUP // 32), Shared("positions", "int", GROUP // 32)],
)

BLOCK_ROW_GROUP = 32  # a SIMD group: a large matrix's block row spreads over many cores

LU_BLOCK_ROW = Kernel(
    function="lu_block_row",
    source="lu.metal",
    args=(
        Buffer("a"), Buffer("pivots", "int", const=True),
        Scalar("m"), Scalar("n"), Scalar("k"), Scalar("j0"), Scalar("w"),
        Scalar("row_stride"), Scalar("column_stride"), Scalar("groups_per_matrix"),
    ),
    instances=({"GROUP": BLOCK_ROW_GROUP},),
    group_size=BLOCK_ROW_GROUP,
    template=lambda GROUP: (GROUP,),
    shared=lambda GROUP: [Shared("triangle", "T", PANEL_WIDTH * PANEL_WIDTH)],
)

BLOCK_ROW_BY_COLUMNS_GROUP = 128

LU_BLOCK_ROW_BY_COLUMNS = Kernel(
    function="lu_block_row_by_columns",
    source="lu.metal",
    args=LU_BLOCK_ROW.args,
    instances=({"GROUP": BLOCK_ROW_BY_COLUMNS_GROUP},),
    group_size=BLOCK_ROW_BY_COLUMNS_GROUP,
    template=lambda GROUP: (GROUP,),
)

PERMUTATION_GROUP = 64

LU_PERMUTATION = Kernel(
    function="lu_permutation",
    source="lu.metal",
    args=(Buffer("pivots", "int", const=True), Buffer("permutation", "int"), Scalar("m"), Scalar("k"), Scalar("count")),
    instances=({"GROUP": PERMUTATION_GROUP},),
    group_size=PERMUTATION_GROUP,
    template=lambda GROUP: (GROUP,),
    dtypes=(torch.int32,),
)

LU_DETERMINANT = Kernel(
    function="lu_determinant",
    source="lu.metal",
    args=(
        Buffer("lu", const=True), Buffer("pivots", "int", const=True), Buffer("det_or_sign"), Buffer("logabs", "R"),
        Scalar("n"), Scalar("count"), Scalar("logarithmic"),
    ),
    instances=({"GROUP": PERMUTATION_GROUP},),
    group_size=PERMUTATION_GROUP,
    template=lambda GROUP: (GROUP,),
)


def _small_size(m: int, n: int, dtype: torch.dtype) -> int:
    """The N of the lu_factor_small instance for m x n, or 0 if none applies."""
    largest = max(m, n)
    for size in SIZES:
        if largest <= size:
            return size if _SMALL_DTYPES[dtype, size] else 0
    return 0


# --- the factorization ---


def _lu_factor_by_torch(A: torch.Tensor, pivot: bool, check_errors: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    LU, pivots, info = _dispatch.TORCH.lu_factor_ex(A, pivot=pivot)
    if check_errors:
        _ERRORS[check_errors](check_errors, info)
    return LU, pivots, info


@_dispatch.answered_by(_lu_factor_by_torch)
def _lu_factor_body(A: torch.Tensor, pivot: bool, check_errors: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(LU, pivots, info) of A (*, m, n), as torch.linalg.lu_factor_ex; if ``check_errors``
    names an API, raise its error for a zero pivot. The check lives inside the op, so
    that torch.compile(fullgraph=True) and vmap take it without a graph break."""
    a = _checks.resolved(A)
    *batch, m, n = a.shape
    k = min(m, n)
    count = a.shape[:-2].numel()
    size = _small_size(m, n, a.dtype)
    # The small kernel writes every info; the panels only record a first zero pivot.
    # Outputs are made in their own shapes (a reshape costs host time on every call).
    info = (torch.empty if size and count and k else torch.zeros)(batch, dtype=torch.int32, device=a.device)
    pivots = torch.empty((*batch, k), dtype=torch.int32, device=a.device)
    if count == 0 or k == 0:
        lu = a.clone()
    elif size:
        lu = torch.empty_like(a)
        for matrices, tensors in batches(count, a, lu, pivots, info):
            launch(LU_FACTOR_SMALL, groups_for(matrices, TEAMS[size]), *tensors, m, n, matrices, int(pivot), N=size)
    else:
        lu = a.clone()
        for _, (flat, flat_pivots, flat_info) in batches(count, lu, pivots, info):
            _factor_blocked(flat.view(-1, m, n), flat_pivots.view(-1, k), flat_info.view(-1), pivot)
    if check_errors:
        _ERRORS[check_errors](check_errors, info)
    return lu, pivots, info


def _register_panel(h: int, dtype: torch.dtype, device: torch.device) -> dict | None:
    """The values of the lu_factor_panel instance for a panel of h rows: the first
    shape that holds them (a Metal pipeline may allow fewer than 1024 threads), or
    None if none does."""
    for group, rows in PANEL_SHAPES:
        if group * rows >= h and (group == 256 or fits(LU_FACTOR_PANEL, dtype, device, GROUP=group, ROWS=rows)):
            return {"GROUP": group, "ROWS": rows}
    return None


def _tall_panel(lu: torch.Tensor) -> dict:
    """The values of the lu_factor_tall_panel instance: 1024 threads where they fit."""
    group = TALL_PANEL_GROUPS[1]
    return {"GROUP": group if fits(LU_FACTOR_TALL_PANEL, lu.dtype, lu.device, GROUP=group) else TALL_PANEL_GROUPS[0]}


# Fewer matrices than this are factored in a column-major copy: the panel, one
# threadgroup a matrix, is then their serial part and reads columns; more fill the
# GPU, and row-major keeps the rest coalesced. (Measured on the H200: 1 matrix of
# 1024 or 4096 by columns, 1000 of 100 by rows; the crossover was not measured.)
FEW_MATRICES = 16


def _factor_blocked(lu: torch.Tensor, pivots: torch.Tensor, info: torch.Tensor, pivot: bool) -> None:
    """Right-looking blocked sgetrf in place on contiguous (count, m, n) ``lu``: per
    panel of PANEL_WIDTH columns, the panel kernel, then one kernel that applies its
    interchanges to the other columns and forms U12 = L11^-1 A12, then
    A22 -= L21 U12 (three launches a panel).

    Panels the register panel cannot hold take the tall panel, which works on
    row-major matrices; a few matrices that the register panel holds are factored
    in a column-major copy (see FEW_MATRICES)."""
    count, m, n = lu.shape
    k = min(m, n)
    by_columns = count < FEW_MATRICES and _register_panel(m, lu.dtype, lu.device) is not None
    work = lu.mT.contiguous().mT if by_columns else lu  # (count, m, n), either layout
    storage = work.mT if by_columns else work  # what the kernels index: contiguous
    strides = (1, m) if by_columns else (n, 1)  # of element (i, c)
    for j0 in range(0, k, PANEL_WIDTH):
        w = min(PANEL_WIDTH, k - j0)
        values = _register_panel(m - j0, lu.dtype, lu.device)
        if values:
            launch(LU_FACTOR_PANEL, count, storage, pivots, info, m, n, j0, w, int(pivot), *strides, **values)
        else:
            launch(LU_FACTOR_TALL_PANEL, count, storage, pivots, info, m, n, j0, w, int(pivot), **_tall_panel(lu))
        if n > w:
            # A column a thread where rows are contiguous, a column a SIMD group where
            # columns are: either way, accesses of consecutive lanes are adjacent.
            kernel = LU_BLOCK_ROW_BY_COLUMNS if by_columns else LU_BLOCK_ROW
            group = kernel.instances[0]["GROUP"]
            groups = groups_for(n - w, group // 32 if by_columns else group)
            launch(kernel, count * groups, storage, pivots, m, n, k, j0, w, *strides, groups, GROUP=group)
        e = j0 + w
        if e < n and e < m:
            work[:, e:, e:].baddbmm_(work[:, e:, j0:e], work[:, j0:e, e:], alpha=-1)
    if by_columns:
        lu.copy_(work)


def _permutation_by_torch(pivots: torch.Tensor, m: int) -> torch.Tensor:
    # A = P L U, so row i of P^T A is the row r of A with P[r, i] = 1.
    shape = (*pivots.shape[:-1], m, pivots.shape[-1])
    P = _dispatch.TORCH.lu_unpack(pivots.new_zeros(shape, dtype=torch.float32), pivots, unpack_data=False).P
    return P.argmax(dim=-2)


@_dispatch.answered_by(_permutation_by_torch)
def _permutation_body(pivots: torch.Tensor, m: int) -> torch.Tensor:
    *batch, k = pivots.shape
    flat = pivots.reshape(pivots.shape[:-1].numel(), k).contiguous()
    order = torch.empty(flat.shape[0], m, dtype=torch.int32, device=pivots.device)
    if order.numel():
        for count, tensors in batches(flat.shape[0], flat, order):
            launch(LU_PERMUTATION, groups_for(count, PERMUTATION_GROUP), *tensors, m, k, count, GROUP=PERMUTATION_GROUP)
    return order.long().reshape(*batch, m)


_permutation_op = torch.library.custom_op("mpslinalg::lu_permutation", mutates_args=())(_permutation_body)


@_permutation_op.register_fake
def _(pivots, m):
    return pivots.new_empty((*pivots.shape[:-1], m), dtype=torch.int64)


def _permutation(pivots: torch.Tensor, m: int) -> torch.Tensor:
    """The row order of P^T A (int64, pivots' batch shape + (m,)): row i of P^T A is
    row order[i] of A."""
    return _dispatch.call(torch.ops.mpslinalg.lu_permutation, _permutation_body, pivots, m)


def _rows(M: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Rows ``order`` of M: M[..., order, :], batch dims of both broadcast."""
    batch = torch.broadcast_shapes(M.shape[:-2], order.shape[:-1])
    index = order[..., :, None].expand(*batch, order.shape[-1], M.shape[-1])
    return M.expand(*batch, *M.shape[-2:]).gather(-2, index)


def _inverse_order(order: torch.Tensor) -> torch.Tensor:
    return torch.argsort(order, dim=-1)


_lu_factor_op = torch.library.custom_op("mpslinalg::lu_factor_ex", mutates_args=())(_lu_factor_body)


@_lu_factor_op.register_fake
def _(A, pivot, check_errors):
    *batch, m, n = A.shape
    return (
        torch.empty_like(A, memory_format=torch.contiguous_format),
        A.new_empty((*batch, min(m, n)), dtype=torch.int32),
        A.new_empty(batch, dtype=torch.int32),
    )


@_lu_factor_op.register_vmap
def _(info, in_dims, A, pivot, check_errors):
    return torch.ops.mpslinalg.lu_factor_ex(A.movedim(in_dims[0], 0), pivot, check_errors), (0, 0, 0)


# --- derivatives (torch's linalg_lu_backward / lu_factor_ex_jvp), with mpslinalg's solves ---


def _factors(LU: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """L (m x k, unit lower) and U (k x n, upper) of a packed LU."""
    m, n = LU.shape[-2:]
    k = min(m, n)
    L = LU[..., :, :k].tril(-1) + torch.eye(m, k, dtype=LU.dtype, device=LU.device)
    return L, LU[..., :k, :].triu()


def _solve_lh(L: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """L^-H B for unit lower L."""
    return triangular._solve(L.mH, B, True, True, True)


def _right_solve_uh(U: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """B U^-H for upper U."""
    return triangular._solve(U.mH, B, False, False, False)


def _lu_vjp(LU: torch.Tensor, pivots: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The gradient of A from that of the packed LU; gL and gU are grad's strictly
    lower and upper parts (A = P L U; see docs/architecture.md for the derivation)."""
    m, n = LU.shape[-2:]
    k = min(m, n)
    L, U = _factors(LU)
    gL, gU = grad[..., :, :k].tril(-1), grad[..., :k, :].triu()
    if m == n:
        G = (L.mH @ gL).tril(-1) + (gU @ U.mH).triu()
        grad_A = _right_solve_uh(U, _solve_lh(L, G))
    elif m < n:  # U = [U1 | U2]
        U1, U2, gU1, gU2 = U[..., :k], U[..., k:], gU[..., :k], gU[..., k:]
        G1 = (L.mH @ gL - gU2 @ U2.mH).tril(-1) + (gU1 @ U1.mH).triu()
        Y = _solve_lh(L, torch.cat([G1, gU2], dim=-1))
        grad_A = torch.cat([_right_solve_uh(U1, Y[..., :k]), Y[..., k:]], dim=-1)
    else:  # L = [L1; L2]
        L1, L2, gL1, gL2 = L[..., :k, :], L[..., k:, :], gL[..., :k, :], gL[..., k:, :]
        G1 = (L1.mH @ gL1).tril(-1) + (gU @ U.mH - L2.mH @ gL2).triu()
        grad_A = _right_solve_uh(U, torch.cat([_solve_lh(L1, G1), gL2], dim=-2))
    return _rows(grad_A, _inverse_order(_permutation(pivots, m)))


def _lu_jvp(LU: torch.Tensor, pivots: torch.Tensor, tangent: torch.Tensor) -> torch.Tensor:
    m, n = LU.shape[-2:]
    k = min(m, n)
    L, U = _factors(LU)
    dA = _rows(tangent, _permutation(pivots, m))  # P^T dA
    L1, U1 = L[..., :k, :], U[..., :, :k]
    K = triangular._solve(U1, triangular._solve(L1, dA[..., :k, :k], False, True, True), True, False, False)
    dL1, dU1 = L1 @ K.tril(-1), K.triu() @ U1
    top = dL1 + dU1
    if n > k:  # dU2 = L^-1 dA2 - tril_-1(K) U2
        dU2 = triangular._solve(L1, dA[..., :, k:], False, True, True) - K.tril(-1) @ U[..., k:]
        return torch.cat([top, dU2], dim=-1)
    if m > k:  # dL2 = dA2 U^-1 - L2 triu(K)
        dL2 = triangular._solve(U1, dA[..., k:, :], True, False, False) - L[..., k:, :] @ K.triu()
        return torch.cat([top, dL2], dim=-2)
    return top


def _lu_setup(ctx, inputs, output):
    ctx.save_for_backward(output[0], output[1])


def _lu_backward(ctx, grad_LU, _grad_pivots, _grad_info):
    LU, pivots = ctx.saved_tensors
    return _lu_vjp(LU, pivots, grad_LU), None, None


_lu_factor_op.register_autograd(_sharding.mixable(_lu_backward), setup_context=_lu_setup)


class _Factor(torch.autograd.Function):
    """The op with forward mode and torch.func transforms (see inverse._Inverse)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A, pivot, check_errors):
        return torch.ops.mpslinalg.lu_factor_ex(A, pivot, check_errors)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.save_for_backward(output[0], output[1])
        ctx.save_for_forward(output[0], output[1])

    backward = staticmethod(_lu_backward)

    @staticmethod
    def jvp(ctx, tangent, _pivot, _check_errors):
        LU, pivots = ctx.saved_tensors
        return _lu_jvp(LU, pivots, tangent), None, None


def _lu_factor(A: torch.Tensor, pivot: bool = True, check_errors: str = ""):
    return _dispatch.call(torch.ops.mpslinalg.lu_factor_ex, _lu_factor_body, A, pivot, check_errors, function=_Factor)


# --- the fused solves: one launch where no derivative is recorded ---


def fused_size(n: int, dtype: torch.dtype, sizes: tuple[int, ...] = SOLVE_SIZES) -> int:
    """The N of the fused solves' instances (solve_small, lu_solve_small) for n x n
    systems, or, with ``sizes=DETERMINANT_SIZES``, of determinant_small; 0 if none. A
    loop and a table read: torch.compile traces it (torch 2.7's Dynamo takes no next()
    of a generator)."""
    for size in sizes:
        if n <= size:
            return size if _FUSED_DTYPES.get((dtype, size, sizes is SOLVE_SIZES), False) else 0
    return 0


# (dtype, N) -> whether lu_factor_small has that instance (the declaration decides).
_SMALL_DTYPES = {(dtype, size): LU_FACTOR_SMALL.exists(dtype, N=size) for dtype in LU_FACTOR_SMALL.dtypes for size in SIZES}
# (dtype, N, solves) -> whether the fused kernels have that instance (the declarations decide).
_FUSED_DTYPES = {
    **{(dtype, size, True): SOLVE_SMALL.exists(dtype, N=size, TRANSPOSED=0)
       and LU_SOLVE_SMALL.exists(dtype, N=size, TRANSPOSED=0, CONJUGATED=0)
       for dtype in SOLVE_SMALL.dtypes for size in SOLVE_SIZES},
    **{(dtype, size, False): DETERMINANT_SMALL.exists(dtype, N=size) for dtype in SOLVE_SMALL.dtypes
       for size in DETERMINANT_SIZES},
}


def _fused_batch(square: torch.Tensor, B: torch.Tensor, square_may_broadcast: bool) -> torch.Size | None:
    """The broadcast batch of a pair the fused kernels take as it lies, else None: B's
    batch is the square operand's or one matrix, or (``square_may_broadcast``) the
    square operand is one matrix; a nonempty batch of nonempty systems that one launch
    takes. (From the shapes alone: torch.broadcast_shapes costs 10 us a call.)"""
    a, b = square.shape[:-2], B.shape[:-2]
    if a == b or (b.numel() == 1 and len(b) <= len(a)):
        batch = a
    elif square_may_broadcast and a.numel() == 1 and len(a) <= len(b):
        batch = b
    else:
        return None
    return batch if 0 < batch.numel() <= LAUNCH_LIMIT and B.numel() > 0 and square.shape[-1] > 0 else None


def _without_derivatives(*tensors: torch.Tensor) -> bool:
    """Whether a call on ``tensors`` records no derivative: no gradient to record, no
    forward mode or torch.func transform. The fused kernels keep no factors for a
    backward, so they serve these calls; the others take the factorization and the
    triangular solves, each differentiable."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False
    return not _dispatch.needs_forward_mode(*tensors)


def _solve_by_torch(A: torch.Tensor, B: torch.Tensor, left: bool, check_errors: str):
    # lu_factor + lu_solve: torch's solve would read a B of shape A.shape[:-1] as vectors.
    LU, pivots, info = _dispatch.TORCH.lu_factor_ex(A)
    if check_errors:
        _ERRORS[check_errors](check_errors, info)
    return _dispatch.TORCH.lu_solve(LU, pivots, B, left=left), info


@_dispatch.answered_by(_solve_by_torch)
def _solve_small_body(A: torch.Tensor, B: torch.Tensor, left: bool, check_errors: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(X, info) with A X = B (X A = B), sgesv for n <= 32 in one launch (solve_small):
    A's batch is the broadcast batch, B's the same or one matrix (_fused_batch)."""
    a, b = _checks.resolved(A), _checks.resolved(B)
    batch, n = a.shape[:-2], a.shape[-1]
    k = b.shape[-1] if left else b.shape[-2]
    count = batch.numel()
    x = b.new_empty(*batch, *b.shape[-2:])
    info = torch.empty(batch, dtype=torch.int32, device=a.device)
    size = fused_size(n, a.dtype)
    b_stride = n * k if b.shape[:-2] == batch else 0
    launch(SOLVE_SMALL, groups_for(count, TEAMS[size]), a, b, x, info, n, k, count, b_stride, 0, N=size,
           TRANSPOSED=int(not left))
    if check_errors:
        _ERRORS[check_errors](check_errors, info)
    return x, info


_solve_small_op = torch.library.custom_op("mpslinalg::solve_small", mutates_args=())(_solve_small_body)


@_solve_small_op.register_fake
def _(A, B, left, check_errors):
    batch = A.shape[:-2]
    return B.new_empty(*batch, *B.shape[-2:]), A.new_empty(batch, dtype=torch.int32)


@_dispatch.answered_by(lambda LU, pivots, B, left, adjoint: _dispatch.TORCH.lu_solve(LU, pivots, B, left=left, adjoint=adjoint))
def _lu_solve_small_body(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, left: bool, adjoint: bool) -> torch.Tensor:
    """X from A = P L U as lu_solve's, sgetrs for n <= 32 in one launch (lu_solve_small):
    LU's and B's batches each the broadcast batch or one matrix (_fused_batch)."""
    # Factors by columns (torch's, LAPACK's layout) are read as they lie, not copied.
    by_columns = not LU.is_contiguous() and LU.mT.is_contiguous() and not LU.is_conj() and not LU.is_neg()
    lu = LU.mT if by_columns else _checks.resolved(LU)
    ipiv, b = pivots.contiguous(), _checks.resolved(B)
    batch = _fused_batch(lu, b, True)
    n = lu.shape[-1]
    k = b.shape[-1] if left else b.shape[-2]
    count = batch.numel()
    x = b.new_empty(*batch, *b.shape[-2:])
    size = fused_size(n, lu.dtype)
    lu_stride = n * n if lu.shape[:-2] == batch else 0
    b_stride = n * k if b.shape[:-2] == batch else 0
    conjugated = int(adjoint and lu.is_complex())
    launch(LU_SOLVE_SMALL, groups_for(count, TEAMS[size]), lu, ipiv, b, x, n, k, count, lu_stride, int(by_columns),
           b_stride, int(left), N=size, TRANSPOSED=int(left == adjoint), CONJUGATED=conjugated)
    return x


_lu_solve_small_op = torch.library.custom_op("mpslinalg::lu_solve_small", mutates_args=())(_lu_solve_small_body)


@_lu_solve_small_op.register_fake
def _(LU, pivots, B, left, adjoint):
    return B.new_empty(*_fused_batch(LU, B, True), *B.shape[-2:])


# --- solves, determinants and inverses from the factors ---


def _lu_solve(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, left: bool, adjoint: bool) -> torch.Tensor:
    """X with A X = B, A^H X = B, X A = B or X A^H = B for A = P L U (sgetrs): one
    launch of lu_solve_small where no derivative is recorded, else the permutation and
    two triangular solves on the packed LU, differentiable in LU and B."""
    if (fused_size(LU.shape[-1], LU.dtype) and _fused_batch(LU, B, True) is not None
            and _without_derivatives(LU, pivots, B)):
        return _dispatch.call(torch.ops.mpslinalg.lu_solve_small, _lu_solve_small_body, LU, pivots, B, left, adjoint)
    order = _permutation(pivots, LU.shape[-1])
    # The kernels take row-major LU; torch's CUDA lu_factor returns column-major
    # factors, which are copied once here rather than once per triangular solve.
    LU = _checks.resolved(LU)
    solve = triangular._solve  # (A, B, upper, left, unit), batch dims broadcast
    if left and not adjoint:  # X = U^-1 L^-1 P^T B
        return solve(LU, solve(LU, _rows(B, order), False, True, True), True, True, False)
    if left:  # X = P L^-H U^-H B
        LUh = LU.mH
        return _rows(solve(LUh, solve(LUh, B, False, True, False), True, True, True), _inverse_order(order))
    if not adjoint:  # X = B U^-1 L^-1 P^T
        X = solve(LU, solve(LU, B, True, False, False), False, False, True)
        return _rows(X.mT, _inverse_order(order)).mT
    LUh = LU.mH  # X = B P L^-H U^-H
    return solve(LUh, solve(LUh, _rows(B.mT, order).mT, True, False, True), False, False, False)


def determinant(A: torch.Tensor, logarithmic: bool):
    """det, or (sign, logabsdet), of square A (n > 0): one launch up to n = 32
    (determinant_small: the factorization and the product fused), else the
    factorization and lu_determinant. Not differentiable (the ops' bodies call it)."""
    *batch, n, _ = A.shape
    size = fused_size(n, A.dtype, DETERMINANT_SIZES)
    if not size:
        LU, pivots, _ = _lu_factor_body(A, True, "")
        return _determinant_from(LU, pivots, logarithmic)
    a = _checks.resolved(A)
    count = a.shape[:-2].numel()
    real = _checks.real_dtype(a.dtype)
    det_or_sign = a.new_empty(batch)
    logabs = a.new_empty(batch if logarithmic else (0,), dtype=real)  # det: an empty buffer
    for matrices, tensors in batches(count, a, det_or_sign, logabs) if count else ():
        launch(DETERMINANT_SMALL, groups_for(matrices, TEAMS[size]), *tensors, n, matrices, int(logarithmic), N=size)
    return (det_or_sign, logabs) if logarithmic else det_or_sign


def _determinant_from(LU: torch.Tensor, pivots: torch.Tensor, logarithmic: bool):
    """det, or (sign, logabsdet), of the matrices P L U, from LU's diagonal and the
    pivots' parity: one kernel launch (``lu_determinant``), not differentiable."""
    *batch, n, _ = LU.shape
    count = LU.shape[:-2].numel()
    real = _checks.real_dtype(LU.dtype)
    flat = _checks.resolved(LU).reshape(count, n, n)
    ipiv = pivots.reshape(count, n).to(torch.int32).contiguous()
    # Made in their own shapes: an output that is a view trips forward mode's layout check.
    det_or_sign = LU.new_empty(batch)
    logabs = LU.new_empty(batch if logarithmic else (0,), dtype=real)  # det: an empty buffer
    outputs = (det_or_sign.view(count), logabs.view(-1))
    for matrices, tensors in batches(count, flat, ipiv, *outputs) if count else ():
        launch(LU_DETERMINANT, groups_for(matrices, PERMUTATION_GROUP), *tensors, n, matrices, int(logarithmic),
               GROUP=PERMUTATION_GROUP)
    return (det_or_sign, logabs) if logarithmic else det_or_sign


def _inverse_from(LU: torch.Tensor, pivots: torch.Tensor) -> torch.Tensor:
    n = LU.shape[-1]
    identity = _sharding.expanded_like(torch.eye(n, dtype=LU.dtype, device=LU.device), LU)
    return _lu_solve(LU, pivots, identity, True, False)


# --- argument checks, with torch.linalg's messages ---


def _check_pair(api: str, A: torch.Tensor, B: torch.Tensor, left: bool, a_name: str = "A") -> None:
    _checks.system(api, A, B, left, a_name)
    _checks.broadcast_batch(B.shape[:-2], A.shape[:-2])  # torch's error if they do not broadcast


def _first_failure(info: torch.Tensor) -> tuple[int, str] | None:
    """(1-based zero pivot, "(Batch element b): " or "") of the first failed matrix, or
    None (one scalar read: _checks.first_failure)."""
    failure = _checks.first_failure(info)
    if failure is None:
        return None
    index, value = failure
    return value, f"(Batch element {index}): " if info.dim() > 0 else ""


def _raise_lu_error(api: str, info: torch.Tensor) -> None:
    """torch.linalg.lu_factor's RuntimeError for the first matrix with a zero pivot."""
    failure = _first_failure(info)
    if failure:
        i, prefix = failure
        raise RuntimeError(
            f"torch.{api}: {prefix}U[{i},{i}] is zero and using it on lu_solve would result in a division by zero. "
            "If you still want to perform the factorization, consider calling linalg.lu(A, pivot) or "
            "linalg.lu_factor_ex(A, pivot)"
        )


def _raise_solve_error(api: str, info: torch.Tensor) -> None:
    failure = _first_failure(info)
    if failure:
        raise torch.linalg.LinAlgError(f"torch.{api}: {failure[1]}The solver failed because the input matrix is singular.")


def _raise_inverse_error(api: str, info: torch.Tensor) -> None:
    _checks.raise_if_singular(api, info, batched=info.dim() > 0)


# How each API that checks reports a singular matrix.
_ERRORS = {
    "linalg.lu_factor": _raise_lu_error,
    "linalg.lu_factor_ex": _raise_lu_error,
    "linalg.solve": _raise_solve_error,
    "linalg.solve_ex": _raise_solve_error,
    "linalg.inv": _raise_inverse_error,
    "linalg.inv_ex": _raise_inverse_error,
}


# --- public functions ---


def lu_factor_ex(A: torch.Tensor, *, pivot: bool = True, check_errors: bool = False, out=None):
    """LU factorization with partial pivoting and LAPACK's ``info``, like
    ``torch.linalg.lu_factor_ex``.

    Args:
        A: ``(*, m, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL); any batch dims, strides and conjugate views.
        pivot: partial pivoting (True) or none (False, as torch on CUDA).
        check_errors: raise torch's RuntimeError if a U[i, i] is exactly zero
            (synchronises with the device).

    Returns:
        ``(LU, pivots, info)``: L (unit diagonal, not stored) and U packed in LU;
        pivots ``(*, min(m, n))`` int32, 1-based: row i was interchanged with row
        ``pivots[i] - 1``; info ``(*)`` int32, the first i with U[i, i] == 0 (1-based),
        else 0. The pivot is the largest ``|a|`` (``|re| + |im|`` for complex),
        the lowest row on ties, as LAPACK. Gradients flow to LU (torch's formula:
        A must have full rank), in reverse and forward mode.

    Example:
        >>> LU, pivots, info = LA.lu_factor_ex(torch.tensor([[1.0, 2.0], [2.0, 4.0]]))
        >>> info  # U[1, 1] == 0
        tensor(2, dtype=torch.int32)
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.lu_factor_ex(A, pivot=pivot, check_errors=check_errors, out=out)
    if A.dim() < 2:
        raise RuntimeError(f"torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: {list(A.shape)} instead")
    _checks.out_without_grad("linalg_lu_factor_ex", out, A)
    LU, pivots, info = _lu_factor(A, pivot, "linalg.lu_factor_ex" if check_errors else "")
    return torch.return_types.linalg_lu_factor_ex(_checks.into_each(out, (LU, pivots, info)))


def lu_factor(A: torch.Tensor, *, pivot: bool = True, out=None):
    """The LU factorization in LAPACK's packed form, like
    ``torch.linalg.lu_factor``.

    Args:
        A: ``(*, m, n)``, as for ``lu_factor_ex``.
        pivot: partial pivoting (True) or none (False).
        out: optional ``(LU, pivots)`` tensors to write into.

    Returns:
        ``(LU, pivots)`` as ``lu_factor_ex`` returns them.

    Raises:
        RuntimeError: torch's, where a U[i, i] is exactly zero; the check
            synchronises with the device (``lu_factor_ex`` does not).

    Example:
        >>> LU, pivots = LA.lu_factor(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        >>> pivots  # 1-based: row 1 was interchanged with row 2
        tensor([2, 2], dtype=torch.int32)
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.lu_factor(A, pivot=pivot, out=out)
    if A.dim() < 2:
        raise RuntimeError(f"torch.lu_factor: Expected tensor with 2 or more dimensions. Got size: {list(A.shape)} instead")
    _checks.out_without_grad("linalg_lu_factor_ex", out, A)
    LU, pivots, info = _lu_factor(A, pivot, "linalg.lu_factor")
    return torch.return_types.linalg_lu_factor(_checks.into_each(out, (LU, pivots)))


def lu(A: torch.Tensor, *, pivot: bool = True, out=None):
    """The LU factorization with partial pivoting, like ``torch.linalg.lu``:
    A = P L U.

    Args:
        A: ``(*, m, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL).
        pivot: partial pivoting (True) or none (False: P is empty, as torch on CUDA).
        out: optional ``(P, L, U)`` tensors to write into.

    Returns:
        ``(P, L, U)``: P ``(*, m, m)``, L ``(*, m, k)`` unit lower, U ``(*, k, n)``,
        k = min(m, n). Gradients flow to L and U.

    Example:
        >>> A = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> P, L, U = LA.lu(A)
        >>> torch.allclose(P @ L @ U, A)
        True
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.lu(A, pivot=pivot, out=out)
    if A.dim() < 2:
        raise RuntimeError(f"linalg.lu: Expected tensor with 2 or more dimensions. Got size: {list(A.shape)} instead")
    _checks.out_without_grad("linalg_lu", out, A)
    LU, pivots, _ = _lu_factor(A, pivot)
    L, U = _factors(LU)
    m = A.shape[-2]
    if pivot:
        order = _permutation(pivots, m)
        zeros = torch.zeros(*A.shape[:-2], m, m, dtype=A.dtype, device=A.device)
        P = zeros.scatter(-2, order[..., None, :], 1)  # column i of P is e_order[i]; out of place for vmap
    else:
        P = A.new_empty(0)
    return torch.return_types.linalg_lu(_checks.into_each(out, (P, L, U)))


def lu_solve(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *, left: bool = True, adjoint: bool = False, out=None):
    """Solves A X = B from A's LU factorization, like ``torch.linalg.lu_solve``.

    Args:
        LU: ``(*, n, n)``, the packed factors, as ``lu_factor`` returns them.
        pivots: ``(*, n)`` int32, their pivots.
        B: ``(*, n, k)`` (``(*, k, n)`` with ``left=False``); batch dims broadcast
            with LU's.
        left: solve A X = B (True) or X A = B (False).
        adjoint: with A^H in place of A.
        out: optional tensor to write the result into.

    Returns:
        X, B's shape. A zero pivot gives inf/NaN, no error. Differentiable in LU
        and B.

    Example:
        >>> A = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> B = torch.tensor([[5.0], [6.0]])
        >>> X = LA.lu_solve(*LA.lu_factor(A), B)
        >>> torch.allclose(A @ X, B)
        True
    """
    if not _dispatch.has_kernels(LU, pivots, B):
        return _dispatch.TORCH.lu_solve(LU, pivots, B, left=left, adjoint=adjoint, out=out)
    api = "linalg.lu_solve"
    if LU.dim() < 2:
        raise RuntimeError(f"torch.{api}: The input tensor A must have at least 2 dimensions.")
    if B.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor B must have at least 2 dimensions.")
    _checks.square(f"torch.{api}", LU)
    _check_pair(api, LU, B, left, a_name="LU")
    if pivots.dtype != torch.int32:
        raise RuntimeError(f"{api}: pivots should be a Tensor of scalar type torch.int32")
    if pivots.shape[-1:] != LU.shape[-1:]:
        raise RuntimeError(f"{api}: Number of pivots per batch should be same as the dimension of the matrix")
    if pivots.shape[:-1] != LU.shape[:-2]:
        raise RuntimeError(f"{api}: Expected LU.shape[:-1] and pivots.shape to be the same, but got pivots with shape {tuple(pivots.shape)} instead")
    _checks.out_without_grad("linalg_lu_solve", out, LU, B)
    return _checks.into(out, _lu_solve(LU, pivots, B, left, adjoint))


def _is_vector_rhs(A: torch.Tensor, B: torch.Tensor) -> bool:
    return B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])


def solve_ex(A: torch.Tensor, B: torch.Tensor, *, left: bool = True, check_errors: bool = False, out=None):
    """Solves A X = B (or X A = B) and reports singular matrices, like
    ``torch.linalg.solve_ex``, with no host synchronisation unless ``check_errors``.

    Args:
        A: ``(*, n, n)``.
        B: ``(*, n, k)`` or a vector ``(*, n)``; batch dims broadcast.
        left: A X = B (True) or X A = B.
        check_errors: raise for a singular matrix (synchronises with the device).
        out: optional ``(X, info)`` tensors to write into.

    Returns:
        ``(X, info)``: info as ``lu_factor_ex``'s (X then holds inf/NaN).
        Differentiable in A and B.

    Raises:
        torch.linalg.LinAlgError: with ``check_errors``, for a singular A.

    Example:
        >>> X, info = LA.solve_ex(torch.tensor([[1.0, 2.0], [2.0, 4.0]]), torch.ones(2, 1))
        >>> info
        tensor(2, dtype=torch.int32)
    """
    if not _dispatch.has_kernels(A, B):
        return _dispatch.TORCH.solve_ex(A, B, left=left, check_errors=check_errors, out=out)
    _checks.out_without_grad("_linalg_solve_ex", out, A, B)
    X, info = _solve_ex("linalg.solve", A, B, left, "linalg.solve_ex" if check_errors else "")
    return torch.return_types.linalg_solve_ex(_checks.into_each(out, (X, info)))


def solve(A: torch.Tensor, B: torch.Tensor, *, left: bool = True, out=None) -> torch.Tensor:
    """Solves A X = B (or X A = B), like ``torch.linalg.solve``: LU with partial
    pivoting, then the triangular solves.

    Args:
        A: ``(*, n, n)``.
        B: ``(*, n, k)`` or a vector ``(*, n)``; batch dims broadcast.
        left: A X = B (True) or X A = B.
        out: optional tensor to write the result into.

    Returns:
        X, B's shape. Differentiable in A and B.

    Raises:
        torch.linalg.LinAlgError: for a singular A; the check synchronises with the
            device (``solve_ex`` does not).

    Example:
        >>> A = torch.tensor([[3.0, 1.0], [1.0, 2.0]])
        >>> b = torch.tensor([9.0, 8.0])
        >>> torch.allclose(LA.solve(A, b), torch.tensor([2.0, 3.0]))
        True
    """
    if not _dispatch.has_kernels(A, B):
        return _dispatch.TORCH.solve(A, B, left=left, out=out)
    _checks.out_without_grad("_linalg_solve_ex", out, A, B)
    X, info = _solve_ex("linalg.solve", A, B, left, "linalg.solve")
    return _checks.into(out, X)


def _solve_ex(api: str, A: torch.Tensor, B: torch.Tensor, left: bool, check_errors: str):
    if A.dim() < 2:
        raise RuntimeError(f"{api}: The input tensor A must have at least 2 dimensions.")
    _checks.square(api, A)
    vector = _is_vector_rhs(A, B)
    if vector and not left:
        if A.shape[-1] == 1:
            raise RuntimeError(
                f"{api}: Vector broadcasting of the left hand side is not supported for left=False. "
                "In this case linalg.solve is equivalent to B / A.squeeze(-1)"
            )
    if vector:
        B = B.unsqueeze(-1)
    _check_pair(api, A, B, left)
    if fused_size(A.shape[-1], A.dtype) and _fused_batch(A, B, False) is not None and _without_derivatives(A, B):
        X, info = _dispatch.call(torch.ops.mpslinalg.solve_small, _solve_small_body, A, B, left, check_errors)
    else:
        LU, pivots, info = _lu_factor(A, True, check_errors)
        X = _lu_solve(LU, pivots, B, left, False)
    return (X.squeeze(-1) if vector else X), info


def lu_inverse_ex(A: torch.Tensor, check_errors: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """(inverse, info) of square A of any size through its LU (sgetrf + sgetrs with
    B = I, as torch.linalg.inv_ex): inverse.inv_ex's path above the fused kernels'
    size; ``check_errors`` names the API whose LinAlgError singular input raises."""
    LU, pivots, info = _lu_factor(A, True, check_errors)
    return _inverse_from(LU, pivots), info


@_dispatch.answered_by(lambda A: tuple(_dispatch.TORCH.slogdet(A)))
def _slogdet_body(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return determinant(A, True)


_slogdet_op = torch.library.custom_op("mpslinalg::slogdet", mutates_args=())(_slogdet_body)


@_slogdet_op.register_fake
def _(A):
    real = _checks.real_dtype(A.dtype)
    return A.new_empty(A.shape[:-2]), A.new_empty(A.shape[:-2], dtype=real)


@_slogdet_op.register_vmap
def _(info, in_dims, A):
    return torch.ops.mpslinalg.slogdet(A.movedim(in_dims[0], 0)), (0, 0)


def _slogdet_setup(ctx, inputs, output):
    _dispatch.save(ctx, inputs[0], output[0])


def _slogdet_backward(ctx, g_sign, g_logabs):
    """torch's slogdet_backward (linalg-contracts 2.4): (g_logabs - i Im(conj(g_sign)
    sign)) A^-H; a real sign is piecewise constant, its gradient ignored."""
    A, sign = ctx.saved_tensors
    factor = torch.zeros_like(sign.real) if g_logabs is None else g_logabs
    if A.is_complex():
        factor = factor if g_sign is None else factor - 1j * (g_sign.conj() * sign).imag
    inverse, _ = lu_inverse_ex(A)
    return factor.to(A.dtype)[..., None, None] * inverse.mH


_slogdet_op.register_autograd(_sharding.mixable(_slogdet_backward), setup_context=_slogdet_setup)
_Slogdet = _dispatch.with_transposed_jvp(torch.ops.mpslinalg.slogdet, _slogdet_setup, _slogdet_backward)


def slogdet(A: torch.Tensor, *, out=None):
    """The sign and the log of the absolute value of the determinant, like
    ``torch.linalg.slogdet``; from the LU's diagonal and pivots, on the device.

    Args:
        A: ``(*, n, n)``.
        out: optional ``(sign, logabsdet)`` tensors to write into.

    Returns:
        ``(sign, logabsdet)``: sign has A's dtype (a unit complex number for complex
        A, 0 if A is singular); logabsdet is real (-inf if singular). Gradients as
        torch's: ``g_logabs A^-H`` (plus the sign's phase term for complex A).

    Example:
        >>> LA.slogdet(torch.tensor([[-2.0, 0.0], [0.0, 3.0]]))
        torch.return_types.linalg_slogdet(
        sign=tensor(-1.),
        logabsdet=tensor(1.7918))
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.slogdet(A, out=out)
    _checks.square("linalg.slogdet", A)
    _checks.out_without_grad("_linalg_slogdet", out, A)
    if A.shape[-1] == 0:  # det 1; made from A, so that autograd sees it as torch's (a zero gradient)
        zero = A.sum((-2, -1)) * 0
        return torch.return_types.linalg_slogdet(_checks.into_each(out, (zero + 1, zero.real)))
    sign_logabs = _dispatch.call(torch.ops.mpslinalg.slogdet, _slogdet_body, A, function=_Slogdet)
    return torch.return_types.linalg_slogdet(_checks.into_each(out, sign_logabs))


def logdet(A: torch.Tensor) -> torch.Tensor:
    """log(det(A)), like ``torch.logdet``.

    Args:
        A: ``(*, n, n)``.

    Returns:
        ``(*)``: NaN for a real A with a negative determinant, -inf for a singular
        one; complex A gives the complex logarithm. Differentiable.

    Example:
        >>> LA.logdet(2 * torch.eye(3))
        tensor(2.0794)
    """
    if not _dispatch.has_kernels(A):
        return _dispatch.TORCH.logdet(A)
    _checks.square("logdet", A)
    sign, logabs = slogdet(A)
    if A.is_complex():
        return torch.complex(logabs, sign.angle()) if A.shape[-1] else logabs.to(A.dtype)
    return torch.where(sign < 0, torch.nan, logabs)


def lu_unpack(LU_data: torch.Tensor, LU_pivots: torch.Tensor, unpack_data: bool = True, unpack_pivots: bool = True, *,
              out=None):
    """P, L and U from a packed LU factorization, like ``torch.lu_unpack``: the
    pivots become a row order on the device (``lu_permutation``, no host
    synchronisation) and L, U are LU_data's triangles.

    Args:
        LU_data: ``(*, m, n)``, the packed factors, as ``lu_factor`` returns them.
        LU_pivots: ``(*, k)`` int32 (k = min(m, n)), their 1-based pivots.
        unpack_data: return L and U (else both are empty tensors of shape ``(0,)``).
        unpack_pivots: return P (else an empty tensor of shape ``(0,)``).
        out: optional ``(P, L, U)`` tensors to write into.

    Returns:
        ``(P, L, U)``: P ``(*, m, m)``, L ``(*, m, k)`` unit lower, U ``(*, k, n)``,
        all of LU_data's dtype. Gradients flow from L and U to LU_data (P has
        none), in reverse and forward mode. Pivots outside ``[1, m]``, which torch
        rejects by reading them on the host, are not checked (clamped into range).

    Example:
        >>> A = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
        >>> P, L, U = LA.lu_unpack(*LA.lu_factor(A))
        >>> P
        tensor([[0., 1.],
                [1., 0.]])
        >>> torch.allclose(P @ L @ U, A)
        True
    """
    if not _dispatch.has_kernels(LU_data, LU_pivots):
        return _dispatch.TORCH.lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots, out=out)
    if LU_data.dim() < 2:
        raise RuntimeError(f"torch.lu_unpack: Expected tensor with 2 or more dimensions. Got size: {list(LU_data.shape)} instead")
    *batch, m, n = LU_data.shape
    k = min(m, n)
    if unpack_pivots:
        if LU_pivots.dtype != torch.int32:
            raise RuntimeError(
                "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of torch.int32 dtype.\n"
                "Note: this function is intended to be used with the output produced by torch.linalg.lu_factor"
            )
        if list(LU_pivots.shape) != [*batch, k]:
            raise ValueError(f"Expected LU_pivots to have shape {[*batch, k]} but got {list(LU_pivots.shape)} instead.")
    _checks.out_without_grad("lu_unpack", out, LU_data)
    empty = LU_data.new_empty(0)
    if unpack_data:
        # torch's lu_unpack: L = tril(LU, -1) + I over the first k columns, U = triu of
        # the first k rows; built from views, so that autograd differentiates them.
        L = LU_data[..., :, :k].tril(-1) + torch.eye(m, k, dtype=LU_data.dtype, device=LU_data.device)
        U = LU_data[..., :k, :].triu()
    else:
        L = U = empty
    if unpack_pivots:
        order = _permutation(LU_pivots, m)
        zeros = LU_data.new_zeros((*batch, m, m))
        P = zeros.scatter(-2, order[..., None, :], 1)  # column i of P is e_order[i], as in lu
    else:
        P = empty
    return torch.return_types.lu_unpack(_checks.into_each(out, (P, L, U)))
