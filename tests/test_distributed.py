"""Every public function on DTensor batches: two processes (gloo, the CPU, the OpenCL
runtime) each hold half of a batch of matrices; results and gradients equal the
single-process call, a batch-sharded input gives a batch-sharded output with no
communication where the function's last op is one of mpslinalg's, and an input sharded
on a matrix dim is gathered first (the results are the same)."""

import json
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import require

WORLD = 2
# Functions whose output comes from an mpslinalg op on a batch-sharded input (or from
# elementwise ops after one): they keep the batch sharding. The others end in a torch op
# whose DTensor rule replicates (tril/triu, diagonal, reshapes): same values, replicated.
KEEPS_SHARDING = {
    "inv", "inv_ex", "det", "slogdet", "logdet", "solve", "solve_ex", "lu_factor", "lu_factor_ex", "lu_solve",
    "solve_triangular", "qr", "geqrf", "householder_product", "ormqr", "svd", "svdvals", "pinv", "matrix_rank",
    "lstsq", "cholesky", "cholesky_ex", "cholesky_solve", "eigh", "eigvalsh", "eig", "eigvals", "matrix_exp",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    sys.path.insert(0, os.path.dirname(__file__))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor

    import mpslinalg as LA
    from test_hardening import CALLS, NOT_DIFFERENTIABLE, inputs

    mesh = DeviceMesh("cpu", list(range(WORLD)))
    A, B = inputs("cpu")
    report = {}
    with LA.use_backend("opencl"):
        for name, call in sorted(CALLS.items()):
            try:
                differentiable = name not in NOT_DIFFERENTIABLE
                expected = call(A, B)
                outcome = {}
                for placement in ("batch", "matrix"):
                    where = [Shard(0)] if placement == "batch" else [Shard(1)]
                    dA = distribute_tensor(A, mesh, where).requires_grad_(differentiable)
                    dB = distribute_tensor(B, mesh, [Shard(0)] if placement == "batch" else [Replicate()])
                    got = call(dA, dB)
                    same = bool(torch.allclose(got.full_tensor(), expected, rtol=1e-5, atol=1e-5, equal_nan=True))
                    if differentiable:
                        X = A.clone().requires_grad_()
                        grad = torch.autograd.grad(got.sum(), dA)[0].full_tensor()
                        same = same and bool(torch.allclose(grad, torch.autograd.grad(call(X, B).sum(), X)[0], rtol=1e-4, atol=1e-4))
                    outcome[placement] = [same, str(got.placements)]
                report[name] = outcome
            except Exception as error:  # reported by the test, with the function's name
                report[name] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"}
    if rank == 0:
        with open(path, "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


# DTensor gained the sharding rules these functions' torch ops need (select, diagonal's
# backward, ...) after torch 2.7; 2.14 is the version tested.
OLDEST_TORCH = (2, 14)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if tuple(int(p) for p in torch.__version__.split(".")[:2]) < OLDEST_TORCH:
        pytest.skip(f"DTensor batches are tested from torch {OLDEST_TORCH[0]}.{OLDEST_TORCH[1]} (here {torch.__version__})")
    require("opencl")
    path = str(tmp_path_factory.mktemp("distributed") / "report.json")
    mp.spawn(_worker, args=(_free_port(), path), nprocs=WORLD)
    with open(path) as f:
        return json.load(f)


def test_every_function_runs_on_dtensor_batches(report):
    from test_hardening import CALLS

    assert set(report) == set(CALLS)
    errors = {name: r["error"] for name, r in report.items() if "error" in r}
    assert not errors, errors


@pytest.mark.parametrize("placement", ["batch", "matrix"])
def test_results_and_gradients_equal_one_process(report, placement):
    wrong = [name for name, r in report.items() if "error" not in r and not r[placement][0]]
    assert not wrong, wrong


def test_batch_sharding_is_kept_without_communication(report):
    kept = {name for name, r in report.items() if "error" not in r and r["batch"][1] == "(Shard(dim=0),)"}
    assert KEEPS_SHARDING <= kept, KEEPS_SHARDING - kept


def test_a_matrix_dim_sharding_is_gathered_first(report):
    # A factorization reads whole matrices: the input is replicated, and so is the output.
    sharded = {name: r["matrix"][1] for name, r in report.items() if "error" not in r and "Shard" in r["matrix"][1]}
    assert not {name for name in sharded if name in KEEPS_SHARDING}, sharded
