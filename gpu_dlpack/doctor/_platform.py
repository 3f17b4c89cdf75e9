"""The platform: Python, the GPU, what CuPy, PyTorch and JAX see of it,
and the accelerators DLPack does not reach (JAX's TPUs), with the exchanges
that reach them."""

from __future__ import annotations

import importlib.metadata
import platform
import sys

import numpy as np

from .. import _convert, _devices, _import
from .._backends import cupy_backend
from ._measure import _err, _origin, _quiet


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
    if _origin("cupy") is None:
        gpu["reason"] = "CuPy is not installed (gpu_dlpack's GPU backend: pip install cupy-cuda12x, or cupy-cuda13x, cupy-rocm-7-0)"
        return None
    info = {"distributions": _cupy_distributions(), "version": None, "runtime_version": None,
            "driver_version": None, "device_count": None, "capture": None, "error": None}
    try:
        import cupy
        from cupy.cuda import runtime

        info["version"] = cupy.__version__
        hip = bool(getattr(runtime, "is_hip", False))
        gpu["backend"] = "rocm" if hip else "cuda"
        info["capture"] = _capture(cupy, runtime, hip)
    except Exception as exc:
        info["error"] = _err(exc)
        gpu["reason"] = f"CuPy does not import: {info['error']}"
        return info
    for key, call in (("runtime_version", runtime.runtimeGetVersion), ("driver_version", runtime.driverGetVersion)):
        try:
            info[key] = str(call()) if hip else _cuda_version(call())
        except Exception as exc:
            info["error"] = info["error"] or _err(exc)
    try:
        info["device_count"] = count = int(runtime.getDeviceCount())
    except Exception as exc:
        info["error"] = _err(exc)
        gpu["reason"] = f"CuPy cannot use a GPU: {info['error']}"
        return info
    if count == 0:
        gpu["reason"] = "CuPy sees no GPU"
    for i in range(count):
        try:
            p = runtime.getDeviceProperties(i)
            name, arch = (v.decode(errors="replace") if isinstance(v, bytes) else str(v)
                          for v in (p.get("name", b""), p.get("gcnArchName", b"")))
            gpu["devices"].append({
                "index": i,
                "name": name,
                "memory_bytes": int(p.get("totalGlobalMem", 0)),
                "compute_capability": arch if hip else f"{p['major']}.{p['minor']}",
            })
        except Exception as exc:
            gpu["devices"].append({"index": i, "name": f"unreadable: {_err(exc)}", "memory_bytes": 0,
                                   "compute_capability": ""})
    return info


def _capture(cupy, runtime, hip) -> str:
    """Whether the installed CuPy exposes CUDA graph capture, which the
    layer checks before every exchange on a GPU (docs/guide/gpu.md)."""
    if hip:
        return "no: CuPy's ROCm build offers no stream capture (exchanges are not checked for one)"
    missing = [name for name, where in (("streamIsCapturing", runtime), ("Stream.begin_capture", cupy.cuda.Stream))
               if not hasattr(where, name.rpartition(".")[2])]
    if missing:
        return f"no: this CuPy lacks {', '.join(missing)} (upgrade CuPy)"
    return "yes: cupy.cuda.Stream.begin_capture; exchanges under capture are checked by cudaStreamIsCapturing"


#: The platforms of JAX devices the layer reaches by DLPack itself.
_REACHED = ("cpu", "gpu", "cuda", "rocm")


def _accelerators(jax) -> list:
    """The JAX devices of accelerators DLPack does not reach (a TPU), and
    which exchanges reach them: a small array on each, through each entry."""
    found = []
    try:
        devices = [d for d in jax.devices() if str(d.platform).lower() not in _REACHED]
    except Exception:  # no backend usable: the jax line says why
        return found
    for d in devices:
        try:
            dlpack = list(_devices.Device(d).dlpack)
        except Exception:
            dlpack = None
        entry = {"library": "jax", "device": str(d), "dlpack": dlpack, "exchanges": []}
        want = np.arange(4.0, dtype=np.float32)
        try:
            x = jax.device_put(want, d)
        except Exception as exc:
            entry["exchanges"].append({"call": "jax.device_put(a, device)", "ok": False, "detail": _err(exc)})
            found.append(entry)
            continue
        calls = (
            ("from_dlpack(x, device='cpu')", lambda: _import.from_dlpack(x, device="cpu")),
            ("convert(x, 'numpy')", lambda: _convert.convert(x, "numpy")),
            ("convert(a, 'jax', device=device)", lambda: _convert.convert(want, "jax", device=d)),
        )
        for call, run in calls:
            try:
                got = run()
                values = np.asarray(jax.device_get(got) if hasattr(got, "devices") else got)
                on = sorted(str(v) for v in got.devices()) if hasattr(got, "devices") else ["host"]
                ok = values.tolist() == want.tolist()
                detail = f"{'values equal' if ok else 'values differ'}, on {', '.join(on)}"
            except Exception as exc:
                ok, detail = False, _err(exc)
            entry["exchanges"].append({"call": call, "ok": ok, "detail": detail})
        found.append(entry)
    return found


def probe_platform() -> dict:
    gpu = {"usable": False, "backend": None, "reason": None, "nvidia_driver": _nvidia_driver(),
           "cupy": None, "devices": [], "torch": None, "jax": None}
    with _quiet():
        gpu["cupy"] = _probe_cupy(gpu)
        gpu["usable"] = bool(gpu["devices"]) and cupy_backend.device_count() > 0
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
        accelerators = [] if jax is None else _accelerators(jax)
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "os": platform.platform(),
        "machine": platform.machine(),
        "gpu": gpu,
        "accelerators": accelerators,
    }
