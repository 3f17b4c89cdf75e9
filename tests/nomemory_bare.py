"""Failing allocations of a generator expression and nothing else, run as a
script by ``faults.interpreter_survives_nomemory``: CPython 3.12.1 crashes
here by itself (segfault), with no gpu_dlpack loaded, so a crash in an
exchange's allocation sweep says nothing of the layer there."""

import _testcapi


def f():
    return any(x for x in (1, 2))


for n in range(40):
    _testcapi.set_nomemory(n, n + 1)
    try:
        f()
    except MemoryError:
        pass
    finally:
        _testcapi.remove_mem_hooks()
