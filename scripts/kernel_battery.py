"""Every public function on a small battery of shapes on CUDA (``cpu``: OpenCL), for compute-sanitizer
(scripts/sanitize.sh): tails included (n not a multiple of a block or SIMD width, batch
1, batches that leave a threadgroup part-full). Prints how many of the CUDA runtime's
kernel instantiations it launched, and which it did not."""

import os
import sys

import torch

import mpslinalg as LA
from mpslinalg import runtimes
from mpslinalg._kernel import KERNELS

# BATTERY_SIZES=1,3,16,33 (say) for a shorter run: racecheck is the slowest tool.
SIZES = tuple(int(n) for n in os.environ.get("BATTERY_SIZES", "1,2,3,4,5,8,12,16,17,32,33,64,65,130").split(","))
BATCHES = ((), (3,), (37,))
# BATTERY_DTYPES=float32,complex64 (Metal's) halves the run.
DTYPES = tuple(getattr(torch, name) for name in os.environ.get("BATTERY_DTYPES", "float32,complex64,float64,complex128").split(","))


def triangular(A, B):
    """Every triangle flag with 1, 8, 16 and 40 right-hand sides (trsm_rows, trsm_small and
    trsm_by_inverse's panel widths), and tril_inverse where it applies."""
    wide = torch.cat((B,) * 5, -1)
    for upper in (False, True):
        for unit in (False, True):
            T = A.triu() if upper else A.tril()
            for rhs in (B[..., :1], B, torch.cat((B, B), -1), wide):
                LA.solve_triangular(T, rhs, upper=upper, unitriangular=unit)
    if not A.is_complex() and A.shape[-1] in (16, 32, 64):
        LA.tril_inverse(A.tril())


# family -> the calls on a square batch A and right-hand sides B; BATTERY_FAMILIES=lu,qr
# (say) runs some, so that a slow tool (racecheck) fits a run per family.
FAMILIES = {
    "inverse": lambda A, B: (LA.inv_ex(A), LA.det(A)),
    "lu": lambda A, B: (
        LA.slogdet(A), LA.lu_factor_ex(A), LA.lu_factor_ex(torch.cat((A, A, A), -2)),  # and tall
        LA.lu_solve(*LA.lu_factor(A), B), LA.solve_ex(A, B),
    ),
    "triangular": triangular,
    "qr": lambda A, B: (
        LA.qr(A), LA.qr(torch.cat((A, A), -2), mode="complete"), LA.ormqr(*LA.geqrf(A), B),
        LA.householder_product(*LA.geqrf(A)),
    ),
    "svd": lambda A, B: (LA.svd(A), LA.svd(torch.cat((A, A), -2), full_matrices=True), LA.pinv(A)),
}
SELECTED = os.environ.get("BATTERY_FAMILIES", ",".join(FAMILIES)).split(",")


def main(device: str = "cuda") -> int:
    launched = set()
    runtime = runtimes.for_device(torch.device(device))
    real = runtime.launch

    def counting(instance, *args):  # every family's launch passes here with its instance
        launched.add(instance.host_name)
        return real(instance, *args)

    runtime.launch = counting
    generator = torch.Generator(device=device).manual_seed(0)
    for dtype in DTYPES:
        for n in SIZES:
            print(f"{dtype} n={n}", flush=True)  # where a run cut by a timeout got to
            for batch in BATCHES:
                A = torch.randn(*batch, n, n, dtype=dtype, device=device, generator=generator) + 3 * torch.eye(n, dtype=dtype, device=device)
                B = torch.randn(*batch, n, 8, dtype=dtype, device=device, generator=generator)
                for family in SELECTED:
                    FAMILIES[family](A, B)
    for dtype in (torch.float32, torch.complex64):  # many tiny matrices: many threadgroups, the last part-full
        A = torch.randn(1000, 3, 3, dtype=dtype, device=device, generator=generator) + 3 * torch.eye(3, dtype=dtype, device=device)
        for family in SELECTED:
            FAMILIES[family](A, A)
    # Panels by height: 1024 threads with 1, 2, 4 rows each, then the tall panel; where
    # pipelines allow fewer than 1024 threads (as a Metal pipeline may), the 256-thread shapes.
    for dtype in DTYPES:
        for threads in (1024, 512):
            with runtimes.thread_limit(threads):
                for m in (300, 600, 1100, 2100, 4200):
                    A = torch.randn(m, 40, dtype=dtype, device=device, generator=generator)
                    if "lu" in SELECTED:
                        LA.lu_factor_ex(A)
                    if "qr" in SELECTED:
                        LA.qr(A)
    if "triangular" in SELECTED:
        for dtype in (d for d in DTYPES if not d.is_complex):
            for chunk in (16, 32, 64):
                A = 0.1 * torch.randn(2, 3 * chunk, 2, chunk, dtype=dtype, device=device, generator=generator)
                LA.solve_tril(A)
    if device == "cuda":
        torch.cuda.synchronize()
    every = {
        i.host_name for k in KERNELS for i in k.all_instances()
        if i.scalar.dtype in runtime.dtypes and (i.scalar.dtype in DTYPES or not (i.scalar.dtype.is_floating_point or i.scalar.dtype.is_complex))
    }
    missing = sorted(every - launched)
    print(f"launched {len(launched & every)} of {len(every)} {runtime.name} kernel instantiations")
    if missing:
        print("not launched: " + ", ".join(missing))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["cpu"]:  # the OpenCL runtime: a trial of the battery without a GPU
        with LA.use_backend("opencl"):
            sys.exit(main("cpu"))
    sys.exit(main())
