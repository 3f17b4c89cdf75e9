"""The ``gpu-dlpack`` command (also ``python -m gpu_dlpack``).

A setting read from the environment that the layer cannot take
(``GPU_DLPACK_MIN_VERSION=zero``) stops ``demo`` and ``doctor`` before they
run, with the layer's own message and exit status 2, as a bad argument
does; ``explain`` reads no setting.

When the reader of standard output goes away (``gpu-dlpack doctor | head``),
the command stops quietly with exit status 141, the status a shell gives a
program ended by SIGPIPE, as ``cat`` or ``yes`` would.

Floor: the faces, under ``__main__`` (it imports the doctor, the demo and
``explain`` when asked).
"""

from __future__ import annotations

import argparse
import os
import sys

#: Exit status when standard output was closed by its reader: 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 141


def _demo(args) -> int:
    from ._demo import run_demo

    return 1 if run_demo() else 0


def _doctor(args) -> int:
    # The probes hand JAX unaligned data on purpose; jaxlib before 0.9 logs a
    # warning for each copy it then makes (its C++ logging, which reads this
    # variable when it loads). The report says what was copied. "1" is what
    # importing jax sets when it finds none (a parent that imported it
    # passes that on); a level the user chose otherwise is kept.
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "") in ("", "1"):
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    from . import doctor

    try:
        report = doctor.run(extra=args.library, strict=args.strict)
    except ModuleNotFoundError as exc:
        print(f"gpu-dlpack: error: {exc}", file=sys.stderr)
        return 2
    print(doctor.to_json(report) if args.json else doctor.render(report))
    return report["exit_status"]


def _explain(args) -> int:
    from . import _explain

    if args.list:
        for e in _explain.entries():
            print(f"{e.id:<38} {e.library}: {e.exception}")
        return 0
    if not args.text and sys.stdin.isatty():
        print("gpu-dlpack explain: give the error text as an argument, or pipe it in "
              "(for example: python script.py 2>&1 | gpu-dlpack explain)", file=sys.stderr)
        return 2
    text = " ".join(args.text) if args.text else sys.stdin.read()
    out, status = _explain.run(text, as_json=args.json)
    print(out)
    return status


def _settings_refused() -> str | None:
    """The layer's refusal of a setting in the environment, or None: each
    setting is read as an exchange would read it."""
    from . import _versions

    try:
        _versions.min_version()
    except ValueError as exc:
        return str(exc)
    return None


def build_parser(argv=None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-dlpack", description="DLPack interop checks and tools.",
        epilog=f"Exit status {EXIT_BROKEN_PIPE} when the reader of standard output closes it early.",
    )
    # Printed by main, not by argparse, which would hide a closed pipe.
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    asks_version = "--version" in (sys.argv[1:] if argv is None else argv)
    sub = parser.add_subparsers(dest="command", required=not asks_version)
    demo = sub.add_parser("demo", help="exchange arrays between NumPy, PyTorch and JAX and say what happened")
    demo.set_defaults(func=_demo, reads_settings=True)

    doctor = sub.add_parser(
        "doctor",
        help="measure what each installed array library does with DLPack, and what gpu_dlpack fixes",
        description="Probe every installed DLPack library with small live exchanges, print a "
        "producer-by-consumer matrix (directly and through gpu_dlpack), and a remedy for each "
        "problem. Exit status 0 when every exchange through gpu_dlpack works (with --strict: and "
        "nothing was found that gpu_dlpack does not correct); 2 for a --library that cannot be imported.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON (for CI and bug reports)")
    doctor.add_argument(
        "--library", action="append", default=[], metavar="MODULE",
        help="also probe this importable module (repeatable; one that cannot be imported is an error)",
    )
    doctor.add_argument(
        "--strict", action="store_true",
        help="exit status 1 also on what gpu_dlpack does not correct (an installed library that "
        "cannot be used, a fault the table does not list for the installed version, an entry it no "
        "longer finds), not only on failed exchanges; the direct path's hazards it corrects pass",
    )
    doctor.set_defaults(func=_doctor, reads_settings=True)

    explain = sub.add_parser(
        "explain",
        help="say what a DLPack error message means and how to fix it",
        description="Match an error message (or a whole traceback) against the DLPack errors "
        "that NumPy, PyTorch, JAX, CuPy and gpu_dlpack raise. Reads standard input when no text "
        "is given. Exit status 0 when something matched, 1 when nothing did.",
    )
    explain.add_argument("text", nargs="*", help="the error text (default: standard input)")
    explain.add_argument("--json", action="store_true", help="print the matches as JSON")
    explain.add_argument("--list", action="store_true", help="list the known errors")
    explain.set_defaults(func=_explain)
    return parser


def main(argv=None) -> int:
    try:
        args = build_parser(argv).parse_args(argv)
        if args.version:
            from . import __version__

            print(f"gpu-dlpack {__version__}")
            status = 0
        elif getattr(args, "reads_settings", False) and (refused := _settings_refused()) is not None:
            print(f"gpu-dlpack {args.command}: error: {refused}", file=sys.stderr)
            status = 2
        else:
            status = args.func(args)
        sys.stdout.flush()  # here, not at exit, where a closed pipe cannot be caught
    except BrokenPipeError:
        # Standard output to the null device, so that the flush Python makes
        # at exit does not fail again over the closed pipe.
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, sys.stdout.fileno())
            os.close(null)
        except (OSError, ValueError):
            pass
        return EXIT_BROKEN_PIPE
    return status


if __name__ == "__main__":
    sys.exit(main())
