"""Which implementation runs the hot path: the compiled core
(``gpu_dlpack._core``) or pure Python.

A leaf: it loads the core, or says why not, and knows nothing of the
modules above, which any of them may use. What the core is told of their
decisions is ``_wiring``'s, at the top of the package.
``GPU_DLPACK_PURE_PYTHON=1`` (set before the import) runs pure Python.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "GPU_DLPACK_PURE_PYTHON"

core: Any = None  # the compiled module (gpu_dlpack._core), when it is used
#: Why the core is not used, or None when it is.
reason: str | None = None

if os.environ.get(ENV, "").strip() not in ("", "0"):
    reason = f"disabled by {ENV}={os.environ[ENV]}"
else:
    try:
        # By its full name: the import tools, which cannot read a compiled
        # module, take "from . import _core" for an import of the package.
        import gpu_dlpack._core as core
    except ImportError as exc:  # not built (no compiler at install) or not loadable
        reason = f"not built or not loadable ({exc})"


def active() -> str:
    """``"compiled"`` or ``"pure Python"``."""
    return "compiled" if core is not None else "pure Python"


def describe() -> str:
    """The active path, in words (``gpu-dlpack doctor``)."""
    if core is not None:
        return f"compiled core ({core.__file__})"
    return f"pure Python: the compiled core is {reason}"
