"""The compiled core, ``gpu_dlpack._core`` (built from ``_core.pyx`` and
``core/``): the package's mechanism, loaded here and named nowhere else.

A leaf over ``_errors``: it knows nothing of the modules above, which take
``core`` from here; what the core is told of their decisions is
``_wiring``'s, at the top of the package. There is no other implementation:
without the core gpu_dlpack does not import, and the ImportError says what
to install.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder
from typing import Any

from . import _errors


def _shadowed() -> str | None:
    """Where another gpu_dlpack lies on sys.path, past the folder this one
    was imported from (a source tree, whose core is not built, run from its
    own root hides the installed package), or None."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rest = [p for p in sys.path if os.path.realpath(os.path.abspath(p or os.curdir)) != os.path.realpath(here)]
    spec = PathFinder.find_spec(__package__, rest)
    if spec is None or not spec.submodule_search_locations:
        return None
    found = os.path.realpath(list(spec.submodule_search_locations)[0])
    return None if found == os.path.realpath(os.path.join(here, __package__)) else found


try:
    # By its full name: the import tools, which cannot read a compiled
    # module, take "from . import _core" for an import of the package.
    import gpu_dlpack._core as _loaded
except ImportError as exc:  # not built (no compiler at install) or not loadable here
    raise _errors.core_not_loaded("gpu_dlpack._core", exc, _shadowed()) from exc

#: The compiled module (``gpu_dlpack._core``).
core: Any = _loaded
