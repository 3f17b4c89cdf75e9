"""The demo exchange: arrays travel between NumPy, PyTorch and JAX through
gpu_dlpack, and each step says what happened (capsule kind, version, flags,
zero-copy or copied).

Floor: the faces; it stands on the two directions.
"""

from __future__ import annotations

import importlib

import numpy as np

from . import _capsule
from ._backends import numpy_backend
from ._devices import Device
from ._export import export, wrap
from ._import import from_dlpack


def _describe_capsule(capsule):
    info = _capsule.read(capsule)
    flags = [n for bit, n in ((1, "READ_ONLY"), (2, "IS_COPIED"), (4, "SUBBYTE_PADDED")) if info.flags & bit]
    version = f"{info.version[0]}.{info.version[1]}" if info.version else "legacy"
    return f"{info.name} v{version} flags=[{' '.join(flags) or '-'}] on {info.device}"


def _step(title, run):
    try:
        line, ok = run(), True
    except Exception as exc:  # the demo reports, it does not stop
        line, ok = f"FAILED {type(exc).__name__}: {exc}", False
    print(f"  {title:<48} {line}")
    return ok


def _same(a, b):
    """Whether ``b`` holds ``a``'s memory, read from a capsule of each."""
    try:
        pa, pb = (_capsule.read(export(x, max_version=(1, 0))) for x in (a, b))
    except Exception:  # a producer the layer cannot read says nothing
        return "?"
    return "zero-copy" if pa.data + pa.byte_offset == pb.data + pb.byte_offset else "copied"


def run_demo() -> int:
    """Run the demo; returns the number of failed steps."""
    peers = {}
    for name in ("torch", "jax"):
        try:
            peers[name] = importlib.import_module(name)
        except Exception as exc:
            print(f"  ({name} is not usable here: {type(exc).__name__}: {exc})")
    failures = 0
    # 64-byte aligned: JAX shares host memory only when it is (it copies otherwise).
    a = numpy_backend.aligned_copy(np.arange(12, dtype=np.float32).reshape(3, 4), 64)
    ro = a.copy()
    ro.flags.writeable = False
    print("gpu_dlpack demo exchange (host memory)")

    def capsule_of(x, **kw):
        return lambda: _describe_capsule(export(x, **kw))

    failures += not _step("export NumPy, versioned", capsule_of(a, max_version=(1, 0)))
    failures += not _step("export read-only NumPy, versioned", capsule_of(ro, max_version=(1, 0)))
    failures += not _step("export NumPy, copy=True", capsule_of(a, max_version=(1, 0), copy=True))
    torch = peers.get("torch")
    if torch is not None:
        t = torch.arange(6.0)

        def numpy_to_torch():
            out = torch.from_dlpack(wrap(a))
            return f"{_same(a, out)}, values equal: {bool((out.numpy() == a).all())}"

        def torch_to_numpy():
            out = from_dlpack(t)
            return f"{_same(t, out)}, writeable={out.flags.writeable}"

        failures += not _step("NumPy -> torch.from_dlpack(wrap(a))", numpy_to_torch)
        failures += not _step("torch -> gpu_dlpack.from_dlpack(t)", torch_to_numpy)
        failures += not _step(
            "torch copy=True (torch forgets IS_COPIED)", capsule_of(t, max_version=(1, 0), copy=True)
        )
    jax = peers.get("jax")
    if jax is not None:
        j = jax.numpy.arange(6.0)

        def jax_versioned():
            return _describe_capsule(export(j, max_version=(1, 0))) + " (JAX before 0.12 gives legacy only: adapted)"

        def numpy_to_jax():
            out = jax.dlpack.from_dlpack(wrap(a))
            return f"{_same(a, out)} on {Device(next(iter(out.devices())))}"

        def jax_to_numpy():
            out = from_dlpack(j)
            return f"{_same(j, out)}, writeable={out.flags.writeable} (JAX arrays are immutable)"

        failures += not _step("JAX -> versioned capsule", jax_versioned)
        failures += not _step("NumPy -> jax.dlpack.from_dlpack(wrap(a))", numpy_to_jax)
        failures += not _step("JAX -> gpu_dlpack.from_dlpack(j)", jax_to_numpy)

    def floor():
        try:
            export(a, max_version=(0, 4))
        except BufferError as exc:
            return f"BufferError, as it should: {str(exc)[:60]}..."
        raise AssertionError("the version floor was not applied")

    failures += not _step("max_version=(0, 4), below the floor", floor)
    print(f"demo: {failures} step(s) failed")
    return failures
