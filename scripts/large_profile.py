"""Where one large call's GPU time goes (CUDA): the profiler's device time per kernel
name (top rows) and the call's wall time, for the cases named on the command line as
name:n[:dtype][:m] (m rows for tall lu/qr), e.g. cholesky_ex:1024 qr:65536:float32:64."""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import mpslinalg as LA


def inputs(name, n, dtype, m):
    g = torch.Generator(device="cuda").manual_seed(0)
    A = torch.randn(m or n, n, generator=g, device="cuda", dtype=dtype)
    if name == "cholesky_ex":
        return (A @ A.mH / n + torch.eye(n, device="cuda"),), {}
    if name == "solve_triangular":
        return (torch.tril(A) + n**0.5 * torch.eye(n, device="cuda"), A), {"upper": False}
    return (A,), {}


def main(cases):
    for case in cases:
        name, n, *rest = case.split(":")
        dtype = getattr(torch, rest[0]) if rest else torch.float32
        m = int(rest[1]) if len(rest) > 1 else 0
        args, kw = inputs(name, int(n), dtype, m)
        for module in (LA, torch.linalg):
            call = lambda: getattr(module, name)(*args, **kw)
            call(); torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record(); call(); e.record(); torch.cuda.synchronize()
            events = [ev for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA]
            busy = sum(ev.device_time for ev in events) / 1e3
            print(f"== {case} {module.__name__}: {s.elapsed_time(e):.2f} ms, kernels {busy:.2f} ms, {len(events)} kernels")
            if module is LA:
                totals = {}
                for ev in events:
                    t, c = totals.get(ev.name, (0.0, 0))
                    totals[ev.name] = (t + ev.device_time / 1e3, c + 1)
                for k, (t, c) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:8]:
                    print(f"   {t:8.3f} ms {c:5d}x  {k[:90]}")


if __name__ == "__main__":
    main(sys.argv[1:])
