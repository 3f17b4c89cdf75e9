"""A simulated CUDA under real CuPy, for the ``gpu`` tests on a machine without a GPU.

CuPy 14 links the CUDA runtime statically into ``cupy_backends.cuda.api.runtime``;
its other modules call that runtime (and ``cupy_backends.cuda.api.driver``)
through the C functions those two modules publish in ``__pyx_capi__``, each
a capsule named by its C signature. ``install()`` puts stand-in modules in
their place before CuPy is imported: their capsules point at the simulator
(``simcuda.c``, built here with the interpreter's compiler), their Python
functions call the same C functions, and everything else (constants, the
error classes, ``PointerAttributes``) is CuPy's own. Real CuPy then runs on
it: ``cupy.empty``, ``asarray``, ``get``, ``__dlpack__``, ``from_dlpack``,
streams, events, stream capture and graphs, two GPUs, pinned and managed
memory. No kernel runs (no
NVRTC, no device code): what needs one raises ``NotSimulated``.

It fails closed: an installed CuPy whose C entries are not exactly those
the simulator implements (an entry missing, added, or of another signature)
stops ``install()`` with ``SimulatorMismatch`` naming the entry.

``take_reports()`` gives what the happens-before checker saw since the last
call (``simcuda.c`` says what it checks); the suite's conftest fails a test
that leaves any (``GPU_DLPACK_SIMCUDA=1``, ``scripts/gpu-sim.sh``).

No library simulates the CUDA runtime under CuPy: Numba's CUDA simulator
runs Numba kernels in Python, with synchronous streams and no CuPy; a fake
``libcuda.so.1`` does not satisfy CuPy's static runtime (it asks the driver
for undocumented export tables); stand-ins of CuPy itself would test
gpu_dlpack against something that is not CuPy.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = ("simcuda.c", "table.h", "entries.h")
RUNTIME = "cupy_backends.cuda.api.runtime"
DRIVER = "cupy_backends.cuda.api.driver"
#: The Python functions of CuPy's modules that call no CUDA, kept as they are.
PURE = {
    RUNTIME: {"_export_enum", "__pyx_unpickle_MemPoolProps", "__pyx_unpickle_PointerAttributes",
              "__pyx_unpickle__ThreadLocal"},
    DRIVER: {"_is_cuda_python", "check_status"},
}


class SimulatorMismatch(RuntimeError):
    """The installed CuPy's C-API is not the one the simulator implements."""


class NotSimulated(RuntimeError):
    """A CUDA call the simulator does not implement, or a kernel."""


def build() -> str:
    """The path of the built simulator (built when missing, once per source and interpreter)."""
    digest = hashlib.sha1(sys.version.encode())
    for name in SOURCES:
        with open(os.path.join(HERE, name), "rb") as f:
            digest.update(f.read())
    flags = os.environ.get("GPU_DLPACK_SIMCUDA_CFLAGS", "-O1 -g")
    digest.update(flags.encode())
    root = os.environ.get("GPU_DLPACK_CPRODUCER_DIR") or os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                                     "build", "tests")
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = os.path.join(root, f"_simcuda-{digest.hexdigest()[:12]}{suffix}")
    if not os.path.exists(path):
        os.makedirs(root, exist_ok=True)
        cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "gcc").split()
        include = sysconfig.get_paths()["include"]
        fd, tmp = tempfile.mkstemp(suffix=suffix, dir=root)
        os.close(fd)
        try:
            done = subprocess.run(
                [*cc, *flags.split(), "-Wall", "-Wno-unused-parameter", "-Wno-format-truncation", "-shared",
                 "-fPIC", f"-I{include}", "-o", tmp, os.path.join(HERE, "simcuda.c"), "-lpthread"],
                capture_output=True, text=True,
            )
            if done.returncode:
                raise RuntimeError(f"tests/simcuda/simcuda.c did not build with {cc}:\n{done.stderr}")
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


_module: list = []


def load():
    """The simulator's extension module (built and loaded once)."""
    if not _module:
        spec = importlib.util.spec_from_file_location("_simcuda", build())
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _module.append(module)
    return _module[0]


def _capsule_name(capsule) -> str:
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule).decode()


def compare(real_capi: dict, module: str, sim) -> None:
    """SimulatorMismatch naming the first entry of ``module`` (``"runtime"`` or
    ``"driver"``) that CuPy's ``real_capi`` and the simulator do not share
    with the same signature."""
    implemented = {name: signature for mod, name, signature, _addr, _kind in sim.entries() if mod == module}
    for name, capsule in sorted(real_capi.items()):
        found = _capsule_name(capsule)
        if name not in implemented:
            raise SimulatorMismatch(
                f"the installed CuPy's {module} module has the C entry {name!r} ({found}), "
                "which the simulated CUDA does not implement (tests/simcuda/table.h)")
        if implemented[name] != found:
            raise SimulatorMismatch(
                f"the installed CuPy's {module} entry {name!r} has the signature {found!r}; "
                f"the simulated CUDA implements {implemented[name]!r} (tests/simcuda/table.h)")
    for name in sorted(set(implemented) - set(real_capi)):
        raise SimulatorMismatch(
            f"the simulated CUDA implements the {module} entry {name!r}, which the installed CuPy does "
            "not have (tests/simcuda/table.h)")


# -- the Python face: CuPy's Python functions over the same C entries -----------------

_CTYPES = {
    "int": ctypes.c_int, "unsigned int": ctypes.c_uint, "intptr_t": ctypes.c_ssize_t, "size_t": ctypes.c_size_t,
    "uintmax_t": ctypes.c_uint64, "float": ctypes.c_float, "PyObject *": ctypes.py_object,
    "CUdevice": ctypes.c_int, "cudaMemcpyKind": ctypes.c_int,
}


def _ctype(text: str):
    text = text.strip()
    if text.startswith("struct __pyx_obj_"):
        return ctypes.py_object
    if text.startswith("struct __pyx_opt_args_"):
        return ctypes.c_void_p
    return _CTYPES[text]


def _parse_signature(signature: str):
    """``(restype, argtypes, has optional args)`` of a Cython C signature."""
    match = re.fullmatch(r"(.+?)\s*\((.*)\)", signature)
    ret, params = match.group(1), match.group(2)
    parts = [p.strip() for p in params.split(",")] if params.strip() not in ("", "void") else []
    optional = bool(parts) and "__pyx_optional_args" in parts[-1]
    argtypes = []
    for part in parts:
        if "__pyx_skip_dispatch" in part:
            argtypes.append(ctypes.c_int)
        elif "__pyx_optional_args" in part:
            argtypes.append(ctypes.c_void_p)
        else:
            argtypes.append(_ctype(part))
    return _ctype(ret), argtypes, optional


def _doc_params(real_function, namespace):
    """The parameters of CuPy's Python function, from the signature Cython
    embeds in its docstring: ``[(name, C type, default or inspect._empty)]``."""
    doc = (real_function.__doc__ or "").splitlines()
    head = doc[0] if doc else ""
    match = re.match(r"\w+\((.*?)\)", head)
    params = []
    if match is None or not match.group(1).strip():
        return params
    for part in match.group(1).split(","):
        part = part.strip()
        default = inspect.Parameter.empty
        if "=" in part:
            part, text = (s.strip() for s in part.split("=", 1))
            default = eval(text, dict(namespace))  # a constant of CuPy's module
        words = part.split()
        params.append((words[-1], " ".join(words[:-1]), default))
    return params


def _python_face(sim, module_name, name, signature, address, real_function, namespace):
    restype, argtypes, optional = _parse_signature(signature)
    cfunc = ctypes.PYFUNCTYPE(restype, *argtypes)(address)
    params = _doc_params(real_function, namespace)
    required = [p for p in params if p[2] is inspect.Parameter.empty]
    optionals = [p for p in params if p[2] is not inspect.Parameter.empty]
    n_c_args = len(argtypes) - 1 - int(optional)
    if len(required) != n_c_args or (optionals and not optional):
        raise SimulatorMismatch(f"{module_name}.{name}: its docstring {real_function.__doc__.splitlines()[0]!r} "
                                f"does not match the C signature {signature!r}")
    opt_type = None
    if optionals:
        fields = [("n", ctypes.c_int)] + [(p[0], _ctype(p[1])) for p in optionals]
        opt_type = type(f"{name}_optional_args", (ctypes.Structure,), {"_fields_": fields})
    sig = inspect.Signature([inspect.Parameter(p[0], inspect.Parameter.POSITIONAL_OR_KEYWORD, default=p[2])
                             for p in params])

    def face(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        values = list(bound.arguments.values())
        call = values[:len(required)] + [1]
        if optional:
            if opt_type is not None:
                opts = opt_type(len(optionals), *values[len(required):])
                call.append(ctypes.addressof(opts))
            else:
                call.append(None)
        out = cfunc(*call)
        return bool(out) if name == "streamIsCapturing" else out

    face.__name__ = face.__qualname__ = name
    face.__doc__ = real_function.__doc__
    face.__signature__ = sig
    return face


def _not_simulated(sim, module_name, name):
    def face(*args, **kwargs):
        sim.report(f"{module_name}.{name} is not simulated")
        raise NotSimulated(f"the simulated CUDA does not implement {module_name}.{name}")

    face.__name__ = face.__qualname__ = name
    return face


def _stand_in(sim, real, short):
    """A module named as ``real`` with its attributes, whose functions and
    ``__pyx_capi__`` are the simulator's."""
    stand = types.ModuleType(real.__name__, real.__doc__)
    entries = {name: (signature, address, kind) for mod, name, signature, address, kind in sim.entries()
               if mod == short}
    namespace = vars(real)
    for key, value in namespace.items():
        if key == "__pyx_capi__":
            continue
        if isinstance(value, types.BuiltinFunctionType) and key not in PURE[real.__name__]:
            entry = entries.get(key)
            if entry is not None and entry[2] == 0:
                value = _python_face(sim, real.__name__, key, entry[0], entry[1], value, namespace)
            else:
                value = _not_simulated(sim, real.__name__, key)
        setattr(stand, key, value)
    stand.__pyx_capi__ = sim.capi(short)
    stand.__simulated__ = True
    return stand


_installed: list = []


def install(devices: int = 2):
    """Put the simulated runtime and driver in the place of CuPy's, before
    CuPy is imported; returns the simulator's module. Once per process."""
    if _installed:
        return _installed[0]
    if "cupy" in sys.modules or any(m.startswith("cupy.") for m in sys.modules):
        raise RuntimeError("simcuda.install() must run before CuPy is imported")
    import cupy_backends.cuda.api as api
    import cupy_backends.cuda.api.driver as real_driver
    import cupy_backends.cuda.api.runtime as real_runtime

    sim = load()
    compare(real_runtime.__pyx_capi__, "runtime", sim)
    compare(real_driver.__pyx_capi__, "driver", sim)
    sim.configure(devices, real_runtime.CUDARuntimeError, real_driver.CUDADriverError, NotSimulated,
                  real_runtime.PointerAttributes, runtime_version=real_runtime.runtimeGetVersion(),
                  build_version=real_driver.get_build_version())
    driver = _stand_in(sim, real_driver, "driver")
    runtime = _stand_in(sim, real_runtime, "runtime")
    sys.modules[DRIVER] = driver
    sys.modules[RUNTIME] = runtime
    api.driver = driver
    api.runtime = runtime
    _installed.append(sim)
    return sim


class _PoolWatch:
    """A memory hook of CuPy's (``cupy.cuda.memory_hook.MemoryHook``) that tells
    the simulator when CuPy's device memory pool takes a block back, and on
    which stream the pool will hand it out again (the stream current when it
    was allocated): ``pool_release`` reports queued work of another stream
    still using it."""

    name = "simcuda-pool"

    def __init__(self, sim):
        self.sim = sim
        self.streams = {}

    def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
        import cupy

        self.streams[pmem_id] = cupy.cuda.get_current_stream().ptr

    def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
        stream = self.streams.pop(pmem_id, None)
        if stream is not None:
            self.sim.pool_release(mem_ptr, mem_size, stream)


def watch_pool():
    """Have CuPy's memory pool report the blocks it takes back to the
    simulator, on the calling thread (CuPy's memory hooks are per thread),
    once CuPy is imported on the simulator."""
    from cupy.cuda import memory_hook

    hooks = memory_hook.get_memory_hooks()
    if _PoolWatch.name not in hooks:
        watch = type("PoolWatch", (_PoolWatch, memory_hook.MemoryHook), {})(_installed[0])
        watch.__enter__()


def installed():
    """The simulator's module when it is installed in this process, else None."""
    return _installed[0] if _installed else None


def take_reports() -> list:
    """What the checker reported since the last call (and forgets it)."""
    return load().take_reports() if _module else []
