"""PyTorch's own OpInfo samples (``torch.testing._internal``'s ``op_db``) through
mpslinalg's kernels on the OpenCL runtime, against torch on the same sample.

Every OpInfo of a function that mpslinalg exports runs its ``sample_inputs`` in each of
float32, float64, complex64 and complex128 that it supports. Where torch raises, mpslinalg
raises the same error (type and message); where torch returns, both results lie within
THRESHOLD * size * condition * eps of each other, relative to their magnitude: the bound two
backward-stable results of a problem of that size and condition number keep (the condition
of each sample measured in float64, the singular values' gaps for singular vectors); and
LAPACK's scaled residuals of our result (mpslinalg.testing's ratios), which do not depend on
the condition, stay below THRESHOLD. Results that are not unique (the SVD's singular vectors,
eigh's eigenvectors) are compared through the invariant functions of them that torch's OpInfo differentiates
(``output_process_fn_grad``). Where the OpInfo supports autograd, the gradients of a random
linear function of those outputs, and where it supports forward mode their tangents along
random directions, agree with torch's in the same way (in float64 and complex128).
``error_inputs`` raise the OpInfo's error type with a message matching its regex. Where
torch's own derivative is wrong (TORCH_TANGENT_WRONG), ours is compared with a function of
the same values whose derivative torch gets right, and torch's asserted to differ.
"""

import importlib.util
import math
import os
import re
from unittest import mock

import numpy as np
import scipy.linalg
import pytest
import torch
from torch.autograd import forward_ad

import mpslinalg as LA
from conftest import load_hypothesis_profile, require
from mpslinalg.testing import (
    norm1,
    THRESHOLD,
    cholesky_ratio,
    det_ratio,
    eig_ratios,
    eigh_ratios,
    eps,
    exact,
    general_solve_ratio,
    inv_ratio,
    lu_ratio,
    qr_ratios,
    solve_ratio,
    svd_ratios,
)

if importlib.util.find_spec("expecttest") is None:  # torch.testing._internal imports it
    if os.environ.get("CI"):
        raise ImportError("tests/test_opinfo.py needs expecttest (pip install expecttest), which torch's OpInfos import")
    pytest.skip("expecttest is missing: torch.testing._internal cannot be imported", allow_module_level=True)

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

load_hypothesis_profile()  # torch.testing._internal loaded its own hypothesis profile

DTYPES = [torch.float32, torch.float64, torch.complex64, torch.complex128]
# Derivatives in double precision only: they take most of this file's time, and single
# precision's go through the same formulas (its values are compared in DTYPES).
DERIVATIVE_DTYPES = [torch.float64, torch.complex128]


def torch_namesake(name: str) -> tuple:
    """(module, attribute) of the torch function that mpslinalg's ``name`` stands in for:
    torch.linalg's, else torch's (geqrf, ormqr, logdet)."""
    return (torch.linalg, name) if hasattr(torch.linalg, name) else (torch, name)


def opinfo_name(name: str) -> str:
    module, attribute = torch_namesake(name)
    return f"linalg.{attribute}" if module is torch.linalg else attribute


# Exported names that no OpInfo describes, and why.
WITHOUT_OPINFO = {
    "backends": "reports the runtimes; not a torch function",
    "use_backend": "selects the CPU runtime; not a torch function",
    "patch_torch": "puts mpslinalg's functions in torch's places; not a torch function",
    "unpatch_torch": "puts torch's functions back after patch_torch; not a torch function",
    "solve_tril": "flash-linear-attention's chunked (I + A)^-1; torch has no such function",
    "tril_inverse": "torch has no triangular inverse (torch.linalg.inv takes any matrix)",
}
# torch.linalg's newer functions: an older torch has neither them nor their OpInfos (and its
# torch.polar is another function, the complex number of a modulus and an angle).
WITHOUT_OPINFO.update({name: f"torch {torch.__version__} has no torch.linalg.{name}"
                       for name in ("matrix_sqrth", "polar") if not hasattr(torch.linalg, name)})
OURS = {opinfo_name(name): name for name in LA.__all__ if name not in WITHOUT_OPINFO}


def described_as(op) -> str | None:
    """The name in OURS that the OpInfo describes: its own, or an alias's (torch.linalg.matmul
    is described by the OpInfo of torch.matmul, whose alias it is)."""
    return next((name for name in (op.name, *(alias.name for alias in op.aliases)) if name in OURS), None)


OPS = [op for op in op_db if described_as(op)]


def test_every_exported_function_with_an_opinfo_is_run():
    """Each export is run through every OpInfo of its torch namesake, or listed with the
    reason it has none; an OpInfo either calls the namesake itself (or the function it
    is an alias of) or is a variant whose lambda calls it (run with mpslinalg's function
    in its place)."""
    assert set(WITHOUT_OPINFO) <= set(LA.__all__)
    assert {described_as(op) for op in OPS} == set(OURS), set(OURS) - {described_as(op) for op in OPS}
    names = {op.name for op in op_db} | {alias.name for op in op_db for alias in op.aliases}
    newer = {"matrix_sqrth", "polar"} - set(dir(torch.linalg))  # an older torch's torch.polar is another function
    assert not {opinfo_name(name) for name in set(WITHOUT_OPINFO) - newer} & names
    for op in OPS:
        module, attribute = torch_namesake(OURS[described_as(op)])
        aliased = described_as(op) != op.name
        assert op.op is getattr(module, attribute) or aliased or op.op.__name__ == "<lambda>", op.name


def in_lapack_order(function, vectors: bool):
    """``function`` (eig or eigvals) with its eigenvalues (and eigenvectors) permuted into
    the order of torch's (LAPACK's) on the same input: the kernel's order is its QR
    iteration's, and torch promises none; each of ours paired with the nearest of
    torch's by an assignment. A constant permutation: derivatives pass through it."""
    from scipy.optimize import linear_sum_assignment

    def reordered(A, *args, **kwargs):
        result = function(A, *args, **kwargs)
        w = result[0] if vectors else result
        if w.numel() == 0:
            return result
        reference = torch.linalg.eigvals(A.detach().cpu()).to(torch.complex128)
        n = w.shape[-1]
        flat_w, flat_ref = w.detach().cpu().to(torch.complex128).reshape(-1, n), reference.reshape(-1, n)
        order = torch.empty(flat_w.shape, dtype=torch.long)
        for i in range(flat_w.shape[0]):
            distance = (flat_ref[i].unsqueeze(-1) - flat_w[i].unsqueeze(-2)).abs().nan_to_num(float("inf"), float("inf"))
            order[i] = torch.as_tensor(linear_sum_assignment(distance.clamp_max(1e300).numpy())[1])
        order = order.reshape(w.shape).to(w.device)
        if not vectors:
            return w.gather(-1, order)
        V = result[1]
        return torch.return_types.linalg_eig((w.gather(-1, order), V.gather(-1, order.unsqueeze(-2).expand_as(V))))

    return reordered


def ours(op):
    """mpslinalg's function for ``op``; for a variant, its lambda calling mpslinalg's
    function where it calls torch's (linalg.pinv's 'singular', linalg.lstsq's
    'grad_oriented'); eig and eigvals in LAPACK's order (``in_lapack_order``)."""
    name = OURS[described_as(op)]
    module, attribute = torch_namesake(name)
    function = getattr(LA, name)
    if name in ("eig", "eigvals"):
        return in_lapack_order(function, name == "eig")
    if op.op is getattr(module, attribute) or described_as(op) != op.name:  # or an alias of it
        return function

    def variant(*args, **kwargs):
        with mock.patch.object(module, attribute, function):
            return op.op(*args, **kwargs)

    return variant


def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def cases(ops, dtypes):
    return [pytest.param(op, dtype, id=f"{op_id(op)}-{str(dtype).removeprefix('torch.')}")
            for op in ops for dtype in dtypes if dtype in op.supported_dtypes("cpu")]


def samples(op, dtype, requires_grad):
    torch.manual_seed(0)  # the samples are drawn from torch's generator
    return list(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))


class Where:
    """A failure's OpInfo, dtype, what it compared and sample, formatted only when printed
    (a sample's summary costs more than most comparisons)."""

    def __init__(self, op, dtype, compared, sample):
        self.op, self.dtype, self.compared, self.sample = op, dtype, compared, sample

    def __repr__(self):
        return f"{op_id(self.op)} {self.dtype} {self.compared}, sample {self.sample.summary()}"


def outputs(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def outcome(function, sample):
    """("returned", the outputs as a tuple), or ("raised", error type, message)."""
    try:
        result = function(sample.input, *sample.args, **sample.kwargs)
    except Exception as error:  # the type and message are what is compared
        return "raised", type(error), str(error)
    return "returned", outputs(result)


# --- how far two correct results of a sample may be apart ---


def singular_values(A: torch.Tensor) -> np.ndarray:
    """Singular values of each matrix of A as stored, in float64 (batch x k)."""
    a = exact(A).reshape(A.shape[:-2].numel(), *A.shape[-2:])
    if a.size == 0:
        return np.zeros((a.shape[0], 0))
    return np.linalg.svd(a, compute_uv=False)


def kappa(A: torch.Tensor) -> float:
    """The largest 2-norm condition number over the batch (1 for empty matrices; inf for a
    singular one)."""
    s = singular_values(A)
    if s.size == 0:
        return 1.0
    with np.errstate(divide="ignore"):
        return float(np.max(s[:, 0] / s[:, -1]))


def vector_condition(A: torch.Tensor) -> float:
    """sigma_max over the smallest gap between singular values (and sigma_min, the gap
    to the complementary subspace), the largest over the batch: how much singular vectors
    and the SVD's derivatives magnify an error in A."""
    s = singular_values(A)
    if s.size == 0:
        return 1.0
    gaps = np.concatenate([-np.diff(s, axis=-1), s[:, -1:]], axis=-1)
    with np.errstate(divide="ignore"):
        return float(np.max(s[:, 0] / gaps.min(axis=-1)))


def kept_condition(A: torch.Tensor, atol=None, rtol=None) -> float:
    """sigma_max over the smallest singular value pinv keeps (torch's cut-off
    max(atol, rtol sigma_max), rtol defaulting to max(m, n) eps when neither is given)."""
    s = singular_values(A)
    if s.size == 0:
        return 1.0
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else max(A.shape[-2:]) * eps(A.dtype)
    cut = np.maximum(float(atol or 0.0), float(rtol) * s[:, :1])
    kept = np.where(s > cut, s, np.inf).min(axis=-1)
    return float(np.max(np.where(np.isfinite(kept), s[:, 0] / kept, 1.0)))


def lower_hermitian(A: torch.Tensor) -> torch.Tensor:
    """The Hermitian matrix whose lower triangle A holds: what hermitian=True reads."""
    lower = A.tril(-1)
    return lower + lower.mH + torch.diag_embed(A.diagonal(dim1=-2, dim2=-1).real.to(A.dtype))


def triangle(A: torch.Tensor, upper: bool, unitriangular: bool) -> torch.Tensor:
    """The triangle of A that solve_triangular reads."""
    T = A.triu() if upper else A.tril()
    if unitriangular:
        T = T - torch.diag_embed(T.diagonal(dim1=-2, dim2=-1)) + torch.eye(A.shape[-1], dtype=A.dtype)
    return T


def from_lu(LU: torch.Tensor, pivots: torch.Tensor) -> torch.Tensor:
    """P L U in float64/complex128."""
    P, L, U = torch.lu_unpack(LU.detach().to(torch.complex128 if LU.is_complex() else torch.float64), pivots)
    return P @ L @ U


def unit_lower_times_upper(LU: torch.Tensor) -> torch.Tensor:
    """L U of packed LU factors: P L U's singular values without the permutation P."""
    return LU.tril(-1) @ LU.triu() + LU.triu()


def reflector_growth(A: torch.Tensor, tau: torch.Tensor) -> float:
    """G = prod_j ||I - tau_j v_j v_j^H||_2 = prod_j max(1, |1 - tau_j ||v_j||^2|), the largest
    over the batch: how much applying the reflectors can grow a matrix and its rounding
    errors (1 for a QR factorization's unitary reflectors; the OpInfo's random ones are not)."""
    k = tau.shape[-1]
    if A.numel() == 0 or k == 0:
        return 1.0
    a, t = exact(A)[..., :, :k], exact(tau)
    norms = 1 + (np.abs(np.tril(a, -1)) ** 2).sum(-2)  # ||v_j||^2, v_j[j] = 1
    return float(np.max(np.prod(np.maximum(1.0, np.abs(1 - t * norms)), axis=-1)))


def reflector_condition(A: torch.Tensor, tau: torch.Tensor, C: torch.Tensor | None = None, left: bool = True) -> float:
    """G max|C| / max|Q C| (C = I for householder_product's Q): the rounding errors of
    applying the reflectors, G max|C| eps, relative to the result."""
    if A.numel() == 0 or tau.shape[-1] == 0 or (C is not None and C.numel() == 0):
        return 1.0
    growth = reflector_growth(A, tau)
    double = torch.complex128 if A.is_complex() else torch.float64
    if C is None:
        result, size = torch.linalg.householder_product(A.detach().to(double), tau.detach().to(double)), 1.0
    else:
        result = torch.ormqr(A.detach().to(double), tau.detach().to(double), C.detach().to(double), left)
        size = C.detach().abs().max().item()
    return growth * size / max(result.abs().max().item(), np.finfo(float).tiny)


def lstsq_condition(A: torch.Tensor, B: torch.Tensor) -> float:
    """kappa + kappa^2 ||r|| / (||A|| ||x||), the sensitivity of the least squares
    solution (Golub and Van Loan, 5.3.8), from float64 solutions; the largest over the batch."""
    a, b = exact(A), exact(B)
    s = singular_values(A)
    if s.size == 0:
        return 1.0
    k = s[:, 0] / s[:, -1]
    x = np.linalg.pinv(a) @ b
    r = np.linalg.norm(b - a @ x, axis=(-2, -1)).reshape(-1)
    size = s[:, 0] * np.linalg.norm(x, axis=(-2, -1)).reshape(-1)
    return float(np.max(k + k**2 * np.where(size > 0, r / np.where(size > 0, size, 1), 0)))


def hermitian_read(s) -> torch.Tensor:
    """The Hermitian matrix of the triangle that eigh and eigvalsh read (UPLO)."""
    A = s.input.detach()
    return lower_hermitian(A.mH if s.kwargs.get("UPLO", "L").upper() == "U" else A)


def eigenvector_condition(A: torch.Tensor) -> float:
    """max |lambda| over the smallest gap between eigenvalues, the largest over the batch:
    how much eigenvectors and eigh's derivatives magnify an error in A."""
    a = exact(A).reshape(A.shape[:-2].numel(), *A.shape[-2:])
    if a.size == 0 or a.shape[-1] < 2:
        return 1.0
    w = np.linalg.eigvalsh(a)
    with np.errstate(divide="ignore"):
        return float(np.max(np.abs(w).max(-1) / np.diff(w, axis=-1).min(-1)))


def general_eigen_condition(A: torch.Tensor, vectors: bool) -> float:
    """The eigenvalues' condition numbers 1 / |y^H x| (unit left and right eigenvectors),
    the largest over the batch; with ``vectors``, times ||A||_2 over the smallest gap
    between eigenvalues, which magnifies an error in an eigenvector (and eig's
    derivatives)."""
    a = exact(A).astype(np.complex128).reshape(A.shape[:-2].numel(), *A.shape[-2:])
    if a.size == 0:
        return 1.0
    worst = 1.0
    for matrix in a:
        w, left, right = scipy.linalg.eig(matrix, left=True, right=True)
        with np.errstate(divide="ignore"):
            condition = float(np.max(1 / np.abs(np.sum(left.conj() * right, axis=0))))
            if vectors and len(w) > 1:
                gaps = np.abs(w[:, None] - w[None, :]) + np.diag(np.full(len(w), np.inf))
                condition *= np.linalg.norm(matrix, 2) / gaps.min()
        worst = max(worst, condition)
    return worst


def shape_size(A: torch.Tensor) -> int:
    return max(*A.shape[-2:], 1)


def matrices_in(A: torch.Tensor, dim) -> torch.Tensor:
    """A's matrices over the two dims ``dim`` (a matrix norm's), batched over the rest."""
    return A.detach().movedim(tuple(dim), (-2, -1))


def norm_arguments(s, names, defaults) -> list:
    """The sample's arguments ``names`` (positional after the input, or keywords)."""
    return [s.args[i] if i < len(s.args) else s.kwargs.get(name, default) for i, (name, default) in enumerate(zip(names, defaults))]


def matrix_norm_conditioning(A: torch.Tensor, ord, dim) -> tuple:
    """The singular-value norms are mpslinalg's: sigma_max and the nuclear norm move by
    at most ||dA||_2 (Weyl), sigma_min by as much, relative to it kappa times more.
    The other orders are torch's own code: the same result exactly."""
    if ord not in (2, -2, "nuc") or A.numel() == 0:
        return forwarded(None)
    X = matrices_in(A, dim)
    if ord != -2 or not X.any():  # a zero matrix's singular values are exactly 0 (its kappa 0 / 0)
        return shape_size(X), 1.0
    return shape_size(X), kappa(X)


def matrix_norm_derivative_conditioning(A: torch.Tensor, ord, dim) -> tuple:
    """Where the singular-value norms' derivatives come from mpslinalg: the gaps of the
    singular values (the nuclear norm's is U V^H, the polar factor, moved by kappa)."""
    if ord not in (2, -2, "nuc") or A.numel() == 0:
        return forwarded(None)
    X = matrices_in(A, dim)
    if not X.any():  # zero matrices: U V^H of the exact SVD, both
        return shape_size(X), 1.0
    return shape_size(X), kappa(X) if ord == "nuc" else vector_condition(X)


def norm_conditioning(s, conditioning=matrix_norm_conditioning) -> tuple:
    """linalg.norm's: a matrix norm where dim is a 2-tuple, or None with ord given and a
    2-D input (``conditioning``'s); else a vector norm, torch's own code."""
    ord, dim = norm_arguments(s, ("ord", "dim"), (None, None))
    matrix = ord is not None and (s.input.dim() == 2 if dim is None else not isinstance(dim, int) and len(dim) == 2)
    return conditioning(s.input, ord, (0, 1) if dim is None else dim) if matrix else forwarded(None)


def matrix_power_conditioning(A: torch.Tensor, n: int) -> tuple:
    """A^-k from mpslinalg's inverse: |k| products of a result within kappa eps of A^-1.
    Non-negative powers are torch's own code."""
    return (shape_size(A) * -n, kappa(A)) if n < 0 else forwarded(None)


def tensorsolve_matrix(s) -> torch.Tensor:
    """The square matrix tensorsolve solves with (after moving ``dims`` to the end)."""
    A, B = s.input.detach(), s.args[0]
    dims = s.kwargs.get("dims")
    if dims is not None:
        A = A.movedim(dims, tuple(range(A.dim() - len(dims), A.dim())))
    return A.reshape(B.numel(), -1)


def tensorinv_matrix(s) -> torch.Tensor:
    ind = s.kwargs.get("ind", 2)
    return s.input.detach().reshape(math.prod(s.input.shape[:ind]), -1)


# mpslinalg's functions that are torch's own (elementwise work, matrix products, the LDL
# factorization that has no kernel yet): their results and derivatives are torch's exactly.
FORWARDED = ("linalg.vector_norm", "linalg.cross", "linalg.multi_dot", "linalg.vecdot", "linalg.vander",
             "linalg.diagonal", "matmul", "linalg.ldl_factor", "linalg.ldl_factor_ex", "linalg.ldl_solve")


def forwarded(s) -> tuple:
    return 1, 0.0


# OpInfo name (with variant) -> (size, condition) of a sample: two backward-stable results,
# and the gradients computed from them, lie within THRESHOLD * size * condition * eps of
# each other relative to their magnitude.
CONDITIONING = {
    "linalg.det": lambda s: (shape_size(s.input), kappa(s.input)),
    "logdet": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.slogdet": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.inv": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.inv_ex": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.solve": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.solve_ex": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.solve_triangular": lambda s: (shape_size(s.input), kappa(triangle(
        s.input.detach(), s.kwargs["upper"], s.kwargs.get("unitriangular", False)))),
    "linalg.lu_factor": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.lu_factor_ex": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.lu": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.lu_solve": lambda s: (shape_size(s.input), kappa(unit_lower_times_upper(s.input.detach()))),
    "lu_unpack": lambda s: (1, 0.0),  # copies of LU's triangles and a permutation: exactly torch's
    "linalg.qr": lambda s: (shape_size(s.input), kappa(s.input)),
    "geqrf": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.householder_product": lambda s: (
        shape_size(s.input) * max(s.args[0].shape[-1], 1), reflector_condition(s.input, s.args[0])),
    "ormqr": lambda s: (shape_size(s.input) * max(s.args[0].shape[-1], 1),
                        reflector_condition(s.input, s.args[0], s.args[1], s.kwargs.get("left", True))),
    "linalg.svd": lambda s: (shape_size(s.input), vector_condition(s.input)),
    "linalg.svdvals": lambda s: (shape_size(s.input), vector_condition(s.input)),
    "linalg.pinv": lambda s: (shape_size(s.input), kept_condition(s.input, s.kwargs.get("atol"), s.kwargs.get("rtol"))),
    "linalg.pinv.hermitian": lambda s: (shape_size(s.input), kept_condition(lower_hermitian(s.input.detach()))),
    "linalg.pinv.singular": lambda s: (
        max(*s.input.shape[-2:], *s.args[0].shape[-2:], 1), kept_condition(s.input.detach() @ s.args[0].detach().mT)),
    "linalg.matrix_rank": lambda s: (1, 1.0),  # integers: compared exactly
    "linalg.matrix_rank.hermitian": lambda s: (1, 1.0),
    "linalg.lstsq": lambda s: (shape_size(s.input), lstsq_condition(s.input, s.args[0])),
    "linalg.lstsq.grad_oriented": lambda s: (shape_size(s.input), lstsq_condition(s.input, s.args[0])),
    "linalg.eigh": lambda s: (shape_size(s.input), eigenvector_condition(hermitian_read(s))),
    "linalg.eigvalsh": lambda s: (shape_size(s.input), eigenvector_condition(hermitian_read(s))),
    # exp's relative condition in the 1-norm is at most ||A||_1 (Higham 2008, Thm 10.12's
    # bound kappa_exp <= e^{||A||} ||A|| / ||e^A|| is looser; ||A|| is what the error of a
    # backward-stable scaling and squaring reaches in practice, as check.matrix_exp_ratio).
    "matrix_exp": lambda s: (shape_size(s.input), max(1.0, float(np.max(norm1(exact(s.input.detach())), initial=0)))),
    "linalg.eig": lambda s: (shape_size(s.input), general_eigen_condition(s.input, vectors=True)),
    "linalg.eigvals": lambda s: (shape_size(s.input), general_eigen_condition(s.input, vectors=False)),
    "linalg.cholesky": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.cholesky_ex": lambda s: (shape_size(s.input), kappa(s.input)),
    "cholesky_solve": lambda s: (shape_size(s.args[0]), kappa(s.args[0]) ** 2),
    "cholesky_inverse": lambda s: (shape_size(s.input), kappa(s.input) ** 2),
    # composite.py. The 2-norm condition number: the relative error of sigma_min.
    "linalg.cond": lambda s: (shape_size(s.input), kappa(s.input)),
    "linalg.matrix_norm": lambda s: matrix_norm_conditioning(s.input, *norm_arguments(s, ("ord", "dim"), ("fro", (-2, -1)))),
    "linalg.norm": lambda s: norm_conditioning(s),
    "linalg.norm.subgradients_at_zero": lambda s: norm_conditioning(s),
    "linalg.matrix_power": lambda s: matrix_power_conditioning(s.input, s.args[0]),
    "linalg.tensorsolve": lambda s: (shape_size(tensorsolve_matrix(s)), kappa(tensorsolve_matrix(s))),
    "linalg.tensorinv": lambda s: (shape_size(tensorinv_matrix(s)), kappa(tensorinv_matrix(s))),
    # ||dX|| <= ||dA|| / (2 sqrt(lambda_min)): relative to ||X||, eps sqrt(kappa) / 2.
    "linalg.matrix_sqrth": lambda s: (shape_size(s.input), kappa(s.input) ** 0.5),
    "linalg.polar": lambda s: (shape_size(s.input), kappa(s.input)),
    **{name: forwarded for name in FORWARDED},
}


# Where derivatives need their own: a derivative of the product of reflectors is a sum of
# k products of up to G's size, which can cancel where the product itself does not.
DERIVATIVE_CONDITIONING = {
    "linalg.householder_product": lambda s: (
        shape_size(s.input) * max(s.args[0].shape[-1], 1), reflector_growth(s.input, s.args[0])),
    # The derivative of sigma_max or sigma_min is u v^H, its singular vectors': moved by
    # sigma_max over their gap as the SVD's. cond's is sigma_1 / sigma_n's: those vectors'
    # over sigma_n, a kappa more.
    "linalg.matrix_norm": lambda s: matrix_norm_derivative_conditioning(s.input, *norm_arguments(s, ("ord", "dim"), ("fro", (-2, -1)))),
    "linalg.norm": lambda s: norm_conditioning(s, matrix_norm_derivative_conditioning),
    "linalg.norm.subgradients_at_zero": lambda s: norm_conditioning(s, matrix_norm_derivative_conditioning),
    "linalg.cond": lambda s: (shape_size(s.input), kappa(s.input) * vector_condition(s.input)),
}


def bound(op, sample, dtype, derivative=False) -> float:
    """THRESHOLD * size * condition * eps for ``sample`` (its derivatives'): inf where the
    condition is."""
    conditioning = (derivative and DERIVATIVE_CONDITIONING.get(op_id(op))) or CONDITIONING[op_id(op)]
    size, condition = conditioning(sample)
    return THRESHOLD * size * condition * eps(dtype)


def assert_agree(got: tuple, expected: tuple, tolerance: float, what) -> None:
    """Same number, shapes and dtypes of outputs; integers equal; floating ones within
    ``tolerance`` times the largest magnitude of torch's (NaN where torch's is)."""
    assert len(got) == len(expected), what
    for i, (x, y) in enumerate(zip(got, expected)):
        assert x.shape == y.shape and x.dtype == y.dtype, (what, i, x.shape, y.shape, x.dtype, y.dtype)
        x, y = x.detach(), y.detach()
        if not (y.is_floating_point() or y.is_complex()):
            assert torch.equal(x, y), (what, i, x, y)
        elif y.numel():
            scale = y.abs().nan_to_num(0).max().item()
            torch.testing.assert_close(x, y, rtol=0, atol=tolerance * max(scale, torch.finfo(y.dtype).tiny),
                                       equal_nan=True, msg=lambda m: f"{what}, output {i}: {m}")


# --- LAPACK's ratios of our results (mpslinalg.testing), per OpInfo ---


def rhs_as_matrix(A: torch.Tensor, B: torch.Tensor, X: torch.Tensor):
    """B and X as matrices of right-hand sides where B is a batch of vectors (torch's rule)."""
    if B.dim() == 1 or (B.dim() == A.dim() - 1 and B.shape == A.shape[:-1]):
        return B.unsqueeze(-1), X.unsqueeze(-1)
    return B, X


def solve_ratios(s, result):
    A, B = s.input.detach(), s.args[0].detach()
    B, X = rhs_as_matrix(A, B, result[0])
    return [general_solve_ratio(A, X, B, left=s.kwargs.get("left", True))]


def triangular_ratios(s, result):
    kwargs = s.kwargs
    return [solve_ratio(s.input.detach(), result[0], s.args[0].detach(), kwargs["upper"], kwargs.get("left", True),
                        kwargs.get("unitriangular", False))]


def lu_unpacked_ratios(s, result):
    P, L, U = (r.detach() for r in result)
    m, n = s.input.shape[-2:]
    k = min(m, n)
    packed = torch.nn.functional.pad(L.tril(-1), (0, n - k)) + torch.nn.functional.pad(U, (0, 0, 0, m - k))
    pivots = torch.linalg.lu_factor_ex(s.input.detach())[1]  # P is compared with torch's exactly
    return [lu_ratio(s.input.detach(), packed, pivots)]


def geqrf_ratios(s, result):
    a, tau = (r.detach() for r in result)
    k = tau.shape[-1]
    Q = torch.linalg.householder_product(a.to(torch.complex128 if a.is_complex() else torch.float64)[..., :k], tau.to(
        torch.complex128 if a.is_complex() else torch.float64))
    return list(qr_ratios(s.input.detach(), Q, a[..., :k, :].triu()))


def svd_outputs_ratios(s, result):
    U, S, Vh = (r.detach() for r in result)
    return list(svd_ratios(s.input.detach(), U, S, Vh))


RATIOS = {
    "linalg.det": lambda s, r: [det_ratio(s.input.detach(), r[0].detach())],
    "linalg.inv": lambda s, r: [inv_ratio(s.input.detach(), r[0].detach())],
    "linalg.inv_ex": lambda s, r: [inv_ratio(s.input.detach(), r[0].detach())],
    "linalg.solve": solve_ratios,
    "linalg.solve_ex": solve_ratios,
    "linalg.solve_triangular": triangular_ratios,
    "linalg.lu_factor": lambda s, r: [lu_ratio(s.input.detach(), r[0].detach(), r[1])],
    "linalg.lu_factor_ex": lambda s, r: [lu_ratio(s.input.detach(), r[0].detach(), r[1])],
    "linalg.lu": lu_unpacked_ratios,
    "linalg.lu_solve": lambda s, r: [general_solve_ratio(  # P L U rounded to the sample's dtype, whose eps counts
        from_lu(s.input, s.args[0]).to(s.input.dtype), r[0].detach(), s.args[1].detach(), s.kwargs.get("left", True),
        s.kwargs.get("adjoint", False))],
    "linalg.qr": lambda s, r: list(qr_ratios(s.input.detach(), r[0].detach(), r[1].detach())),
    "geqrf": geqrf_ratios,
    "linalg.svd": svd_outputs_ratios,
    "linalg.cholesky": lambda s, r: [cholesky_ratio(s.input.detach(), r[0].detach(), s.kwargs.get("upper", False))],
    "linalg.cholesky_ex": lambda s, r: [cholesky_ratio(s.input.detach(), r[0].detach(), s.kwargs.get("upper", False))],
    "linalg.eigh": lambda s, r: list(eigh_ratios(s.input.detach(), r[0].detach(), r[1].detach(), s.kwargs.get("UPLO", "L").upper() == "U")),
    "linalg.eigvalsh": lambda s, r: list(eigh_ratios(s.input.detach(), r[0].detach(), None, s.kwargs.get("UPLO", "L").upper() == "U")),
    "linalg.eig": lambda s, r: list(eig_ratios(s.input.detach(), r[0].detach(), r[1].detach())),
    "linalg.eigvals": lambda s, r: list(eig_ratios(s.input.detach(), r[0].detach(), None)),
}
# Outputs that are not unique, compared through the functions of them that the OpInfo
# differentiates (and through LAPACK's ratios) rather than directly: the singular vectors
# (a phase per pair; U's columns past min(m, n) span a fixed space only) and the
# eigenvectors (a phase each). OpInfo id -> the output that is unique, compared directly.
NOT_UNIQUE = {"linalg.svd": 1, "linalg.eigh": 0, "linalg.eig": 0}


def check_forward(op, sample, dtype, got, expected):
    what = Where(op, dtype, "results", sample)
    if expected[0] == "raised" or got[0] == "raised":
        assert got == expected, what
        return
    got, expected = got[1], expected[1]
    tolerance = bound(op, sample, dtype)
    if op_id(op) in NOT_UNIQUE:
        assert_agree(outputs(sample.output_process_fn_grad(got)), outputs(sample.output_process_fn_grad(expected)),
                     tolerance, what)
        unique = NOT_UNIQUE[op_id(op)]
        assert_agree(got[unique:unique + 1], expected[unique:unique + 1], THRESHOLD * CONDITIONING[op_id(op)](sample)[0] * eps(dtype), what)
        assert all(x.shape == y.shape and x.dtype == y.dtype for x, y in zip(got, expected)), what
    elif op.name == "linalg.lstsq":
        check_lstsq(sample, dtype, got, expected, tolerance, what)
    else:
        assert_agree(got, expected, tolerance, what)
    ratios = RATIOS.get(op.name, lambda s, r: [])(sample, got)
    assert max(ratios, default=0) < THRESHOLD, (what, ratios)


def check_lstsq(sample, dtype, got, expected, tolerance, what):
    """The solution within the least squares bound; the residuals ||b - A x||^2 (where torch
    fills them) within it times (||A|| ||x|| + ||b||)^2, the scale of a residual's rounding
    errors; the rank equal; the singular values within THRESHOLD size eps sigma_max (Weyl)."""
    assert_agree(got[:1], expected[:1], tolerance, what)
    A, B, X = (exact(t.detach()) for t in (sample.input, sample.args[0], expected[0]))
    norm = lambda a: float(np.linalg.norm(a, axis=(-2, -1)).max(initial=0))
    assert got[1].shape == expected[1].shape and got[1].dtype == expected[1].dtype, what
    if expected[1].numel():
        residual_tolerance = tolerance * (norm(A) * norm(X) + norm(B)) ** 2
        assert (got[1] - expected[1]).abs().max().item() <= residual_tolerance, what
    size = CONDITIONING["linalg.lstsq"](sample)[0]
    assert_agree(got[2:3], expected[2:3], 0, what)
    assert_agree(got[3:], expected[3:], THRESHOLD * size * eps(dtype), what)


@pytest.mark.parametrize("op,dtype", cases(OPS, DTYPES))
def test_samples_match_torch(op, dtype):
    """Each sample: torch's error, or results within the sample's bound of torch's, and
    LAPACK's ratios of ours below THRESHOLD."""
    require("opencl")
    function = ours(op)
    for sample in samples(op, dtype, requires_grad=False):
        expected = outcome(op.op, sample)
        with LA.use_backend("opencl"):
            got = outcome(function, sample)
        check_forward(op, sample, dtype, got, expected)


# --- derivatives: reverse and forward mode ---


def differentiable(op, sample, function):
    """``function`` of the sample's tensors (input first), as torch's gradcheck takes it:
    through the OpInfo's gradcheck_wrapper, then output_process_fn_grad."""
    def call(*tensors):
        given = iter(tensors)
        args = [next(given) if isinstance(a, torch.Tensor) else a for a in (sample.input, *sample.args)]
        return outputs(sample.output_process_fn_grad(op.gradcheck_wrapper(function, *args, **sample.kwargs)))
    return call


def wrapped_sample(op, sample):
    """The sample as the gradcheck wrapper passes it on (pinv's hermitian variant gets
    A + A^H): what the conditioning is measured on."""
    captured = []
    capture = lambda *args, **kwargs: captured.append((args, kwargs))  # noqa: E731
    op.gradcheck_wrapper(capture, sample.input, *sample.args, **sample.kwargs)
    (args, kwargs), = captured
    return type(sample)(args[0], args=tuple(args[1:]), kwargs=kwargs)


def tensor_inputs(sample) -> list:
    return [t for t in (sample.input, *sample.args) if isinstance(t, torch.Tensor)]


def random_like(tensors, generator) -> list:
    """Standard normal tensors like the floating ones of ``tensors`` (None for the others)."""
    return [torch.randn(t.shape, dtype=t.dtype, generator=generator) if t.is_floating_point() or t.is_complex() else None
            for t in tensors]


def gradients(op, sample, function):
    """("returned", which outputs require grad, the gradients of Re <w, those outputs> for
    fixed random w) or ("raised", type, message); None for an input they do not depend on."""
    inputs = [t for t in tensor_inputs(sample) if t.requires_grad]
    try:
        results = differentiable(op, sample, function)(*tensor_inputs(sample))
        requiring = tuple(r.requires_grad for r in results)
        results = [r for r in results if r.requires_grad]
        weights = random_like(results, torch.Generator().manual_seed(1))
        loss = sum((w.conj() * r).real.sum() for w, r in zip(weights, results))
        grads = torch.autograd.grad(loss, inputs, allow_unused=True) if results else (None,) * len(inputs)
    except Exception as error:  # the type and message are what is compared
        return "raised", type(error), str(error)
    return "returned", requiring, tuple(grads)


def tangents(op, sample, function):
    """("returned", the tangents of the outputs along fixed random directions of every
    floating input) or ("raised", type, message); None for an output with no tangent."""
    inputs = tensor_inputs(sample)
    directions = random_like(inputs, torch.Generator().manual_seed(2))
    try:
        with forward_ad.dual_level():
            duals = [t if d is None else forward_ad.make_dual(t.detach(), d) for t, d in zip(inputs, directions)]
            results = differentiable(op, sample, function)(*duals)
            result = tuple(forward_ad.unpack_dual(r).tangent for r in results)
    except Exception as error:  # the type and message are what is compared
        return "raised", type(error), str(error)
    return "returned", result


def with_zeros(values: tuple, like: tuple) -> tuple:
    """None (no dependence) as zeros, as torch treats an undefined gradient or tangent."""
    return tuple(torch.zeros_like(t) if v is None else v for v, t in zip(values, like))


# A difference from torch that these samples find and that is not mpslinalg's to fix is
# listed with what differs and asserted to be exactly that (so that its fix fails here
# and the entry goes), while the rest of the sample is compared as usual.


def cholesky_inverse_by_definition(L, upper=False, *, out=None):
    """(L L^H)^-1 (U^H U for ``upper``) by torch.linalg.inv, whose JVP is right."""
    return torch.linalg.inv(L.mH @ L if upper else L @ L.mH)


# OpInfo id -> (a function with the same values whose tangents torch gets right, what is
# wrong with torch's own): ours are compared with that function's, and torch's asserted to
# differ from them (so that torch's fix fails here and the entry goes).
TORCH_TANGENT_WRONG = {
    "cholesky_inverse": (cholesky_inverse_by_definition,
                         "pytorch/pytorch#196682: torch's JVP is -X dL X L^H + its adjoint for -X dL L^H X + its adjoint"),
}


def check_derivatives(op, sample, dtype, got, expected, like, what):
    if expected[0] == "raised" or got[0] == "raised":
        assert got == expected, what
        return
    requiring = expected[1:-1]
    assert got[1:-1] == requiring, what  # the same outputs differentiable
    tolerance = bound(op, wrapped_sample(op, sample), dtype, derivative=True)
    assert_agree(with_zeros(got[-1], like), with_zeros(expected[-1], like), tolerance, what)


GRADIENT_OPS = [op for op in OPS if op.supports_autograd]
FORWARD_OPS = [op for op in OPS if op.supports_forward_ad]


@pytest.mark.parametrize("op,dtype", cases(GRADIENT_OPS, DERIVATIVE_DTYPES))
def test_gradients_match_torch(op, dtype):
    """Reverse-mode gradients of each sample's outputs (as torch's gradcheck processes
    them) within the sample's bound of torch's; torch's error where it raises."""
    require("opencl")
    function = ours(op)
    for sample in samples(op, dtype, requires_grad=True):
        what = Where(op, dtype, "gradients", sample)
        inputs = [t for t in tensor_inputs(sample) if t.requires_grad]
        expected = gradients(op, sample, op.op)
        with LA.use_backend("opencl"):
            got = gradients(op, sample, function)
        check_derivatives(op, sample, dtype, got, expected, inputs, what)


@pytest.mark.parametrize("op,dtype", cases(FORWARD_OPS, DERIVATIVE_DTYPES))
def test_forward_mode_matches_torch(op, dtype):
    """Forward-mode tangents (dual tensors) of each sample's outputs within the sample's
    bound of torch's; torch's error where it raises."""
    require("opencl")
    function = ours(op)
    for sample in samples(op, dtype, requires_grad=False):
        what = Where(op, dtype, "tangents", sample)
        expected = tangents(op, sample, op.op)
        if op_id(op) in TORCH_TANGENT_WRONG:
            reference, difference = TORCH_TANGENT_WRONG[op_id(op)]
            torchs, expected = expected, tangents(op, sample, reference)
            if torchs[0] == "returned" and any(t.numel() for t in torchs[1]):
                assert not all(torch.allclose(x, y) for x, y in zip(torchs[1], expected[1])), (what, difference)
        with LA.use_backend("opencl"):
            got = tangents(op, sample, function)
        result = op.op(sample.input, *sample.args, **sample.kwargs)
        # output_process_fn_grad takes the result as the function returns it (eigvalsh's
        # tells eigh's tuple from its tensor).
        check_derivatives(op, sample, dtype, got, expected, outputs(sample.output_process_fn_grad(result)), what)


@pytest.mark.parametrize("op", [op for op in OPS if op.error_inputs_func is not None], ids=op_id)
def test_error_inputs_raise_torchs_error(op):
    """The OpInfo's error_inputs: its error type, with a message matching its regex."""
    require("opencl")
    function = ours(op)
    for error in op.error_inputs("cpu"):
        sample = error.sample_input
        with LA.use_backend("opencl"), pytest.raises(error.error_type, match=error.error_regex):
            function(sample.input, *sample.args, **sample.kwargs)


# --- regressions found by these samples ---


def test_householder_product_under_dual_tensors():
    """Forward mode with dual tensors, where the JVP once called torch.func.jvp inside
    forward AD's own level ('Nested forward mode AD is not supported'): torch's tangents,
    with and without a tangent for tau, and with an input that also requires grad."""
    require("opencl")
    generator = torch.Generator().manual_seed(3)
    for dtype in (torch.float64, torch.complex128):
        A, tau = torch.geqrf(torch.randn(2, 6, 4, dtype=dtype, generator=generator))
        tau = tau[..., :3]
        dA, dtau = (torch.randn(x.shape, dtype=dtype, generator=generator) for x in (A, tau))
        for directions in ((dA, dtau), (dA, None), (None, dtau)):
            results = []
            for function in (torch.linalg.householder_product, LA.householder_product):
                with LA.use_backend("opencl"), forward_ad.dual_level():
                    duals = [x if d is None else forward_ad.make_dual(x.clone().requires_grad_(), d)
                             for x, d in zip((A, tau), directions)]
                    results.append(forward_ad.unpack_dual(function(*duals)).tangent)
            torch.testing.assert_close(results[1], results[0])


def test_householder_product_without_reflectors_is_in_the_graph():
    """k = 0 (Q is I's first n columns): as torch's, the output has a grad_fn and its
    backward gives A and tau no gradient (None), where ours once raised 'element 0 of tensors
    does not require grad'; torch.func's grad, jvp and jacfwd give zeros."""
    require("opencl")
    A, tau = torch.randn(5, 4, dtype=torch.float64), torch.empty(0, dtype=torch.float64)
    for function in (torch.linalg.householder_product, LA.householder_product):
        with LA.use_backend("opencl"):
            A_, tau_ = A.clone().requires_grad_(), tau.clone().requires_grad_()
            Q = function(A_, tau_)
            assert Q.grad_fn is not None
            torch.testing.assert_close(Q, torch.eye(5, 4, dtype=torch.float64))
            Q.sum().backward()
            assert A_.grad is None and tau_.grad is None
            assert torch.autograd.grad(function(A_, tau_).sum(), (A_, tau_), allow_unused=True) == (None, None)
            grad = torch.func.grad(lambda A: function(A, tau).sum())(A)
            tangent = torch.func.jvp(function, (A, tau), (torch.ones_like(A), tau))[1]
            jacobian = torch.func.jacfwd(lambda A: function(A, tau))(A)
            assert not grad.any() and not tangent.any() and not jacobian.any()


# torch 2.7's CPU ormqr (CI's oldest) checks tau's length against the other shapes one
# at a time, in other words; the newer torch's checks are mpslinalg's.
NEWER_ORMQR_CHECKS = re.compile(r"^torch\.ormqr: (tau\.shape\[-1\] must be equal to min|other\.shape\[-[12]\] must be equal to input)")


@pytest.mark.parametrize("left", [True, False])
def test_ormqr_tau_of_another_length_gets_torchs_error(left):
    """tau.shape[-1] must be min(rows of C if left else its columns, A's columns): the
    installed torch's CPU error (older torch words it "must be less than or equal to"),
    which its meta function (that ours once called for its checks) words otherwise or
    lets pass; where older torch's CPU kernel lets a tau of another length pass,
    mpslinalg still refuses it, with the newer torch's error. The other shape and dtype
    checks in the CPU kernel's order."""
    require("opencl")
    side = (5, 2) if left else (2, 5)
    shapes = [((5, 3), (k,), side) for k in (0, 2, 4, 5)] + [
        ((5, 0), (5,), (5, 5)), ((5, 3), (), side), ((5, 3), (3,), (4, 4)), ((5, 3), (2, 3), side),
        ((2, 5, 3), (3, 3), (2, *side)), ((2, 5, 3), (2, 3), side), ((2, 5, 3), (2, 3), (3, *side)),
    ]
    single = (torch.float32,) * 3
    mixed = [(torch.float32, torch.float64, torch.float32), (torch.float32, torch.float32, torch.complex64)]
    for (a, t, c), dtypes in [(shape, single) for shape in shapes] + [(((5, 3), (3,), side), d) for d in mixed]:
        args = [torch.ones(shape, dtype=dtype) for shape, dtype in zip((a, t, c), dtypes)]
        with LA.use_backend("opencl"), pytest.raises(Exception) as got:
            LA.ormqr(*args, left)
        try:
            torch.ormqr(*args, left)
        except Exception as expected:
            assert (got.type, str(got.value)) == (type(expected), str(expected)), (a, t, c, dtypes)
        else:  # older torch may let a tau of another length through
            assert NEWER_ORMQR_CHECKS.search(str(got.value)), (a, t, c, dtypes)
