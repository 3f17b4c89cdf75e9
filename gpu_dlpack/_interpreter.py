"""The interpreter gpu_dlpack runs in: the main interpreter of the process,
with the GIL.

Subinterpreters are refused at import, whichever interpreter imports the
package first: the compiled core keeps its state in C globals that one
interpreter owns, the capsule destructors and deleters the layer lends are
called from any interpreter, and NumPy, which every exchange needs, does not
support subinterpreters either (imported first in one, it may hang).

A free-threaded CPython (3.13t and later) running without its GIL is refused
too: the compiled core's caches are unsynchronized (docs/internals/core.md,
"Interpreters").
"""

from __future__ import annotations

import importlib
import sys

from . import _errors


def interpreters() -> tuple:
    """``(current, main)``: the ids of the current and the main interpreter
    on CPython (the same in the main interpreter); ``(0, 0)`` elsewhere.

    Read from CPython's own interpreters module, which loads in any
    interpreter: ctypes (the C API's states) does not load in a
    subinterpreter of CPython 3.12+, whose ImportError would not say why."""
    if sys.implementation.name != "cpython":
        return 0, 0
    for name in ("_interpreters", "_xxsubinterpreters"):  # CPython 3.13+, before
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        current, main = module.get_current(), module.get_main()
        if isinstance(current, tuple):  # 3.13+: (id, how it was made)
            current, main = current[0], main[0]
        return int(current), int(main)
    import ctypes  # an interpreter built without the module: the C API's states

    api = ctypes.pythonapi
    current = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyInterpreterState_Get", api))
    main = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyInterpreterState_Main", api))
    return current(), main()


def check(current, main) -> None:
    """ImportError unless ``current`` is the main interpreter."""
    if current != main:
        raise _errors.subinterpreter()


def check_main() -> None:
    """ImportError in a subinterpreter, or without the GIL (before anything
    else is imported)."""
    check(*interpreters())
    check_gil()


def check_gil() -> None:
    """ImportError on a free-threaded CPython whose GIL is off."""
    enabled = getattr(sys, "_is_gil_enabled", None)  # CPython 3.13+, on every build
    if enabled is not None and not enabled():
        raise _errors.gil_disabled(sys.version.split()[0])
