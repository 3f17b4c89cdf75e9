"""``gpu_dlpack.convert`` as a typed program uses it: checked by mypy (the
files of [tool.mypy] in pyproject.toml), never run. ``assert_type`` fails
the check unless the result type is exactly the one named."""

from __future__ import annotations

import importlib
from typing import Any

import jax
import numpy as np
import torch
from typing_extensions import assert_type

import gpu_dlpack
from gpu_dlpack import Conversion, Explanation


def use(x: np.ndarray, r: np.ndarray) -> None:
    assert_type(gpu_dlpack.convert(x, "torch"), torch.Tensor)
    assert_type(gpu_dlpack.convert(x, "numpy", copy=True), np.ndarray)
    assert_type(gpu_dlpack.convert(x, "jax", device="cpu", stream=None), jax.Array)
    assert_type(gpu_dlpack.convert(r, "torch", on_readonly="share"), torch.Tensor)
    done = gpu_dlpack.convert(r, "torch", report=True)
    assert_type(done, Conversion)
    copied: bool | None = done.copied
    faults: tuple[str, ...] = done.faults
    assert_type(gpu_dlpack.convert(x, torch), Any)  # a module: the type system cannot say
    # Another library by name is passed as its module (a name convert does
    # not know is a type error: tests/test_typing.py).
    assert_type(gpu_dlpack.convert(x, importlib.import_module("some_library")), Any)
    assert_type(gpu_dlpack.convert(x, "torch", require_alignment=64, require_contiguous=True), torch.Tensor)
    found = gpu_dlpack.explain("BufferError: ...")
    assert_type(found, Explanation)
    if found:
        print(found[0].remedies, str(found))
    print(copied, faults)
