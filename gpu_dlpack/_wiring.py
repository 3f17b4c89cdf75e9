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

import inspect
import operator

import numpy as np

from . import _capsule, _devices, _dtypes, _errors, _exchange, _export, _faults, _import, _peers, _streams, _versions
from ._backends import numpy as numpy_backend
from ._devices import Device
from . import _compiled

#: Whether producers' C exchange APIs are read (False: their __dlpack__ is
#: always asked). Call ``forget()`` after a change.
EXCHANGE_API = True
#: Whether the core asks the producers with a host test in ``_peers`` (JAX)
#: for their capsules itself (False: the Python path does). Call
#: ``forget()`` after a change.
CAPSULES = True


def forget() -> None:
    """The one invalidation of what is read of the peers' rows: after a
    change to ``_peers.PEERS``, ``EXCHANGE_API`` or ``CAPSULES``, each
    type's ``_peers.Profile`` and the compiled core's import plan are read
    again at its next exchange, under a policy made anew (which libraries
    convert lands on the host with nothing to correct)."""
    _peers.forget()
    install()


def _host_consumers() -> frozenset:
    """The libraries convert lands on the host with nothing to correct, in
    any version (NumPy), from their rows: the compiled front of
    gpu_dlpack.convert makes their plain cases."""
    return frozenset(
        peer.name for peer in _peers.PEERS
        if peer.lands == "host" and not _faults.for_landing(frozenset(f.id for f in peer.faults), peer.lands)
    )


def _import_plan(t):
    """What the core may do with instances of producer type ``t`` without
    asking Python: ``(api, attrs, methods, codes, host, read_only)``, or None.

    ``api`` is the type's DLPack C exchange API (None: not read), with its
    guards, each of which must be false for the plain exchange: ``attrs``,
    data descriptors of the type that the core reads with their ``__get__``
    (as ``getattr`` reads them), and ``methods``, callables it calls with
    the array, each for arrays of the dtype codes in its mask in ``codes``
    (the row's ``exchange``, and the views of ``_peers.VIEWS`` by their readers,
    ``ExportFacts.readers``: the row's own methods). ``host`` is the type's
    host test (``_peers.HostTest``) where the core may ask the producer's
    ``__dlpack__`` itself; ``read_only`` whether its arrays are read-only
    whatever its capsules say (``_peers.ExportFacts.read_only``): the core
    imports them read-only. Only a row's array type and its plain subclasses
    have a plan: a subclass with a hook of its own takes the general path."""
    peer = _peers.of_array_type(t) if isinstance(t, type) else None
    if peer is None:
        return None
    api = t.__dict__.get("__dlpack_c_exchange_api__")
    if api is None or not EXCHANGE_API or peer.exchange is None:
        api = None  # other producers keep their __dlpack__, whose checks are theirs
    host = None if peer.host_test is None or not CAPSULES else tuple(peer.host_test)
    if api is None and host is None:
        return None
    every = (1 << 32) - 1
    attrs, methods, codes = [], [], []
    for name in peer.exchange or ():
        read = _data_descriptor(t, name)
        if read is None:  # read by name, as any attribute
            methods.append(operator.attrgetter(name))
            codes.append(every)
        else:
            attrs.append(read)
    facts = _peers.export_facts(t)
    for view, (test, _resolve) in zip(facts.views, facts.readers):
        methods.append(test)
        codes.append(sum(1 << _CODES[kind] for kind in view.kinds) if view.kinds else every)
    return api, tuple(attrs), tuple(methods), tuple(codes), host, facts.read_only


def _data_descriptor(t, name):
    """The data descriptor (a getset or a property: its ``__get__`` is what
    ``getattr`` reads) that attribute ``name`` of ``t``'s instances is, or
    None where ``getattr`` may read something else (another kind of
    attribute, or a ``__getattribute__`` of the type's own)."""
    if t.__getattribute__ is not object.__getattribute__:
        return None
    found = inspect.getattr_static(t, name, None)
    kind = type(found)
    return found if hasattr(kind, "__get__") and hasattr(kind, "__set__") else None


_CODES = {name: code for code, name in _dtypes.CODE_NAMES.items()}


def _current_stream(device_type, device_id):
    """The stream gpu_dlpack would queue work on for that device, for a
    consumer of ``wrap(x)``'s C exchange API (its ``current_work_stream``)."""
    handle = _streams.block_stream(Device((device_type, device_id)))
    if handle is None:
        handle = _streams.DEFAULT_HANDLE.get(device_type)
    return None if handle is None or handle < 0 else handle


def policy():
    """The compiled core's ``Policy``: what each module decided that the
    core reads, each fact from the module that owns it."""
    return _compiled.Policy(
        # The general path of each case the core hands back.
        from_dlpack=_import.from_dlpack,
        host_capsule=_import.host_capsule,
        host_export=_exchange.host_export,
        current_stream=_current_stream,
        exportable_fallback=_export.general_dlpack,
        learn_import=_import_plan,
        errors=vars(_errors),
        exportable_class=_export.Exportable,
        header_type=_capsule.Header,
        capsule_info=_capsule.CapsuleInfo,
        # The NumPy array an import makes: CPU and pinned memory only
        # (managed memory takes the general path, which knows its device).
        device_class=Device,
        cpu_device=_devices.CPU,
        host_types=_devices.types(array="numpy"),
        known=_dtypes.KNOWN,
        # The NumPy dtype of each pair the core's imports and adaptation make.
        numpy_dtypes={key: d for key, d in _dtypes.NATIVE.items() if d.isbuiltin == 1 and d.isnative},
        # The dtypes whose NumPy capsule the core makes and passes on as it
        # is, each with its DLPack pair: the plain ones, the table the
        # Python paths read too (triples, not a dict: 'q' and 'l' are equal
        # dtypes, two objects).
        plain=tuple((d, _dtypes.from_numpy(d).code, _dtypes.from_numpy(d).bits) for d in _dtypes.PLAIN.values()),
        # The core's NumPy imports take what NumPy takes: NumPy 1.x refuses
        # more than 32 dimensions, 2.x more than 64.
        numpy_maxdims=64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32,
        # The core's exports of NumPy arrays and its capsule imports (JAX)
        # lay a capsule out as NumPy 2.4 lays it, strides always. Before 2.4
        # NumPy exports C-contiguous arrays without strides (before 2.1 it
        # moves empty ones too), so those are then NumPy's own: the same
        # capsule whichever makes it.
        numpy_layout=numpy_backend.VERSIONED_NUMPY and not numpy_backend.STRIDES_AFTER_SHAPE,
        numpy_strides_after_shape=numpy_backend.STRIDES_AFTER_SHAPE,
        versions=_versions.VERDICT,
        host_consumers=_host_consumers(),
    )


def install() -> None:
    """Put the core's policy in force, once every module is loaded
    (``gpu_dlpack/__init__``), and again after ``forget``."""
    _compiled.configure(policy())
