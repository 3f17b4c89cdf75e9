"""Probes of one library: what it does as a producer and as a consumer."""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import os
import sys

from .. import _capsule, _peers, testing
from ..testing import _consumer
from .._devices import Device
from .._export import wrap
from ._measure import VALUES, _aligned, _capsule_kind, _err, _origin, _pointer, _quiet, _sent
from ._peers import _peer_gpu_usable
from ._unopened import unopened


@contextlib.contextmanager
def _native_stderr_silenced():
    """File descriptor 2 sent to the null device while a library loads:
    TensorFlow's C++ logs at import ("oneDNN custom operations are on")
    whatever TF_CPP_MIN_LOG_LEVEL says, which a report must not carry.
    Python's own stderr is flushed first and kept."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 2)
        finally:
            os.close(null)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# -- producers ---------------------------------------------------------------


def _no_dlpack(x) -> str:
    """Why an array of a library is no DLPack producer."""
    chunks = _peers.chunks_of(type(x))
    if chunks is not None:
        return (f"{type(x).__name__} is a lazy array of chunks, with no __dlpack__: gpu_dlpack.convert "
                f"maps over its chunks for {' or '.join(chunks.holds)}, and converts x.{chunks.compute}() "
                "for any other library")
    return f"{type(x).__name__} has no __dlpack__"


def _accepts(x, keyword, value):
    """True when ``x.__dlpack__`` takes ``keyword``; the TypeError otherwise."""
    try:
        type(x).__dlpack__(x, **{keyword: value})
    except TypeError as exc:
        return _err(exc)
    except Exception:  # the keyword was taken; the value was refused
        pass
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


@_quiet()
def probe_producer(peer, module, gpu=False) -> dict:
    out = {"probed": False, "reason": None}
    make = peer.gpu if gpu else peer.host
    if make is None:
        out["reason"] = "makes no GPU arrays" if gpu else "makes no host arrays here"
        return out
    if gpu and not _peer_gpu_usable(peer, module):
        out["reason"] = "its arrays live on a GPU, and none is usable"
        return out
    try:
        x = make(module, VALUES if gpu else peer.values)
    except Exception as exc:
        out["reason"] = f"could not make an array: {_err(exc)}"
        return out
    if not hasattr(type(x), "__dlpack__"):
        takes = "gpu_dlpack.from_dlpack(x) and gpu_dlpack.wrap(x) take it"
        if hasattr(x, "__cuda_array_interface__"):
            out["reason"] = f"{type(x).__name__} speaks the CUDA Array Interface, not DLPack: {takes}"
        elif hasattr(x, "__dlpack__"):
            out["reason"] = f"{type(x).__name__} forwards __dlpack__ through its instance: {takes}"
        else:
            out["reason"] = _no_dlpack(x)
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
    try:
        own_device = tuple(type(x).__dlpack_device__(x))
    except Exception:
        own_device = None
    out["device_answer"] = None if own_device is None else list(own_device)  # __dlpack_device__() as it came
    taken = {k: _accepts(x, k, v) for k, v in (("stream", None), ("max_version", (1, 0)), ("dl_device", own_device),
                                                 ("copy", None))}
    out["keywords"] = keywords = {k: t is True for k, t in taken.items()}
    out["keyword_errors"] = {k: t for k, t in taken.items() if t is not True}
    out["floor"], out["floor_error"] = _floor(x) if keywords["max_version"] else (None, None)
    read_only = None if gpu else _read_only_maker(peer)
    out["read_only"] = None if read_only is None else _producer_read_only(read_only, module, peer.values)
    out["copy"] = _producer_copy(x) if keywords["copy"] else {
        "copies": None, "flag": None, "detail": "does not take copy"
    }
    out["rules"] = None if gpu else _producer_rules(peer, module)
    return out


def _read_only_maker(peer):
    """(module, ndarray) -> the library's read-only host data (None: it
    makes none): any of its host arrays where the table of peers says they
    are all immutable, else ``peer.readonly``. The rules and the display
    read the same data."""
    row = _peers.by_name(peer.name)
    if row is not None and any(f.id in _peers.READ_ONLY_ARRAYS for f in row.export_faults):
        return peer.host
    return peer.readonly


def _producer_rules(peer, module) -> dict | None:
    """gpu_dlpack.testing's rules of a producer, checked on the library's
    host arrays of float32: rule id -> [outcome, evidence] (None where it
    makes none). Read-only data is what ``_read_only_maker`` makes."""
    read_only = _read_only_maker(peer)

    def make(shape, dtype, *, readonly=False):
        if peer.flat and len(shape) != 1:
            raise TypeError(f"{peer.name}'s arrays here have one dimension")
        a = testing.values(shape, dtype)
        made = peer.host(module, a) if not readonly else (None if read_only is None else read_only(module, a))
        if made is None:
            raise NotImplementedError(f"the doctor makes no read-only arrays of {peer.name}")
        return made

    try:
        report = testing.check_producer(make, dtypes=("float32",), name=peer.name)
    except ValueError:
        return None
    return {row.rule.id: [row.outcome, row.evidence] for row in report.rows}


def _producer_read_only(make, module, values):
    result = {"flag": None, "legacy": None, "detail": None}
    try:
        r = make(module, values)
    except Exception as exc:
        return dict(result, detail=f"could not make read-only data: {_err(exc)}")
    if r is None:  # this release makes none (torch before 2.14)
        return None
    try:
        info = _capsule.read(type(r).__dlpack__(r, max_version=(1, 0)))
        if info.versioned:
            result["flag"] = info.readonly
        else:
            result["detail"] = "gives legacy capsules only"
    except Exception as exc:
        result["detail"] = f"versioned export failed: {_err(exc)}"
    try:
        answer = _capsule.read(type(r).__dlpack__(r))
    except Exception:
        result["legacy"] = "refused"
    else:
        # A versioned capsule that says READ_ONLY answers it safely (torch 2.15's), as rule 5.2 reads it.
        result["legacy"] = "versioned" if answer.versioned and answer.readonly else "exported"
    return result


def _producer_copy(x):
    try:
        cap = type(x).__dlpack__(x, max_version=(1, 0), copy=True)
        info = _capsule.read(cap)
    except Exception as exc:
        return {"copies": None, "flag": None, "detail": _err(exc)}
    source = _pointer(x)
    copies = None if source is None else info.data + info.byte_offset != source
    return {"copies": copies, "flag": info.is_copied if info.versioned else None, "detail": None}


# -- consumers ---------------------------------------------------------------


@_quiet()
def probe_consumer(peer, module) -> dict:
    fn, path = _peers.named_callable(module, peer.consumer)
    call = f"{peer.module}.{path}" if path else None
    out = {"probed": False, "reason": None, "call": call}
    if not peer.consumer:
        out["reason"] = "imports no DLPack"
        return out
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
        out["zero_copy"] = _pointer(got) == src.ctypes.data
    out["asks"] = _sent(_consumer._first_ask(fn)[0])  # its first request's keywords (None: none made)
    out["unaligned"] = _consumer_unaligned(fn)
    out["copy"] = _consumer_copy(fn)
    honoured, detail, _exc = _consumer._read_only_import(fn)
    out["read_only"] = {"honoured": honoured, "detail": detail}
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
    try:
        where, source = _consumer._imported_at(fn, 4)
    except Exception as exc:
        return _err(exc)
    return "the result's address could not be read" if where is None else where == source


def _consumer_copy(fn):
    try:
        got, forwarded, src = _consumer._copy_import(fn)
    except Exception as exc:
        return {"forwarded": None, "copied": None, "error": _err(exc)}
    p = _pointer(got)
    return {"forwarded": forwarded, "copied": None if p is None else p != src.ctypes.data, "error": None}


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

    suffix = ""  # what a call's text adds after the producer

    def __init__(self, peer, module, row):
        self.peer = peer
        self.module = module
        self.row = row
        self.consume, _ = _peers.named_callable(module, peer.consumer) if module is not None else (None, None)


def load(peer) -> _Loaded:
    """Import ``peer`` and probe it; never raises."""
    row = {"name": peer.name, "module": peer.module, "installed": False, "version": None,
           "error": None, "unopened": None, "producer": None, "consumer": None}
    if _origin(peer.module) is None:
        row["error"] = "not installed"
        return _Loaded(peer, None, row)
    row["installed"] = True
    try:
        with _quiet(), _native_stderr_silenced():
            module = importlib.import_module(peer.module)
            for sub in peer.submodules:
                importlib.import_module(sub)
    except Exception as exc:
        row["error"] = f"import failed: {_err(exc)}"
        return _Loaded(peer, None, row)
    row["version"] = _version(module, peer.module.split(".")[0])
    # Before any probe: one that cannot open its accelerator is probed on the CPU.
    with _native_stderr_silenced():
        row["unopened"] = unopened(peer, module)
    # A library of GPU arrays only (CuPy) is probed as a producer on the GPU.
    gpu = peer.host is None and peer.gpu is not None
    for side, probe in (("producer", lambda: probe_producer(peer, module, gpu)),
                        ("consumer", lambda: probe_consumer(peer, module))):
        try:
            row[side] = probe()
        except Exception as exc:  # a probe reports, it never stops the report
            row[side] = {"probed": False, "reason": f"probe crashed: {_err(exc)}"}
    return _Loaded(peer, module, row)
