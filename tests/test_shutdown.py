"""Shutdown: capsules and imported arrays still alive when the interpreter
exits must not crash it. Each case runs in its own interpreter, once as is
and once in development mode (``-X dev``: debug memory allocators, which
catch a double free or a use after free that a release build may survive).
The exit must be clean: status 0, and no fatal error, segmentation fault or
ignored exception on stderr.
"""

from __future__ import annotations

import textwrap

import pytest

from .figures import counter_fixture
from .interpreter import run_python

figures = counter_fixture("shutdown")

PRELUDE = """
import numpy as np
import gpu_dlpack
"""

CASES = {
    "an unconsumed capsule": """
        CAP = gpu_dlpack.export(np.arange(1000.0), max_version=(1, 0))
        LEGACY = gpu_dlpack.export(np.arange(1000.0))
    """,
    "a consumed capsule held by a NumPy array": """
        CAP = gpu_dlpack.export(np.arange(1000.0), max_version=(1, 0))
        ARR = gpu_dlpack.from_dlpack(CAP)
        VIEW = ARR[::3]
    """,
    "a wrap() object and what it exported": """
        W = gpu_dlpack.wrap(np.arange(1000.0), readonly=True)
        CAP = W.__dlpack__(max_version=(1, 0))
        ARR = np.from_dlpack(W)
    """,
    "a torch tensor imported from a gpu_dlpack capsule": """
        import torch
        T = torch.from_dlpack(gpu_dlpack.export(np.arange(1000.0), max_version=(1, 0)))
        T_LEGACY = torch.from_dlpack(gpu_dlpack.export(np.arange(1000.0)))
        T_WRAP = torch.from_dlpack(gpu_dlpack.wrap(np.arange(10.0)))
    """,
    "an array imported from JAX": """
        import jax.numpy as jnp
        J = jnp.arange(1000.0)
        ARR = gpu_dlpack.from_dlpack(J)
        ADAPTED = gpu_dlpack.export(J, max_version=(1, 0))  # rebuilt, unconsumed
        FROM_ADAPTED = gpu_dlpack.from_dlpack(gpu_dlpack.export(jnp.ones(7), max_version=(1, 0)))
        del J
    """,
    "JAX's capsules taken, passed on and adapted by the core": """
        import jax.numpy as jnp
        import torch
        J = jnp.arange(1000.0)
        W = gpu_dlpack.wrap(J)
        VERSIONED = W.__dlpack__(max_version=(1, 0))  # adapted around JAX's legacy struct, unconsumed
        LEGACY = gpu_dlpack.export(J, copy=True)  # a copy: JAX's arrays are immutable (rule 5)
        T = torch.from_dlpack(gpu_dlpack.wrap(jnp.ones(5)))
        ARR = gpu_dlpack.from_dlpack(jnp.arange(3.0))
        del J
    """,
    "adapted capsules of another producer, unconsumed and consumed": """
        from tests import capsules
        CAP, REC = capsules.make(np.arange(100.0), versioned=False, device=(2, 0), data=0x1000)
        ADAPTED = gpu_dlpack.export(capsules.Producer(CAP, device=(2, 0)), max_version=(1, 0))
        HOST, _ = capsules.make(np.arange(10.0), versioned=True)
        LEGACY = gpu_dlpack.export(capsules.Producer(HOST))
        ARR = gpu_dlpack.from_dlpack(gpu_dlpack.export(capsules.Producer(capsules.make(np.arange(4.0),
                                                                                      versioned=False)[0]),
                                                       max_version=(1, 0)))
    """,
    "a torch tensor exported through gpu_dlpack, unconsumed and consumed": """
        import torch
        T = torch.arange(1000.0)
        CAP = gpu_dlpack.export(T, max_version=(1, 0))
        ARR = gpu_dlpack.from_dlpack(gpu_dlpack.export(T))
        del T
    """,
    "capsules in a reference cycle": """
        class Holder:
            pass
        h = Holder()
        h.self = h
        h.cap = gpu_dlpack.export(np.arange(100.0), max_version=(1, 0))
        h.arr = gpu_dlpack.from_dlpack(gpu_dlpack.export(np.arange(100.0)))
        del h
    """,
    "arrays held by a daemon thread still running": """
        import threading, time
        def hold():
            arr = gpu_dlpack.from_dlpack(gpu_dlpack.export(np.arange(100.0), max_version=(1, 0)))
            cap = gpu_dlpack.export(arr, max_version=(1, 0))
            while True:
                time.sleep(0.01)
        threading.Thread(target=hold, daemon=True).start()
        time.sleep(0.2)
    """,
    "a capsule freed by an atexit handler": """
        import atexit
        CAP = gpu_dlpack.export(np.arange(100.0), max_version=(1, 0))
        ARR = gpu_dlpack.from_dlpack(gpu_dlpack.export(np.arange(100.0), max_version=(1, 0)))
        def late():
            global CAP, ARR
            gpu_dlpack.from_dlpack(CAP)
            del CAP, ARR
        atexit.register(late)
    """,
    "a capsule refused at exit": """
        import atexit
        CAP = gpu_dlpack.export(np.arange(100.0), max_version=(1, 0))
        def late():
            try:
                gpu_dlpack.from_dlpack(CAP, device="nowhere")
            except ValueError:
                pass
        atexit.register(late)
    """,
}

BAD_SIGNS = ("Segmentation fault", "Fatal Python error", "Exception ignored", "Traceback", "core dumped")


@pytest.mark.parametrize("mode", ["release", "dev"])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_the_interpreter_exits_cleanly_with(figures, case, mode):
    for peer in ("torch", "jax"):
        if f"import {peer}" in CASES[case]:
            pytest.importorskip(peer)
    code = PRELUDE + textwrap.dedent(CASES[case]) + "\nprint('reached the end')\n"
    options = ("-X", "dev") if mode == "dev" else ()
    done = run_python(code, options=options, env={"PYTHONMALLOC": "debug"} if mode == "dev" else None)
    figures[f"interpreter exits ({mode})"] += 1
    assert "reached the end" in done.stdout, done.stderr[-3000:]
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-3000:]}"
    for sign in BAD_SIGNS:
        assert sign not in done.stderr, done.stderr[-3000:]


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["release", "dev"])
def test_the_interpreter_exits_cleanly_with_gpu_capsules_alive(figures, mode):
    code = PRELUDE + textwrap.dedent("""
        import cupy
        D = cupy.asarray(np.arange(1000.0))
        CAP = gpu_dlpack.export(D, max_version=(1, 0))
        MOVED = gpu_dlpack.export(np.arange(1000.0), max_version=(1, 0), dl_device=(2, 0))
        ON_GPU = gpu_dlpack.from_dlpack(gpu_dlpack.export(np.arange(10.0), dl_device=(2, 0), max_version=(1, 0)))
        BACK = gpu_dlpack.from_dlpack(gpu_dlpack.export(D, dl_device=(1, 0), max_version=(1, 0)))
        S = cupy.cuda.Stream(non_blocking=True)
        with S:
            E = gpu_dlpack.from_dlpack(gpu_dlpack.export(D, stream=S.ptr, max_version=(1, 0)))
        print('reached the end')
    """)
    options = ("-X", "dev") if mode == "dev" else ()
    done = run_python(code, options=options)
    figures[f"interpreter exits with GPU capsules ({mode})"] += 1
    assert "reached the end" in done.stdout, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    for sign in BAD_SIGNS:
        assert sign not in done.stderr, done.stderr[-3000:]
