"""The rest of torch.linalg: functions built on the decompositions, and the ones
that need none.

Built on mpslinalg's own functions, so that they run on its kernels where a kernel
runtime serves the tensors (and on torch.linalg where none does, as every family):

- ``cond``: the 2-norm and nuclear-norm condition numbers from the singular values
  (``svdvals``); the
  others as torch forms them, ||A|| ||A^-1||, with ``inv_ex`` (inf for a singular
  matrix, no error).
- ``matrix_norm`` and ``norm``: ord 2, -2 and 'nuc' from the singular values, as
  cond's; the other orders are sums and maxima of entries, torch's.
- ``matrix_power``: negative powers of ``inv``'s inverse (positive powers are
  matrix products, torch's).
- ``tensorsolve`` and ``tensorinv``: ``solve`` and ``inv`` on the tensor reshaped
  to a matrix, as torch reshapes it.
- ``matrix_sqrth``: V diag(sqrt(w)) V^H from ``eigh``; ``polar``: U = W Vh and
  H = V diag(S) Vh from ``svd`` (from ``svd_family.POLAR_FROM`` columns U by
  QDWH and H = U^H A, ``qdwh``). Their gradients are the polar decomposition's and
  the square root's own (Sylvester equations solved in the eigenbasis the forward
  pass found), defined where eigenvalues or singular values repeat, where those of
  eigh and svd are not.

The rest are torch's (elementwise work and matrix products; the LDL factorization
has no kernel yet): ``vector_norm``, ``cross``, ``multi_dot``, ``vecdot``,
``vander``, ``diagonal``, ``matmul``, ``ldl_factor``, ``ldl_factor_ex``,
``ldl_solve``.

Argument errors are torch's own: torch's function runs on meta copies of the
tensors (no data, no work) before mpslinalg's, and raises what torch raises, for
``out=`` too. (Where a meta function of torch's words an error otherwise than its
CPU and CUDA kernels, the call is left to torch's function: tensorsolve's two dtypes,
matrix_power's products into ``out``.)
"""

from __future__ import annotations

import collections
import math

import torch
from torch.utils._pytree import tree_map_only

from . import _checks, _dispatch, _sharding, qdwh, svd_family
from .eigh_family import eigh
from .inverse import inv, inv_ex
from .lu_family import solve
from .svd_family import svd, svdvals

TORCH = _dispatch.TORCH
# The functions that are torch's own (no kernel runs in them).
FORWARDED_TO_TORCH = ("vector_norm", "cross", "multi_dot", "vecdot", "vander", "diagonal", "matmul",
                      "ldl_factor", "ldl_factor_ex", "ldl_solve")
# Newer than torch 2.7, mpslinalg's oldest torch: None where the installed torch lacks them.
TORCH_MATRIX_SQRTH = getattr(TORCH, "matrix_sqrth", None)
TORCH_POLAR = getattr(TORCH, "polar", None)
# torch's result type of linalg.polar; a torch without the function (before 2.14) has none: a
# named tuple of the same fields.
_POLAR_RESULT = getattr(torch.return_types, "linalg_polar", None)
_PolarResult = collections.namedtuple("linalg_polar", ["U", "H"])
SVD_ORDERS = (2, -2, "nuc")  # the matrix norms that are functions of the singular values


def _routed(*tensors: torch.Tensor, out=None) -> bool:
    """Whether a call runs on mpslinalg's functions: the tensors have kernels, and any
    ``out`` lies on their device (else torch's function, which raises its error for it)."""
    outs = [] if out is None else [out] if isinstance(out, torch.Tensor) else list(out)
    return _dispatch.has_kernels(*tensors) and all(o.device == tensors[0].device for o in outs)


def _torch_checks(function, *args, out=None, **kwargs):
    """torch's own ``function`` on meta copies of the tensors (and of ``out``): the
    argument errors of its composite code (the same code on every device), out='s
    dtype errors and resize warning, with no data and no work. Returns its (meta)
    result."""
    meta = lambda x: tree_map_only(torch.Tensor, lambda t: t.to("meta"), x)  # noqa: E731
    if out is not None:
        kwargs["out"] = tree_map_only(torch.Tensor, lambda t: torch.empty_like(t, device="meta"), out)
    return function(*meta(args), **kwargs)


def _into(out, result: torch.Tensor) -> torch.Tensor:
    """``result`` written into ``out`` (checked by ``_torch_checks``, which warned where
    torch warns about resizing it), or ``result`` if out is None."""
    if out is None:
        return result
    out.resize_(result.shape)
    return out.copy_(result)


# --- Sylvester equations H Z + Z H = Y with Hermitian positive definite H ---


def _solve_sylvester(s: torch.Tensor, V: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Z with H Z + Z H = Y for H = V diag(s) V^H (s > 0, V unitary): in H's eigenbasis
    the equation is elementwise, (s_i + s_j) Z'_ij = Y'_ij. It stays defined where
    eigenvalues repeat, where the derivatives of eigh and svd divide by their gaps."""
    denominator = s.unsqueeze(-1) + s.unsqueeze(-2)
    return V @ ((V.mH @ Y @ V) / denominator) @ V.mH


class _Sylvester(torch.autograd.Function):
    """Z = S_H^-1(Y), S_H(Z) = H Z + Z H, differentiable in H and Y to any order: with
    W = S_H^-1(G), the gradients are G_Y = W and G_H = -(W Z^H + Z^H W) (S_H is
    self-adjoint for Hermitian H), both through this function again. s and V, H's
    eigendecomposition, are values of H that it is given, not inputs to differentiate."""

    generate_vmap_rule = True

    @staticmethod
    def forward(H, Y, s, V):
        return _solve_sylvester(s, V, Y)

    @staticmethod
    def setup_context(ctx, inputs, output):
        H, _, s, V = inputs
        ctx.save_for_backward(H, output, s, V)
        ctx.save_for_forward(H, output, s, V)

    @staticmethod
    @_sharding.mixable  # a DTensor's plain helpers replicated, as the public functions'
    def backward(ctx, G):
        H, Z, s, V = ctx.saved_tensors
        W = _sylvester(H, G, s, V)
        return -(W @ Z.mH + Z.mH @ W), W, None, None


class _SylvesterWithJvp(_Sylvester):
    """_Sylvester with its JVP, dZ = S_H^-1(dY - dH Z - Z dH), for forward mode and
    torch.func (a class apart: Dynamo does not trace a custom jvp)."""

    @staticmethod
    def jvp(ctx, dH, dY, ds, dV):
        _, Z, s, V = ctx.saved_tensors
        rhs = torch.zeros_like(Z) if dY is None else dY
        if dH is not None:
            rhs = rhs - dH @ Z - Z @ dH
        return _solve_sylvester(s, V, rhs)


def _sylvester(H, Y, s, V):
    function = _SylvesterWithJvp if _dispatch.needs_forward_mode(H, Y) else _Sylvester
    return function.apply(H, Y, s, V)


# --- matrix_sqrth ---


class _Sqrth(torch.autograd.Function):
    """X = V diag(sqrt(max(w, 0))) V^H from the eigendecomposition of A's lower
    triangle (eigh's on the kernels, else torch's), as torch.linalg.matrix_sqrth. Its
    gradient is torch's, S_X^-1 of the Hermitian part of G (X dX + dX X = dA), through
    _Sylvester on the saved output X, so that higher derivatives are right too.
    Returns (X, s, V), s and V not differentiable (saved for the backward pass)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A, kernels):
        w, V = (eigh if kernels else TORCH.eigh)(A)
        s = w.clamp_min(0).sqrt()
        return (V * s.unsqueeze(-2).to(V.dtype)) @ V.mH, s, V

    @staticmethod
    def setup_context(ctx, inputs, output):
        X, s, V = output
        ctx.mark_non_differentiable(s, V)
        ctx.save_for_backward(X, s, V)
        ctx.save_for_forward(X, s, V)

    @staticmethod
    @_sharding.mixable  # a DTensor's plain helpers replicated, as the public functions'
    def backward(ctx, G, _s, _V):
        X, s, V = ctx.saved_tensors
        return _sylvester(X, qdwh.hermitian_part(G), s, V), None


class _SqrthWithJvp(_Sqrth):
    """_Sqrth with its JVP, the same solve on the Hermitian part of dA."""

    @staticmethod
    def jvp(ctx, dA, _kernels):
        X, s, V = ctx.saved_tensors
        return _solve_sylvester(s, V, qdwh.hermitian_part(dA)), None, None


def _matrix_sqrth(A: torch.Tensor, kernels: bool) -> torch.Tensor:
    function = _SqrthWithJvp if _dispatch.needs_forward_mode(A) else _Sqrth
    return function.apply(A, kernels)[0]


def matrix_sqrth(input: torch.Tensor) -> torch.Tensor:
    """The principal square root of Hermitian positive-definite matrices, like
    ``torch.linalg.matrix_sqrth``: X = V diag(sqrt(w)) V^H from mpslinalg's ``eigh``
    (its kernels), so that X X = A.

    As torch's, only the lower triangle is read, and negative eigenvalues (of a
    matrix that is not positive semidefinite, or rounding's) count as zero. Torch's
    own function is used where the kernels do not apply; where the installed torch
    has none (before torch.linalg.matrix_sqrth), the same construction on torch's eigh.

    Args:
        input: ``(*, n, n)`` Hermitian positive-definite matrices.

    Returns:
        ``(*, n, n)``. Differentiable (reverse and forward mode, to any order) where
        A is positive definite, also where eigenvalues repeat: the gradient solves
        X G_A + G_A X = (G + G^H) / 2, as torch's.

    Raises:
        RuntimeError: torch's, for fewer than 2 dimensions or non-square matrices.

    Example:
        >>> LA.matrix_sqrth(torch.tensor([[4.0, 0.0], [0.0, 9.0]]))
        tensor([[2., 0.],
                [0., 3.]])
    """
    if not _dispatch.has_kernels(input):
        if TORCH_MATRIX_SQRTH is not None:
            return TORCH_MATRIX_SQRTH(input)
        _checks.square("linalg.matrix_sqrth", input)
        _checks.floating("linalg.matrix_sqrth", input)
        return _matrix_sqrth(input, kernels=False)
    _checks.square("linalg.matrix_sqrth", input)
    return _matrix_sqrth(input, kernels=True)


# --- polar ---


def _polar_by_qdwh(A: torch.Tensor):
    """(U, H, placeholders for S and V) by QDWH (``qdwh.polar_factor``) for finite A of at
    least svd_family.POLAR_FROM columns and full column rank (U^H U = I to 10 n eps; one
    host synchronisation), else None (the SVD's route then: the SVD completes U's
    columns where A's rank falls short). H's eigenbasis is left for the derivatives."""
    *batch, m, n = A.shape
    count = A.shape[:-2].numel()
    if n < svd_family.POLAR_FROM or count == 0:
        return None
    flat = _checks.resolved(A).reshape(count, m, n)
    U = qdwh.polar_factor(flat)
    identity = torch.eye(n, dtype=A.dtype, device=A.device)
    departure = torch.linalg.matrix_norm(U.mH @ U - identity).amax()
    if not float(departure) <= 10 * n * torch.finfo(_checks.real_dtype(A.dtype)).eps:  # NaN: the SVD's route
        return None
    H = qdwh.hermitian_part(U.mH @ flat)
    real = _checks.real_dtype(A.dtype)
    return (U.reshape(A.shape), H.reshape(*batch, n, n), A.new_empty((*batch, 0), dtype=real),
            A.new_empty((*batch, n, 0)))


def _eigenbasis(A, U, H, S, V):
    """The saved tensors with H's eigenbasis (S, V), from eigh where QDWH's forward left
    placeholders."""
    if S.shape[-1] == 0 and H.shape[-1] > 0:
        S, V = eigh(H)
    return A, U, H, S, V


class _Polar(torch.autograd.Function):
    """A = U H from the thin SVD A = W diag(S) Vh (svd's on the kernels, else torch's):
    U = W Vh, H = V diag(S) Vh, so H's eigendecomposition is (S, V); from
    svd_family.POLAR_FROM columns U by QDWH, H = U^H A, and (S, V) by eigh when a
    derivative needs them. Gradients: with
    E = G_H - U^H G_U H^-1, G_A = G_U H^-1 + A S_H^-1(E + E^H) (from H^2 = A^H A and
    dU = (dA - U dH) H^-1), H^-1 itself S_H^-1(2 I): all through _Sylvester on the saved
    A, U and H, so that higher derivatives are right too. Returns (U, H, S, V), S and V
    not differentiable."""

    generate_vmap_rule = True

    @staticmethod
    def forward(A, kernels):
        if kernels and (found := _polar_by_qdwh(A)) is not None:
            return found
        W, S, Vh = (svd if kernels else TORCH.svd)(A, full_matrices=False)
        V = Vh.mH
        return W @ Vh, (V * S.unsqueeze(-2).to(V.dtype)) @ Vh, S, V

    @staticmethod
    def setup_context(ctx, inputs, output):
        U, H, S, V = output
        ctx.mark_non_differentiable(S, V)
        ctx.save_for_backward(inputs[0], U, H, S, V)
        ctx.save_for_forward(inputs[0], U, H, S, V)

    @staticmethod
    @_sharding.mixable  # a DTensor's plain helpers replicated, as the public functions'
    def backward(ctx, gU, gH, _S, _V):
        A, U, H, S, V = _eigenbasis(*ctx.saved_tensors)
        identity = torch.eye(H.shape[-1], dtype=H.dtype, device=H.device).expand_as(H)
        H_inverse = _sylvester(H, 2 * identity, S, V)
        M = gU @ H_inverse
        E = gH - U.mH @ M
        return M + A @ _sylvester(H, E + E.mH, S, V), None


class _PolarWithJvp(_Polar):
    """_Polar with its JVP: dH = S_H^-1(dA^H A + A^H dA), dU = (dA - U dH) H^-1."""

    @staticmethod
    def jvp(ctx, dA, _kernels):
        A, U, H, S, V = _eigenbasis(*ctx.saved_tensors)
        dH = _solve_sylvester(S, V, dA.mH @ A + A.mH @ dA)
        H_inverse = (V / S.unsqueeze(-2).to(V.dtype)) @ V.mH
        return (dA - U @ dH) @ H_inverse, dH, None, None


def _polar(A: torch.Tensor, kernels: bool):
    function = _PolarWithJvp if _dispatch.needs_forward_mode(A) else _Polar
    U, H, _, _ = function.apply(A, kernels)
    return U, H


def _check_polar(A: torch.Tensor) -> None:
    """torch.linalg.polar's errors (written out: torch before 2.14 has no polar)."""
    if A.dim() < 2:
        raise RuntimeError("linalg.polar: The input tensor A must have at least 2 dimensions.")
    if not (A.is_floating_point() or A.is_complex()):
        raise RuntimeError(f"linalg.polar: Expected a floating point or complex tensor as input. Got {_checks.type_name(A.dtype)}")
    m, n = A.shape[-2:]
    if m < n:
        raise RuntimeError(f"linalg.polar: input must have at least as many rows as columns, but got {m} by {n} matrices")


def _polar_result(pair):
    return _POLAR_RESULT(pair) if _POLAR_RESULT is not None else _PolarResult(*pair)


def polar(A: torch.Tensor, *, out=None):
    """The polar decomposition A = U H, like ``torch.linalg.polar``: U with
    orthonormal columns, the closest such matrix to A in the Frobenius norm, and H
    Hermitian positive semidefinite, from mpslinalg's ``svd`` (its kernels):
    U = W Vh, H = V diag(S) Vh.

    Torch's own function is used where the kernels do not apply; where the installed
    torch has none (before torch.linalg.polar), the same construction on torch's svd.

    Args:
        A: ``(*, m, n)`` with m >= n.
        out: optional ``(U, H)`` tensors to write into.

    Returns:
        ``(U, H)``: ``(*, m, n)`` and ``(*, n, n)``. Differentiable (reverse and
        forward mode, to any order) where A has full column rank, also where
        singular values repeat (an orthogonal A), as torch's.

    Raises:
        RuntimeError: torch's, for fewer than 2 dimensions, m < n or an integer A.

    Example:
        >>> A = torch.tensor([[0.0, -2.0], [3.0, 0.0]])  # a rotation times diag(3, 2)
        >>> U, H = LA.polar(A)
        >>> U
        tensor([[ 0., -1.],
                [ 1.,  0.]])
        >>> H
        tensor([[3., 0.],
                [0., 2.]])
    """
    if not _routed(A, out=out):
        if TORCH_POLAR is not None:
            return TORCH_POLAR(A, out=out)
        _check_polar(A)
        _checks.out_without_grad("linalg_polar", out, A)
        return _polar_result(_checks.into_each(out, _polar(A, kernels=False)))
    _check_polar(A)
    _checks.out_without_grad("linalg_polar", out, A)
    return _polar_result(_checks.into_each(out, _polar(A, kernels=True)))


# --- norms and condition numbers ---


def _singular_value_norm(A: torch.Tensor, ord, dim, keepdim: bool, dtype) -> torch.Tensor:
    """torch's matrix norm of order 2, -2 or 'nuc' over ``dim`` (checked), from svdvals:
    the largest, the smallest or the sum of the singular values."""
    first, second = (d % A.dim() for d in dim)
    X = A.movedim((first, second), (-2, -1))  # torch moves the two dims last, in this order
    if dtype is not None:
        X = X.to(dtype)
    S = svdvals(X)
    result = S.sum(-1) if ord == "nuc" else S.amax(-1) if ord > 0 else S.amin(-1)
    if keepdim:
        for d in sorted((first, second)):
            result = result.unsqueeze(d)
    return result


def matrix_norm(input: torch.Tensor, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None, out=None):
    """A matrix norm, like ``torch.linalg.matrix_norm``.

    ord 2, -2 and 'nuc' (the largest, the smallest and the sum of the singular
    values) run mpslinalg's ``svdvals`` (its kernels); 'fro', 1, -1, inf and -inf
    are sums and maxima of entries, torch's.

    Args:
        input: ``(*, m, n)`` or any tensor with the two dims ``dim``.
        ord: 'fro' (default), 'nuc', 2, -2, 1, -1, inf or -inf.
        dim: the two dimensions that hold the matrices.
        keepdim: keep them, with size 1.
        dtype: compute in this dtype (the input is converted first).
        out: optional tensor to write the result into.

    Returns:
        The norms, real, of the batch shape. Differentiable (through svdvals for the
        singular-value orders: where the largest or smallest singular value is simple).

    Raises:
        RuntimeError: torch's, for an unsupported ord, bad dims or dtypes.

    Example:
        >>> A = torch.tensor([[3.0, 0.0], [0.0, -4.0]])
        >>> LA.matrix_norm(A, 2), LA.matrix_norm(A, -2), LA.matrix_norm(A, "nuc")
        (tensor(4.), tensor(3.), tensor(7.))
    """
    if not (ord in SVD_ORDERS and _routed(input, out=out) and input.numel()):
        # Empty matrices too: torch's result for them (zeros, or its error for -2).
        return TORCH.matrix_norm(input, ord, dim, keepdim, dtype=dtype, out=out)
    _torch_checks(TORCH.matrix_norm, input, ord, dim, keepdim, dtype=dtype, out=out)
    return _into(out, _singular_value_norm(input, ord, dim, keepdim, dtype))


def norm(input: torch.Tensor, ord=None, dim=None, keepdim: bool = False, *, out=None, dtype=None):
    """A vector or matrix norm, like ``torch.linalg.norm``: a matrix norm where
    ``dim`` is a 2-tuple, or is None with ``ord`` given and a 2-D input; else a vector
    norm (the 2-norm of the flattened input where both are None).

    The matrix norms of order 2, -2 and 'nuc' run mpslinalg's ``svdvals`` (its
    kernels), as ``matrix_norm``; every other norm is sums and maxima of entries,
    torch's.

    Args:
        input: a tensor.
        ord: as ``vector_norm``'s or ``matrix_norm``'s, or None.
        dim: an int or a tuple of 1 or 2 ints, or None.
        keepdim: keep the reduced dims, with size 1.
        out: optional tensor to write the result into.
        dtype: compute in this dtype (the input is converted first).

    Returns:
        The norms, real. Differentiable.

    Raises:
        RuntimeError: torch's, for an unsupported ord, bad dims or dtypes.

    Example:
        >>> A = torch.tensor([[3.0, 0.0], [0.0, -4.0]])
        >>> LA.norm(A), LA.norm(A, 2), LA.norm(A, "nuc")
        (tensor(5.), tensor(4.), tensor(7.))
    """
    matrix = ord is not None and (input.dim() == 2 if dim is None else not isinstance(dim, int) and len(dim) == 2)
    if not (matrix and ord in SVD_ORDERS and _routed(input, out=out) and input.numel()):
        return TORCH.norm(input, ord, dim, keepdim, out=out, dtype=dtype)
    _torch_checks(TORCH.norm, input, ord, dim, keepdim, dtype=dtype, out=out)
    return _into(out, _singular_value_norm(input, ord, (0, 1) if dim is None else dim, keepdim, dtype))


def cond(input: torch.Tensor, p=None, *, out=None) -> torch.Tensor:
    """The condition number ||A||_p ||A^-1||_p, like ``torch.linalg.cond``.

    p = None (2), 2 and -2 are the ratio of the extreme singular values and 'nuc'
    sum(S) sum(1 / S), from mpslinalg's ``svdvals`` (its kernels), for any m x n
    where torch allows it; 'fro', 1, -1, inf and -inf multiply the norms of A and of
    its inverse by mpslinalg's ``inv_ex`` (its kernels), as torch: a singular matrix
    gives inf, not an error.

    Args:
        input: ``(*, m, n)``; square for every p but None, 2 and -2.
        p: None, 2, -2, 'fro', 'nuc', 1, -1, inf or -inf.
        out: optional tensor to write the result into.

    Returns:
        ``(*)``, real (0 for empty matrices, as torch). Differentiable.

    Raises:
        RuntimeError: torch's, for fewer than 2 dimensions or a non-square matrix
            where p needs a square one.
        ValueError: torch's, for an unknown p.

    Example:
        >>> A = torch.tensor([[4.0, 0.0], [0.0, 0.5]])
        >>> LA.cond(A), LA.cond(A, "fro")
        (tensor(8.), tensor(8.1250))
        >>> LA.cond(torch.tensor([[1.0, 2.0], [2.0, 4.0]]), 1)  # singular
        tensor(inf)
    """
    if not (_routed(input, out=out) and input.numel()):
        return TORCH.cond(input, p, out=out)  # empty: torch's zeros
    _torch_checks(TORCH.cond, input, p, out=out)
    if p is None or p in (2, -2, "nuc"):
        S = svdvals(input)
        if p == "nuc":
            result = S.sum(-1) * S.reciprocal().sum(-1)
        else:  # singular values descend
            result = S[..., -1] / S[..., 0] if p == -2 else S[..., 0] / S[..., -1]
    else:
        inverse, info = inv_ex(input)
        inverse = inverse.masked_fill((info > 0).unsqueeze(-1).unsqueeze(-1), math.inf)
        result = TORCH.matrix_norm(input, p) * TORCH.matrix_norm(inverse, p)
        result = result.nan_to_num(math.inf, math.inf, -math.inf)  # 0 * inf: torch's inf
    return _into(out, result)


# --- powers and tensor equations ---


def matrix_power(input: torch.Tensor, n: int, *, out=None) -> torch.Tensor:
    """The n-th power of square matrices, like ``torch.linalg.matrix_power``.

    A negative n raises mpslinalg's ``inv`` (its kernels) to the power -n; n >= 0
    is matrix products, torch's (by repeated squaring, as for -n).

    Args:
        input: ``(*, m, m)``.
        n: an int; 0 gives the identity.
        out: optional tensor to write the result into.

    Returns:
        ``(*, m, m)``. Differentiable.

    Raises:
        torch.linalg.LinAlgError: torch's, for n < 0 and a singular matrix.
        RuntimeError: torch's, for non-square matrices.

    Example:
        >>> LA.matrix_power(torch.tensor([[2.0, 0.0], [0.0, 4.0]]), -2)
        tensor([[0.2500, 0.0000],
                [0.0000, 0.0625]])
    """
    if not (isinstance(n, int) and n < 0 and _routed(input, out=out)):
        return TORCH.matrix_power(input, n, out=out)
    if n == -1:  # torch's is inv's, into out
        _torch_checks(TORCH.matrix_power, input, n, out=out)
        return _into(out, inv(input))
    # torch's checks before its inverse (the matrix; out's dtype and device, and its resize
    # warning): those of the power 1, whose products are none.
    _torch_checks(TORCH.matrix_power, input, 1, out=out)
    if out is not None:
        out.resize_(input.shape)  # warned about above
    # torch's products on mpslinalg's inverse, with their own out= checks (matmul's).
    return TORCH.matrix_power(inv(input), -n, out=out)


def tensorsolve(input: torch.Tensor, other: torch.Tensor, dims=None, *, out=None) -> torch.Tensor:
    """X with ``tensordot(input, X, X.ndim) == other``, like ``torch.linalg.tensorsolve``:
    mpslinalg's ``solve`` (its kernels) on input reshaped to a square matrix (after
    moving ``dims`` to the end), as torch reshapes it.

    Args:
        input: a tensor whose first ``other.ndim`` dims and the rest hold equally many
            entries.
        other: the right-hand side.
        dims: dims of input moved to the end first, or None.
        out: optional tensor to write the result into.

    Returns:
        X, of shape ``input.shape[other.ndim:]`` (after the move). Differentiable.

    Raises:
        torch.linalg.LinAlgError: torch's, for a singular system.
        RuntimeError: torch's, for shapes that do not form a square system.

    Example:
        >>> A = torch.eye(6).reshape(2, 3, 6)
        >>> B = torch.arange(6.0).reshape(2, 3)
        >>> LA.tensorsolve(A, B)
        tensor([0., 1., 2., 3., 4., 5.])
    """
    if not (_routed(input, other, out=out) and input.numel() and input.dtype == other.dtype):
        # Two dtypes: torch's error, whose words its meta function does not share.
        return TORCH.tensorsolve(input, other, dims, out=out)
    _torch_checks(TORCH.tensorsolve, input, other, dims, out=out)
    A = input
    if dims is not None:
        A = A.movedim(dims, tuple(range(A.dim() - len(dims), A.dim())))
    result_shape = A.shape[other.dim():]
    X = solve(A.reshape(other.numel(), -1), other.flatten())
    return _into(out, X.reshape(result_shape))


def tensorinv(input: torch.Tensor, ind: int = 2, *, out=None) -> torch.Tensor:
    """The inverse of ``tensordot`` over ``ind`` dims, like ``torch.linalg.tensorinv``:
    mpslinalg's ``inv_ex`` (its kernels) of input reshaped to a square matrix.

    Args:
        input: a tensor whose first ``ind`` dims and the rest hold equally many entries.
        ind: the number of leading dims (positive).
        out: optional tensor to write the result into.

    Returns:
        ``input.shape[ind:] + input.shape[:ind]``. Differentiable.

    Raises:
        torch.linalg.LinAlgError: torch's, for a singular matrix.
        RuntimeError: torch's, for a bad ind or shapes that do not form a square matrix.

    Example:
        >>> LA.tensorinv(2 * torch.eye(4).reshape(4, 2, 2), ind=1).shape
        torch.Size([2, 2, 4])
    """
    if not (_routed(input, out=out) and input.numel()):
        return TORCH.tensorinv(input, ind, out=out)
    _torch_checks(TORCH.tensorinv, input, ind, out=out)
    rows = math.prod(input.shape[:ind])
    matrix = input.reshape(rows, rows)
    if torch.compiler.is_compiling():
        # The check on the host would break the graph: inv checks inside its op, and
        # names itself "linalg.inv" where torch's tensorinv says "inv".
        inverse = inv(matrix)
    else:
        inverse, info = inv_ex(matrix)
        _checks.raise_if_singular("inv", info, batched=False)  # torch's message names "inv"
    return _into(out, inverse.reshape(input.shape[ind:] + input.shape[:ind]))


# --- torch's own: no decomposition to run on the kernels ---


def vector_norm(x: torch.Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None, out=None) -> torch.Tensor:
    """A vector norm, ``torch.linalg.vector_norm`` itself (elementwise work: no
    kernel of mpslinalg's).

    Args:
        x: a tensor.
        ord: the order (default 2; inf, -inf, 0 and any real number).
        dim: an int or tuple of ints to reduce over, or None (all of them).
        keepdim: keep the reduced dims, with size 1.
        dtype: compute in this dtype.
        out: optional tensor to write the result into.

    Returns:
        The norms, real.

    Example:
        >>> LA.vector_norm(torch.tensor([3.0, -4.0]))
        tensor(5.)
    """
    return TORCH.vector_norm(x, ord, dim, keepdim, dtype=dtype, out=out)


def cross(input: torch.Tensor, other: torch.Tensor, *, dim: int = -1, out=None) -> torch.Tensor:
    """The cross product of 3-vectors, ``torch.linalg.cross`` itself (elementwise
    work: no kernel of mpslinalg's).

    Args:
        input: ``(*, 3, *)``.
        other: the same, broadcast with input.
        dim: the dimension of size 3.
        out: optional tensor to write the result into.

    Returns:
        The products, broadcast.

    Example:
        >>> LA.cross(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0]))
        tensor([0., 0., 1.])
    """
    return TORCH.cross(input, other, dim=dim, out=out)


def multi_dot(tensors, *, out=None) -> torch.Tensor:
    """The product of a chain of matrices in the cheapest order,
    ``torch.linalg.multi_dot`` itself (matrix products: no kernel of mpslinalg's).

    Args:
        tensors: two or more 2-D tensors (the first and last may be 1-D).
        out: optional tensor to write the result into.

    Returns:
        The product.

    Example:
        >>> LA.multi_dot([torch.ones(1, 2), torch.ones(2, 3), torch.ones(3, 1)])
        tensor([[6.]])
    """
    return TORCH.multi_dot(tensors, out=out)


def vecdot(x: torch.Tensor, y: torch.Tensor, *, dim: int = -1, out=None) -> torch.Tensor:
    """The dot product sum(conj(x) * y) along ``dim``, ``torch.linalg.vecdot`` itself
    (elementwise work: no kernel of mpslinalg's).

    Args:
        x: ``(*, n)``.
        y: ``(*, n)``, broadcast with x.
        dim: the dimension to sum over.
        out: optional tensor to write the result into.

    Returns:
        The products, broadcast.

    Example:
        >>> LA.vecdot(torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]))
        tensor(11.)
    """
    return TORCH.vecdot(x, y, dim=dim, out=out)


def vander(x: torch.Tensor, *, N=None) -> torch.Tensor:
    """The Vandermonde matrix of powers x^0 ... x^(N-1), ``torch.linalg.vander``
    itself (elementwise work: no kernel of mpslinalg's).

    Args:
        x: ``(*, n)``.
        N: the number of columns (default n).

    Returns:
        ``(*, n, N)``.

    Example:
        >>> LA.vander(torch.tensor([1, 2, 3]))
        tensor([[1, 1, 1],
                [1, 2, 4],
                [1, 3, 9]])
    """
    return TORCH.vander(x, N=N)


def diagonal(A: torch.Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> torch.Tensor:
    """The diagonals of matrices (a view), ``torch.linalg.diagonal`` itself (no work
    for a kernel).

    Args:
        A: a tensor of at least 2 dims.
        offset: which diagonal (positive: above the main one).
        dim1: the rows' dimension.
        dim2: the columns' dimension.

    Returns:
        A view, the diagonal last.

    Example:
        >>> LA.diagonal(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        tensor([1., 4.])
    """
    return TORCH.diagonal(A, offset=offset, dim1=dim1, dim2=dim2)


def matmul(input: torch.Tensor, other: torch.Tensor, *, out=None) -> torch.Tensor:
    """The matrix product, ``torch.linalg.matmul`` (``torch.matmul``) itself: no
    kernel of mpslinalg's.

    Args:
        input: a tensor (1-D: a vector).
        other: a tensor, batch dims broadcast with input's.
        out: optional tensor to write the result into.

    Returns:
        The product.

    Example:
        >>> LA.matmul(torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]]))
        tensor([[11.]])
    """
    return TORCH.matmul(input, other, out=out)


def ldl_factor_ex(input: torch.Tensor, *, hermitian: bool = False, check_errors: bool = False, out=None):
    """The LDL factorization of symmetric (Hermitian) indefinite matrices with
    Bunch-Kaufman pivoting, ``torch.linalg.ldl_factor_ex`` itself: mpslinalg has no
    LDL kernel yet, so every device runs torch's.

    Args:
        input: ``(*, n, n)``; the lower triangle is read.
        hermitian: factor complex input as Hermitian (else symmetric).
        check_errors: raise for a failed factorization.
        out: optional ``(LD, pivots, info)`` tensors to write into.

    Returns:
        ``(LD, pivots, info)``, in LAPACK's sytrf format.

    Example:
        >>> LD, pivots, info = LA.ldl_factor_ex(torch.tensor([[4.0, 2.0], [2.0, 3.0]]))
        >>> LD
        tensor([[4.0000, 0.0000],
                [0.5000, 2.0000]])
        >>> info
        tensor(0, dtype=torch.int32)
    """
    return TORCH.ldl_factor_ex(input, hermitian=hermitian, check_errors=check_errors, out=out)


def ldl_factor(input: torch.Tensor, *, hermitian: bool = False, out=None):
    """The LDL factorization, ``torch.linalg.ldl_factor`` itself: mpslinalg has no
    LDL kernel yet, so every device runs torch's.

    Args:
        input: ``(*, n, n)``; the lower triangle is read.
        hermitian: factor complex input as Hermitian (else symmetric).
        out: optional ``(LD, pivots)`` tensors to write into.

    Returns:
        ``(LD, pivots)``, in LAPACK's sytrf format.

    Raises:
        torch.linalg.LinAlgError: torch's, for a failed factorization.

    Example:
        >>> LD, pivots = LA.ldl_factor(torch.tensor([[4.0, 2.0], [2.0, 3.0]]))
        >>> pivots
        tensor([1, 2], dtype=torch.int32)
    """
    return TORCH.ldl_factor(input, hermitian=hermitian, out=out)


def ldl_solve(LD: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *, hermitian: bool = False, out=None) -> torch.Tensor:
    """A X = B from ``ldl_factor``'s factorization, ``torch.linalg.ldl_solve`` itself:
    mpslinalg has no LDL kernel yet, so every device runs torch's.

    Args:
        LD: ``(*, n, n)``, from ``ldl_factor``.
        pivots: ``(*, n)``, from ``ldl_factor``.
        B: ``(*, n, k)``.
        hermitian: as given to ``ldl_factor``.
        out: optional tensor to write the result into.

    Returns:
        X, ``(*, n, k)``.

    Example:
        >>> A = torch.tensor([[4.0, 2.0], [2.0, 3.0]])
        >>> X = LA.ldl_solve(*LA.ldl_factor(A), torch.tensor([[6.0], [5.0]]))
        >>> torch.allclose(X, torch.ones(2, 1))
        True
    """
    return TORCH.ldl_solve(LD, pivots, B, hermitian=hermitian, out=out)
