"""One eager call of the large single-matrix routes (issue 35's table), mpslinalg and
torch.linalg in the same process: milliseconds per call (median of 5, CUDA events
around the call, host time included) and the kernels + device ops of one call."""
import statistics
import sys

import torch

import mpslinalg as LA
from mpslinalg.bench import device_work


def timed(call) -> float:
    call()  # the kernels' compilation and the caches
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def main(sizes: list[int], names: tuple[str, ...] = ("lu_factor_ex", "cholesky_ex", "qr", "solve_triangular")) -> None:
    device = torch.device("cuda")
    for n in sizes:
        for dtype in (torch.float32, torch.complex64):
            g = torch.Generator(device=device).manual_seed(0)
            A = torch.randn(n, n, generator=g, device=device, dtype=dtype)
            S = A @ A.mH / n + torch.eye(n, device=device)
            T = torch.tril(A) + n**0.5 * torch.eye(n, device=device)
            inputs = {"lu_factor_ex": (A,), "cholesky_ex": (S,), "qr": (A,), "solve_triangular": (T, A)}
            for name in names:
                args = inputs[name]
                kw = {"upper": False} if name == "solve_triangular" else {}
                ours = timed(lambda: getattr(LA, name)(*args, **kw))
                theirs = timed(lambda: getattr(torch.linalg, name)(*args, **kw))
                kernels, ops = device_work(device, lambda: getattr(LA, name)(*args, **kw))
                print(f"{name} {n} {str(dtype)[6:]}: {ours:.2f} ms, torch {theirs:.2f} ms ({theirs / ours:.2f}x); "
                      f"{kernels} kernels + {len(ops)} ops", flush=True)


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:] if a.isdigit()]
    names = tuple(a for a in sys.argv[1:] if not a.isdigit())
    main(sizes or [1024, 4096], *([names] if names else []))
