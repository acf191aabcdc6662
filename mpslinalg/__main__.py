"""mpslinalg's command line: ``info``, ``kernels`` and ``check``."""

from __future__ import annotations

import argparse
import sys

import torch


def info() -> int:
    import mpslinalg

    print(f"mpslinalg {mpslinalg.__version__}, torch {torch.__version__}, Python {sys.version.split()[0]}")
    for name, status in mpslinalg.backends().items():
        print(f"  {name:<7} {status}")
    from mpslinalg._dispatch import cpu_backend

    if cpu_backend() == "opencl":
        print("CPU tensors run on mpslinalg's OpenCL kernels (MPSLINALG_BACKEND=opencl); unset it for torch.linalg.")
    else:
        print("CPU tensors are computed by torch.linalg; to run mpslinalg's kernels on the CPU, set "
              "MPSLINALG_BACKEND=opencl or call inside `with mpslinalg.use_backend(\"opencl\"):`.")
    return 0


def kernel_table() -> str:
    """Markdown: for each public function, the dtypes its kernels take on each runtime
    (from the kernel declarations of its module); everything else goes to torch.linalg."""
    import mpslinalg
    from mpslinalg._kernel import Kernel
    from mpslinalg.runtimes import RUNTIMES

    names = {"metal": "Metal (MPS tensors)", "cuda": "CUDA (CUDA tensors)", "opencl": "OpenCL (CPU tensors, opt-in)"}
    lines = ["| function | " + " | ".join(names.values()) + " |", "|---|" + "---|" * len(names)]
    for name in mpslinalg.__all__:
        function = getattr(mpslinalg, name)
        module = sys.modules[function.__module__]
        kernels = [k for k in vars(module).values() if isinstance(k, Kernel)]
        if not kernels:
            continue  # backends, use_backend
        cells = []
        for runtime in names:
            dtypes = [d for d in RUNTIMES[runtime].dtypes if any(k.exists(d, **v) for k in kernels for v in k.instances)]
            cells.append(", ".join(str(d).removeprefix("torch.") for d in dtypes))
        if name == "solve_tril":  # computes in float32 whatever it is given
            cells = ["float32" for _ in cells]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    counts = {runtime: len(RUNTIMES[runtime].instances()) for runtime in names}
    lines += ["", "Kernel instances (template instantiations, each compiled on first use; `check --kernels` "
              "compiles and runs every one): " + ", ".join(f"{count} on {names[r].split(' (')[0]}" for r, count in counts.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mpslinalg",
        description="mpslinalg's command line: 'info' says which runtimes are usable here; 'kernels' which "
        "functions run on kernels where; 'check' runs every function (or every kernel) on the best runtime against SciPy.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="which runtimes are usable here, and why not")
    sub.add_parser("kernels", help="which functions run on kernels on which runtime and dtype (a Markdown table)")
    check = sub.add_parser("check", help="run every function on the best runtime against SciPy")
    check.add_argument(
        "--kernels", action="store_true",
        help="compile every kernel instance the runtime can launch and run each against SciPy; a row per instance",
    )
    check.add_argument("--quick", action="store_true", help="only the first case of each family of functions")
    check.add_argument("-k", dest="pattern", default="", metavar="PATTERN",
                       help="only the functions whose names contain PATTERN (e.g. -k eigh)")
    args = parser.parse_args(argv)
    if args.command == "info":
        return info()
    if args.command == "kernels":
        print(kernel_table(), end="")
        return 0
    from mpslinalg import check as checks

    return checks.main_kernels() if args.kernels else checks.main(args.quick, args.pattern)


if __name__ == "__main__":
    sys.exit(main())
