"""mpslinalg's command line: ``info`` and ``check``."""

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mpslinalg",
        description="mpslinalg's command line: 'info' says which runtimes are usable here; 'check' runs every "
        "function (or every kernel) on the best of them against SciPy.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="which runtimes are usable here, and why not")
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
    from mpslinalg import check as checks

    return checks.main_kernels() if args.kernels else checks.main(args.quick, args.pattern)


if __name__ == "__main__":
    sys.exit(main())
