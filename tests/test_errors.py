"""Bad input, table-driven: every public function with each class of bad input raises
torch.linalg's error, the same type and the same message (through the kernels: the
OpenCL runtime on the CPU, and CUDA where it is usable)."""

import pytest
import torch

import mpslinalg as LA
from conftest import require


def square(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype) + 4 * torch.eye(shape[-1], dtype=dtype)


def factored(A):
    """lu_solve's arguments for A: its LU factors, pivots and a right-hand side."""
    LU, pivots = torch.linalg.lu_factor(A) if A.dtype.is_floating_point or A.dtype.is_complex else (A, None)
    return LU, pivots, torch.ones(*A.shape[:-1], 2, dtype=A.dtype)


def reflectors(A):
    """householder_product's arguments: A's reflectors and their scalars."""
    return tuple(torch.geqrf(A)) if A.dtype.is_floating_point or A.dtype.is_complex else (A, A[..., 0])


# name -> (our function, torch's, arguments builder for a valid call)
FUNCTIONS = {
    "inv": (LA.inv, torch.linalg.inv, lambda A: (A,)),
    "inv_ex": (LA.inv_ex, torch.linalg.inv_ex, lambda A: (A,)),
    "det": (LA.det, torch.linalg.det, lambda A: (A,)),
    "slogdet": (LA.slogdet, torch.linalg.slogdet, lambda A: (A,)),
    "logdet": (LA.logdet, torch.logdet, lambda A: (A,)),
    "lu_factor": (LA.lu_factor, torch.linalg.lu_factor, lambda A: (A,)),
    "lu_factor_ex": (LA.lu_factor_ex, torch.linalg.lu_factor_ex, lambda A: (A,)),
    "lu": (LA.lu, torch.linalg.lu, lambda A: (A,)),
    "solve": (LA.solve, torch.linalg.solve, lambda A: (A, torch.ones(*A.shape[:-1], 2, dtype=A.dtype))),
    "solve_ex": (LA.solve_ex, torch.linalg.solve_ex, lambda A: (A, torch.ones(*A.shape[:-1], 2, dtype=A.dtype))),
    "solve_triangular": (
        lambda A, B: LA.solve_triangular(A, B, upper=False),
        lambda A, B: torch.linalg.solve_triangular(A, B, upper=False),
        lambda A: (A, torch.ones(*A.shape[:-1], 2, dtype=A.dtype)),
    ),
    "lu_solve": (LA.lu_solve, torch.linalg.lu_solve, factored),
    "qr": (LA.qr, torch.linalg.qr, lambda A: (A,)),
    "householder_product": (LA.householder_product, torch.linalg.householder_product, reflectors),
    "ormqr": (LA.ormqr, torch.ormqr, lambda A: reflectors(A) + (torch.ones(*A.shape[:-1], 2, dtype=A.dtype),)),
    "geqrf": (LA.geqrf, torch.geqrf, lambda A: (A,)),
    "svd": (LA.svd, torch.linalg.svd, lambda A: (A,)),
    "svdvals": (LA.svdvals, torch.linalg.svdvals, lambda A: (A,)),
    "pinv": (LA.pinv, torch.linalg.pinv, lambda A: (A,)),
    "matrix_rank": (LA.matrix_rank, torch.linalg.matrix_rank, lambda A: (A,)),
    "lstsq": (LA.lstsq, torch.linalg.lstsq, lambda A: (A, torch.ones(*A.shape[:-1], 2, dtype=A.dtype))),
    "cholesky": (LA.cholesky, torch.linalg.cholesky, lambda A: (A @ A.mH,)),
    "cholesky_ex": (LA.cholesky_ex, torch.linalg.cholesky_ex, lambda A: (A @ A.mH,)),
    "cholesky_solve": (lambda L, B: LA.cholesky_solve(B, L), lambda L, B: torch.cholesky_solve(B, L),
                       lambda A: (A.tril(), torch.ones(*A.shape[:-1], 2, dtype=A.dtype))),
    "cholesky_inverse": (LA.cholesky_inverse, torch.cholesky_inverse, lambda A: (A.tril(),)),
    "eigh": (LA.eigh, torch.linalg.eigh, lambda A: (A,)),
    "eigvalsh": (LA.eigvalsh, torch.linalg.eigvalsh, lambda A: (A,)),
}
SQUARE_ONLY = {"inv", "inv_ex", "det", "slogdet", "logdet", "solve", "solve_ex", "solve_triangular", "cholesky", "cholesky_ex",
               "cholesky_solve", "cholesky_inverse", "eigh", "eigvalsh"}

# class of bad input -> the functions it applies to and a builder of the bad arguments
BAD_INPUTS = {
    "one dimension": (set(FUNCTIONS), lambda name: (torch.ones(3),) + FUNCTIONS[name][2](square(3))[1:]),
    "not square": (SQUARE_ONLY, lambda name: (torch.ones(3, 4),) + FUNCTIONS[name][2](square(3))[1:]),
    "integer dtype": (set(FUNCTIONS), lambda name: tuple(
        a.to(torch.int32) if torch.is_tensor(a) else a for a in FUNCTIONS[name][2](square(3)))),
    "half precision": (set(FUNCTIONS), lambda name: tuple(
        a.to(torch.float16) if torch.is_tensor(a) else a for a in FUNCTIONS[name][2](square(3)))),
    "mixed dtypes": ({"solve", "solve_ex", "solve_triangular", "lstsq", "cholesky_solve"}, lambda name: (
        square(3), torch.ones(3, 2, dtype=torch.float64))),
    "mismatched right-hand side": ({"solve", "solve_ex", "solve_triangular", "lstsq", "cholesky_solve"}, lambda name: (
        square(2, 3, 3), torch.ones(2, 4, 2))),
    "batches mismatched twice": ({"solve", "solve_ex", "solve_triangular", "lstsq", "lu_solve", "cholesky_solve"}, lambda name: (
        FUNCTIONS[name][2](square(2, 3, 3, 3))[:-1] + (torch.ones(4, 5, 3, 1),))),
    "singular": ({"inv", "solve"}, lambda name: FUNCTIONS[name][2](torch.zeros(2, 3, 3))),
    "not positive definite": ({"cholesky"}, lambda name: (-square(2, 3, 3).mT @ square(2, 3, 3),)),
    "UPLO neither L nor U": ({"eigh", "eigvalsh"}, lambda name: (square(3), "X")),
    "right-hand side of two more dimensions": ({"lstsq"}, lambda name: (square(3), torch.ones(4, 3, 1))),
    "right-hand side of two fewer dimensions": ({"lstsq"}, lambda name: (square(2, 3, 3), torch.ones(3))),
}
CASES = [(bad, name) for bad, (names, _) in BAD_INPUTS.items() for name in sorted(names)]
# Where torch answers silently wrong, mpslinalg raises instead: torch's solve_triangular
# returns A's dtype for mixed dtypes (B's imaginary part dropped if A is real).
RAISES_WHERE_TORCH_DOES_NOT = {("mixed dtypes", "solve_triangular"): "Expected A and B to have the same dtype"}


def outcome(function, args):
    """(error type, message), or ("returned", the results) where ``function`` accepts ``args``."""
    try:
        result = function(*args)
    except Exception as error:  # the type and message are what is compared
        return type(error), str(error)
    return "returned", [r for r in (result if isinstance(result, tuple) else (result,)) if r.numel()]


def with_out(function, args, results, dtype_of):
    """outcome of function(*args, out=...), the outs empty, one per result, of dtype_of(its dtype)."""
    empty = [torch.empty(0, dtype=dtype_of(r.dtype)) for r in (results if isinstance(results, tuple) else (results,))]
    return outcome(lambda *a: function(*a, out=tuple(empty) if isinstance(results, tuple) else empty[0]), args)


def assert_same_answer(got, expected, rtol=1e-5, atol=1e-5):
    """torch's error, or, where torch returns, results of its dtypes close to its own."""
    if expected[0] != "returned":
        assert got == expected
    else:
        assert got[0] == "returned", got
        for x, y in zip(got[1], expected[1], strict=True):
            assert x.dtype == y.dtype
            torch.testing.assert_close(x, y, rtol=rtol, atol=atol)


@pytest.mark.parametrize("bad,name", CASES, ids=[f"{name}-{bad}" for bad, name in CASES])
def test_bad_input_gets_torchs_answer(bad, name):
    """torch's error; where torch accepts the input after all (solve_triangular promotes
    mixed dtypes), torch's result."""
    require("opencl")
    ours, theirs, _ = FUNCTIONS[name]
    args = BAD_INPUTS[bad][1](name)
    expected = outcome(theirs, args)
    with LA.use_backend("opencl"):
        got = outcome(ours, args)
    if (bad, name) in RAISES_WHERE_TORCH_DOES_NOT:
        assert got[0] is RuntimeError and RAISES_WHERE_TORCH_DOES_NOT[bad, name] in got[1]
    else:
        assert_same_answer(got, expected)


TWO_TENSORS = ["solve", "solve_ex", "solve_triangular", "lstsq", "lu_solve", "householder_product", "ormqr"]


@pytest.mark.cuda
@pytest.mark.parametrize("name", TWO_TENSORS)
def test_mismatched_devices_get_torchs_error(name):
    require("cuda")
    ours, theirs, arguments = FUNCTIONS[name]
    args = list(arguments(square(3)))
    args[0] = args[0].cuda()  # the first tensor on the GPU, the others on the CPU
    expected = outcome(theirs, args)
    assert expected[0] is RuntimeError, expected
    assert outcome(ours, args) == expected


WITH_OUT = sorted(set(FUNCTIONS) - {"logdet", "lstsq"})  # the two torch gives no out=


@pytest.mark.parametrize("name", WITH_OUT)
def test_out_while_an_input_requires_grad(name):
    """torch refuses out= where an argument requires grad (before any other check);
    matrix_rank, not differentiable, takes it."""
    require("opencl")
    ours, theirs, arguments = FUNCTIONS[name]
    args = list(arguments(square(3)))
    results = theirs(*args)
    args[0] = args[0].clone().requires_grad_()
    expected = with_out(theirs, args, results, lambda dtype: dtype)
    with LA.use_backend("opencl"):
        got = with_out(ours, args, results, lambda dtype: dtype)
    assert_same_answer(got, expected)


OUT_DTYPES = [torch.float64, torch.complex64, torch.float16, torch.int64, torch.int32, torch.bool]


@pytest.mark.parametrize("dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("name", WITH_OUT)
def test_out_of_another_dtype(name, dtype):
    """torch's answer to out= of another dtype: most functions require the result's, pinv,
    matrix_rank, householder_product and geqrf take any it safely casts to, ormqr has a
    message of its own."""
    require("opencl")
    ours, theirs, arguments = FUNCTIONS[name]
    args = arguments(square(3))
    results = theirs(*args)
    dtype_of = lambda result: result if result == torch.int32 else dtype  # pivots and info stay int32
    expected = with_out(theirs, args, results, dtype_of)
    with LA.use_backend("opencl"):
        got = with_out(ours, args, results, dtype_of)
    assert_same_answer(got, expected, rtol=1e-3, atol=1e-3)
