"""The exchange matrix: every producer against every consumer, directly and
through gpu_dlpack, on the host or on the GPU."""

from __future__ import annotations

import functools

import numpy as np

from .. import _convert, _explain, _peers
from ..testing import _consumer
from .._devices import Device, DLDeviceType
from .._export import export as gpu_export
from .._export import wrap
from .._import import from_dlpack as gd_from_dlpack
from ._measure import VALUES, _err, _host_values, _pointer, _quiet, _readonly_numpy, _sent
from ._peers import _jax_devices, _peer_gpu_usable
from ._probes import _no_dlpack
from ._verdicts import judge


def _result(call, run, source, readonly_source=False, wrapper=None, expected=VALUES):
    """Run one exchange and judge it: values (``expected``), pointers,
    read-only writes, and what the consumer asked of ``wrapper`` (where it
    was handed one)."""
    try:
        with _quiet():
            got = run()
    except Exception as exc:
        return _failed(call, exc, _sent(getattr(wrapper, "last_request", None)), judged=True)
    result = {"call": call, "outcome": None, "ok": False, "error": None, "explain": None,
              "request": _sent(getattr(wrapper, "last_request", None)), "hazards": []}
    values = _host_values(got)
    if values is None or values.shape != expected.shape or not np.array_equal(values, expected):
        result["outcome"] = "wrong-values"
        return result
    shared = _pointer(got) == _pointer(source)
    result["outcome"] = "zero-copy" if shared else "copied"
    result["ok"] = True
    if readonly_source and shared and isinstance(source, np.ndarray):
        honoured, _ = _consumer._write_through(got, source)
        if not honoured:
            result["hazards"].append("consumer-ignores-read-only")
    return result


def _takes_capsules(consumer):
    return consumer.row["consumer"].get("takes") == "capsules"


def _direct(consumer, make):
    source = make()
    if _takes_capsules(consumer):
        return source, lambda: consumer.consume(type(source).__dlpack__(source)), "x.__dlpack__()"
    return source, lambda: consumer.consume(source), "x"


def _through(consumer, make, backend_consumer):
    """The source, the exchange, its call's text, and the wrapper the consumer is handed (None: none)."""
    source = make()
    call = consumer.row["consumer"]["call"]
    if backend_consumer:
        return source, lambda: gd_from_dlpack(source), "gpu_dlpack.from_dlpack(x)", None
    if _takes_capsules(consumer):
        text = f"{call}(gpu_dlpack.export(x){consumer.suffix})"
        return source, lambda: consumer.consume(gpu_export(source)), text, None
    w = wrap(source)
    return source, functools.partial(consumer.consume, w), f"{call}(gpu_dlpack.wrap(x){consumer.suffix})", w


class _OnTheHost:
    """A consumer whose arrays live on the host, in the GPU matrix: its
    ``from_dlpack`` asked for ``device="cpu"``, as such a consumer must be
    to take GPU data (NumPy)."""

    suffix = ", device='cpu'"

    def __init__(self, item):
        self.peer = item.peer
        self.module = item.module
        self.row = item.row
        self.consume = functools.partial(item.consume, device="cpu")


def _crashes_on(consumer, make) -> str | None:
    """Why the exchange is not run: a consumer whose row says it crashes the
    process on GPU data (a CPU build of Paddle), for a producer on a GPU."""
    peer = _peers.by_name(consumer.peer.module)
    if peer is None or "gpu-import-crashes" not in _peers.active_faults(peer, consumer.row.get("version")):
        return None
    fault = next(f for f in peer.faults if f.id == "gpu-import-crashes")
    try:
        if fault.unless and _convert._read_setting(consumer.module, fault.unless):
            return None
        if Device.of(wrap(make())).type is DLDeviceType.CPU:
            return None
    except Exception:
        return None
    return f"not run: {consumer.peer.name} {_peers.FAULTS['gpu-import-crashes'][0]}"


def exchange(producer_name, make, consumer, backend_consumer, readonly_source=False, expected=VALUES) -> dict:
    """One producer-to-consumer exchange, directly and through gpu_dlpack:
    the consumer must hold ``expected``, the values ``make`` made."""
    call = consumer.row["consumer"]["call"]
    crashes = _crashes_on(consumer, make)
    if crashes is not None:
        direct = {"call": f"{call}(x)", "outcome": "error", "ok": False, "error": crashes, "explain": None,
                  "request": None, "hazards": []}
        return {"producer": producer_name, "consumer": consumer.peer.name, "direct": direct, "via": dict(direct)}
    try:
        source, run, arg = _direct(consumer, make)
        direct = _result(f"{call}({arg}{consumer.suffix})", run, source, readonly_source, None, expected)
    except Exception as exc:
        direct = _failed(f"{call}(x)", exc)
    try:
        source, run, via_call, wrapper = _through(consumer, make, backend_consumer)
        via = _result(via_call, run, source, readonly_source, wrapper, expected)
    except Exception as exc:
        via = _failed("gpu_dlpack", exc)
    judge(direct, via)
    return {"producer": producer_name, "consumer": consumer.peer.name, "direct": direct, "via": via}


def _failed(call, exc, request=None, judged=False):
    """An exchange that raised (``judged``: a refusal by design is
    ``refused``), or could not start (the array or the wrapper failed)."""
    error = _err(exc)
    found = _explain.first(error)
    refused = judged and found is not None and found.entry.refusal
    return {"call": call, "outcome": "refused" if refused else "error", "ok": False, "error": error,
            "explain": found.entry.id if found else None, "request": request, "hazards": []}


def _makers(loaded, gpu):
    """(row name, maker, read-only?, values) for every producer on the host or the
    GPU, and (name, reason) for those skipped: a library whose arrays cannot
    be made here, or have no ``__dlpack__``, exchanges nothing."""
    makers, skipped = [], []
    for item in loaded:
        peer, module = item.peer, item.module
        if module is None:
            continue
        if gpu:
            if peer.gpu is None or not _peer_gpu_usable(peer, module):
                continue
            make = functools.partial(peer.gpu, module, VALUES)
        elif peer.host is not None:
            prod = item.row.get("producer") or {}
            if prod.get("probed") and not Device(_device_tuple(prod.get("device"))).is_host_accessible:
                continue
            make = functools.partial(peer.host, module, peer.values)
        else:
            continue
        try:
            with _quiet():
                sample = make()
        except Exception as exc:
            skipped.append({"producer": peer.name, "reason": f"could not make an array: {_err(exc)}"})
            continue
        # DLPack (on the type or forwarded by the instance), or the CUDA Array
        # Interface (Numba's device arrays): gpu_dlpack takes each.
        if not (hasattr(type(sample), "__dlpack__") or hasattr(sample, "__dlpack__")
                or hasattr(sample, "__cuda_array_interface__")):
            skipped.append({"producer": peer.name, "reason": _no_dlpack(sample)})
            continue
        makers.append((peer.name, make, False, VALUES if gpu else peer.values))
        if peer.name == "jax":
            spread = _jax_sharded_maker(module, gpu)
            if spread is not None:
                makers.append(("jax (sharded)", spread, False, VALUES))
        if peer.name == "numpy" and not gpu:
            makers.append(("numpy (read-only)", functools.partial(_readonly_numpy, None, VALUES), True, VALUES))
        if peer.name == "cupy" and gpu and _has_managed_memory(module):
            makers.append(("cupy (managed)", functools.partial(_managed_cupy, module, VALUES), False, VALUES))
    return makers, skipped


def _jax_sharded_maker(jax, gpu):
    """A maker of a JAX array sharded over two devices (its rows split), when
    JAX has two devices of the kind: no DLPack consumer takes one directly."""
    devices = _jax_devices(jax, "gpu" if gpu else "cpu")
    if len(devices) < 2:
        return None
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    sharding = NamedSharding(Mesh(np.array(devices[:2]), ("x",)), PartitionSpec("x", None))
    return functools.partial(jax.device_put, VALUES, sharding)


def _has_managed_memory(cupy) -> bool:
    """Whether CuPy allocates managed memory here (CUDA, not ROCm)."""
    try:
        return not cupy.cuda.runtime.is_hip and bool(_managed_cupy(cupy, VALUES).size)
    except Exception:
        return False


def _managed_cupy(cupy, a):
    with cupy.cuda.using_allocator(cupy.cuda.malloc_managed):
        out = cupy.asarray(a)
    cupy.cuda.Device().synchronize()
    return out


def _device_tuple(name):
    try:
        return Device(name).dlpack
    except Exception:
        return (1, 0)


def _consumers(loaded, gpu):
    out = []
    for item in loaded:
        if item.consume is None:
            continue
        cons = item.row.get("consumer") or {}
        if gpu:
            if item.peer.gpu is not None and _peer_gpu_usable(item.peer, item.module):
                out.append(item)
            elif item.peer.name == "numpy":
                out.append(_OnTheHost(item))
        elif item.peer.host_consumer and (item.peer.always or cons.get("error") is None):
            out.append(item)
    return out


def matrix(loaded, gpu=False) -> dict | None:
    """Every producer against every consumer on the host, or on the GPU."""
    makers, skipped = _makers(loaded, gpu)
    consumers = _consumers(loaded, gpu)
    if not makers or not consumers:
        return None
    backend = "cupy" if gpu else "numpy"
    device = "cpu"
    if gpu:
        try:
            device = Device.of(makers[0][1]()).type.name.lower()
        except Exception:
            device = "gpu"
    cells = [exchange(name, make, c, c.peer.name == backend, ro, values)
             for name, make, ro, values in makers for c in consumers]
    return {
        "device": device,
        "producers": [m[0] for m in makers],
        "consumers": [c.peer.name for c in consumers],
        "skipped": skipped,
        "cells": cells,
    }
