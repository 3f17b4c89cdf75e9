"""The sample array every probe and exchange uses, and the small tools that
measure what a library did with it."""

from __future__ import annotations

import contextlib
import importlib.util
import warnings

import numpy as np

from .. import _capsule
from ..testing._consumer import _aligned  # the checks' samples are the doctor's

VALUES = np.arange(6, dtype=np.float32).reshape(2, 3)
_MESSAGE_WIDTH = 300


def _readonly_numpy(m, a):
    a = _aligned(a)
    a.flags.writeable = False
    return a


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
    """Address of ``x``'s first element (None: unreadable), read from a
    capsule of it: its export through gpu_dlpack, which reads any producer
    zero-copy (a read-only array of NumPy before 2.1 refuses the legacy
    capsule that is all its own __dlpack__ makes), else its own capsule."""
    from .._export import export

    try:
        try:
            cap = export(x, max_version=(1, 0))
        except Exception:
            method = type(x).__dlpack__
            try:
                cap = method(x, max_version=(1, 0))
            except TypeError:
                cap = method(x)
        info = _capsule.read(cap)
    except Exception:
        return None
    return info.data + info.byte_offset


def _host_values(x):
    """``x``'s values as a NumPy array, wherever ``x`` lives."""
    # np.from_dlpack(x).copy(): a producer that refuses copy=True (tvm-ffi).
    for attempt in (lambda: np.from_dlpack(x, device="cpu", copy=True), lambda: np.from_dlpack(x).copy(),
                    lambda: x.get(), lambda: x.cpu().numpy(), lambda: np.asarray(x)):
        try:
            return np.asarray(attempt())
        except Exception:
            continue
    return None


def _origin(module: str):
    """Where ``module``'s top-level package is (a namespace package, such
    as MLX's ``mlx``, has no file: its folders), or None when it is not
    installed."""
    try:
        spec = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return spec.origin or (tuple(spec.submodule_search_locations or ()) or None)


def _capsule_kind(make):
    try:
        info = _capsule.read(make())
    except Exception as exc:
        return {"error": _err(exc)}
    return {"name": info.name, "version": list(info.version) if info.version else None, "flags": info.flags}


@contextlib.contextmanager
def _quiet():
    """Warnings silenced (a probe reports, it does not warn); a decorator too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
