"""Where a large Cholesky's host time goes on CUDA (issue 35: the GPU idles half of
cholesky_ex 4096 while the CPU shows ~1 ms of Python): one call's host time and wall
time, a cProfile of one call, and the host cost of each piece of a step alone (a bare
launch through ``launch`` and through the runtime, a slice, a baddbmm_).

    python scripts/large_host.py
"""
import time, cProfile, pstats, torch
import mpslinalg as LA
from mpslinalg import cholesky_family as C, runtimes
dev = torch.device("cuda")
for n in (1024, 4096):
    X = torch.randn(n, n, device=dev); A = X @ X.T + n * torch.eye(n, device=dev)
    for _ in range(3): LA.cholesky_ex(A)
    torch.cuda.synchronize()
    t = time.perf_counter(); LA.cholesky_ex(A); h = time.perf_counter() - t; torch.cuda.synchronize(); w = time.perf_counter() - t
    print(f"n={n} host {h*1e3:.2f} ms wall {w*1e3:.2f} ms")
    torch.cuda.synchronize()
    pr = cProfile.Profile(); pr.enable(); LA.cholesky_ex(A); pr.disable(); torch.cuda.synchronize()
    pstats.Stats(pr).sort_stats("tottime").print_stats(12)
L = torch.zeros(4096, 4096, device=dev); f = torch.zeros(64, 1, dtype=torch.int32, device=dev)
torch.cuda.synchronize()
for name, call in [("launch potf2", lambda: C.launch(C.POTF2_BLOCK, 1, A, L, f, 4096, 0, 0, 1, N=64)),
                   ("runtime.launch", None), ("baddbmm_", lambda: L[None, 64:, 64:].baddbmm_(L[None, 64:, :64], L[None, 64:, :64].mH, alpha=-1)),
                   ("slice", lambda: L[None, 64:, 64:])]:
    if call is None:
        rt = runtimes.for_device(dev); inst = C.POTF2_BLOCK.instance(torch.float32, N=64); args = (A, L, f, 4096, 0, 0, 1)
        call = lambda: rt.launch(inst, 1, args, dev)
    call(); torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(200): call()
    h = (time.perf_counter() - t) / 200; torch.cuda.synchronize()
    print(f"{name}: {h*1e6:.1f} us host each")
