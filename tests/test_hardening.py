"""What a real user does that the family tests do not: compiled models, every public
function under torch.compile(fullgraph=True), CUDA graphs, many repeated calls (no
memory growth, no recompilation), and threads calling at once."""

import gc
import os
import threading
from contextlib import nullcontext

import pytest
import torch

import mpslinalg as LA
from conftest import require
from mpslinalg import _dispatch
from mpslinalg.check import _synchronize
from mpslinalg.runtimes import for_device

REPEATS = int(os.environ.get("MPSLINALG_REPEATS", "300"))  # the 10^4 on demand


def well_conditioned(*shape, dtype=torch.float32, generator=None):
    n = shape[-1]
    return torch.randn(*shape, dtype=dtype, generator=generator) / n**0.5 + 2 * torch.eye(n, dtype=dtype)


def reflectors(A):
    """geqrf's (V, tau) of A, V carrying A's gradient (geqrf has none, as torch's)."""
    V, tau = LA.geqrf(A.detach())
    return V + (A - A.detach()), tau


# name -> f(A, B) of a batch of 5 x 5 matrices A and right-hand sides B (5 x 2); every
# public function, its outputs reduced to tensors that a loss can sum.
CALLS = {
    "inv": lambda A, B: LA.inv(A),
    "inv_ex": lambda A, B: LA.inv_ex(A).inverse,
    "det": lambda A, B: LA.det(A),
    "slogdet": lambda A, B: LA.slogdet(A).logabsdet,
    "logdet": lambda A, B: LA.logdet(A @ A.mT),
    "lu_factor": lambda A, B: LA.lu_factor(A).LU,
    "lu_factor_ex": lambda A, B: LA.lu_factor_ex(A).LU,
    "lu": lambda A, B: LA.lu(A).U,
    "lu_solve": lambda A, B: LA.lu_solve(*LA.lu_factor(A), B),
    "lu_unpack": lambda A, B: (lambda P, L, U: P + L + U)(*LA.lu_unpack(*LA.lu_factor_ex(A)[:2])),
    "solve": lambda A, B: LA.solve(A, B),
    "solve_ex": lambda A, B: LA.solve_ex(A, B).result,
    "solve_triangular": lambda A, B: LA.solve_triangular(A.tril(), B, upper=False),
    "tril_inverse": lambda A, B: LA.tril_inverse(A.tril()),
    "qr": lambda A, B: LA.qr(A).R,
    "geqrf": lambda A, B: LA.geqrf(A)[0],
    "householder_product": lambda A, B: LA.householder_product(*reflectors(A)),
    "ormqr": lambda A, B: LA.ormqr(*reflectors(A), B),
    "svd": lambda A, B: LA.svd(A).S,
    "svdvals": lambda A, B: LA.svdvals(A),
    "pinv": lambda A, B: LA.pinv(A),
    "matrix_rank": lambda A, B: LA.matrix_rank(A).float(),
    "lstsq": lambda A, B: LA.lstsq(A, B).solution,
    "cholesky": lambda A, B: LA.cholesky(A @ A.mT),
    "cholesky_ex": lambda A, B: LA.cholesky_ex(A @ A.mT).L,
    "cholesky_solve": lambda A, B: LA.cholesky_solve(B, A.tril()),
    "cholesky_inverse": lambda A, B: LA.cholesky_inverse(A.tril()),
    "eigh": lambda A, B: (lambda w, V: w.unsqueeze(-1) + V.abs())(*LA.eigh(A + A.mT)),
    "eigvalsh": lambda A, B: LA.eigvalsh(A + A.mT),
    # The eigenvectors' phases are free: |V|, as torch's OpInfo differentiates.
    "eig": lambda A, B: (lambda w, V: w.abs().unsqueeze(-1) + V.abs())(*LA.eig(A)),
    "eigvals": lambda A, B: LA.eigvals(A).abs(),
    "matrix_exp": lambda A, B: LA.matrix_exp(A / 4),
    # four chunks of 16 (A's strictly lower part, padded) in the [B, T, H, BT] layout
    "solve_tril": lambda A, B: LA.solve_tril(0.1 * torch.nn.functional.pad(A.tril(-1), (0, 11, 0, 11)).reshape(1, 64, 1, 16)),
    # composite.py: on svdvals, inv, solve, eigh and svd, or torch's own
    "cond": lambda A, B: LA.cond(A),
    "matrix_norm": lambda A, B: LA.matrix_norm(A, 2),
    "norm": lambda A, B: LA.norm(A, "nuc", dim=(-2, -1)),
    "matrix_power": lambda A, B: LA.matrix_power(A, -2),
    "tensorsolve": lambda A, B: LA.tensorsolve(A[0].reshape(5, 5, 1), B[0, :, 0]),
    "tensorinv": lambda A, B: LA.tensorinv(A[0].reshape(5, 5, 1), ind=1),
    "matrix_sqrth": lambda A, B: LA.matrix_sqrth(A @ A.mT),
    "polar": lambda A, B: (lambda U, H: U + H)(*LA.polar(A)),
    "vector_norm": lambda A, B: LA.vector_norm(A, dim=-1),
    "cross": lambda A, B: LA.cross(A[..., :3], A[..., 1:4]),
    "multi_dot": lambda A, B: LA.multi_dot([A[0], A[1], B[0]]),
    "vecdot": lambda A, B: LA.vecdot(A, B[..., :1]),
    "vander": lambda A, B: LA.vander(A[..., 0]),
    "diagonal": lambda A, B: LA.diagonal(A),
    "matmul": lambda A, B: LA.matmul(A, B),
    "ldl_factor": lambda A, B: LA.ldl_factor(A @ A.mT).LD,
    "ldl_factor_ex": lambda A, B: LA.ldl_factor_ex(A @ A.mT).LD,
    "ldl_solve": lambda A, B: LA.ldl_solve(*LA.ldl_factor(A @ A.mT), B),
}
NOT_DIFFERENTIABLE = {"lu_factor_ex", "matrix_rank", "geqrf", "ldl_factor", "ldl_factor_ex", "ldl_solve"}  # as in torch
SYNCHRONISING = {  # check for singular input, or host values
    "inv", "solve", "lu_factor", "logdet", "lu_solve", "matrix_rank", "cholesky", "matrix_power", "tensorsolve",
    "tensorinv", "ldl_factor", "ldl_solve",
}


def test_every_public_function_is_in_the_table():
    # Not linear algebra: the runtimes, and putting mpslinalg in torch's place (tests/test_patch.py).
    assert set(CALLS) | {"backends", "use_backend", "patch_torch", "unpatch_torch"} == set(LA.__all__)


def inputs(device):
    generator = torch.Generator().manual_seed(0)
    A = well_conditioned(4, 5, 5, generator=generator)
    B = torch.randn(4, 5, 2, generator=generator)
    return A.to(device), B.to(device)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_function_compiles_without_graph_breaks(device, name):
    if name == "lu_unpack" and torch.__version__ < "2.8":
        pytest.skip("torch 2.7's Dynamo fails inside on torch.return_types.lu_unpack (VariableTracker dynamic_attributes)")
    torch._dynamo.reset()
    A, B = inputs(device)
    call = CALLS[name]
    differentiable = name not in NOT_DIFFERENTIABLE
    if differentiable:
        A.requires_grad_()
    compiled = torch.compile(lambda A, B: call(A, B).sum(), fullgraph=True, backend="aot_eager")
    y = compiled(A, B)
    torch.testing.assert_close(y, call(A, B).sum())
    if differentiable:
        (grad,) = torch.autograd.grad(y, A)
        (expected,) = torch.autograd.grad(call(A, B).sum(), A)
        torch.testing.assert_close(grad, expected)


class PoseModel(torch.nn.Module):
    """A toy model on matrices: a predicted 4 x 4 transform, inverted and solved with, its
    rotation part orthogonalised by QR and by the SVD (polar)."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(8, 16)

    def forward(self, x, targets):
        M = self.head(x).view(-1, 4, 4) + 3 * torch.eye(4, device=x.device)
        Q, _ = LA.qr(M[..., :3, :3])
        U, S, Vh = LA.svd(M[..., :3, :3])
        polar = U @ Vh
        return (LA.inv(M).square().mean() + LA.solve(M, targets).square().mean()
                + (Q - polar).square().mean() + S.mean())


def test_compiled_model_matches_eager(device):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = PoseModel().to(device)
    x, targets = torch.randn(32, 8, device=device), torch.randn(32, 4, 2, device=device)
    backend = "inductor" if device.type == "cuda" else "aot_eager"  # inductor on the CPU needs minutes to build
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    loss = compiled(x, targets)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    expected = model(x, targets)
    expected_grads = torch.autograd.grad(expected, list(model.parameters()))
    torch.testing.assert_close(loss, expected)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e)


# Forwarded to torch, whose own CUDA path cannot be captured: torch.linalg.ldl_factor_ex's
# cuSOLVER sytrf fails inside a capture (seen with torch 2.11 on an H100); mpslinalg has
# no LDL kernel to capture instead.
TORCH_NOT_CAPTURABLE = {"ldl_factor_ex": "torch's cuSOLVER sytrf (ldl_factor_ex is torch's own) fails under CUDA graph capture"}


@pytest.mark.cuda
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.skip(reason=TORCH_NOT_CAPTURABLE[name])) if name in TORCH_NOT_CAPTURABLE else name
    for name in sorted(set(CALLS) - SYNCHRONISING)
])
def test_cuda_graph_capture_and_replay(name):
    """Captured in a CUDA graph (no host synchronisation, launches on the current stream,
    memory from torch's allocator), replayed on new data: eager's results."""
    require("cuda")
    A, B = inputs("cuda")
    call = CALLS[name]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm up (and compile) outside the capture
            call(A, B)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call(A, B)
    A2, B2 = inputs("cuda")
    A.copy_(A2 * 1.5 + 0.1), B.copy_(B2 - 1)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, call(A, B))


@pytest.mark.parametrize("name", sorted(CALLS))
def test_repeated_calls_keep_memory_and_compiled_kernels(device, name, monkeypatch):
    A, B = inputs(device)
    call = CALLS[name]
    runtime = for_device(device)
    compiles = []
    real = runtime._compile
    monkeypatch.setattr(runtime, "_compile", lambda *a: (compiles.append(a[0].host_name), real(*a))[1])
    for _ in range(20):
        call(A, B)
    allocated, rss, compiled = device_memory(device), process_rss(), len(compiles)
    for _ in range(REPEATS):
        call(A, B)
    assert len(compiles) == compiled, f"recompiled: {compiles[compiled:]}"
    assert device_memory(device) == allocated
    assert process_rss() - rss < 32 * 2**20  # bytes; what a leak of one tensor a call would pass


def device_memory(device) -> int:
    gc.collect()
    _synchronize(device)
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    if device.type == "mps":
        return torch.mps.driver_allocated_memory()
    return 0


def process_rss() -> int:
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_threads_calling_functions_at_once(device, monkeypatch):
    """Two threads calling every function at the same time on an emptied kernel cache:
    each instance is compiled once, and every result is what one thread gets after."""
    A, B = inputs(device)
    runtime = for_device(device)
    monkeypatch.setattr(runtime, "_compiled", {})
    compiles = []
    real = runtime._compile
    monkeypatch.setattr(runtime, "_compile", lambda *a: (compiles.append(a[0].host_name), real(*a))[1])
    backend = _dispatch.cpu_backend() if device.type == "cpu" else None  # a context variable: per thread
    barrier, errors, results = threading.Barrier(2), [], []

    def work():
        try:
            with LA.use_backend(backend) if backend else nullcontext():
                barrier.wait()
                results.append({name: call(A, B) for name, call in CALLS.items()})
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert compiles and len(compiles) == len(set(compiles)), "an instance was compiled twice"
    for result in results:
        for name, call in CALLS.items():
            torch.testing.assert_close(result[name], call(A, B), msg=name)
