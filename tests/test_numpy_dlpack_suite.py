"""NumPy's own DLPack tests (``numpy/_core/tests/test_dlpack.py``, shipped in
NumPy's wheel) run against the layer, in two roles:

* consumer: every ``np.from_dlpack(...)`` in the file is ``gpu_dlpack.from_dlpack(...)``;
* producer: every producer the file hands over, to ``np.from_dlpack`` or by
  calling ``x.__dlpack__(...)``, is ``gpu_dlpack.wrap(x)``.

The file is read from the installed NumPy and rewritten in memory; its test
classes are collected here under the role's name. Where the layer decides
otherwise than NumPy (docs/internals/rules.md, "Differences from NumPy"), the case is an
expected failure with the reason; every other case must pass.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import types

import numpy as np
import pytest

import gpu_dlpack


def _numpy_test_file():
    root = os.path.dirname(np.__file__)
    for sub in ("_core", "core"):  # NumPy 2, NumPy 1
        path = os.path.join(root, sub, "tests", "test_dlpack.py")
        if os.path.exists(path):
            return path
    return None


PATH = _numpy_test_file()
if PATH is None:
    pytest.skip("this NumPy ships no tests/test_dlpack.py", allow_module_level=True)


def _wrapped_from_dlpack(x, *args, **kwargs):
    return np.from_dlpack(gpu_dlpack.wrap(x), *args, **kwargs)


def _load(role: str) -> types.ModuleType:
    with open(PATH, encoding="utf-8") as f:
        source = f.read()
    if role == "consumer":
        source, n = re.subn(r"\bnp\.from_dlpack\(", "_gpu_dlpack.from_dlpack(", source)
    else:
        source, n = re.subn(r"\bnp\.from_dlpack\(", "_wrapped_from_dlpack(", source)
        # x.__dlpack__(...) of a named array (not super().__dlpack__ inside
        # NumPy's own legacy subclass) goes through the wrapper.
        source, m = re.subn(r"\b([a-z_]\w*)\.__dlpack__\(", r"_gpu_dlpack.wrap(\1).__dlpack__(", source)
        n += m
    assert n, "the rewrite matched nothing: NumPy's test file changed shape"
    # Its generator of cases as a list, as pytest 9 asks of parametrize.
    source = re.sub(r"(parametrize\(\"arr\", )new_and_old_dlpack\(\)\)", r"\1list(new_and_old_dlpack()))", source)
    name = f"tests._numpy_test_dlpack_as_{role}"
    module = types.ModuleType(name)
    module.__file__ = PATH
    module._gpu_dlpack = gpu_dlpack
    module._wrapped_from_dlpack = _wrapped_from_dlpack
    exec(compile(source, PATH, "exec"), module.__dict__)
    sys.modules[name] = module
    return module


_consumer = _load("consumer")
_producer = _load("producer")

# (role, test name without parameters): why the layer differs from NumPy.
DECIDED = {
    ("consumer", "test_device"): 'device="gpu" is read as the CUDA GPU: without one that '
        "is a BufferError (nothing can be imported there), not NumPy's ValueError for a "
        "device it does not know",
    ("producer", "test_dunder_dlpack_stream"): "stream=1 for host memory is a ValueError "
        "(a bad value, listing the valid ones), not NumPy's RuntimeError",
    ("producer", "test_dunder_dlpack_copy"): "copy must be True, False or None: anything "
        "else is a TypeError, where NumPy converts it and raises ValueError",
    ("producer", "test_dunder_dlpack_refcount[max_version0]"): "max_version=(0, 0) is below "
        "the version floor, MIN_DLPACK_VERSION (0, 5): a BufferError, where NumPy exports",
}
with open(PATH, encoding="utf-8") as _f:
    if re.search(r"raises\(ValueError\):\s+x\.__dlpack__\(dl_device=\(10, 0\)\)", _f.read()):
        DECIDED[("producer", "test_device")] = (
            "a dl_device the data cannot reach is a BufferError, as the standard and NumPy 2.4 "
            "have it, where NumPy 2.1 to 2.3 raise ValueError (and their tests expect it)"
        )


@pytest.fixture(autouse=True)
def _decided_difference(request):
    role = "consumer" if "AsConsumer" in request.node.nodeid else "producer"
    reason = DECIDED.get((role, request.node.name)) or DECIDED.get((role, request.node.originalname))
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=True))


class TestNumPyDLPackTestsAsConsumer(_consumer.TestDLPack):
    """NumPy's tests with gpu_dlpack.from_dlpack as the consumer."""


class TestNumPyDLPackTestsAsProducer(_producer.TestDLPack):
    """NumPy's tests with every producer wrapped by gpu_dlpack.wrap."""
