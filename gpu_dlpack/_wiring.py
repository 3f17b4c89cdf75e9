"""Wiring the compiled core: what it is told, once every module is loaded.

The core is mechanism only. Python tells it, once, what the policy modules
decided (the dtypes and device types exchanged, the NumPy dtype of each
DLPack dtype, which producer types may be imported through their DLPack C
exchange API and with which guards) and it hands every case it was not told
about back to the general path in Python, which decides and words the error.
This module stands just under the package's face (``__init__`` calls
``install``), above the two directions it names to the core.
"""

from __future__ import annotations

import numpy as np

from . import _capsule, _devices, _dtypes, _exchange, _export, _import, _peers, _streams, _versions
from ._backends import numpy as numpy_backend
from ._devices import Device
from ._compiled import core

#: Whether producers' C exchange APIs are read (False: their __dlpack__ is
#: always asked). Call ``core.forget()`` after a change.
EXCHANGE_API = True
#: Whether the core asks the producers with a host test in ``_peers`` (JAX)
#: for their capsules itself (False: the Python path does). Call
#: ``core.forget()`` after a change.
CAPSULES = True


def _import_plan(t):
    """What the core may do with instances of producer type ``t`` without
    asking Python: ``(api, attrs, methods, codes, host)``, or None.

    ``api`` is the type's DLPack C exchange API, read with guards: attributes
    and methods (each asked of arrays of the dtype codes in its mask in
    ``codes``) that must be false for the exchange to be the plain one (else
    the general path runs, and says what the producer refuses or resolves
    the view: ``_peers.VIEWS``); None when it is not read. ``host`` is
    ``(method, answer, pieces, deleted)``, the type's host test (``_peers.HostTest``),
    when the core may ask the producer's ``__dlpack__`` itself for host
    memory: it takes the plain capsules, and hands every other one to the
    Python functions that would have received them (an error the producer
    raises, to the ones that go on from it)."""
    peer = _peers.of_array_type(t) if isinstance(t, type) else None
    if peer is None:
        return None
    api = t.__dict__.get("__dlpack_c_exchange_api__")
    if api is None or not EXCHANGE_API or peer.exchange is None:
        api = None  # other producers keep their __dlpack__, whose checks are theirs
    host = None if peer.host_test is None or not CAPSULES else tuple(peer.host_test)
    if api is None and host is None:
        return None
    guards = peer.exchange or _peers.Exchange((), (), ())
    every = (1 << 32) - 1
    kinds = sum(1 << _CODES[kind] for kind in guards.method_kinds) if guards.method_kinds else every
    methods = list(guards.methods)
    codes = [kinds] * len(methods)
    for view in _peers.export_facts(t).views:
        methods.append(view.test)
        codes.append(sum(1 << _CODES[kind] for kind in view.kinds) if view.kinds else every)
    return api, guards.attrs, tuple(methods), tuple(codes), host


_CODES = {name: code for code, name in _dtypes.CODE_NAMES.items()}


def _current_stream(device_type, device_id):
    """The stream gpu_dlpack would queue work on for that device, for a
    consumer of ``wrap(x)``'s C exchange API (its ``current_work_stream``)."""
    handle = _streams.block_stream(Device((device_type, device_id)))
    if handle is None:
        handle = _streams.DEFAULT_HANDLE.get(device_type)
    return None if handle is None or handle < 0 else handle


def install() -> None:
    """Configure the core once every module is loaded (``gpu_dlpack/__init__``)."""
    # NumPy's C API table lives in the extension module of its C functions
    # (_multiarray_umath, which moved between NumPy 1 and 2).
    numpy_api = getattr(np.frompyfunc.__self__, "_ARRAY_API", None)
    impl = dict(_capsule.GENERAL)
    impl.update(
        wrap=_export.python_wrap,
        check_known=_dtypes.check_known,
        from_dlpack=_import.from_dlpack,
        current_stream=_current_stream,
        host_capsule=_import.host_capsule,
        host_refused_import=_import.host_refused_import,
        host_answer=_exchange.host_answer,
        host_refused=_exchange.host_refused,
        host_export=_exchange.host_export,
        rebuild=_exchange.python_rebuild,
    )
    host = 0
    for t in _devices.HOST_ACCESSIBLE:
        if int(t) < 64:
            host |= 1 << int(t)
    # The NumPy array an import makes: CPU and pinned memory only (managed
    # memory takes the general path, which knows its device).
    host &= (1 << int(_devices.DLDeviceType.CPU)) | (1 << int(_devices.DLDeviceType.CUDA_HOST)) | (
        1 << int(_devices.DLDeviceType.ROCM_HOST)
    )
    core.configure(
        impl=impl,
        header_type=_capsule.Header,
        device_types=sum(1 << t for t in _capsule._DEVICE_TYPES if t < 64),
        host_types=host,
        known=list(_dtypes.KNOWN),
        numpy_dtypes={key: d for key, d in _dtypes._NATIVE.items() if d.isbuiltin == 1 and d.isnative},
        numpy_api=numpy_api if type(numpy_api) is _capsule.CapsuleType and np.ndarray else None,
        versions=vars(_versions),
        produced=_versions.DLPACK_VERSION,
        version_word=_capsule.version_word(_versions.DLPACK_VERSION),
        learn_import=_import_plan,
        exportable_fallback=_export.general_dlpack,
        exportable_class=_export.Exportable,
        cpu_device=_devices.CPU,
        cpu_dlpack=_devices.CPU.dlpack,
        # The dtypes whose NumPy capsule _exchange._export passes on as it is.
        plain_dtypes={d: True for d in _dtypes._NATIVE.values() if d.isbuiltin == 1},
        numpy_strides_after_shape=numpy_backend.STRIDES_AFTER_SHAPE,
        # The core's NumPy imports and its adaptation (the rebuild through
        # NumPy is its reference) take what NumPy takes: NumPy 1.x refuses
        # more than 32 dimensions, 2.x more than 64.
        numpy_maxdims=64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32,
        # The core's adaptation and its capsule imports (JAX) lay a capsule
        # out as NumPy 2.4 lays it, strides always. Before 2.4 NumPy exports
        # C-contiguous arrays without strides (before 2.1 it moves empty
        # ones too), so they are then the ones the general path rebuilds
        # through NumPy: the same capsule whichever makes it.
        numpy_layout=numpy_backend.VERSIONED_NUMPY and not numpy_backend.STRIDES_AFTER_SHAPE,
        capsule_info=_capsule.CapsuleInfo,
        device_class=_devices.Device,
    )
