"""solve_triangular, tril_inverse and solve_tril against SciPy and torch.linalg.

solve_triangular: max_j ||b_j - op(A) x_j||_1 / (||op(A)||_1 ||x_j||_1 eps) < 15
(LAPACK sget02 / strt02), on well-conditioned triangles (mpslinalg.testing.triangle).
tril_inverse: ||I - X A||_1 / (n ||A||_1 ||X||_1 eps) < 15 (strt01).
"""

import math

import numpy as np
import pytest
import scipy.linalg
import torch
from hypothesis import given
from hypothesis import strategies as st

import mpslinalg as LA
from conftest import on, require, supported
from mpslinalg import triangular as family
from mpslinalg.testing import THRESHOLD, exact, inv_ratio, solve_ratio, triangle

DTYPES = [torch.float32, torch.complex64, torch.float64, torch.complex128]
FLAGS = [(u, l, d) for u in (False, True) for l in (True, False) for d in (False, True)]
rng = np.random.default_rng(1)


def system(batch_a, batch_b, n, k, dtype, upper, left, unit, cond=10.0, seed=None):
    r = np.random.default_rng(seed) if seed is not None else rng
    count = int(np.prod(batch_a, dtype=np.int64))
    mats = [triangle(n, cond, r, dtype.is_complex, upper, unit) for _ in range(count)]
    A = torch.from_numpy(np.array(mats).reshape(*batch_a, n, n) if count else np.zeros((*batch_a, n, n))).to(dtype)
    # What the solve must not read: the other triangle (and the diagonal if unit) holds NaN.
    ignored = torch.ones(n, n, dtype=torch.bool).tril(-1 if not unit else 0) if upper else torch.ones(n, n, dtype=torch.bool).triu(1 if not unit else 0)
    A = A.masked_fill(ignored, math.nan)
    shape = (*batch_b, n, k) if left else (*batch_b, k, n)
    B = torch.from_numpy(r.standard_normal(shape) + (1j * r.standard_normal(shape) if dtype.is_complex else 0)).to(dtype)
    return A, B


@pytest.mark.parametrize("upper,left,unit", FLAGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n,k", [(1, 1), (5, 3), (16, 8), (32, 40), (64, 64), (33, 1), (70, 5), (130, 20)])
def test_solve_matches_scipy(device, n, k, dtype, upper, left, unit):
    supported(device, dtype)
    A, B = system((3,), (3,), n, k, dtype, upper, left, unit)
    X = LA.solve_triangular(A.to(device), B.to(device), upper=upper, left=left, unitriangular=unit)
    assert X.shape == B.shape and X.dtype == dtype
    assert solve_ratio(A, X, B, upper, left, unit) < THRESHOLD
    a, b = exact(A[0]), exact(B[0])
    if left:
        ref = scipy.linalg.solve_triangular(np.nan_to_num(a), b, lower=not upper, unit_diagonal=unit)
    else:
        ref = scipy.linalg.solve_triangular(np.nan_to_num(a), b.T, lower=not upper, unit_diagonal=unit, trans="T").T
    np.testing.assert_allclose(exact(X[0]), ref, rtol=0, atol=2e3 * torch.finfo(A.real.dtype).eps * np.abs(ref).max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
@pytest.mark.parametrize("upper", [False, True])
def test_large_solve_ratio(device, dtype, upper):
    """The recursive blocked solve over ten diagonal blocks (the last short): uneven halves
    and both orders of the recursion, within LAPACK's ratio."""
    A, B = system((), (), 600, 17, dtype, upper, True, False, cond=1e3)
    X = LA.solve_triangular(A.to(device), B.to(device), upper=upper)
    assert solve_ratio(A, X, B, upper, True, False) < THRESHOLD


@st.composite
def systems(draw):
    upper, left, unit = draw(st.sampled_from(FLAGS))
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.sampled_from([0, 1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100]))
    k = draw(st.sampled_from([0, 1, 3, 8, 9, 31, 32, 33, 64]))
    batch_b = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    batch_a = draw(st.sampled_from([batch_b, (), (1,) * len(batch_b), batch_b[-1:]]))
    cond = 10.0 ** draw(st.floats(0, 3))
    seed = draw(st.integers(0, 2**32 - 1))
    return system(batch_a, batch_b, n, k, dtype, upper, left, unit, cond, seed), (upper, left, unit)


@given(problem=systems())
def test_solve_ratio_over_flags_sizes_and_broadcasting(device, problem):
    (A, B), (upper, left, unit) = problem
    A, B = on(device, A), on(device, B)
    X = LA.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit)
    ref = torch.linalg.solve_triangular(A.cpu().nan_to_num(), B.cpu(), upper=upper, left=left, unitriangular=unit)
    assert X.shape == ref.shape
    assert solve_ratio(A.cpu(), X, B.cpu(), upper, left, unit) < THRESHOLD


def test_broadcast_shapes_as_torch(device):
    A, B = system((4, 1), (5,), 3, 2, torch.float32, False, True, False)
    X = LA.solve_triangular(A.to(device), B.to(device), upper=False)
    assert X.shape == (4, 5, 3, 2)
    assert solve_ratio(A, X, B, False, True, False) < THRESHOLD


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64], ids=str)
def test_views_equal_contiguous(device, dtype):
    A, B = system((4,), (4,), 20, 6, dtype, False, True, False)
    A, B = A.nan_to_num().to(device), B.to(device)
    for name, (VA, VB, upper) in {
        "A transposed": (A.mT, B, True),
        "A conj": (A.conj(), B, False),
        "B conj": (A, B.conj(), False),
        "B strided": (A[::2], B[::2], False),
        "B transposed": (A, B.mT.contiguous().mT, False),
    }.items():
        X = LA.solve_triangular(VA, VB, upper=upper)
        ref = LA.solve_triangular(VA.clone().resolve_conj(), VB.clone().resolve_conj(), upper=upper)
        assert not X.is_conj()
        torch.testing.assert_close(X, ref, msg=name)


def test_zero_diagonal_gives_inf_or_nan_as_torch(device):
    A = torch.tensor([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 4.0, 5.0]])
    B = torch.ones(3, 2)
    X = LA.solve_triangular(A.to(device), B.to(device), upper=False).cpu()
    ref = torch.linalg.solve_triangular(A, B, upper=False)
    assert torch.equal(torch.isfinite(X), torch.isfinite(ref)) and not torch.isfinite(X).all()


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("n,zero", [(16, 0), (32, 20), (64, 5), (64, 40)])
def test_fast_path_zero_diagonal_gives_inf_or_nan_where_torch_does(device, n, zero, upper):
    # The inverse-based kernel must leave the rows that substitution leaves finite
    # finite: an inf from the zero pivot may not meet a zero of inv(L) and become NaN.
    A = torch.eye(n) + torch.randn(n, n, generator=torch.Generator().manual_seed(n)).tril(-1) / n
    A = A.mT if upper else A
    A[zero, zero] = 0
    B = torch.randn(2, n, 24, generator=torch.Generator().manual_seed(1))
    X = LA.solve_triangular(A.to(device), B.to(device), upper=upper).cpu()
    ref = torch.linalg.solve_triangular(A, B, upper=upper)
    assert torch.equal(torch.isfinite(X), torch.isfinite(ref)) and not torch.isfinite(X).all()


@pytest.mark.parametrize("n,k", [(16, 200), (32, 130), (64, 70), (64, 17)])
def test_fast_path_with_several_teams_per_system(device, n, k):
    A, B = system((3,), (3,), n, k, torch.float32, False, True, False)
    X = LA.solve_triangular(A.to(device), B.to(device), upper=False)
    assert solve_ratio(A, X, B, False, True, False) < THRESHOLD


@pytest.mark.parametrize("n,k", [(16, 200), (5, 40), (64, 70)])
def test_systems_wider_than_int_indices_go_in_pieces(device, monkeypatch, n, k):
    """Systems of n k >= 2^31 elements are solved in pieces of columns (the kernels index
    within a system in int); the limit is lowered so that small systems take the path."""
    monkeypatch.setattr(family, "INDEX_LIMIT", 7 * n)  # pieces of 6 columns
    A, B = system((2,), (2,), n, k, torch.float32, False, True, False)
    X = LA.solve_triangular(A.to(device), B.to(device), upper=False)
    assert solve_ratio(A, X, B, False, True, False) < THRESHOLD


BAD = {
    "A vector": (torch.ones(3), torch.ones(3, 1)),
    "B vector": (torch.ones(3, 3), torch.ones(3)),
    "A non-square": (torch.ones(2, 3), torch.ones(2, 1)),
    "left shapes": (torch.ones(2, 2), torch.ones(3, 1)),
    "int": (torch.ones(2, 2, dtype=torch.int32), torch.ones(2, 1, dtype=torch.int32)),
    "batches": (torch.eye(2).expand(2, 2, 2), torch.ones(4, 2, 1)),
    "inner batch": (torch.eye(2).expand(3, 1, 2, 2), torch.ones(5, 2, 2, 1)),
}


@pytest.mark.parametrize("name", BAD)
@pytest.mark.parametrize("left", [True, False])
def test_errors_match_torch(device, name, left):
    A, B = (t.to(device) for t in BAD[name])
    if not left and B.dim() == 2:
        B = B.mT
    with pytest.raises(Exception) as expected:
        torch.linalg.solve_triangular(A, B, upper=False, left=left)
    with pytest.raises(Exception) as got:
        LA.solve_triangular(A, B, upper=False, left=left)
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)
    with pytest.raises(TypeError, match="upper"):
        LA.solve_triangular(A, B)


@pytest.mark.parametrize("upper,left,unit", FLAGS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
@pytest.mark.parametrize("n,k", [(5, 3), (16, 8), (40, 2)], ids=["small", "fast path", "blocked"])
def test_gradcheck_through_kernels(device, n, k, dtype, upper, left, unit):
    supported(device, dtype)
    A, B = system((2,), (2,), n, k, dtype, upper, left, unit, cond=3)
    A = A.nan_to_num().to(device).requires_grad_()
    B = B.to(device).requires_grad_()

    def f(A, B):
        return LA.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit)

    # Larger systems check a random projection of the Jacobian (fast mode): the full one costs minutes.
    assert torch.autograd.gradcheck(f, (A, B), fast_mode=n > 8)
    assert torch.autograd.gradgradcheck(f, (A, B), fast_mode=True)


def test_gradients_agree_with_torch_and_broadcast(device):
    A, B = system((1,), (4,), 16, 8, torch.float32, False, True, False)
    A = A.nan_to_num()
    G = torch.randn(4, 16, 8)
    ours, theirs = A.clone().to(device).requires_grad_(), A.clone().requires_grad_()
    ours_b, theirs_b = B.clone().to(device).requires_grad_(), B.clone().requires_grad_()
    (LA.solve_triangular(ours, ours_b, upper=False) * G.to(device)).sum().backward()
    (torch.linalg.solve_triangular(theirs, theirs_b, upper=False) * G).sum().backward()
    torch.testing.assert_close(ours.grad.cpu(), theirs.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours_b.grad.cpu(), theirs_b.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_forward_mode_matches_torch(device, dtype):
    supported(device, dtype)
    A, B = system((3,), (3,), 6, 2, dtype, True, False, False)
    A, B = A.nan_to_num().to(device), B.to(device)
    dA, dB = torch.randn_like(A), torch.randn_like(B)

    def ours(A, B):
        return LA.solve_triangular(A, B, upper=True, left=False)

    def theirs(A, B):
        return torch.linalg.solve_triangular(A, B, upper=True, left=False)

    torch.testing.assert_close(torch.func.jvp(ours, (A, B), (dA, dB))[1], torch.func.jvp(theirs, (A, B), (dA, dB))[1])
    torch.testing.assert_close(torch.func.vmap(ours)(A, B), theirs(A, B))
    # vmap over A alone, and over operands of different batch ranks
    torch.testing.assert_close(torch.func.vmap(ours, in_dims=(0, None))(A, B), torch.func.vmap(theirs, in_dims=(0, None))(A, B))
    B3 = torch.randn(3, 2, *B.shape[1:], dtype=dtype).to(device)
    torch.testing.assert_close(torch.func.vmap(ours)(A, B3), torch.func.vmap(theirs)(A, B3))


def test_fast_path_is_taken_for_gated_deltanet_shapes(device, monkeypatch):
    launched = []
    real = family.launch
    monkeypatch.setattr(family, "launch", lambda kernel, *a, **k: (launched.append(kernel.function), real(kernel, *a, **k)))
    for n, k, upper, expected in [
        (64, 64, False, "trsm_by_inverse"), (32, 8, True, "trsm_by_inverse"), (16, 7, False, "trsm_rows"),
        (20, 8, False, "trsm_rows"), (20, 9, False, "trsm_small"), (40, 9, False, "trsm_rows"),
    ]:
        A, B = system((5,), (5,), n, k, torch.float32, upper, True, True)
        launched.clear()
        X = LA.solve_triangular(A.to(device), B.to(device), upper=upper, unitriangular=True)
        assert launched == [expected]
        assert solve_ratio(A, X, B, upper, True, True) < THRESHOLD


def test_compiles_without_graph_breaks(device):
    torch._dynamo.reset()
    A, B = system((3,), (3,), 16, 8, torch.float32, False, True, False)
    A, B = A.nan_to_num().to(device).requires_grad_(), B.to(device)

    def f(A, B):
        return LA.solve_triangular(A, B, upper=False).sum() + LA.tril_inverse(A).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    y = compiled(A, B)
    y.backward()
    torch.testing.assert_close(y, f(A, B))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64], ids=str)
@pytest.mark.parametrize("n", [1, 7, 16, 33, 64, 100])
@pytest.mark.parametrize("unit", [False, True])
def test_tril_inverse(device, n, dtype, unit):
    supported(device, dtype)
    A, _ = system((4,), (4,), n, 1, dtype, False, True, unit)
    A = A.nan_to_num()
    X = LA.tril_inverse(A.to(device), unitriangular=unit)
    L = A.tril(-1) + torch.eye(n, dtype=dtype) if unit else A.tril()
    assert torch.equal(X.cpu().triu(1), torch.zeros_like(X.cpu()).triu(1))
    assert inv_ratio(L, X) < THRESHOLD


def test_tril_inverse_of_empty(device):
    for shape in [(3, 0, 0), (0, 0), (0, 5, 5)]:
        assert LA.tril_inverse(torch.empty(shape, device=device)).shape == shape


def test_tril_inverse_gradient(device):
    supported(device, torch.float64)
    A, _ = system((2,), (2,), 16, 1, torch.float64, False, True, False, cond=3)
    A = A.nan_to_num().to(device).requires_grad_()
    assert torch.autograd.gradcheck(LA.tril_inverse, (A,))


def fla_like(batch, T, heads, chunk, seed, cu_seqlens=None):
    """A as flash-linear-attention builds it: beta * K K^T of L2-normalised keys,
    strictly lower within each chunk, in the [B, T, H, BT] layout."""
    g = torch.Generator().manual_seed(seed)
    k = torch.nn.functional.normalize(torch.randn(batch, T, heads, 64, generator=g, dtype=torch.float64), dim=-1)
    beta = torch.rand(batch, T, heads, generator=g, dtype=torch.float64)
    A = torch.zeros(batch, T, heads, chunk, dtype=torch.float64)
    bounds = [0, T] if cu_seqlens is None else cu_seqlens
    reference = torch.zeros_like(A)
    for b in range(batch):
        for begin, end in zip(bounds, bounds[1:]):
            for s in range(begin, end, chunk):
                rows = min(chunk, end - s)
                kc = k[b, s : s + rows].transpose(0, 1)  # heads x rows x 64
                block = (beta[b, s : s + rows].T[..., None] * (kc @ kc.mT)).tril(-1)
                A[b, s : s + rows, :, :rows] = block.transpose(0, 1)
                inverse = torch.linalg.inv(torch.eye(rows, dtype=torch.float64) + block)
                reference[b, s : s + rows, :, :rows] = inverse.transpose(0, 1)
    return A, reference


@pytest.mark.parametrize("chunk", [16, 32, 64])
def test_solve_tril_matches_fla_semantics(device, chunk):
    A, reference = fla_like(2, 150, 3, chunk, seed=chunk)  # 150: a partial last chunk
    out = LA.solve_tril(A.float().to(device))
    assert out.dtype == torch.float32 and out.shape == A.shape
    error = (out.cpu().double() - reference).abs().max().item()
    assert error < 50 * torch.finfo(torch.float32).eps * reference.abs().max().item()


@pytest.mark.parametrize("chunk", [16, 64])
def test_solve_tril_with_ragged_cu_seqlens(device, chunk):
    cu_seqlens = [0, 37, 100, 101, 230]
    A, reference = fla_like(1, 230, 2, chunk, seed=7, cu_seqlens=cu_seqlens)
    out = LA.solve_tril(A.float().to(device), cu_seqlens=torch.tensor(cu_seqlens, device=device))
    error = (out.cpu().double() - reference).abs().max().item()
    assert error < 50 * torch.finfo(torch.float32).eps * reference.abs().max().item()
    torch_backend = LA.solve_tril(A.float(), cu_seqlens=torch.tensor(cu_seqlens))  # CPU tensors on torch.linalg
    torch.testing.assert_close(torch_backend, out.cpu(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cu_seqlens", [None, [0, 5, 21, 22, 40]], ids=["fixed", "ragged"])
def test_solve_tril_gradient(device, cu_seqlens):
    supported(device, torch.float64)
    batch = 2 if cu_seqlens is None else 1
    A, _ = fla_like(batch, 40, 2, 16, seed=3, cu_seqlens=cu_seqlens)
    A = A.to(device).requires_grad_()
    lengths = None if cu_seqlens is None else torch.tensor(cu_seqlens, device=device)

    def f(A):
        return LA.solve_tril(A, cu_seqlens=lengths, output_dtype=torch.float64)

    # Only the strictly lower part of each chunk is an input; the rest must get zero gradient.
    assert torch.autograd.gradcheck(f, (A,), fast_mode=True)
    (grad,) = torch.autograd.grad(f(A).sum(), A)
    reference = torch.autograd.grad(_solve_tril_dense(A, cu_seqlens).sum(), A)[0]
    torch.testing.assert_close(grad, reference)


@pytest.mark.cuda
@pytest.mark.parametrize("cu_seqlens", [None, [0, 5, 21, 22, 40]], ids=["fixed", "ragged"])
def test_solve_tril_synchronises_only_for_cu_seqlens(cu_seqlens):
    """The Gated DeltaNet path without a host synchronisation: fixed chunks forward and
    backward, cu_seqlens in the backward (its forward synchronises once, for its ends
    and chunk count, outside the checked region)."""
    require("cuda")
    A, _ = fla_like(1, 40, 2, 16, seed=5, cu_seqlens=cu_seqlens)
    A = A.float().cuda().requires_grad_()
    lengths = None if cu_seqlens is None else torch.tensor(cu_seqlens, device="cuda")
    X = LA.solve_tril(A, cu_seqlens=lengths)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        if cu_seqlens is None:
            X = LA.solve_tril(A)
        X.backward(torch.ones_like(X))
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _solve_tril_dense(A, cu_seqlens):
    """(I + A)^-1 per chunk with torch.linalg, differentiably, for the gradient reference."""
    batch, T, heads, chunk = A.shape
    bounds = [0, T] if cu_seqlens is None else cu_seqlens
    pieces = []
    for b in range(batch):
        rows = []
        for begin, end in zip(bounds, bounds[1:]):
            for s in range(begin, end, chunk):
                r = min(chunk, end - s)
                block = A[b, s : s + r, :, :r].transpose(0, 1).tril(-1)
                inverse = torch.linalg.inv(torch.eye(r, dtype=A.dtype, device=A.device) + block)
                rows.append(torch.nn.functional.pad(inverse, (0, chunk - r)).transpose(0, 1))
        pieces.append(torch.cat(rows))
    return torch.stack(pieces)


def test_solve_tril_rejects_bad_layouts(device):
    with pytest.raises(ValueError, match="BT in"):
        LA.solve_tril(torch.zeros(1, 8, 2, 8, device=device))
    with pytest.raises(ValueError, match="batch size must be 1"):
        LA.solve_tril(torch.zeros(2, 8, 2, 16, device=device), cu_seqlens=torch.tensor([0, 8], device=device))
    with pytest.raises(ValueError, match="from 0 to T"):
        LA.solve_tril(torch.zeros(1, 8, 2, 16, device=device), cu_seqlens=torch.tensor([0, 5], device=device))
