"""Where the time of gpu_dlpack's common exchanges goes.

    python bench/steps.py [--repeat N]

Each exchange is timed as a chain of calls, each adding one layer of the
real call path to the one before (the last line is the public call), so the
difference between two lines is what that layer costs. Medians of N
repeats of timeit loops, in ns per call; the peer's own call is printed
first for comparison. A profile by construction: unlike cProfile it adds
no per-call overhead of its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import timeit

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _median_ns(stmt, env, repeat, number):
    times = timeit.repeat(stmt, globals=env, repeat=repeat, number=number)
    return statistics.median(times) / number * 1e9


def chains():
    import numpy as np
    import torch

    import gpu_dlpack
    from gpu_dlpack import _capsule, _exchange, _import, _producer
    from gpu_dlpack._backends import numpy as numpy_backend

    env = {
        "np": np, "torch": torch, "g": gpu_dlpack, "_capsule": _capsule, "_exchange": _exchange,
        "_import": _import, "_producer": _producer, "numpy_backend": numpy_backend,
        "x": np.arange(1000.0), "t": torch.arange(1000.0), "V": (1, 0), "V12": (1, 2),
        "STAMP": numpy_backend._STAMP,
    }
    env["w"] = gpu_dlpack.wrap(env["x"])
    return env, [
        ("gpu_dlpack.export(x, max_version=(1, 0))", [
            ("peer: x.__dlpack__(max_version=(1, 0))", "x.__dlpack__(max_version=V)"),
            ("+ stamp DLPACK_VERSION into the capsule", "_capsule.stamp_version(x.__dlpack__(max_version=V), STAMP)"),
            ("+ backend call (numpy_backend.export_in_place)", "numpy_backend.export_in_place(x, True)"),
            ("+ rule checks (_exchange: arguments, dtype, max_version)", "_exchange._export(x, False, None, V, None, None)"),
            ("= gpu_dlpack.export(x, max_version=(1, 0))", "g.export(x, max_version=V)"),
        ]),
        ("torch.from_dlpack(gpu_dlpack.wrap(x))", [
            ("peer: torch.from_dlpack(x)", "torch.from_dlpack(x)"),
            ("+ a prebuilt wrapper's __dlpack__ (export above, recorded request)", "torch.from_dlpack(w)"),
            ("= torch.from_dlpack(gpu_dlpack.wrap(x)) (+ making the wrapper)", "torch.from_dlpack(g.wrap(x))"),
            ("  of which gpu_dlpack.wrap(x) alone", "g.wrap(x)"),
        ]),
        ("gpu_dlpack.from_dlpack(t)", [
            ("peer: np.from_dlpack(t)", "np.from_dlpack(t)"),
            ("torch's own t.__dlpack__(max_version=(1, 2))", "t.__dlpack__(max_version=V12)"),
            ("+ ask the producer (_producer.request)", "_producer.request(t, max_version=V12)"),
            ("+ open and check the capsule (kind, pointer, header)", "_capsule.checked(_producer.request(t, max_version=V12)[0])"),
            ("+ hand it to NumPy (host_capsule)", "_import.host_capsule(t)"),
            ("= gpu_dlpack.from_dlpack(t) (+ host test)", "g.from_dlpack(t)"),
        ]),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args(argv)
    env, exchanges = chains()
    for title, steps in exchanges:
        print(f"\n{title}")
        before = None
        for label, stmt in steps:
            ns = _median_ns(stmt, env, args.repeat, args.number)
            delta = "" if before is None or label.startswith("  ") else f"{ns - before:+8.0f}"
            print(f"  {label:<72} {ns:8.0f} ns {delta}")
            if not label.startswith("  "):
                before = ns
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
