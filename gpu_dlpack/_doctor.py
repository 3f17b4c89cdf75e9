"""``gpu-dlpack doctor``: what in this environment interoperates through
DLPack, and what gpu_dlpack fixes.

Everything is measured live, with small exchanges (a 2x3 float32 array),
never read from a table of versions. A library that is missing, fails to
import or raises while probed gets its row with the reason; it never stops
the report. A segmentation fault inside a library cannot be caught in
process.

``PEERS`` names the libraries and how to make an array with each; every
behaviour reported is measured from those arrays.

The JSON report (``gpu-dlpack doctor --json``, schema ``gpu_dlpack.doctor/1``)::

    {
      "schema": "gpu_dlpack.doctor/1",
      "gpu_dlpack": {"version": str, "dlpack_version": [int, int],
                     "min_dlpack_version": [int, int],
                     "path": "compiled" | "pure Python",  # the hot path in use
                     "path_detail": str},                 # where it is, or why not
      "platform": {
        "python": str, "implementation": str, "executable": str,
        "os": str, "machine": str,
        "gpu": {
          "usable": bool,                 # gpu_dlpack's GPU backend (CuPy) has a device
          "backend": "cuda" | "rocm" | null,
          "reason": str | null,           # why not usable
          "nvidia_driver": str | null,    # /proc/driver/nvidia/version, first line
          "cupy": {"distributions": [str], "version": str | null,
                   "runtime_version": str | null, "driver_version": str | null,
                   "device_count": int | null, "error": str | null} | null,
          "devices": [{"index": int, "name": str, "memory_bytes": int,
                       "compute_capability": str}],
          "torch": {"cuda_available": bool, "cuda_version": str | null,
                    "hip_version": str | null, "device_count": int} | null,
          "jax": {"backend": str, "devices": [str]} | null
        }
      },
      "libraries": [{
        "name": str, "module": str, "installed": bool,
        "version": str | null, "error": str | null,   # "not installed", import error
        "producer": {                                  # null when not imported
          "probed": bool, "reason": str | null,        # why not probed
          "device": str,                               # "cpu", "cuda:0"
          "capsules": {"none": CAPSULE, "1.0": CAPSULE},   # max_version=None / (1, 0)
          "keywords": {"stream": bool, "max_version": bool, "dl_device": bool, "copy": bool},
          "keyword_errors": {keyword: str},
          "floor": [int, int] | null,        # lowest max_version accepted, when above (0, 0)
          "floor_error": str | null,
          "read_only": {"flag": bool | null, "legacy": "refused" | "exported" | null,
                        "detail": str | null} | null,   # null: it makes no read-only data
          "copy": {"copies": bool | null, "flag": bool | null, "detail": str | null}
        },
        "consumer": {                                   # null when not imported
          "probed": bool, "reason": str | null,
          "call": str,                                  # "torch.from_dlpack"
          "sends": {keyword: value} | null,             # non-None keywords it passed
          "error": str | null,                          # importing host data failed
          "lands_on": str | null,                       # device of the result
          "zero_copy": bool | null,
          "unaligned": bool | str,      # zero-copy for data not 64-byte aligned; str: the error
          "copy": {"forwarded": bool | null, "copied": bool | null, "error": str | null},
          "read_only": {"honoured": bool | null, "detail": str},
          "raw_capsules": {"legacy": true | str, "versioned": true | str},  # str: the error
          "takes": "producers" | "capsules"   # what the exchanges feed it
        }
      }],
      "matrices": [{
        "device": "cpu" | "cuda" | "rocm",
        "producers": [str], "consumers": [str],
        "skipped": [{"producer": str, "reason": str}],   # no array, or no __dlpack__
        "cells": [{"producer": str, "consumer": str, "direct": RESULT, "via": RESULT}],
        "error": str                                     # only when the matrix could not run
      }],
      "findings": [{"severity": "failure" | "refused" | "hazard" | "fixed" | "note",
                    "subject": str, "problem": str, "remedy": str}],
      "summary": {"exchanges": int, "through_gpu_dlpack_ok": int,
                  "through_gpu_dlpack_failed": int, "refused": int, "hazards": int},
      "exit_status": 0 | 1
    }

    CAPSULE = {"name": "dltensor" | "dltensor_versioned", "version": [int, int] | null}
              or {"error": str}
    RESULT  = {"call": str,
               "outcome": "zero-copy" | "copied" | "refused" | "error" | "wrong-values",
               "ok": bool, "error": str | null,
               "explain": str | null,        # id of the gpu-dlpack explain entry
               "request": {keyword: value} | null,   # what the consumer sent to wrap()
               "hazards": [str]}             # hazard ids, e.g. "consumer-ignores-read-only"

``direct`` is the consumer's own ``from_dlpack`` on the producer's array.
``via`` is the same exchange through gpu_dlpack: ``gpu_dlpack.from_dlpack(x)``
for the consumer gpu_dlpack lands in on that device (NumPy on the host, CuPy
on a GPU), ``consumer(gpu_dlpack.wrap(x))`` for every other consumer.
``refused`` is gpu_dlpack declining by design what the standard forbids (read-
only data to a consumer that asks only for legacy capsules); it is not a
failure. The exit status is 1 when an exchange through gpu_dlpack fails.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import json
import platform
import sys
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import _capsule, _explain, _fastpath, _versions
from ._devices import Device
from ._export import export as gpu_export
from ._export import wrap
from ._import import from_dlpack as gd_from_dlpack

SCHEMA = "gpu_dlpack.doctor/1"
VALUES = np.arange(6, dtype=np.float32).reshape(2, 3)
KEYWORDS = ("stream", "max_version", "dl_device", "copy")
_MESSAGE_WIDTH = 300


# -- the peers ---------------------------------------------------------------


ALIGNMENT = 64  # bytes; JAX copies host buffers aligned less


def _aligned(a, offset=0):
    """A copy of ``a`` whose data starts ``offset`` bytes past a 64-byte
    boundary, so that what a consumer does with alignment shows the same on
    every run."""
    raw = np.empty(a.nbytes + 2 * ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT + offset
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _host_copy(m, a):
    return _aligned(a)


def _readonly_numpy(m, a):
    a = _aligned(a)
    a.flags.writeable = False
    return a


def _jax_devices(m, platform_name):
    try:
        return m.devices(platform_name)
    except RuntimeError:  # no such backend
        return []


def _tf_host(m, a):
    with m.device("CPU:0"):
        return m.constant(a)


@functools.lru_cache(maxsize=1)
def _cupy_gpus() -> int:
    from ._backends import cupy_backend

    return cupy_backend.device_count()


@dataclass(frozen=True)
class Peer:
    """How to reach one array library: nothing here says how it behaves."""

    name: str
    module: str
    consumer: tuple = ("from_dlpack",)   # where its from_dlpack lives, first found wins
    host: Callable | None = None          # (module, ndarray) -> array in host memory
    readonly: Callable | None = None      # (module, ndarray) -> read-only host array
    gpu: Callable | None = None           # (module, ndarray) -> array on the GPU
    gpu_usable: Callable | None = None    # module -> bool
    submodules: tuple = ()
    always: bool = True                   # a row even when not installed
    host_consumer: bool = True            # its from_dlpack of host data lands on the host


PEERS = (
    Peer("numpy", "numpy", host=_host_copy, readonly=_readonly_numpy),
    Peer(
        "torch", "torch",
        host=lambda m, a: m.from_numpy(_aligned(a)),
        gpu=lambda m, a: m.as_tensor(a, device="cuda"),
        gpu_usable=lambda m: bool(m.cuda.is_available()),
    ),
    Peer(
        "jax", "jax", consumer=("dlpack.from_dlpack",), submodules=("jax.dlpack", "jax.numpy"),
        host=lambda m, a: m.device_put(a, _jax_devices(m, "cpu")[0]),
        gpu=lambda m, a: m.device_put(a, _jax_devices(m, "gpu")[0]),
        gpu_usable=lambda m: bool(_jax_devices(m, "gpu")),
    ),
    Peer(
        "cupy", "cupy", gpu=lambda m, a: m.asarray(a), gpu_usable=lambda m: _cupy_gpus() > 0,
        host_consumer=False,
    ),
    Peer(
        "array_api_strict", "array_api_strict",
        host=lambda m, a: m.asarray(_aligned(a)),
        readonly=lambda m, a: m.asarray(_readonly_numpy(None, a)),
    ),
    Peer(
        "numba", "numba", consumer=("cuda.from_dlpack", "from_dlpack"), submodules=("numba.cuda",),
        gpu=lambda m, a: m.cuda.to_device(a), gpu_usable=lambda m: bool(m.cuda.is_available()),
        host_consumer=False,
    ),
    # Other DLPack speakers: probed only when installed.
    Peer(
        "tensorflow", "tensorflow", consumer=("experimental.dlpack.from_dlpack",), host=_tf_host,
        always=False,
    ),
    Peer(
        "paddle", "paddle", consumer=("utils.dlpack.from_dlpack", "from_dlpack"),
        host=lambda m, a: m.to_tensor(a, place=m.CPUPlace()), always=False,
    ),
    Peer("mlx", "mlx.core", host=lambda m, a: m.array(a), always=False),
    Peer("dpnp", "dpnp", host=lambda m, a: m.asarray(a), always=False, host_consumer=False),
    Peer("dpctl", "dpctl.tensor", host=lambda m, a: m.asarray(a), always=False, host_consumer=False),
)


def _generic_host(m, a):
    for name in ("asarray", "array", "tensor"):
        make = getattr(m, name, None)
        if callable(make):
            return make(_aligned(a))
    raise AttributeError(f"{m.__name__} has no asarray, array or tensor")


def generic_peer(module: str) -> Peer:
    """A peer for any importable module (``gpu-dlpack doctor --library``)."""
    return Peer(
        module, module, consumer=("from_dlpack", "dlpack.from_dlpack", "utils.dlpack.from_dlpack"),
        host=_generic_host,
    )


# -- small measuring tools ---------------------------------------------------


def _err(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_WIDTH else text[: _MESSAGE_WIDTH - 3] + "..."


def _jsonable(value):
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return repr(value)


def _sent(request) -> dict | None:
    """The keywords a consumer passed to wrap(), without the None ones (None
    and absent mean the same to a producer)."""
    if request is None:
        return None
    return {k: _jsonable(v) for k, v in request.items() if v is not None}


def _pointer(x):
    """Address of ``x``'s first element, read from a capsule of it."""
    method = type(x).__dlpack__
    try:
        cap = method(x, max_version=(1, 0))
    except TypeError:
        cap = method(x)
    info = _capsule.read(cap)
    return info.data + info.byte_offset


def _pointer_or_none(x):
    try:
        return _pointer(x)
    except Exception:
        return None


def _host_values(x):
    """``x``'s values as a NumPy array, wherever ``x`` lives."""
    try:
        return np.from_dlpack(x, device="cpu", copy=True)
    except Exception:
        pass
    for attempt in (lambda: x.get(), lambda: x.cpu().numpy(), lambda: np.asarray(x)):
        try:
            return np.asarray(attempt())
        except Exception:
            continue
    return None


def _resolve(module, paths):
    for path in paths:
        obj = module
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            continue
        if callable(obj):
            return obj, path
    return None, None


def _capsule_kind(make):
    try:
        info = _capsule.read(make())
    except Exception as exc:
        return {"error": _err(exc)}
    return {"name": info.name, "version": list(info.version) if info.version else None}


def _quiet(fn):
    """Run a probe with warnings silenced (a probe reports, it does not warn)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(*args, **kwargs)

    return run


# -- producers ---------------------------------------------------------------


def _accepts(x, keyword, value):
    """True when ``x.__dlpack__`` takes ``keyword``; the TypeError otherwise."""
    try:
        type(x).__dlpack__(x, **{keyword: value})
    except TypeError as exc:
        return _err(exc)
    except Exception:  # the keyword was taken; the value was refused
        return True
    return True


def _floor(x):
    """The lowest ``max_version`` ``x`` accepts (None when (0, 0) works), and
    the error just below it."""
    error = None
    for minor in range(0, 10):
        try:
            type(x).__dlpack__(x, max_version=(0, minor))
        except Exception as exc:
            error = _err(exc)
            continue
        return (None, None) if minor == 0 else ([0, minor], error)
    return [1, 0], error


@_quiet
def probe_producer(peer, module, gpu=False) -> dict:
    out = {"probed": False, "reason": None}
    make = peer.gpu if gpu else peer.host
    if make is None:
        out["reason"] = "makes no GPU arrays" if gpu else "makes no host arrays here"
        return out
    try:
        x = make(module, VALUES)
    except Exception as exc:
        out["reason"] = f"could not make an array: {_err(exc)}"
        return out
    if not hasattr(type(x), "__dlpack__"):
        out["reason"] = f"{type(x).__name__} has no __dlpack__"
        return out
    out["probed"] = True
    try:
        out["device"] = str(Device.of(x))
    except Exception as exc:
        out["device"] = f"unknown ({_err(exc)})"
    out["capsules"] = {
        "none": _capsule_kind(lambda: type(x).__dlpack__(x)),
        "1.0": _capsule_kind(lambda: type(x).__dlpack__(x, max_version=(1, 0))),
    }
    own_device = _own_device(x)
    keywords, errors = {}, {}
    for keyword, value in (("stream", None), ("max_version", (1, 0)), ("dl_device", own_device), ("copy", None)):
        taken = _accepts(x, keyword, value)
        keywords[keyword] = taken is True
        if taken is not True:
            errors[keyword] = taken
    out["keywords"] = keywords
    out["keyword_errors"] = errors
    out["floor"], out["floor_error"] = _floor(x) if keywords["max_version"] else (None, None)
    out["read_only"] = _producer_read_only(peer, module) if peer.readonly and not gpu else None
    out["copy"] = _producer_copy(x) if keywords["copy"] else {
        "copies": None, "flag": None, "detail": "does not take copy"
    }
    return out


def _own_device(x):
    try:
        return tuple(type(x).__dlpack_device__(x))
    except Exception:
        return None


def _producer_read_only(peer, module):
    try:
        r = peer.readonly(module, VALUES)
    except Exception as exc:
        return {"flag": None, "legacy": None, "detail": f"could not make read-only data: {_err(exc)}"}
    result = {"flag": None, "legacy": None, "detail": None}
    try:
        info = _capsule.read(type(r).__dlpack__(r, max_version=(1, 0)))
        if info.versioned:
            result["flag"] = info.read_only
        else:
            result["detail"] = "gives legacy capsules only"
    except Exception as exc:
        result["detail"] = f"versioned export failed: {_err(exc)}"
    try:
        type(r).__dlpack__(r)
        result["legacy"] = "exported"
    except Exception:
        result["legacy"] = "refused"
    return result


def _producer_copy(x):
    try:
        cap = type(x).__dlpack__(x, max_version=(1, 0), copy=True)
        info = _capsule.read(cap)
    except Exception as exc:
        return {"copies": None, "flag": None, "detail": _err(exc)}
    source = _pointer_or_none(x)
    copies = None if source is None else info.data + info.byte_offset != source
    return {"copies": copies, "flag": info.is_copied if info.versioned else None, "detail": None}


# -- consumers ---------------------------------------------------------------


def _write_through(out, source):
    """Write into an import of read-only ``source``: (honoured, detail)."""
    index = (0,) * len(source.shape)
    before = source[index].item()
    try:
        out[index] = before + 41  # a Python scalar: every library takes one
    except Exception as exc:
        return True, f"refuses writes ({type(exc).__name__})"
    if source[index].item() != before:
        return False, "writes into the read-only source"
    return True, "the write went to a copy"


@_quiet
def probe_consumer(peer, module) -> dict:
    fn, path = _resolve(module, peer.consumer)
    call = f"{peer.module}.{path}" if path else None
    out = {"probed": False, "reason": None, "call": call}
    if fn is None:
        out["reason"] = "no from_dlpack found (looked for " + ", ".join(peer.consumer) + ")"
        return out
    out["probed"] = True
    src = _aligned(VALUES)
    w = wrap(src)
    try:
        got = fn(w)
    except Exception as exc:
        out.update(sends=_sent(w.last_request), error=_err(exc), lands_on=None, zero_copy=None)
    else:
        out.update(sends=_sent(w.last_request), error=None)
        try:
            out["lands_on"] = str(Device.of(got))
        except Exception:
            out["lands_on"] = None
        out["zero_copy"] = _pointer_or_none(got) == src.ctypes.data
    out["unaligned"] = _consumer_unaligned(fn)
    out["copy"] = _consumer_copy(fn)
    out["read_only"] = _consumer_read_only(fn)
    raw = {}
    for kind, make in (("legacy", lambda: VALUES.copy().__dlpack__()),
                       ("versioned", lambda: VALUES.copy().__dlpack__(max_version=(1, 0)))):
        try:
            fn(make())
            raw[kind] = True
        except Exception as exc:
            raw[kind] = _err(exc)
    out["raw_capsules"] = raw
    # A consumer that takes only capsules (tensorflow's from_dlpack) is fed
    # capsules in the exchanges.
    out["takes"] = "capsules" if out["error"] and raw["legacy"] is True else "producers"
    return out


def _consumer_unaligned(fn):
    """Whether an import of host data 4 bytes past a 64-byte boundary is
    zero-copy (True), copied (False) or fails (the error)."""
    src = _aligned(VALUES, offset=4)
    try:
        got = fn(wrap(src))
    except Exception as exc:
        return _err(exc)
    return _pointer_or_none(got) == src.ctypes.data


def _consumer_copy(fn):
    src = _aligned(VALUES)
    w = wrap(src)
    try:
        got = fn(w, copy=True)
    except Exception as exc:
        return {"forwarded": None, "copied": None, "error": _err(exc)}
    forwarded = bool(w.last_request and w.last_request.get("copy") is True)
    p = _pointer_or_none(got)
    return {"forwarded": forwarded, "copied": None if p is None else p != src.ctypes.data, "error": None}


def _consumer_read_only(fn):
    src = _readonly_numpy(None, VALUES)
    w = wrap(src)
    try:
        got = fn(w)
    except Exception as exc:
        if w.last_request is not None and w.last_request.get("max_version") is None:
            return {"honoured": None, "detail": "asks for legacy capsules only, so read-only data is refused"}
        return {"honoured": None, "detail": f"import failed: {_err(exc)}"}
    honoured, detail = _write_through(got, src)
    return {"honoured": honoured, "detail": detail}


# -- libraries ---------------------------------------------------------------


def _version(module, top):
    try:
        return importlib.metadata.version(top)
    except Exception:
        pass
    v = getattr(module, "__version__", None)
    return None if v is None else str(v)


class _Loaded:
    """A peer and its imported module, kept for the exchanges."""

    def __init__(self, peer, module, row):
        self.peer = peer
        self.module = module
        self.row = row
        self.consume, _ = _resolve(module, peer.consumer) if module is not None else (None, None)


def _installed(module_name) -> bool:
    top = module_name.split(".")[0]
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def load(peer) -> _Loaded:
    """Import ``peer`` and probe it; never raises."""
    row = {"name": peer.name, "module": peer.module, "installed": False, "version": None,
           "error": None, "producer": None, "consumer": None}
    if not _installed(peer.module):
        row["error"] = "not installed"
        return _Loaded(peer, None, row)
    row["installed"] = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(peer.module)
            for sub in peer.submodules:
                importlib.import_module(sub)
    except Exception as exc:
        row["error"] = f"import failed: {_err(exc)}"
        return _Loaded(peer, None, row)
    row["version"] = _version(module, peer.module.split(".")[0])
    # A library of GPU arrays only (CuPy) is probed as a producer on the GPU.
    gpu = peer.host is None and peer.gpu is not None
    for side, probe in (("producer", lambda: _probe_producer_where_possible(peer, module, gpu)),
                        ("consumer", lambda: probe_consumer(peer, module))):
        try:
            row[side] = probe()
        except Exception as exc:  # a probe reports, it never stops the report
            row[side] = {"probed": False, "reason": f"probe crashed: {_err(exc)}"}
    return _Loaded(peer, module, row)


def _probe_producer_where_possible(peer, module, gpu):
    if gpu and not _peer_gpu_usable(peer, module):
        return {"probed": False, "reason": "its arrays live on a GPU, and none is usable"}
    return probe_producer(peer, module, gpu=gpu)


def _peer_gpu_usable(peer, module) -> bool:
    if peer.gpu_usable is None or module is None:
        return False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(peer.gpu_usable(module))
    except Exception:
        return False


# -- exchanges ---------------------------------------------------------------


def _result(call, run, source, readonly_source=False):
    """Run one exchange and judge it: values, pointers, read-only writes."""
    result = {"call": call, "outcome": None, "ok": False, "error": None, "explain": None,
              "request": None, "hazards": []}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got, request = run()
    except Exception as exc:
        result["error"] = _err(exc)
        found = _explain.first(result["error"])
        result["explain"] = found.entry.id if found else None
        result["outcome"] = "refused" if found is not None and found.entry.refusal else "error"
        request = getattr(exc, "_doctor_request", None)
        result["request"] = request
        return result
    result["request"] = request
    values = _host_values(got)
    if values is None or values.shape != VALUES.shape or not np.array_equal(values, VALUES):
        result["outcome"] = "wrong-values"
        return result
    shared = _pointer_or_none(got) == _pointer_or_none(source)
    result["outcome"] = "zero-copy" if shared else "copied"
    result["ok"] = True
    if readonly_source and shared and isinstance(source, np.ndarray):
        honoured, _ = _write_through(got, source)
        if not honoured:
            result["hazards"].append("consumer-ignores-read-only")
    return result


def _takes_capsules(consumer):
    return consumer.row["consumer"].get("takes") == "capsules"


def _direct(consumer, make):
    source = make()
    if _takes_capsules(consumer):
        def run():
            return consumer.consume(type(source).__dlpack__(source)), None

        return source, run, "x.__dlpack__()"

    def run():
        return consumer.consume(source), None

    return source, run, "x"


def _through(consumer, make, backend_consumer):
    source = make()
    call = consumer.row["consumer"]["call"]
    if backend_consumer:
        def run():
            return gd_from_dlpack(source), None

        return source, run, "gpu_dlpack.from_dlpack(x)"
    if _takes_capsules(consumer):
        def run():
            return consumer.consume(gpu_export(source)), None

        return source, run, f"{call}(gpu_dlpack.export(x))"
    w = wrap(source)

    def run():
        try:
            return consumer.consume(w), _sent(w.last_request)
        except Exception as exc:
            exc._doctor_request = _sent(w.last_request)
            raise

    return source, run, f"{call}(gpu_dlpack.wrap(x))"


def exchange(producer_name, make, consumer, backend_consumer, readonly_source=False) -> dict:
    """One producer-to-consumer exchange, directly and through gpu_dlpack."""
    call = consumer.row["consumer"]["call"]
    try:
        source, run, arg = _direct(consumer, make)
        direct = _result(f"{call}({arg})", run, source, readonly_source)
    except Exception as exc:
        direct = _failed(f"{call}(x)", exc)
    try:
        source, run, via_call = _through(consumer, make, backend_consumer)
        via = _result(via_call, run, source, readonly_source)
    except Exception as exc:
        via = _failed("gpu_dlpack", exc)
    return {"producer": producer_name, "consumer": consumer.peer.name, "direct": direct, "via": via}


def _failed(call, exc):
    """An exchange that could not start (the array or the wrapper failed)."""
    error = _err(exc)
    found = _explain.first(error)
    return {"call": call, "outcome": "error", "ok": False, "error": error,
            "explain": found.entry.id if found else None, "request": None, "hazards": []}


def _makers(loaded, gpu):
    """(row name, maker, read-only?) for every producer on the host or the
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
            make = functools.partial(peer.host, module, VALUES)
        else:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sample = make()
        except Exception as exc:
            skipped.append({"producer": peer.name, "reason": f"could not make an array: {_err(exc)}"})
            continue
        if not hasattr(type(sample), "__dlpack__"):
            skipped.append({"producer": peer.name, "reason": f"{type(sample).__name__} has no __dlpack__"})
            continue
        makers.append((peer.name, make, False))
        if peer.name == "numpy" and not gpu:
            makers.append(("numpy (read-only)", functools.partial(_readonly_numpy, None, VALUES), True))
    return makers, skipped


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
    cells = []
    for name, make, ro in makers:
        for consumer in consumers:
            cells.append(exchange(name, make, consumer, consumer.peer.name == backend, ro))
    return {
        "device": device,
        "producers": [m[0] for m in makers],
        "consumers": [c.peer.name for c in consumers],
        "skipped": skipped,
        "cells": cells,
    }


# -- platform ----------------------------------------------------------------


def _nvidia_driver():
    try:
        with open("/proc/driver/nvidia/version") as f:
            return f.readline().strip() or None
    except OSError:
        return None


def _cuda_version(v):
    return None if not v else f"{v // 1000}.{(v % 1000) // 10}"


def _cupy_distributions():
    names = set()
    try:
        for dist in importlib.metadata.distributions():
            name = (dist.metadata["Name"] or "").lower()
            if name == "cupy" or name.startswith("cupy-"):
                names.add(f"{dist.metadata['Name']} {dist.version}")
    except Exception:
        pass
    return sorted(names)


def _probe_cupy(gpu):
    if not _installed("cupy"):
        gpu["reason"] = "CuPy is not installed (gpu_dlpack's GPU backend: pip install 'gpu_dlpack[cuda12]')"
        return None
    info = {"distributions": _cupy_distributions(), "version": None, "runtime_version": None,
            "driver_version": None, "device_count": None, "error": None}
    try:
        import cupy
        from cupy.cuda import runtime

        info["version"] = cupy.__version__
        hip = bool(getattr(runtime, "is_hip", False))
        gpu["backend"] = "rocm" if hip else "cuda"
    except Exception as exc:
        info["error"] = _err(exc)
        gpu["reason"] = f"CuPy does not import: {info['error']}"
        return info
    for key, call, fmt in (("runtime_version", runtime.runtimeGetVersion, _cuda_version),
                           ("driver_version", runtime.driverGetVersion, _cuda_version)):
        try:
            info[key] = fmt(call()) if not hip else str(call())
        except Exception as exc:
            info[key] = None
            info["error"] = info["error"] or _err(exc)
    try:
        count = int(runtime.getDeviceCount())
        info["device_count"] = count
    except Exception as exc:
        info["error"] = _err(exc)
        gpu["reason"] = f"CuPy cannot use a GPU: {info['error']}"
        return info
    if count == 0:
        gpu["reason"] = "CuPy sees no GPU"
    for i in range(count):
        try:
            p = runtime.getDeviceProperties(i)
            name = p.get("name", b"")
            arch = p.get("gcnArchName", b"") if hip else b""
            cc = (arch.decode(errors="replace") if isinstance(arch, bytes) else str(arch)) if hip else f"{p['major']}.{p['minor']}"
            gpu["devices"].append({
                "index": i,
                "name": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
                "memory_bytes": int(p.get("totalGlobalMem", 0)),
                "compute_capability": cc,
            })
        except Exception as exc:
            gpu["devices"].append({"index": i, "name": f"unreadable: {_err(exc)}", "memory_bytes": 0,
                                   "compute_capability": ""})
    return info


def probe_platform() -> dict:
    gpu = {"usable": False, "backend": None, "reason": None, "nvidia_driver": _nvidia_driver(),
           "cupy": None, "devices": [], "torch": None, "jax": None}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gpu["cupy"] = _probe_cupy(gpu)
        gpu["usable"] = bool(gpu["devices"]) and _cupy_gpus() > 0
        if gpu["usable"]:
            gpu["reason"] = None
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                gpu["torch"] = {
                    "cuda_available": bool(torch.cuda.is_available()),
                    "cuda_version": torch.version.cuda,
                    "hip_version": getattr(torch.version, "hip", None),
                    "device_count": int(torch.cuda.device_count()),
                }
            except Exception as exc:
                gpu["torch"] = {"cuda_available": False, "cuda_version": None, "hip_version": None,
                                "device_count": 0, "error": _err(exc)}
        jax = sys.modules.get("jax")
        if jax is not None:
            try:
                gpu["jax"] = {"backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()]}
            except Exception as exc:
                gpu["jax"] = {"backend": "unusable", "devices": [], "error": _err(exc)}
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "os": platform.platform(),
        "machine": platform.machine(),
        "gpu": gpu,
    }


# -- findings ----------------------------------------------------------------

SEVERITIES = ("failure", "refused", "hazard", "fixed", "note")


def _hazard(hazard_id, subject, severity="hazard", **fields):
    text = _explain.hazards()[hazard_id]
    return {"severity": severity, "subject": subject, "problem": _explain.fill(text["problem"], fields),
            "remedy": _explain.fill(text["remedy"], fields), "hazard": hazard_id}


def _library_findings(row):
    out = []
    name = row["name"]
    if row["installed"] and row["error"]:
        out.append(_hazard("library-unusable", name, "note", library=name, error=row["error"]))
    prod = row.get("producer") or {}
    if prod.get("probed"):
        if prod["keywords"]["max_version"] and prod["capsules"]["1.0"].get("name") == _capsule.LEGACY:
            out.append(_hazard("producer-legacy-only", name, producer=name))
        if prod.get("floor"):
            f = prod["floor"]
            out.append(_hazard("producer-floor", name, producer=name, floor=f"({f[0]}, {f[1]})",
                               error=prod.get("floor_error") or ""))
        missing = [k for k, taken in prod["keywords"].items() if not taken]
        if missing:
            out.append(_hazard("producer-missing-keyword", name, producer=name, keywords=", ".join(missing)))
        copy = prod.get("copy") or {}
        if copy.get("copies") is False:
            out.append(_hazard("producer-copy-shares", name, producer=name))
        elif copy.get("copies") and copy.get("flag") is False:
            out.append(_hazard("producer-no-is-copied", name, producer=name))
        ro = prod.get("read_only") or {}
        if ro.get("flag") is False:
            out.append(_hazard("producer-no-read-only", name, producer=name))
        if ro.get("legacy") == "exported":
            out.append(_hazard("producer-read-only-legacy", name, producer=name))
    cons = row.get("consumer") or {}
    if cons.get("probed"):
        call = cons["call"]
        copy = cons.get("copy") or {}
        ro = cons.get("read_only") or {}
        if ro.get("honoured") is False:
            copy_call = f"{call}(gpu_dlpack.wrap(a), copy=True)" if copy.get("forwarded") else f"{call}(a.copy())"
            out.append(_hazard("consumer-ignores-read-only", name, consumer=name, copy_call=copy_call))
        sends = cons.get("sends")
        if sends is not None and "max_version" not in sends:
            out.append(_hazard("consumer-legacy-only", name, consumer=name, consumer_call_copy=f"{call}(a.copy())"))
        if copy.get("copied") is False and copy.get("error") is None:
            out.append(_hazard("consumer-copy-ignored", name, consumer=name))
    return out


def _remedy_for(result):
    found = _explain.first(result["error"] or "")
    if found is None:
        return "Unknown to `gpu-dlpack explain`; please report it with `gpu-dlpack doctor --json`."
    return found.remedies[0]


def _first_sentence(text):
    """The first sentence of a message, ending with a period."""
    if not text:
        return text
    head = text.partition(". ")[0].rstrip(".")
    return head + "."


def _cell_findings(mat):
    out = []
    for cell in mat["cells"]:
        subject = f"{cell['producer']} -> {cell['consumer']} ({mat['device']})"
        direct, via = cell["direct"], cell["via"]
        if via["outcome"] in ("error", "wrong-values"):
            problem = f"through gpu_dlpack, {via['call']}: " + (via["error"] or "the values arrived wrong")
            out.append({"severity": "failure", "subject": subject, "problem": problem,
                        "remedy": _remedy_for(via) if via["error"] else "Please report it with `gpu-dlpack doctor --json`."})
        elif via["outcome"] == "refused":
            out.append({"severity": "refused", "subject": subject,
                        "problem": f"{direct['call']}: {_first_sentence(direct['error']) or direct['outcome']} "
                                   f"Through gpu_dlpack: {_first_sentence(via['error'])}",
                        "remedy": _remedy_for(via)})
        elif not direct["ok"]:
            out.append({"severity": "fixed", "subject": subject,
                        "problem": f"{direct['call']}: {direct['error'] or direct['outcome']}",
                        "remedy": f"Use {via['call']} ({via['outcome']})."})
    return out


def findings(report) -> list:
    out = []
    gpu = report["platform"]["gpu"]
    if not gpu["usable"] and gpu["cupy"] is not None and gpu["cupy"].get("error"):
        out.append(_hazard("gpu-unusable", "gpu", "note", error=gpu["cupy"]["error"]))
    for row in report["libraries"]:
        out += _library_findings(row)
    for mat in report["matrices"]:
        out += _cell_findings(mat)
    out.sort(key=lambda f: SEVERITIES.index(f["severity"]))
    return out


# -- the report --------------------------------------------------------------


def _summary(report):
    cells = [c for m in report["matrices"] for c in m["cells"]]
    return {
        "exchanges": len(cells),
        "through_gpu_dlpack_ok": sum(c["via"]["ok"] for c in cells),
        "through_gpu_dlpack_failed": sum(c["via"]["outcome"] in ("error", "wrong-values") for c in cells),
        "refused": sum(c["via"]["outcome"] == "refused" for c in cells),
        "hazards": sum(f["severity"] == "hazard" for f in report["findings"]),
    }


def run(extra=(), peers=None) -> dict:
    """Probe the environment; the report as a JSON-ready dict (schema above).

    ``extra`` names more modules to probe; ``peers`` replaces ``PEERS``.
    """
    from . import __version__

    peers = PEERS if peers is None else tuple(peers)
    peers = peers + tuple(generic_peer(m) for m in extra if m not in {p.module for p in peers})
    loaded = [load(p) for p in peers]
    loaded = [item for item in loaded if item.peer.always or item.row["installed"]]
    report = {
        "schema": SCHEMA,
        "gpu_dlpack": {
            "version": __version__,
            "dlpack_version": list(_versions.DLPACK_VERSION),
            "min_dlpack_version": list(_versions.min_version()),
            "path": _fastpath.active(),
            "path_detail": _fastpath.describe(),
        },
        "platform": probe_platform(),
        "libraries": [item.row for item in loaded],
        "matrices": [],
    }
    for gpu in (False, True):
        if gpu and not any(_peer_gpu_usable(i.peer, i.module) for i in loaded):
            continue
        try:
            mat = matrix(loaded, gpu=gpu)
        except Exception as exc:  # the report goes on without this matrix
            mat = {"device": "gpu" if gpu else "cpu", "producers": [], "consumers": [], "skipped": [],
                   "cells": [], "error": _err(exc)}
        if mat is not None:
            report["matrices"].append(mat)
    report["findings"] = findings(report)
    report["summary"] = _summary(report)
    report["exit_status"] = 1 if report["summary"]["through_gpu_dlpack_failed"] else 0
    return report


def to_json(report) -> str:
    return json.dumps(report, indent=2)


# -- the terminal view -------------------------------------------------------


class _Span(str):
    """A table cell that runs over the columns after it (a reason, not a value)."""


def _table(rows, indent="  "):
    def spans(r):
        return any(isinstance(c, _Span) for c in r)

    full = [r for r in rows if not spans(r)]
    widths = [max(len(str(r[i])) for r in full) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = []
        for c, w in zip(r, widths):
            cells.append(str(c) if isinstance(c, _Span) else str(c).ljust(w))
            if isinstance(c, _Span):
                break
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _capsule_text(c):
    if "error" in c:
        return "error"
    if c["version"] is None:
        return "legacy"
    return f"{c['version'][0]}.{c['version'][1]}"


def _producer_cells(row):
    p = row.get("producer") or {}
    if not row["installed"] or row["error"]:
        return [_Span(row["error"] or ""), "", "", "", "", ""]
    if not p.get("probed"):
        return [_Span(f"not probed: {p.get('reason')}"), "", "", "", "", ""]
    missing = [k for k, taken in p["keywords"].items() if not taken]
    ro = p.get("read_only")
    if ro is None:
        ro_text = "n/a"
    elif ro["flag"] is None:
        ro_text = ro.get("detail") or "?"
    else:
        ro_text = ("sets" if ro["flag"] else "NOT SET") + ("" if ro["legacy"] != "exported" else ", legacy export!")
    c = p["copy"]
    if c["copies"] is None:
        copy_text = c["detail"] or "?"
    else:
        copy_text = ("copies" if c["copies"] else "SHARES") + (
            "" if c["flag"] is None else (", IS_COPIED" if c["flag"] else ", no IS_COPIED")
        )
    floor = p.get("floor")
    return [
        f"{_capsule_text(p['capsules']['none'])} / {_capsule_text(p['capsules']['1.0'])}",
        "-" if not floor else f"{floor[0]}.{floor[1]}",
        ", ".join(missing) or "all",
        ro_text,
        copy_text,
        p.get("device", ""),
    ]


def _consumer_cells(row):
    c = row.get("consumer") or {}
    if not row["installed"] or row["error"]:
        return [_Span(row["error"] or ""), "", "", "", "", ""]
    if not c.get("probed"):
        return [_Span(f"not probed: {c.get('reason')}"), "", "", "", "", ""]
    sends = c.get("sends")
    if c.get("error"):
        sends_text = f"fails ({c['error'].split(':')[0]})"
    elif sends is None:
        sends_text = "?"
    else:
        sends_text = ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v}" for k, v in sends.items()) or "nothing"
    copy = c["copy"]
    if copy.get("error"):
        copy_text = "not taken"
    else:
        copy_text = ("forwarded" if copy["forwarded"] else "not forwarded") + (
            "" if copy["copied"] is not False else ", SHARES"
        )
    ro = c["read_only"]
    ro_text = {True: "honoured", False: "IGNORED", None: "n/a"}[ro["honoured"]]
    raw = [k for k, v in c["raw_capsules"].items() if v is True]
    unaligned = {True: "0-copy", False: "copies"}.get(c.get("unaligned"), "fails")
    return [c["call"], sends_text, copy_text, ro_text, unaligned, "both" if len(raw) == 2 else (raw or ["no"])[0]]


_SHORT = {"zero-copy": "0-copy", "copied": "copied", "refused": "refused", "error": "ERROR",
          "wrong-values": "WRONG"}


def _cell_text(cell):
    def one(r):
        return _SHORT[r["outcome"]] + ("!" if r["hazards"] else "")

    return f"{one(cell['direct'])} > {one(cell['via'])}"


def render(report) -> str:
    g = report["gpu_dlpack"]
    lines = [
        f"gpu-dlpack doctor: gpu_dlpack {g['version']}, produces DLPack "
        f"{g['dlpack_version'][0]}.{g['dlpack_version'][1]}, floor "
        f"{g['min_dlpack_version'][0]}.{g['min_dlpack_version'][1]}",
        "",
        "Platform",
    ]
    p = report["platform"]
    lines.append(f"  Python  {p['python']} ({p['implementation']}) on {p['os']}")
    if "path" in g:
        lines.append(f"  Path    {g['path_detail']}")
    lines += _gpu_lines(p["gpu"])
    lines += ["", "Producers: x.__dlpack__() / x.__dlpack__(max_version=(1, 0))"]
    rows = [["library", "version", "capsules", "floor", "keywords taken", "read-only data", "copy=True", "device"]]
    for row in report["libraries"]:
        rows.append([row["name"], row["version"] or "-"] + _producer_cells(row))
    lines += _table(rows)
    lines += ["", "Consumers: what from_dlpack asks of a producer (measured with gpu_dlpack.wrap)"]
    rows = [["library", "call", "sends", "copy=True", "READ_ONLY", "unaligned", "raw capsules"]]
    for row in report["libraries"]:
        rows.append([row["name"]] + _consumer_cells(row))
    lines += _table(rows)
    for mat in report["matrices"]:
        lines += ["", f"Exchanges on {mat['device']}: direct > through gpu_dlpack"]
        if mat.get("error"):
            lines.append(f"  could not run: {mat['error']}")
            continue
        by = {(c["producer"], c["consumer"]): c for c in mat["cells"]}
        rows = [["producer \\ consumer"] + mat["consumers"]]
        for prod in mat["producers"]:
            rows.append([prod] + [_cell_text(by[(prod, cons)]) for cons in mat["consumers"]])
        lines += _table(rows)
        for skip in mat.get("skipped", ()):
            lines.append(f"  ({skip['producer']} is not a producer here: {skip['reason']})")
        backend = "cupy" if mat["device"] != "cpu" else "numpy"
        lines += _explain.wrap_text(
            f"0-copy: zero-copy, copied: the consumer got a copy, ERROR: an exception, refused: "
            f"gpu_dlpack declines by rule, !: hazard. Through gpu_dlpack means "
            f"gpu_dlpack.from_dlpack(x) in the {backend} column, consumer(gpu_dlpack.wrap(x)) elsewhere.",
            "  ", "  ", 100,
        )
    lines += ["", "Findings"]
    if not report["findings"]:
        lines.append("  none")
    for f in report["findings"]:
        lines += _explain.wrap_text(f"[{f['severity']}] {f['subject']}: {f['problem']}", "  ", "      ", 100)
        lines += _explain.wrap_text(f"remedy: {f['remedy']}", "      ", "        ", 100)
    s = report["summary"]
    lines.append("")
    if report["exit_status"] == 0:
        lines.append(
            f"OK: all {s['exchanges']} exchanges through gpu_dlpack work"
            + (f" ({s['refused']} refused by rule, see Findings)" if s["refused"] else "")
            + ". Exit status 0."
        )
    else:
        lines.append(
            f"FAILED: {s['through_gpu_dlpack_failed']} of {s['exchanges']} exchanges through gpu_dlpack fail. "
            "Exit status 1; attach `gpu-dlpack doctor --json` to a bug report."
        )
    return "\n".join(lines)


def _gpu_lines(gpu):
    lines = []
    if gpu["usable"]:
        lines.append(f"  GPU     {gpu['backend'].upper()} usable through CuPy")
    else:
        lines += _explain.wrap_text(f"none usable: {gpu['reason'] or 'unknown'}", "  GPU     ", "          ", 100)
    c = gpu["cupy"]
    if c is not None:
        rt = c.get("runtime_version") or "?"
        drv = c.get("driver_version") or "none"
        dists = ", ".join(c["distributions"]) or f"cupy {c.get('version')}"
        lines.append(f"          CuPy build: {dists}; runtime {rt}, driver {drv}")
    if gpu["nvidia_driver"]:
        lines.append(f"          {gpu['nvidia_driver']}")
    for d in gpu["devices"]:
        mem = d["memory_bytes"] / 2**30
        lines.append(f"          device {d['index']}: {d['name']}, {mem:.1f} GiB, compute capability {d['compute_capability']}")
    t = gpu["torch"]
    if t is not None:
        kind = f"CUDA {t['cuda_version']}" if t["cuda_version"] else (f"ROCm {t['hip_version']}" if t["hip_version"] else "CPU build")
        lines.append(f"          torch: {kind}, {t['device_count']} GPU(s) usable" if t["cuda_available"] else f"          torch: {kind}, no GPU usable")
    j = gpu["jax"]
    if j is not None:
        lines.append(f"          jax: backend {j['backend']}, devices {', '.join(j['devices']) or 'none'}")
    return lines
