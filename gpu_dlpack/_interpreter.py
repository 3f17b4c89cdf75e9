"""The interpreter gpu_dlpack runs in: the main interpreter of the process.

Subinterpreters are refused at import, whichever interpreter imports the
package first: the compiled core keeps its state in C globals that one
interpreter owns, the capsule destructors and deleters the layer lends are
called from any interpreter, and NumPy, which every exchange needs, does not
support subinterpreters either (imported first in one, it may hang).
"""

from __future__ import annotations

import ctypes
import sys

from . import _errors


def interpreters() -> tuple:
    """``(current, main)``: the C API's current and main interpreter states
    on CPython (the same in the main interpreter); ``(0, 0)`` elsewhere."""
    if sys.implementation.name != "cpython":
        return 0, 0
    api = ctypes.pythonapi
    current = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyInterpreterState_Get", api))
    main = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyInterpreterState_Main", api))
    return current(), main()


def check(current, main) -> None:
    """ImportError unless ``current`` is the main interpreter."""
    if current != main:
        raise _errors.subinterpreter()


def check_main() -> None:
    """ImportError in a subinterpreter (before anything else is imported)."""
    check(*interpreters())
