"""The compiled core, ``gpu_dlpack._core`` (built from ``_core.pyx`` and
``core/``): the package's mechanism, loaded here and named nowhere else.

A leaf over ``_errors``: it knows nothing of the modules above, which take
``core`` from here; what the core is told of their decisions is
``_wiring``'s, at the top of the package. There is no other implementation:
without the core gpu_dlpack does not import, and the ImportError says what
to install.
"""

from __future__ import annotations

from typing import Any

from . import _errors

try:
    # By its full name: the import tools, which cannot read a compiled
    # module, take "from . import _core" for an import of the package.
    import gpu_dlpack._core as _loaded
except ImportError as exc:  # not built (no compiler at install) or not loadable here
    raise _errors.core_not_loaded("gpu_dlpack._core", exc) from exc

#: The compiled module (``gpu_dlpack._core``).
core: Any = _loaded
