"""The public API as a typed program uses it, every public name: checked by
mypy (the files of [tool.mypy] in pyproject.toml) and by ``mypy --strict``
on this file alone (scripts/test.sh), never run."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import numpy.typing as npt

import gpu_dlpack
from gpu_dlpack import (
    ArrayView,
    CapsuleInfo,
    ConsumedCapsuleError,
    CopyRequiredError,
    Device,
    DeviceUnreachableError,
    DLDeviceType,
    DLPackVersionError,
    DtypeChangeError,
    Explanation,
    Exportable,
    GpuDlpackError,
    InvalidStreamError,
    NotDLPackError,
    Producer,
    ReadOnlyError,
    Shard,
    StreamError,
    StreamTypeError,
    StreamWarning,
)


class Samples(Producer):
    def __init__(self) -> None:
        self.data = np.arange(3.0)

    def dlpack_memory(self) -> npt.NDArray[np.float64]:
        return self.data


def use(x: npt.NDArray[np.float64]) -> None:
    cap = gpu_dlpack.export(
        x, max_version=(1, 0), copy=None, dl_device=(1, 0), stream=None, readonly=True, min_version=(0, 5),
    )
    info: CapsuleInfo = gpu_dlpack.inspect_capsule(cap)
    same: CapsuleInfo = gpu_dlpack.inspect(cap)
    start: int = info.ptr + same.data
    shape: tuple[int, ...] = info.shape
    strides: tuple[int, ...] | None = info.strides
    read_only: bool = info.readonly
    dtype: np.dtype[Any] | None = info.dtype
    dl_dtype: tuple[int, int, int] = info.dl_dtype
    version: tuple[int, int] | None = info.version
    w: Exportable = gpu_dlpack.wrap(x, readonly=True, min_version="0.4")
    floor: tuple[int, int] | None = w.min_version
    dev: tuple[int, int] = w.__dlpack_device__()
    on_device: Device = w.device
    again: Any = w.__dlpack__(max_version=(1, 0))
    back = gpu_dlpack.from_dlpack(w, device="cpu", copy=False, stream=None, require_alignment=64,
                                  require_contiguous=True)
    host: npt.NDArray[Any] = back if isinstance(back, np.ndarray) else np.asarray(back.get())
    d: Device = Device.of(x)
    kind: DLDeviceType = d.type
    index: int = d.index
    pair: tuple[int, int] = Device("cuda:1").dlpack
    old: tuple[int, int] = gpu_dlpack.set_min_dlpack_version((0, 8))
    gpu_dlpack.set_min_dlpack_version("0.5")
    current: tuple[int, int] = gpu_dlpack.MIN_DLPACK_VERSION
    gpu_dlpack.MIN_DLPACK_VERSION = (0, 5)
    newest: tuple[int, int] = gpu_dlpack.DLPACK_VERSION
    flags: int = gpu_dlpack.FLAG_READ_ONLY | gpu_dlpack.FLAG_IS_COPIED | gpu_dlpack.FLAG_IS_SUBBYTE_TYPE_PADDED
    with gpu_dlpack.use_stream(-1):
        pass
    pieces: list[Shard] = gpu_dlpack.shards(x)
    first: Shard = pieces[0]
    where: Device = first.device
    v: ArrayView = gpu_dlpack.view(x)
    ptr: int = v.ptr
    device_id: int = v.device_id
    reachable: bool = v.is_device_accessible
    producer: Any = v.exporting_obj

    @gpu_dlpack.args_viewable((0,))
    def kernel(a: Any, stream: int | None = None) -> int:
        seen: ArrayView = a.view(stream)
        return seen.ptr

    address: int = kernel(x)
    view_dtype: np.dtype[Any] | None = v.dtype
    ready_on: int | None = v.stream
    buf = (ctypes.c_double * 3)()
    p: Exportable = gpu_dlpack.from_pointer(
        ctypes.addressof(buf), (3,), np.float64, strides=(1,), device="cpu", owner=buf, readonly=False,
    )
    s = Samples()
    made: Any = s.__dlpack__(max_version=(1, 0))
    on: tuple[int, int] = s.__dlpack_device__()
    errors: tuple[type[Exception], ...] = (
        ConsumedCapsuleError, CopyRequiredError, DeviceUnreachableError, DLPackVersionError, DtypeChangeError,
        InvalidStreamError, NotDLPackError, ReadOnlyError, StreamError, StreamTypeError, GpuDlpackError,
    )
    found: Explanation = gpu_dlpack.explain("BufferError: ...")
    remedies: list[str] = found.remedies
    warning: type[Warning] = StreamWarning
    try:
        gpu_dlpack.export(x, max_version=(0, 1))
    except DLPackVersionError as exc:
        message: str = str(exc)
        print(message)
    print(shape, strides, read_only, dtype, dl_dtype, version, floor, dev, again, host, kind, index, pair, old,
          current, newest, flags, where, ptr, view_dtype, ready_on, p, made, on, errors, warning, remedies,
          start, on_device, device_id, reachable, producer, address,
          gpu_dlpack.__version__)
