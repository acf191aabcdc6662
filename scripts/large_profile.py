"""Where one large call's GPU time goes (CUDA): for each of ``bench large``'s cases whose
"function case" matches the regular expression given (e.g. "cholesky_ex 4096x4096
float32" or "65536x64"), the call's time, its kernels' device time, and the kernel names
that take the most, beside torch.linalg's call.

    python scripts/large_profile.py REGEX
"""
import re
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from mpslinalg import bench


def profiled(call) -> tuple[float, list]:
    call()  # compiles
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as profiler:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end), [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def main(pattern: str) -> None:
    for function, case, ours, theirs, *_ in bench._large_cases(torch.device("cuda")):
        if not re.search(pattern, f"{function} {case}"):
            continue
        for name, call in (("mpslinalg", ours), ("torch.linalg", theirs)):
            ms, kernels = profiled(call)
            busy = sum(e.device_time for e in kernels) / 1e3
            print(f"== {function} {case}, {name}: {ms:.2f} ms, kernels {busy:.2f} ms, {len(kernels)} kernels")
            if call is ours:
                totals: dict[str, tuple[float, int]] = {}
                for e in kernels:
                    time, count = totals.get(e.name, (0.0, 0))
                    totals[e.name] = (time + e.device_time / 1e3, count + 1)
                for kernel, (time, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:8]:
                    print(f"   {time:8.3f} ms {count:5d}x  {kernel[:90]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
