"""Sphinx configuration of gpu_dlpack's documentation.

Built by the test command (``scripts/docs.sh``): the HTML pages with
warnings as errors, in nitpicky mode, then every example as a doctest, on
the compiled core built in place.
The pages are MyST Markdown (the changelog and the mutation reports are
Markdown too, and are included as they are); the API reference is read from
the numpydoc docstrings of the package, which numpydoc also validates.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, ROOT)

# The examples run as the tests do (the root conftest.py): JAX on the CPU,
# with 64-bit types so that dtypes match NumPy's, and four host devices for
# the arrays spread over several devices.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "1")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()

import numpydoc.xref  # noqa: E402

# The package documented: from the tree, with its compiled core built in
# place, asked for by name so that a tree where it is not built stops here,
# with the remedy, rather than at the first example.
try:
    import gpu_dlpack._core  # noqa: E402, F401
except ImportError as exc:
    raise RuntimeError(
        f"the compiled core is not built in this tree ({exc}): python setup.py build_ext --inplace"
    ) from exc
import gpu_dlpack  # noqa: E402

project = "gpu_dlpack"
author = "the gpu_dlpack authors"
copyright = "the gpu_dlpack authors, MIT license"
release = version = gpu_dlpack.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "numpydoc",
    "myst_parser",
    "gpu_dlpack_docs",  # docs/_ext: the troubleshooting catalogue, the layers, the API's coverage
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext"]
templates_path: list[str] = []

# Every cross-reference must resolve (-n). Nothing is fetched from the
# network (no intersphinx): names of other projects are written as literals.
nitpicky = True
# The standard's types as the layer raises them (gpu_dlpack._errors.BufferError...),
# the bases the error classes show: internal, named as text.
nitpick_ignore = [
    ("py:class", f"gpu_dlpack._errors.{name}")
    for name in ("BufferError", "TypeError", "ValueError", "NotImplementedError", "ImportError",
                 "ModuleNotFoundError")
]

# -- MyST ---------------------------------------------------------------------

myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]

# -- autodoc and numpydoc -----------------------------------------------------

# The signature shows names and defaults; the types are in each docstring's
# Parameters and Returns, where numpydoc links the package's own.
autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = True
numpydoc_xref_ignore = "all"  # only the names below become links
# numpydoc's own aliases point into Python's and NumPy's inventories, which
# are not fetched: their words stay words.
numpydoc_xref_aliases = {word: word for word in numpydoc.xref.DEFAULT_LINKS}
numpydoc_xref_aliases.update({
    name: f"gpu_dlpack.{name}" for name in gpu_dlpack.__all__ if isinstance(getattr(gpu_dlpack, name), type)
})
numpydoc_xref_aliases["Match"] = "gpu_dlpack._explain.Match"
# Each public docstring has its sections: an undocumented or unknown
# parameter, a function without Returns, is a build error. (That every
# public function and class has an Examples section is a test:
# tests/test_docs.py.)
numpydoc_validation_checks = {
    "GL06", "GL07", "GL08", "PR01", "PR02", "PR03", "PR04", "PR07", "PR10", "RT01", "RT03", "YD01",
}
numpydoc_validation_exclude = {
    # Records the package makes, never the caller: their fields are their
    # Attributes, not the Parameters of a constructor.
    r"\.(CapsuleInfo|ArrayView|Shard|Conversion|Explanation|Match|Report|Row|Rule)$",
    # The codes of dlpack.h, named in the enum.
    r"\.DLDeviceType(\.\w+)?$",
}

# -- doctest ------------------------------------------------------------------

# The examples run as they are shown. A GPU-only example is marked
# ``:skipif: not gpu``: shown, and run only where CuPy sees a GPU.
doctest_global_setup = """
import gpu_dlpack
from gpu_dlpack_docs import gpu_usable as _gpu_usable
gpu = _gpu_usable()
"""
doctest_default_flags = (
    __import__("doctest").ELLIPSIS | __import__("doctest").NORMALIZE_WHITESPACE
    | __import__("doctest").DONT_ACCEPT_TRUE_FOR_1
)

# -- HTML ---------------------------------------------------------------------

html_theme = "pydata_sphinx_theme"
html_title = f"gpu_dlpack {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_sidebars = {"index": [], "troubleshooting": []}
html_static_path: list[str] = []
html_show_sourcelink = False
