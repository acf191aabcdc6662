"""Times eigh's three routes side by side on the best runtime, to choose their crossovers
(eigh_family.BLOCKS_FROM and eigh_pairs' largest N): the Jacobi kernels (n <= 64 real,
16 complex), Cholesky + SVD, and block Jacobi. One eager call each, host time included
(the way a training step calls eigh), median of three after a warm-up call.

    python scripts/eigh_routes.py [--json FILE]
"""

import argparse
import json

import torch

import mpslinalg as LA
from mpslinalg import bench, eigh_family

CASES = [(10_000, n) for n in (8, 16, 24, 32, 48, 64)] + [(1000, n) for n in (65, 96, 128)] + [
    (100, n) for n in (129, 192, 256)] + [(1, n) for n in (256, 512, 1024)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    runtime, device, selected = bench.best_runtime()
    rows = []
    with selected:
        for dtype in (torch.float32, torch.complex64):
            for count, n in CASES:
                if dtype.is_complex and n > 512:
                    continue
                X = torch.randn(count, n, n, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(n))
                A = X + X.mH
                routes = {"svd": lambda: eigh_family._by_svd(A, False, True), "torch": lambda: torch.linalg.eigh(A)}
                if eigh_family._by_jacobi(A[:1], False, True) is not None:
                    routes["jacobi"] = lambda: eigh_family._by_jacobi(A, False, True)
                if n >= 2 * eigh_family.BLOCK[dtype.is_complex]:
                    routes["blocks"] = lambda: eigh_family._by_blocks(A, False, True)
                if count * n ** 3 >= 10_000 * 64 ** 3 and device.type == "cuda":
                    routes.pop("torch")  # torch's batched syevj takes seconds here
                times = {}
                for name, call in routes.items():
                    times[name] = bench.time_per_call(device, call, loop=1, repeats=3, warmup=1) * 1e3
                w, V = LA.eigh(A)
                wide = torch.complex128 if dtype.is_complex else torch.float64
                Aw, Vw = A.to(wide), V.to(wide)
                norm = torch.linalg.matrix_norm(Aw, 1)
                eps = torch.finfo(dtype).eps
                residual = (torch.linalg.matrix_norm(Aw @ Vw - Vw * w.double()[..., None, :], 1) / (n * norm * eps)).max().item()
                row = {"dtype": str(dtype), "count": count, "n": n, "ms": times, "residual_ratio": residual}
                rows.append(row)
                print(row, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runtime": runtime, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
