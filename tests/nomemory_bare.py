"""Failing allocations of a generator expression and nothing else, run as a
script by ``faults.interpreter_survives_nomemory``: CPython 3.12.1 and
3.13.0 crash here by itself (segfault), with no gpu_dlpack loaded, so a
crash in an exchange's allocation sweep says nothing of the layer there.
3.13.0 survives the first form and crashes on the second (a generator over
an argument, as `any(module.startswith(p) for p in names)` is)."""

import _testcapi

NAMES = ["numpy", "torch", "jax"]


def constant():
    return any(x for x in (1, 2))


def over_argument(module):
    return any(module.startswith(p) for p in NAMES)


for f in (constant, lambda: over_argument("abc")):
    for n in range(40):
        _testcapi.set_nomemory(n, n + 1)
        try:
            f()
        except MemoryError:
            pass
        finally:
            _testcapi.remove_mem_hooks()
