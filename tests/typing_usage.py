"""The public API as a typed program uses it: checked by mypy (the files of
[tool.mypy] in pyproject.toml), never run."""

from __future__ import annotations

from typing import Any

import numpy as np

import gpu_dlpack
from gpu_dlpack import CapsuleInfo, Device, DLDeviceType, Exportable


def use(x: np.ndarray) -> None:
    cap = gpu_dlpack.export(x, max_version=(1, 0), copy=None, dl_device=(1, 0), stream=None)
    info: CapsuleInfo = gpu_dlpack.inspect(cap)
    shape: tuple[int, ...] = info.shape
    read_only: bool = info.read_only
    w: Exportable = gpu_dlpack.wrap(x, readonly=True)
    dev: tuple[int, int] = w.__dlpack_device__()
    back: Any = gpu_dlpack.from_dlpack(w, device="cpu", copy=False, stream=None)
    d: Device = Device.of(x)
    kind: DLDeviceType = d.type
    index: int = d.index
    pair: tuple[int, int] = Device("cuda:1").dlpack
    old: tuple[int, int] = gpu_dlpack.set_min_dlpack_version((0, 8))
    gpu_dlpack.set_min_dlpack_version("0.5")
    with gpu_dlpack.use_stream(-1):
        pass
    print(shape, read_only, dev, back, kind, index, pair, old)
