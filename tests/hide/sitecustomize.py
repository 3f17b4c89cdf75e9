"""Hides the modules named in GPU_DLPACK_TEST_HIDE (comma-separated, e.g.
``cupy`` or ``cupy,torch,jax,ml_dtypes``) from ``import``, as if they were
not installed. The root conftest installs it in the test process and puts
this folder on PYTHONPATH, so the interpreters the tests start hide them
too (Python imports ``sitecustomize`` at start-up)."""

import os
import sys

HIDDEN = frozenset(n.strip() for n in os.environ.get("GPU_DLPACK_TEST_HIDE", "").split(",") if n.strip())


class HideFinder:
    """Wraps a meta path finder so that it finds nothing of the hidden
    modules: ``import`` raises ModuleNotFoundError and
    ``importlib.util.find_spec`` gives None, as when they are not installed."""

    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            return None
        return self.inner.find_spec(name, path, target)

    def find_distributions(self, *args, **kwargs):
        # importlib.metadata asks every meta path finder: the installed
        # distributions stay found, but those of the hidden modules.
        inner = getattr(self.inner, "find_distributions", None)
        if inner is None:
            return iter(())
        return (d for d in inner(*args, **kwargs) if not _hidden_distribution(d))

    def invalidate_caches(self):
        getattr(self.inner, "invalidate_caches", lambda: None)()


# The distributions whose names do not start with the module they install.
_DISTRIBUTIONS = {"paddle": ("paddlepaddle",), "tvm_ffi": ("apache_tvm_ffi",)}


def _hidden_distribution(dist) -> bool:
    try:
        name = (dist.metadata["Name"] or "").lower().replace("-", "_")
    except Exception:
        return False
    return any(name == h or name.startswith(h + "_") or name in _DISTRIBUTIONS.get(h, ()) or
               name.startswith(tuple(d + "_" for d in _DISTRIBUTIONS.get(h, ()))) for h in HIDDEN)


def install():
    if HIDDEN and not any(isinstance(f, HideFinder) for f in sys.meta_path):
        sys.meta_path[:] = [f if not hasattr(f, "find_spec") else HideFinder(f) for f in sys.meta_path]


install()
