"""The ``gpu-dlpack`` command (also ``python -m gpu_dlpack``)."""

from __future__ import annotations

import argparse
import sys


def _demo(args) -> int:
    from ._demo import run_demo

    return 1 if run_demo() else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-dlpack", description="DLPack interop checks and tools."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="exchange arrays between NumPy, PyTorch and JAX and say what happened")
    demo.set_defaults(func=_demo)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
