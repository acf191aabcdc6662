"""Where a small call's host time goes, on the best runtime: for each case, the host
time of one call (until it returns), the same with the runtime's launch stubbed out
(mpslinalg's Python and torch's ops alone), the bare launch of the kernel the call
makes (the runtime's ``launch`` with prepared arguments), and torch.linalg's host
time beside them; then a cProfile of the first case's calls.

    python scripts/host_profile.py [--profile N] [--json FILE]

Medians of 200 calls after a warm-up; gc off while timing.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats
import statistics
import time
from unittest import mock

import torch

import mpslinalg as LA
from mpslinalg import bench, runtimes


def host_time(call, calls: int = 200) -> float:
    for _ in range(5):
        call()
    samples = []
    gc.disable()
    for _ in range(calls):
        begin = time.perf_counter()
        call()
        samples.append(time.perf_counter() - begin)
    gc.enable()
    return statistics.median(samples)


def launches_of(runtime, call):
    """The (instance, groups, args, device) of each launch one call makes."""
    made = []
    real = runtime.launch

    def record(instance, groups, args, device):
        made.append((instance, groups, tuple(args), device))
        real(instance, groups, args, device)

    with mock.patch.object(runtime, "launch", record):
        call()
    return made


def cases(device):
    g = torch.Generator(device).manual_seed(0)
    out = []
    for dtype in (torch.float32, torch.complex64):
        for n in (8, 16, 32):
            A = torch.randn(10**4, n, n, dtype=dtype, device=device, generator=g) + n**0.5 * torch.eye(n, dtype=dtype, device=device)
            B = torch.randn(10**4, n, 8, dtype=dtype, device=device, generator=g)
            P = A @ A.mH / n + torch.eye(n, dtype=dtype, device=device)
            L = A.tril()
            LU, piv = LA.lu_factor(A)
            tag = f"{n} {str(dtype)[6:]}"
            out += [
                (f"lu_factor_ex {tag}", lambda A=A: LA.lu_factor_ex(A), lambda A=A: torch.linalg.lu_factor_ex(A)),
                (f"cholesky_ex {tag}", lambda P=P: LA.cholesky_ex(P), lambda P=P: torch.linalg.cholesky_ex(P)),
                (f"solve_triangular {tag}", lambda L=L, B=B: LA.solve_triangular(L, B, upper=False),
                 lambda L=L, B=B: torch.linalg.solve_triangular(L, B, upper=False)),
                (f"lu_solve {tag}", lambda LU=LU, p=piv, B=B: LA.lu_solve(LU, p, B), lambda LU=LU, p=piv, B=B: torch.linalg.lu_solve(LU, p, B)),
                (f"solve {tag}", lambda A=A, B=B: LA.solve(A, B), lambda A=A, B=B: torch.linalg.solve(A, B)),
                (f"inv {tag}", lambda A=A: LA.inv(A), lambda A=A: torch.linalg.inv(A)),
                (f"det {tag}", lambda A=A: LA.det(A), lambda A=A: torch.linalg.det(A)),
            ]
    S = torch.randn(1024, 4, 4, device=device, generator=g) / 4
    out.append(("matrix_exp 4 float32", lambda: LA.matrix_exp(S), lambda: torch.linalg.matrix_exp(S)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", type=int, default=2000, help="calls of the first case under cProfile")
    parser.add_argument("--json")
    args = parser.parse_args()
    runtime, device, selected = bench.best_runtime()
    rows = []
    with selected:
        runtime = runtimes.for_device(device)
        print(f"{'case':28s} {'ours':>8s} {'stubbed':>8s} {'launch':>8s} {'torch':>8s} {'launches':>8s}  (us, host)")
        for name, ours, theirs in cases(device):
            made = launches_of(runtime, ours)
            whole = host_time(ours)
            stubbed = bench._stubbed_host_times(device, [ours], per_round=200, rounds=3)[0]
            bare = sum(host_time(lambda m=m: runtime.launch(*m)) for m in made)
            torch_host = host_time(theirs)
            if device.type == "cuda":
                torch.cuda.synchronize()
            row = {"case": name, "ours": whole * 1e6, "stubbed": stubbed * 1e6, "launch": bare * 1e6,
                   "torch": torch_host * 1e6, "launches": len(made)}
            rows.append(row)
            print(f"{name:28s} {row['ours']:8.1f} {row['stubbed']:8.1f} {row['launch']:8.1f} {row['torch']:8.1f} {len(made):8d}", flush=True)
            if args.json:  # row by row: a run stopped by its time limit keeps what it measured
                with open(args.json, "w") as file:
                    json.dump(rows, file, indent=1)
        first = cases(device)[0][1]
        if not args.profile:
            return
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.profile):
            first()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)



if __name__ == "__main__":
    main()
