"""``python -m mpslinalg info | check``."""

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

    print(f"  CPU tensors use: {'OpenCL kernels' if cpu_backend() == 'opencl' else 'torch.linalg'} (MPSLINALG_BACKEND)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpslinalg", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="which runtimes are usable here, and why not")
    check = sub.add_parser("check", help="run every function on the best runtime against SciPy")
    check.add_argument(
        "--kernels", action="store_true",
        help="compile every kernel instance the runtime can launch and run each against SciPy; a row per instance",
    )
    args = parser.parse_args(argv)
    if args.command == "info":
        return info()
    from mpslinalg import check as checks

    return checks.main_kernels() if args.kernels else checks.main()


if __name__ == "__main__":
    sys.exit(main())
