"""The matrix exponential: ``matrix_exp``.

Scaling and squaring with Pade approximants, as Higham's algorithm ("The scaling and
squaring method for the matrix exponential revisited", SIAM J. Matrix Anal. Appl.
26(4):1179-1193, 2005: Algorithm 2.3, and MATLAB's expm for single precision; SciPy's
expm is its refinement by Al-Mohy and Higham, 2009). For each matrix, from its 1-norm
and on the device:

- the degree m of the diagonal Pade approximant r_m = p_m / q_m: the lowest of the
  precision's degrees whose theta_m bounds ||A||_1, and the highest otherwise;
- the number of squarings s = max(0, ceil(log2(||A||_1 / theta_max))), so that
  ||A / 2^s||_1 <= theta_max.

theta_m is the largest norm at which r_m's backward error bound (Higham 2005, eq. 2.4 and
Table 2.1) is at most the unit roundoff u: 2^-24 for float32 and complex64 (degrees 3,
5, 7, as MATLAB's expm for single), 2^-53 for float64 and complex128 (3, 5, 7, 9, 13).
The values are Higham's; tests/test_matrix_exp.py recomputes them from the definition.

r_m(2^-s A) for every degree is one evaluation with per-matrix coefficients (the higher
degrees' coefficients zero where a lower degree is chosen): U = A (A6 W2 + W1), V = A6 V2 +
V1 with W, V combinations of I, A^2, A^4, A^6, Higham's scheme for degree 13 (A6 W2 and
A6 V2 vanish for degrees up to 7, and are not formed in single precision); then the solve
(V - U) X = V + U by mpslinalg's LU (``lu_family.solve_ex``, on the kernels). The
squarings are a kernel (``metal/expm.metal``) that squares each matrix in place its own s
times in threadgroup memory, for n <= 64 (float32, float64) or 32 (complex): no host
synchronisation on the way. Larger matrices are squared by batched products, max(s)
times, each matrix kept once its own s are done; taking max(s) synchronises with the
device once, as torch.linalg.matrix_exp does for every batch.

A matrix with an infinite or NaN entry gives NaN throughout, as torch's; n = 1 is the
elementwise exp, as torch's.

Gradients are torch's: the backward is the top-right block of exp([[A^H, G], [0, A^H]]),
the forward mode that of exp([[A, dA], [0, A]]) (the Frechet derivative), both by this
module's own matrix_exp.
"""

from __future__ import annotations

import math

import torch

from . import _checks, _dispatch, _sharding, lu_family
from ._kernel import Buffer, Kernel, Scalar, Shared
from .runtimes import batches, fits, groups_for, launch

# --- the squaring kernel ---

# n <= 16 takes expm_small (below) and, where it cannot run, the instance of 32.
SQUARE_SIZES = (32, 64)
SQUARE_TEAM = {32: 256, 64: 256}  # threads a matrix: 4 or 16 elements each
SQUARE_TEAMS = {32: 1, 64: 1}  # matrices a threadgroup

EXPM_SQUARE = Kernel(
    function="expm_square",
    source="expm.metal",
    args=(Buffer("x"), Buffer("squarings", "int", const=True), Scalar("n"), Scalar("count")),
    instances=tuple({"N": N} for N in SQUARE_SIZES),
    group_size=lambda N: SQUARE_TEAM[N] * SQUARE_TEAMS[N],
    template=lambda N: (N, SQUARE_TEAM[N], SQUARE_TEAMS[N]),
    shared=lambda N: [Shared("tiles", "T", SQUARE_TEAMS[N] * N * N)],
    # A complex 64 x 64 tile is 32 KiB (complex64) or 64 KiB: complex stops at 32.
    where=lambda dtype, N: N <= 32 or not dtype.is_complex,
)


# --- the whole exponential in one kernel, n <= 16 ---

FUSED_SIZES = (8, 16)

EXPM_SMALL = Kernel(
    function="expm_small",
    source="expm.metal",
    args=(Buffer("a", const=True), Buffer("x"), Buffer("coefficients", "R", const=True),
          Buffer("log2_theta", "R", const=True), Scalar("degrees"), Scalar("slots"), Scalar("n"), Scalar("count")),
    instances=tuple({"N": N} for N in FUSED_SIZES),
    # The LU family's teams: N threads a matrix, 64 a threadgroup.
    group_size=lambda N: N * lu_family.TEAMS[N],
    template=lambda N: (N, lu_family.TEAMS[N]),
    shared=lambda N: [Shared("offered_values", "R", 1), Shared("offered_positions", "int", 1),
                      Shared("offered_rows", "T", 1), Shared("order", "int", lu_family.TEAMS[N] * N),
                      Shared("most_squarings", "int", lu_family.TEAMS[N]),
                      Shared("staging", "T", lu_family.TEAMS[N] * N * (N + 1))],
)


def _fused_size(n: int, dtype: torch.dtype, device: torch.device) -> int:
    """The N of the expm_small instance for n x n matrices of ``dtype`` on ``device``,
    or 0 where none can run them."""
    for N in FUSED_SIZES:
        if n <= N and EXPM_SMALL.exists(dtype, N=N) and fits(EXPM_SMALL, dtype, device, N=N):
            return N
    return 0


def _square_size(n: int, dtype: torch.dtype, device: torch.device) -> int:
    """The N of the expm_square instance that squares n x n matrices of ``dtype`` on
    ``device``, or 0 where none can (larger n, or no instance usable there)."""
    for N in SQUARE_SIZES:
        if n <= N and EXPM_SQUARE.exists(dtype, N=N) and fits(EXPM_SQUARE, dtype, device, N=N):
            return N
    return 0


# --- the approximants (Higham 2005) ---


def _pade_coefficients(m: int) -> list[float]:
    """b_0 .. b_m of the diagonal Pade approximant r_m = p_m / q_m of exp, p_m(x) =
    sum b_k x^k, q_m(x) = p_m(-x), scaled so that b_0 = 1 (Higham 2005, eq. 2.2)."""
    return [math.factorial(2 * m - k) * math.factorial(m) / (math.factorial(2 * m) * math.factorial(k) * math.factorial(m - k))
            for k in range(m + 1)]


# (degree, theta_m): Higham 2005, Table 2.1 (u = 2^-53) and MATLAB's expm for single
# (u = 2^-24); the last degree is the one taken with scaling.
SINGLE_DEGREES = ((3, 4.258730016922831e-01), (5, 1.880152677804762e+00), (7, 3.925724783138660e+00))
DOUBLE_DEGREES = ((3, 1.495585217958292e-02), (5, 2.539398330063230e-01), (7, 9.504178996162932e-01),
                  (9, 2.097847961257068e+00), (13, 5.371920351148152e+00))
# Slots of a coefficient row: b_0 .. b_13, the coefficients of I, A, ..., A^13.
SLOTS = 14


def _degrees(dtype: torch.dtype) -> tuple[tuple[int, float], ...]:
    return DOUBLE_DEGREES if dtype in (torch.float64, torch.complex128) else SINGLE_DEGREES


_TABLES: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}


def _coefficient_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(degrees, SLOTS) Pade coefficients of ``dtype``'s degrees (real), zero past each
    degree, on ``device``: made once per device, since the copy from the host would
    synchronise with the device on every call."""
    return _table("coefficients", dtype, device,
                  lambda: [_pade_coefficients(m) + [0.0] * (SLOTS - m - 1) for m, _ in _degrees(dtype)])


def _log2_theta_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """log2 theta_m of ``dtype``'s degrees (real), ascending, on ``device`` (made once)."""
    return _table("log2 theta", dtype, device, lambda: [math.log2(theta) for _, theta in _degrees(dtype)])


def _table(name: str, dtype: torch.dtype, device: torch.device, rows) -> torch.Tensor:
    real = _checks.real_dtype(dtype)
    key = (name, real, device)
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES.setdefault(key, torch.tensor(rows(), dtype=real, device=device))
    return table


def _power_of_two(exponent: torch.Tensor, real: torch.dtype) -> torch.Tensor:
    """2^exponent (integer tensor, within the normal exponents) exactly, from its bits: a
    library's exp2 or pow need not be exact on every device."""
    if real == torch.float64:
        return ((exponent.to(torch.int64) + 1023) << 52).view(torch.float64)
    return ((exponent.to(torch.int32) + 127) << 23).view(torch.float32)


def _scaling(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(degree index, squarings s (int32), finite) of each matrix of (count, n, n) a, from
    its 1-norm, with no host synchronisation. The norm is taken as largest * ||a / largest||_1
    (largest the largest |a_ij|), in log2, so that a finite matrix whose column sums
    overflow still gets its s. finite: no entry is infinite or NaN."""
    degrees = _degrees(a.dtype)
    magnitude = a.abs()
    largest = magnitude.amax((-2, -1))  # NaN if an entry is: amax propagates it
    finite = torch.isfinite(largest)
    divisor = torch.where(finite & (largest > 0), largest, 1)
    log2_norm = torch.log2((magnitude / divisor[:, None, None]).sum(-2).amax(-1)) + torch.log2(divisor)
    index = torch.zeros_like(largest, dtype=torch.int64)
    for _, theta in degrees[:-1]:
        index += log2_norm > math.log2(theta)
    squarings = torch.ceil(log2_norm - math.log2(degrees[-1][1])).clamp_(min=0)
    squarings = torch.where(finite, squarings, 0).to(torch.int32)  # log2 of 0 is -inf: s = 0
    return index, squarings, finite


def _combination(c: torch.Tensor, terms: tuple[tuple[int, torch.Tensor], ...], identity: int | None = None) -> torch.Tensor:
    """sum_k c[:, k] P_k over ``terms`` ((k, P_k), ...), plus c[:, identity] I if given."""
    total = None
    for k, power in terms:
        term = c[:, k, None, None] * power
        total = term if total is None else total + term
    if identity is not None:
        total.diagonal(dim1=-2, dim2=-1).add_(c[:, identity, None])
    return total


def _pade(a: torch.Tensor, c: torch.Tensor, highest: int) -> torch.Tensor:
    """r_m(a) of (count, n, n) a, with the coefficients c (count, SLOTS) of each matrix's
    degree (zero past it): Higham 2005's evaluation of r_13, whose lower-degree terms are
    r_3 .. r_9 (b_9 A^9 as A (A^6 A^2)). ``highest``: the largest degree of a's dtype."""
    A2 = a @ a
    A4 = A2 @ A2
    A6 = A4 @ A2
    powers = ((6, A6), (4, A4), (2, A2))
    W = _combination(c, tuple((k + 1, P) for k, P in powers), 1)  # b_7 A^6 + b_5 A^4 + b_3 A^2 + b_1 I
    V = _combination(c, powers, 0)  # b_6 A^6 + b_4 A^4 + b_2 A^2 + b_0 I
    if highest > 7:
        W = W + A6 @ _combination(c, tuple((k + 7, P) for k, P in powers))
        V = V + A6 @ _combination(c, tuple((k + 6, P) for k, P in powers))
    U = a @ W
    # (V - U) X = V + U: q_m(A) = p_m(-A) = V - U. No check of info (it would
    # synchronise): q_m(A) is far from singular for ||A||_1 <= theta_m (Higham 2005, sec. 2),
    # and NaN input is masked by the caller.
    return lu_family.solve_ex(V - U, V + U).result


def _square(x: torch.Tensor, squarings: torch.Tensor) -> torch.Tensor:
    """x_i squared squarings[i] times, for contiguous (count, n, n) x: by the kernel in
    place, or (larger n) by batched products, max(s) steps (one host synchronisation)."""
    count, n, _ = x.shape
    N = _square_size(n, x.dtype, x.device)
    if N:
        for size, tensors in batches(count, x, squarings):
            launch(EXPM_SQUARE, groups_for(size, SQUARE_TEAMS[N]), *tensors, n, size, N=N)
        return x
    steps = int(squarings.max())  # the one synchronisation, as torch's own matrix_exp
    for step in range(steps):
        x = torch.where((step < squarings)[:, None, None], x @ x, x)
    return x


# --- the custom op ---


@_dispatch.answered_by(lambda A: _dispatch.TORCH.matrix_exp(A))
def _matrix_exp_body(A: torch.Tensor) -> torch.Tensor:
    """exp(A) of (*, n, n) A, contiguous."""
    a = _checks.resolved(A)
    n = a.shape[-1]
    count = a.shape[:-2].numel()
    if count == 0 or n == 0:
        return torch.empty_like(a)
    if n == 1:  # as torch: the scalar exponential
        return a.exp()
    N = _fused_size(n, a.dtype, a.device)
    if N:  # a and X as they lie (a view costs host time on every call)
        X = torch.empty_like(a)
        degrees = _degrees(a.dtype)
        for size, (part, out) in batches(count, a, X):
            launch(EXPM_SMALL, groups_for(size, lu_family.TEAMS[N]), part, out, _coefficient_table(a.dtype, a.device),
                   _log2_theta_table(a.dtype, a.device), len(degrees), SLOTS, n, size, N=N)
        return X
    flat = a.view(count, n, n)
    real = _checks.real_dtype(flat.dtype)
    index, squarings, finite = _scaling(flat)
    half = squarings // 2  # 2^-s in two normal factors (s passes 126 in float32 near its overflow)
    scaled = flat * _power_of_two(-half, real)[:, None, None] * _power_of_two(half - squarings, real)[:, None, None]
    coefficients = _coefficient_table(a.dtype, a.device)[index]
    X = _pade(scaled, coefficients, _degrees(a.dtype)[-1][0])
    X = _square(X.contiguous(), squarings)
    X = torch.where(finite[:, None, None], X, torch.nan)  # torch's: NaN for any non-finite entry
    return X.view(a.shape)


_matrix_exp_op = torch.library.custom_op("mpslinalg::matrix_exp", mutates_args=())(_matrix_exp_body)


@_matrix_exp_op.register_fake
def _(A):
    return torch.empty_like(A, memory_format=torch.contiguous_format)


@_matrix_exp_op.register_vmap
def _(info, in_dims, A):
    return torch.ops.mpslinalg.matrix_exp(A.movedim(in_dims[0], 0)), 0


def _frechet(A: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """L(A, E), the Frechet derivative of exp at A in the direction E: the top-right block
    of exp([[A, E], [0, A]]) (torch's differential_analytic_matrix_function)."""
    n = A.shape[-1]
    A, E = torch.broadcast_tensors(A, E)
    block = torch.cat((torch.cat((A, E), -1), torch.cat((torch.zeros_like(A), A), -1)), -2)
    return _matrix_exp(block)[..., :n, n:]


def _matrix_exp_setup(ctx, inputs, output):
    _dispatch.save(ctx, inputs[0])


def _matrix_exp_backward(ctx, grad):
    """torch's: L(A^H, G)."""
    (A,) = ctx.saved_tensors
    return _frechet(A.mH, grad)


_matrix_exp_op.register_autograd(_sharding.mixable(_matrix_exp_backward), setup_context=_matrix_exp_setup)
_MatrixExp = _dispatch.with_transposed_jvp(
    torch.ops.mpslinalg.matrix_exp, _matrix_exp_setup, _matrix_exp_backward,
    # Laid out as the output (contiguous), as forward mode requires of a tangent.
    jvp=lambda ctx, dA: _frechet(ctx.saved_tensors[0], dA).contiguous(),
)


def _matrix_exp(A: torch.Tensor) -> torch.Tensor:
    return _dispatch.call(torch.ops.mpslinalg.matrix_exp, _matrix_exp_body, A, function=_MatrixExp)


# --- public function ---


def matrix_exp(A: torch.Tensor) -> torch.Tensor:
    """The matrix exponential, like ``torch.linalg.matrix_exp``.

    Scaling and squaring with Pade approximants (Higham 2005), the degree and the number of
    squarings chosen for each matrix from its 1-norm on the device: degrees 3, 5, 7 in
    float32 and complex64, 3 to 13 in float64 and complex128.

    Args:
        A: ``(*, n, n)``, float32 or complex64 (float64 and complex128 on CUDA and
            OpenCL); any batch dims, strides and conjugate views. Other dtypes, and CPU
            tensors without the OpenCL backend, go to torch.linalg.matrix_exp.

    Returns:
        exp(A), ``(*, n, n)``: NaN throughout for a matrix with an infinite or NaN entry,
        as torch's. No host synchronisation for n <= 64 (float32, float64) or n <= 32
        (complex), whose squarings run in a kernel (after a device's first call, which
        compiles the kernels and copies the Pade coefficients there); larger matrices are
        squared by batched products as many times as the batch's largest count, which
        takes one synchronisation, as torch.linalg.matrix_exp's does. Gradients (reverse and
        forward mode) are torch's: the Frechet derivative, as the exponential of a
        2n x 2n block matrix (by this function).

    Raises:
        RuntimeError: torch's, for fewer than 2 dims, non-square matrices or integer dtypes.

    Example:
        >>> LA.matrix_exp(torch.tensor([[0.0, 1.0], [-1.0, 0.0]]))  # a rotation by 1 radian
        tensor([[ 0.5403,  0.8415],
                [-0.8415,  0.5403]])
    """
    if not _dispatch.square_kernels_apply("linalg.matrix_exp", A):
        return _dispatch.TORCH.matrix_exp(A)
    return _matrix_exp(A)
