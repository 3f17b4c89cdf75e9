"""``gpu-dlpack explain``: every entry of the knowledge file recognises the
real message it describes.

Each message is raised here by the real library (NumPy, PyTorch, JAX, CuPy
without a GPU, gpu_dlpack) wherever it can be raised on a CPU. Messages that
only a GPU can raise are quoted from the library's source, and the test says
where; for PyTorch the quote is checked against the installed source.
"""

import ctypes
import datetime
import importlib.metadata
import functools
import inspect
import io
import json
import os
import re
import struct
import subprocess
import sys
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _capsule, _cli, _errors, _explain, _peers, _rules, _streams
from gpu_dlpack._devices import DLDeviceType

from .capsules import AcceleratorProducer
from .helpers import jax_x64


def raised(fn) -> str:
    """``Type: message`` of what ``fn()`` raises, as a traceback shows it."""
    try:
        fn()
    except Exception as exc:  # the message is what is tested
        return f"{type(exc).__name__}: {exc}"
    raise AssertionError(f"{fn} raised nothing")


def warned(fn) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    assert caught, f"{fn} warned nothing"
    w = caught[-1]
    return f"{w.category.__name__}: {w.message}"


def numpy_capsule(device_type=1, versioned=False, major=None, dtype=None, ndim=None):
    """A NumPy capsule with fields rewritten, to make real consumers meet
    memory kinds and layouts this CPU-only machine cannot produce."""
    a = np.arange(6.0)
    cap = a.__dlpack__(max_version=(1, 0)) if versioned else a.__dlpack__()
    ptr = _capsule.pointer(cap, versioned)
    tensor = ptr + (32 if versioned else 0)
    ctypes.memmove(tensor + 8, struct.pack("<ii", device_type, 0), 8)
    if major is not None:
        _capsule.set_version(cap, (major, 0))
    if dtype is not None:
        ctypes.memmove(tensor + 20, struct.pack("<BBH", *dtype), 4)
    if ndim is not None:
        ctypes.memmove(tensor + 16, struct.pack("<i", ndim), 4)
    return cap


class Producer:
    """A minimal DLPack producer that hands out given capsules and claims a
    given device: it plays memory kinds (pinned, managed, CUDA) here."""

    def __init__(self, device_type, make=None):
        self.device_type = device_type
        self.make = make or (lambda kw: numpy_capsule(device_type, kw.get("max_version") is not None))

    def __dlpack__(self, **kw):
        return self.make(kw)

    def __dlpack_device__(self):
        return (self.device_type, 0)


class OldProducer:
    """A producer written before the 2023 revision: only ``stream``."""

    def __init__(self):
        self.a = np.arange(3.0)

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)


class BrokenProducer:
    def __dlpack__(self, **kw):
        raise RuntimeError("device lost")

    def __dlpack_device__(self):
        return (1, 0)


def readonly(a):
    a = a.copy()
    a.flags.writeable = False
    return a


# The peers whose messages are quoted: a test needing a missing one skips.


def _torch():
    return pytest.importorskip("torch")


def _jax():
    jax = pytest.importorskip("jax")
    import jax.dlpack
    import jax.numpy

    return jax


class _LentOnGpu(gpu_dlpack.Producer):
    """The producer kit's class over memory it says is on cuda:0 (the layer reads only the pointer)."""

    def __init__(self):
        self.base = np.arange(3.0)

    def dlpack_memory(self):
        return gpu_dlpack.from_pointer(self.base.ctypes.data, (3,), np.float64, device="cuda:0", owner=self.base)


class _KitSamples(gpu_dlpack.Producer):
    def dlpack_memory(self):
        return np.arange(3.0)


def _tvm_ffi():
    return pytest.importorskip("tvm_ffi")


def _cupy():
    return pytest.importorskip("cupy")


def _cuda_error(status):
    runtime = pytest.importorskip("cupy_backends.cuda.api.runtime")
    return raised(lambda: (_ for _ in ()).throw(runtime.CUDARuntimeError(status)))


def _torch_source_has(text):
    """True when the installed PyTorch's Tensor.__dlpack__ source holds ``text``."""
    return text in inspect.getsource(_torch().Tensor.__dlpack__)


def _consume_twice_numpy():
    cap = np.arange(3.0).__dlpack__()
    handoff = Producer(1, lambda kw: cap)
    np.from_dlpack(handoff)
    np.from_dlpack(handoff)


def _consume_twice_cupy():
    cap = np.arange(3.0).__dlpack__()
    _torch().from_dlpack(cap)
    _cupy().from_dlpack(cap)


def _gpu_dlpack_consumed():
    cap = np.arange(3.0).__dlpack__()
    gpu_dlpack.from_dlpack(cap)
    gpu_dlpack.from_dlpack(cap)


@functools.lru_cache(maxsize=1)
def _torch_abort_message():
    _torch()
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", "import numpy as np, torch; torch.from_dlpack(np.arange(6.0)[::-1])"],
        capture_output=True, text=True, timeout=120,
    )
    if _peers.release(importlib.metadata.version("torch")) < (2, 14):
        assert done.returncode in (-6, 134), done  # SIGABRT
    else:  # 2.14 raises the same message, as a RuntimeError
        assert done.returncode == 1 and "RuntimeError: Storage size calculation overflowed" in done.stderr, done
    return done.stderr


def _unaligned_view():
    buf = np.zeros(17, np.float32)
    view = buf[1:] if buf.ctypes.data % 64 == 0 else buf[(64 - buf.ctypes.data % 64) // 4 + 1:]
    assert view.ctypes.data % 64
    return view


def _sub_itemsize_strides():
    buf = np.zeros(16, np.uint8)
    return np.ndarray((2,), dtype=np.int32, buffer=buf, offset=1, strides=(3,))


# The real message for each entry of explain.json.
class _SaysCpuGivesPinned:
    """A producer whose capsule contradicts its __dlpack_device__."""

    def __dlpack__(self, **kwargs):
        from .helpers import managed

        cap = np.arange(3.0).__dlpack__()
        managed(cap).dl_tensor.device.device_type = 3
        return cap

    def __dlpack_device__(self):
        return (1, 0)


class _ExportsItself:
    """The recipe that asks for its own export, with no other protocol."""

    def __dlpack__(self, **kwargs):
        return gpu_dlpack.export(self, **kwargs)

    def __dlpack_device__(self):
        return (1, 0)


class _NamesNoMemory(gpu_dlpack.Producer):
    pass


class _NamesItself(gpu_dlpack.Producer):
    def dlpack_memory(self):
        return self


class _BadCudaStream:
    def __cuda_stream__(self):
        return "stream"


def _forked_after_gpu():
    # What a child forked after its parent used the GPU through the layer gets.
    from gpu_dlpack import _handoff

    before = list(_handoff._forked)
    _handoff._forked[:] = [True]
    try:
        _handoff.check_not_forked()
    finally:
        _handoff._forked[:] = before


def _gil_off_check():
    # As a free-threaded build with its GIL off answers.
    import sys

    had = getattr(sys, "_is_gil_enabled", None)
    sys._is_gil_enabled = lambda: False
    try:
        gpu_dlpack._interpreter.check_gil()
    finally:
        if had is None:
            del sys._is_gil_enabled
        else:
            sys._is_gil_enabled = had


def _without_the_core():
    # The module that loads the core, run again where the core cannot be
    # imported (a None in sys.modules stops the import, as a missing file).
    import importlib
    import sys

    from gpu_dlpack import _compiled

    loaded = sys.modules["gpu_dlpack._core"]
    sys.modules["gpu_dlpack._core"] = None
    try:
        importlib.reload(_compiled)
    finally:
        sys.modules["gpu_dlpack._core"] = loaded
        assert _compiled.core is loaded


REAL_MESSAGES = {
    # -- gpu_dlpack itself
    "gpu_dlpack-bad-cuda-stream-protocol": lambda: raised(lambda: gpu_dlpack.use_stream(_BadCudaStream()).__enter__()),
    "gpu_dlpack-exports-itself": lambda: raised(lambda: np.from_dlpack(_ExportsItself())),
    "gpu_dlpack-unmade-wrapper": lambda: raised(
        lambda: np.from_dlpack(gpu_dlpack.Exportable.__new__(gpu_dlpack.Exportable))),
    "gpu_dlpack-no-dlpack-memory": lambda: raised(lambda: np.from_dlpack(_NamesNoMemory())),
    "gpu_dlpack-dlpack-memory-names-no-memory": lambda: raised(lambda: np.from_dlpack(_NamesItself())),
    "gpu_dlpack-bad-pointer-type": lambda: raised(lambda: gpu_dlpack.from_pointer("0x10", (3,), np.float32)),
    "gpu_dlpack-bad-pointer-argument": lambda: raised(
        lambda: gpu_dlpack.from_pointer(16, (2, 3), np.float32, strides=(12, 4, 1))
    ),
    "gpu_dlpack-below-floor": lambda: raised(lambda: gpu_dlpack.export(np.arange(3), max_version=(0, 4))),
    "gpu_dlpack-class-not-array": lambda: raised(lambda: gpu_dlpack.from_dlpack(np.ndarray)),
    "gpu_dlpack-bad-alignment": lambda: raised(lambda: gpu_dlpack.from_dlpack(np.arange(3), require_alignment="64")),
    "gpu_dlpack-requirement-needs-copy": lambda: raised(
        lambda: gpu_dlpack.from_dlpack(_unaligned_view(), require_alignment=64, copy=False)
    ),
    "gpu_dlpack-explain-takes": lambda: raised(lambda: gpu_dlpack.explain(3)),
    "gpu_dlpack-renamed": lambda: warned(lambda: gpu_dlpack.inspect(np.arange(3).__dlpack__()).read_only),
    "gpu_dlpack-bad-arg-indices": lambda: raised(lambda: gpu_dlpack.args_viewable(0)),
    "gpu_dlpack-not-on-host": lambda: raised(lambda: np.asarray(_LentOnGpu())),
    "gpu_dlpack-array-copy-forbidden": lambda: raised(lambda: _KitSamples().__array__(np.float32, copy=False)),
    "gpu_dlpack-bad-max-version": lambda: raised(lambda: gpu_dlpack.export(np.arange(3), max_version=[1, 0])),
    "gpu_dlpack-bad-floor": lambda: raised(lambda: gpu_dlpack.set_min_dlpack_version("zero.eight")),
    "gpu_dlpack-needs-version": lambda: raised(
        lambda: gpu_dlpack.export(np.ones(3, bool), max_version=(0, 6))
    ),
    "gpu_dlpack-bad-copy": lambda: raised(lambda: gpu_dlpack.from_dlpack(np.arange(3), copy=1)),
    "gpu_dlpack-bad-stream-type": lambda: raised(lambda: gpu_dlpack.export(np.arange(3), stream="s")),
    "gpu_dlpack-bad-stream-value": lambda: raised(lambda: gpu_dlpack.export(np.arange(3), stream=5)),
    "gpu_dlpack-stream-zero": lambda: warned(lambda: _streams.check_stream(0, DLDeviceType.CUDA)),
    "gpu_dlpack-bad-device": lambda: raised(lambda: gpu_dlpack.Device("gpu0")),
    "gpu_dlpack-producer-bad-device": lambda: raised(lambda: gpu_dlpack.from_dlpack(Producer("cpu"))),
    "gpu_dlpack-bad-device-type": lambda: raised(lambda: gpu_dlpack.Device(0.5)),
    "gpu_dlpack-array-not-device": lambda: raised(lambda: gpu_dlpack.Device(np.arange(3))),
    "gpu_dlpack-bad-dl-device": lambda: raised(lambda: gpu_dlpack.export(np.arange(3), dl_device=1)),
    "gpu_dlpack-readonly-flag-type": lambda: raised(lambda: gpu_dlpack.wrap(np.arange(3), readonly=1)),
    "gpu_dlpack-not-dlpack": lambda: raised(lambda: gpu_dlpack.from_dlpack([1, 2, 3])),
    # A legacy consumer (JAX before 0.12, or any that sends no max_version).
    "gpu_dlpack-readonly-legacy": lambda: raised(lambda: gpu_dlpack.wrap(readonly(np.arange(3.0))).__dlpack__()),
    "gpu_dlpack-copy-forbidden": lambda: raised(
        lambda: gpu_dlpack.from_dlpack(Producer(2), device="cpu", copy=False)
    ),
    "gpu_dlpack-unreachable": lambda: raised(lambda: gpu_dlpack.export(np.arange(3), dl_device=(4, 0))),
    "gpu_dlpack-device-mismatch": lambda: raised(lambda: gpu_dlpack.export(_SaysCpuGivesPinned())),
    "gpu_dlpack-device-unnamed": lambda: raised(lambda: gpu_dlpack.from_dlpack(AcceleratorProducer())),
    "gpu_dlpack-host-device-id": lambda: raised(lambda: gpu_dlpack.export(np.arange(3), dl_device=(1, 1))),
    "gpu_dlpack-no-backend": lambda: raised(lambda: gpu_dlpack.from_dlpack(np.arange(3), device="cuda")),
    "gpu_dlpack-no-backend-accelerator": lambda: raised(lambda: gpu_dlpack.from_dlpack(np.arange(3), device="tpu")),
    "gpu_dlpack-placed-by-consumer": lambda: raised(
        lambda: gpu_dlpack.convert(np.arange(3.0), _jax().__name__, device="tpu:0")
    ),
    "gpu_dlpack-bad-stream-object": lambda: raised(lambda: gpu_dlpack.use_stream("default").__enter__()),
    "gpu_dlpack-readonly-to-writeable": lambda: raised(
        lambda: _rules.readonly_import_copies(gpu_dlpack.Device("cuda:0"), True, False)
    ),
    # GPU only: gpu_dlpack/_backends/cupy/, where CuPy refuses a capsule or
    # is older than 13.4 (the builders in gpu_dlpack._errors give the text).
    "gpu_dlpack-gpu-failed": lambda: "BufferError: " + str(
        _errors.gpu_failed("import the capsule", TypeError("Unsupported dtype. dtype code: 7"))
    ),
    "gpu_dlpack-old-cupy": lambda: "BufferError: " + str(_errors.old_cupy("export a versioned DLPack capsule")),
    # The compiled core with a CuPy whose runtime entries it does not know (gpu-dlpack doctor).
    # PaddlePaddle's static-mode tensors (tests/peers_paddle.py, in a process of its own)
    "gpu_dlpack-buffer-refused": lambda: "BufferError: " + str(_errors.buffer_refused(
        object(), BufferError("pybind11_getbuffer(): Internal error"))),
    "gpu_dlpack-capture-refused": lambda: "CaptureError: " + str(_errors.capture_forbids(
        "wait on the host for the stream's work", 0x5A3C10, "CUDA records no host-side work into a graph")),
    "gpu_dlpack-capture-invalidated": lambda: "CaptureError: " + str(_errors.capture_invalidated(
        0x5A3C10, RuntimeError("the stream was capturing, but an error has invalidated the capture sequence"))),
    "gpu_dlpack-runtime-not-bound": lambda: "RuntimeError: " + str(_errors.runtime_entry_differs(
        "cupy_backends.cuda.api.runtime", "eventRecord", None, "PyObject *(intptr_t, intptr_t, int __pyx_skip_dispatch)")),
    "gpu_dlpack-producer-refused": lambda: raised(lambda: gpu_dlpack.from_dlpack(BrokenProducer())),
    "gpu_dlpack-consumed": lambda: raised(_gpu_dlpack_consumed),
    "gpu_dlpack-not-a-capsule": lambda: raised(lambda: gpu_dlpack.inspect(np.arange(3))),
    "gpu_dlpack-producer-not-a-capsule": lambda: raised(
        lambda: gpu_dlpack.from_dlpack(Producer(1, lambda kw: np.arange(3.0)))
    ),
    "gpu_dlpack-bad-capsule-name": lambda: raised(lambda: gpu_dlpack.inspect(datetime.datetime_CAPI)),
    "gpu_dlpack-unsupported-major": lambda: raised(
        lambda: gpu_dlpack.from_dlpack(numpy_capsule(versioned=True, major=2))
    ),
    "gpu_dlpack-unreadable-major": lambda: raised(
        lambda: gpu_dlpack.inspect(numpy_capsule(versioned=True, major=2))
    ),
    "gpu_dlpack-malformed": lambda: raised(lambda: gpu_dlpack.from_dlpack(numpy_capsule(ndim=-1))),
    "gpu_dlpack-unsupported-platform": lambda: raised(lambda: _capsule.check_platform("big", 2**31 - 1)),
    "gpu_dlpack-subinterpreter": lambda: raised(lambda: gpu_dlpack._interpreter.check(2, 1)),
    "gpu_dlpack-gil-disabled": lambda: raised(_gil_off_check),
    "gpu_dlpack-core-not-loaded": lambda: raised(_without_the_core),
    "gpu_dlpack-forked-after-gpu": lambda: raised(_forked_after_gpu),
    "gpu_dlpack-numpy-import": lambda: raised(
        # NumPy reads no ROCm memory; gpu_dlpack hands it a capsule it checked
        lambda: gpu_dlpack._backends.numpy_backend.consume(
            *(lambda c: (c, *_capsule.checked(c, False)))(numpy_capsule(device_type=10))
        )
    ),
    "gpu_dlpack-unsupported-dtype": lambda: raised(
        lambda: gpu_dlpack.from_dlpack(numpy_capsule(dtype=(2, 64, 4)))
    ),
    "gpu_dlpack-unsupported-numpy-dtype": lambda: raised(lambda: gpu_dlpack.export(np.array(["a", "b"]))),
    # -- NumPy
    "numpy-readonly-legacy": lambda: raised(lambda: readonly(np.arange(3.0)).__dlpack__()),
    "numpy-stream": lambda: raised(lambda: np.arange(3).__dlpack__(stream=1)),
    "numpy-unsupported-device-requested": lambda: raised(lambda: np.arange(3).__dlpack__(dl_device=(2, 0))),
    "numpy-byte-order": lambda: raised(lambda: np.arange(3.0).astype(">f8").__dlpack__()),
    "numpy-dtype-export": lambda: raised(lambda: np.array(["a", "b"]).__dlpack__()),
    "numpy-strides-itemsize": lambda: raised(lambda: _sub_itemsize_strides().__dlpack__()),
    "numpy-longdouble": lambda: raised(lambda: np.ones(3, np.longdouble).__dlpack__()),
    "numpy-unsupported-device-import": lambda: raised(lambda: np.from_dlpack(Producer(2))),
    # An opaque handle: NumPy 2.5 imports bfloat16 and float8 where ml_dtypes is.
    "numpy-unsupported-dtype-import": lambda: raised(
        lambda: np.from_dlpack(Producer(1, lambda kw: numpy_capsule(versioned=kw.get("max_version") is not None,
                                                                    dtype=(3, 64, 1))))
    ),
    "numpy-lanes": lambda: raised(
        lambda: np.from_dlpack(Producer(1, lambda kw: numpy_capsule(dtype=(2, 64, 4))))
    ),
    "numpy-major-too-high": lambda: raised(
        lambda: np.from_dlpack(Producer(1, lambda kw: numpy_capsule(versioned=True, major=2)))
    ),
    "numpy-device-not-understood": lambda: raised(lambda: np.from_dlpack(np.arange(3), device="cuda")),
    "numpy-max-version-type": lambda: raised(lambda: np.arange(3).__dlpack__(max_version=1)),
    "numpy-readonly-result": lambda: raised(
        lambda: np.from_dlpack(_jax().numpy.arange(3.0)).__setitem__(0, 1.0)
    ),
    "capsule-no-dlpack-attr": lambda: raised(lambda: np.from_dlpack(np.arange(3).__dlpack__())),
    "no-dlpack-attr": lambda: raised(lambda: np.from_dlpack([1, 2])),
    "capsule-incorrect-name": lambda: raised(_consume_twice_numpy),
    # -- PyTorch
    "torch-requires-grad": lambda: raised(lambda: _torch().ones(3, requires_grad=True).__dlpack__()),
    "torch-conj": lambda: raised(lambda: _torch().ones(3, dtype=_torch().complex64).conj().__dlpack__()),
    "torch-layout": lambda: raised(lambda: _torch().ones(3).to_sparse().__dlpack__()),
    # GPU only: torch/_tensor.py, Tensor.__dlpack__ (checked against the
    # installed source in test_gpu_only_quotes_are_in_the_installed_source).
    "torch-other-cuda-device": lambda: (
        "BufferError: Can't export tensors on a different CUDA device index. Expected: 1. Current device: 0."
    ),
    "torch-per-thread-stream": lambda: "BufferError: per-thread default stream is not supported.",
    "torch-unsupported-stream": lambda: "AssertionError: unsupported stream on CUDA: 0.",
    "torch-stream-cpu": lambda: raised(lambda: _torch().arange(3).__dlpack__(stream=1)),
    "torch-stream-type": lambda: raised(lambda: _torch().arange(3).__dlpack__(stream="s")),
    "torch-unsupported-device-type": lambda: raised(lambda: _torch().from_dlpack(Producer(13))),
    "torch-invalid-capsule": lambda: raised(lambda: _torch().from_dlpack([1])),
    "torch-major-version": lambda: raised(
        lambda: _torch().from_dlpack(numpy_capsule(versioned=True, major=2))
    ),
    "torch-capsule-kwargs": lambda: raised(
        lambda: _torch().from_dlpack(np.arange(3.0).__dlpack__(), copy=True)
    ),
    "torch-cannot-move": lambda: raised(lambda: _torch().from_dlpack(Producer(2), device="cpu", copy=False)),
    "torch-copy-false-move": lambda: raised(
        lambda: _torch().arange(3.0).__dlpack__(dl_device=(2, 0), copy=False)
    ),
    "torch-no-cuda": lambda: raised(lambda: _torch().from_dlpack(Producer(2))),
    "torch-no-driver": lambda: raised(lambda: _torch().from_dlpack(Producer(2))),
    # -- JAX
    "jax-version-floor": lambda: raised(lambda: _jax().numpy.arange(3.0).__dlpack__(max_version=(0, 4))),
    "jax-versioned-capsule": lambda: raised(
        lambda: _jax().dlpack.from_dlpack(Producer(1, lambda kw: numpy_capsule(versioned=True)))
    ),
    "jax-needs-methods": lambda: raised(lambda: _jax().dlpack.from_dlpack(np.arange(3.0).__dlpack__())),
    "jax-unsupported-device": lambda: raised(lambda: _jax().dlpack.from_dlpack(Producer(13))),
    "jax-compact-strides": lambda: raised(
        lambda: _jax().dlpack.from_dlpack(np.arange(12.0).reshape(3, 4)[:, ::2])
    ),
    "jax-stream-cpu": lambda: raised(lambda: _jax().numpy.arange(3.0).__dlpack__(stream=1)),
    "jax-unknown-backend": lambda: raised(lambda: _jax().dlpack.from_dlpack(Producer(2))),
    "jax-unaligned-copy-false": lambda: raised(lambda: _jax().dlpack.from_dlpack(_unaligned_view(), copy=False)),
    # The accelerator JAX is set up for cannot be opened: held by another
    # process (libtpu's words, measured on a TPU VM whose chip a training
    # job held), or not on this machine (raised by JAX in a child whose
    # JAX_PLATFORMS names a TPU), or a platform alias nothing answers.
    "jax-backend-busy": lambda: "RuntimeError: " + BUSY_TPU,
    "jax-backend-unavailable": lambda: _jax_in_a_child_set_up_for("tpu"),
    "jax-no-platform": lambda: raised(lambda: _jax().devices("gpu")),
    # Vulkan: 0.12 knows oneAPI (14), for which a CPU-only JAX has no backend.
    "jax-to-dlpack-device": lambda: raised(
        lambda: _jax().numpy.arange(3.0).__dlpack__(dl_device=(7, 0))
    ),
    "jax-unsharded-only": lambda: raised(lambda: _sharded_jax().__dlpack_device__()),
    "jax-singular-device": lambda: raised(lambda: _sharded_jax().__dlpack__()),
    # GPU or TPU only: jax/_src/array.py, ArrayImpl.__dlpack_device__ (checked
    # against the installed source below).
    "jax-unknown-gpu-platform": lambda: "BufferError: Unknown GPU platform for __dlpack__: rocm 7.1 / foo",
    "jax-no-hardware-id": lambda: "BufferError: Couldn't get local_hardware_id for __dlpack__",
    "jax-platform-unsupported": lambda: (
        "BufferError: __dlpack__ device only supported for CPU and GPU, got platform: tpu"
        if (_release_of("jax") or (0,)) < (0, 12)
        else "BufferError: __dlpack__ device only supported for CPU, GPU and TPU pinned host, got platform: tpu"
    ),
    # On a TPU (measured with JAX 0.10.2 on a TPU v5e: "The TPU check").
    "jax-device-not-dlpack": lambda: (
        "jaxlib._jax.JaxRuntimeError: INVALID_ARGUMENT: Device TPU_0(process=0,(0,0,0,0)) cannot be used as a "
        "DLPack device."
    ),
    "gpu_dlpack-spread-needs-copy": lambda: raised(lambda: gpu_dlpack.from_dlpack(_sharded_jax(), copy=False)),
    "gpu_dlpack-spread-not-addressable": lambda: raised(
        lambda: gpu_dlpack.from_dlpack(__import__("tests.test_shards").test_shards._SpreadOverOtherProcesses())
    ),
    "gpu_dlpack-bad-interface": lambda: raised(lambda: gpu_dlpack.from_dlpack(_NoDataInterface())),
    "gpu_dlpack-masked": lambda: raised(lambda: gpu_dlpack.from_dlpack(_MaskedInterface())),
    "gpu_dlpack-interface-cannot-copy": lambda: raised(
        lambda: _protocols().producer(
            _PointerInterface()
        ).__dlpack__(copy=True)
    ),
    # -- gpu_dlpack.convert and the doctor
    "gpu_dlpack-convert-read-only": lambda: raised(
        lambda: gpu_dlpack.convert(readonly(np.arange(3.0)), _torch().__name__, copy=False)
    ),
    "gpu_dlpack-convert-layout": lambda: raised(
        lambda: gpu_dlpack.convert(np.arange(6.0)[::-1], _torch().__name__, copy=False)
    ),
    "gpu_dlpack-convert-unaligned": lambda: raised(
        lambda: gpu_dlpack.convert(_unaligned_view(), _jax().__name__, copy=False)
    ),
    "gpu_dlpack-convert-no-gpu": lambda: raised(lambda: gpu_dlpack.convert(np.arange(3.0), _cupy().__name__)),
    "gpu_dlpack-consumer-no-gpu": lambda: raised(lambda: gpu_dlpack.convert(Producer(2), _torch().__name__)),
    "gpu_dlpack-convert-narrowing": lambda: raised(lambda: _without_x64(
        lambda: gpu_dlpack.convert(np.array([2**40]), _jax().__name__))),
    "gpu_dlpack-convert-subbyte-packed": lambda: raised(lambda: gpu_dlpack.convert(
        np.zeros(4, pytest.importorskip("ml_dtypes").float4_e2m1fn), _jax().__name__)),
    "gpu_dlpack-convert-float-narrowing": lambda: raised(
        lambda: gpu_dlpack.convert(np.array([1e300]), pytest.importorskip("mlx.core").__name__)),
    "gpu_dlpack-convert-consumer-copied": lambda: raised(
        lambda: gpu_dlpack.convert(np.arange(3.0), _copying_consumer(), copy=False)
    ),
    "gpu_dlpack-view-needs-copy": lambda: raised(
        lambda: gpu_dlpack.from_dlpack(_torch()._neg_view(_torch().ones(2)), copy=False)
    ),
    "gpu_dlpack-convert-bad-to": lambda: raised(lambda: gpu_dlpack.convert(np.arange(3.0), 3)),
    "gpu_dlpack-convert-not-importable": lambda: raised(
        lambda: gpu_dlpack.convert(np.arange(3.0), "gpu_dlpack_test_no_such_library")
    ),
    "gpu_dlpack-convert-no-from-dlpack": lambda: raised(lambda: gpu_dlpack.convert(np.arange(3.0), "math")),
    "gpu_dlpack-bad-on-readonly": lambda: raised(
        lambda: gpu_dlpack.convert(np.arange(3.0), "numpy", on_readonly=True)
    ),
    "gpu_dlpack-doctor-library": lambda: raised(
        lambda: __import__("gpu_dlpack.doctor").doctor.run(extra=["gpu_dlpack_test_no_such_library"])
    ),
    # Printed by the abort (torch 2.12, 2.13): run in a child, which dies.
    "torch-negative-strides": lambda: _torch_abort_message(),
    "torch-meta-export": lambda: raised(lambda: _torch().empty(3, device="meta").__dlpack__()),
    "torch-meta-device": lambda: raised(lambda: gpu_dlpack.from_dlpack(_torch().empty(3, device="meta"))),
    # -- tvm-ffi: its from_dlpack makes no copy for what a kernel requires
    "tvm-ffi-unaligned": lambda: raised(lambda: _tvm_ffi().from_dlpack(_unaligned_view(), require_alignment=64)),
    "tvm-ffi-not-contiguous": lambda: raised(
        lambda: _tvm_ffi().from_dlpack(np.arange(12.0).reshape(3, 4).T, require_contiguous=True)
    ),
    # -- CuPy (installed, without a GPU)
    "cupy-cpu-import": lambda: raised(lambda: _cupy().from_dlpack(np.arange(3.0))),
    "cupy-unsupported-array-type": lambda: raised(lambda: _cupy().from_dlpack(Producer(3))),
    # GPU only: cupy/_core/core.pyx, _ndarray_base.__dlpack__ (cupy v14.2.0).
    "cupy-copy-true": lambda: "BufferError: copy=True only supported for copy to CPU.",
    "cupy-gpu-to-cpu-no-copy": lambda: "ValueError: GPU memory cannot be exported to CPU without copy.",
    "cupy-stream-cuda": lambda: (
        "ValueError: On CUDA, the valid stream for the DLPack protocol is -1, 1, 2, "
        "or any larger value, but -5 was provided"
    ),
    "cupy-stream-rocm": lambda: (
        "ValueError: On ROCm/HIP, the valid stream for the DLPack protocol is -1, 0, "
        "or any value > 2, but 1 was provided"
    ),
    "cupy-stream-zero-warning": lambda: (
        "UserWarning: Stream 0 is passed from a library that you are converting to; CuPy "
        "assumes 0 as a legacy default stream. Please report this problem to the library "
        "as this violates the DLPack protocol."
    ),
    # GPU only: cupy/_core/dlpack.pyx (cupy v14.2.0), _dlpack_to_cupy_array
    # and get_dlpack_dtype_code.
    "cupy-bfloat16": lambda: (
        "NotImplementedError: CuPy does not support bfloat16. Please install ml_dtypes to use bfloat16."
    ),
    "cupy-export-dtype": lambda: "BufferError: dtype is not supported for dlpack export",
    "cupy-backend-mismatch": lambda: raised(lambda: _cupy().from_dlpack(np.arange(3.0).__dlpack__())),
    "cupy-consumed": lambda: raised(_consume_twice_cupy),
    "cupy-device-kwarg": lambda: raised(lambda: _cupy().from_dlpack(np.arange(3.0), device=(2, 0))),
    "cupy-major": lambda: raised(lambda: _cupy().from_dlpack(numpy_capsule(versioned=True, major=2))),
    "cuda-runtime-unusable": lambda: raised(lambda: _cupy().arange(3)),
    # CuPy's words for CUDA's capture errors (cudaGetErrorString needs no GPU)
    "cuda-capture-unsupported": lambda: _cuda_error(900),
    "cuda-capture-invalidated": lambda: _cuda_error(901),
    "cuda-capture-implicit": lambda: _cuda_error(906),
    "cuda-captured-event": lambda: _cuda_error(907),
    # -- any producer
    "old-producer-keyword": lambda: raised(lambda: OldProducer().__dlpack__(max_version=(1, 0))),
}

def _protocols():
    from gpu_dlpack import _protocols

    return _protocols


class _NoDataInterface:
    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f8", "version": 3}


class _MaskedInterface:
    def __init__(self):
        self.base = np.arange(3.0)
        self.__array_interface__ = dict(self.base.__array_interface__, mask=np.ones(3, bool))


class _PointerInterface:
    """A CUDA Array Interface over host memory no GPU reads (the layer reads the pointer only)."""

    def __init__(self):
        self.base = np.arange(3.0)
        self.__cuda_array_interface__ = {
            "shape": (3,), "typestr": "<f8", "data": (self.base.ctypes.data, False), "version": 3, "stream": None,
        }


def _sharded_jax():
    """A JAX array split over 4 host devices (the root conftest asks for them)."""
    jax = _jax()
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    if len(jax.devices()) < 4:
        pytest.skip("needs 4 JAX devices (XLA_FLAGS=--xla_force_host_platform_device_count=4)")
    mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
    return jax.device_put(jax.numpy.arange(8.0), NamedSharding(mesh, PartitionSpec("x")))


def _jax_source_has(text):
    """True when the installed JAX's ArrayImpl.__dlpack_device__ source holds ``text``."""
    _jax()
    from jax._src import array

    return text in inspect.getsource(array.ArrayImpl.__dlpack_device__)


#: What JAX 0.4.30 to 0.10 raise while another process holds the TPU (the
#: pid is the holder's), as measured.
BUSY_TPU = ("Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid 4242. "
            "Not attempting to load libtpu.so in this process. (set JAX_PLATFORMS='' to automatically choose an "
            "available backend)")


def _jax_in_a_child_set_up_for(platforms):
    """What JAX raises at its first use with JAX_PLATFORMS=``platforms``:
    in a child, since this process's JAX has opened its backends."""
    _jax()
    code = "import jax\ntry:\n    jax.devices()\nexcept Exception as exc:\n    print(f'{type(exc).__name__}: {exc}')\n"
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, JAX_PLATFORMS=platforms),
                          capture_output=True, text=True, timeout=120)
    if not done.stdout.strip():
        pytest.skip(f"JAX opens {platforms} on this machine")
    return done.stdout.strip().splitlines()[-1]


def _torch_has_cuda():
    return bool(_torch().cuda.is_available())


def _jax_has_gpu():
    try:
        return bool(_jax().devices("gpu"))
    except RuntimeError:
        return False


def _cupy_has_gpu():
    return gpu_dlpack._backends.cupy_backend.device_count() > 0


def _without_x64(call):
    with jax_x64(_jax(), False):
        return call()


def _copying_consumer():
    """A consumer module made at run time that copies what it imports."""
    import types

    m = types.ModuleType("copying_consumer")
    m.from_dlpack = lambda x, **kw: np.from_dlpack(x).copy()
    return m


# Messages raised here only because a library has no GPU, with the check
# With a GPU the same call would hand a host pointer to a GPU library.
NEEDS_NO_GPU = {
    "cuda-runtime-unusable": _cupy_has_gpu,
    "gpu_dlpack-no-backend": _cupy_has_gpu,
    "gpu_dlpack-convert-no-gpu": _cupy_has_gpu,
    "gpu_dlpack-consumer-no-gpu": _torch_has_cuda,
    "torch-no-cuda": _torch_has_cuda,
    "torch-no-driver": _torch_has_cuda,
    "jax-unknown-backend": _jax_has_gpu,
    "jax-no-platform": _jax_has_gpu,
}


def test_every_entry_has_a_real_message():
    assert set(REAL_MESSAGES) == {e.id for e in _explain.entries()}


# Messages a peer raises in some of its releases only: entry id -> (the
# library, the first release that raises it, the first that no longer does;
# None: no bound). docs/internals/faults.md, "JAX by release".
RAISED_IN = {
    "jax-needs-methods": ("jax", (0, 7, 2), None),  # 0.6 and 0.7.0 take a raw capsule
    "jax-unaligned-copy-false": ("jax", (0, 9), None),  # before, JAX copies even for copy=False
    "jax-versioned-capsule": ("jax", None, (0, 12)),  # 0.12 reads versioned capsules
    "gpu_dlpack-convert-subbyte-packed": ("jax", (0, 12), None),  # before, no 4-bit dtype reaches JAX
}


# Messages of one kind of build of a peer: entry id -> (the library, whether
# that build is the one installed).
RAISED_BY_BUILD = {
    "torch-no-cuda": ("a CPU build of torch", lambda: _torch().version.cuda is None),
    "torch-no-driver": ("a CUDA build of torch", lambda: _torch().version.cuda is not None),
}


def _release_of(library):
    """The installed release of ``library`` as a tuple, or None where it is
    not installed (or hidden from the suite: GPU_DLPACK_TEST_HIDE)."""
    try:
        return _peers.release(importlib.metadata.version(library))
    except importlib.metadata.PackageNotFoundError:
        return None


def _not_raised_here(entry_id):
    """Why the installed peer does not raise this entry's message, or None."""
    if entry_id in RAISED_BY_BUILD:
        build, installed = RAISED_BY_BUILD[entry_id]
        return None if installed() else f"raised by {build} only"
    if entry_id not in RAISED_IN:
        return None
    library, since, until = RAISED_IN[entry_id]
    try:
        version = importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:  # not installed, or hidden (GPU_DLPACK_TEST_HIDE)
        return f"{library} is not installed"
    have = _peers.release(version)
    if (since is not None and have < since) or (until is not None and have >= until):
        return f"{library} {version} does not raise it (raised from {since} until {until})"
    return None


def _real_message(entry_id):
    """The entry's real message, raised here by the library it quotes (a
    skip where this machine or the installed release does not raise it)."""
    if entry_id in NEEDS_NO_GPU and NEEDS_NO_GPU[entry_id]():
        pytest.skip("this message is raised only where no GPU is usable")
    if _not_raised_here(entry_id):
        pytest.skip(_not_raised_here(entry_id))
    return REAL_MESSAGES[entry_id]()


@pytest.mark.parametrize("entry_id", sorted(REAL_MESSAGES))
def test_entry_recognises_its_real_message(entry_id, floor):
    text = _real_message(entry_id)
    found = _explain.match(text)
    assert found, f"nothing matched {text!r}"
    assert found[0].entry.id == entry_id, (text, [m.entry.id for m in found])


def test_gpu_only_quotes_are_in_the_installed_source():
    assert _torch_source_has("Can't export tensors on a different CUDA device index. ")
    assert _torch_source_has("per-thread default stream is not supported.")
    assert _torch_source_has('f"unsupported stream on {device_str}: {stream}."')


def test_jax_gpu_only_quotes_are_in_the_installed_source():
    assert _jax_source_has('"Unknown GPU platform for __dlpack__: "')
    assert _jax_source_has("Couldn't get local_hardware_id for __dlpack__")
    if _peers.release(importlib.metadata.version("jax")) < (0, 12):  # 0.12 names TPU pinned host memory
        assert _jax_source_has('"__dlpack__ device only supported for CPU and GPU, got platform: "')
    else:
        assert _jax_source_has('"__dlpack__ device only supported for CPU, GPU and TPU pinned host,"')
        assert _jax_source_has('"__dlpack__ device only supported for TPU pinned host memory"')


@pytest.mark.parametrize("cause", [
    "ABORTED: The TPU is already in use by process with pid 4242. Not attempting to load libtpu.so in this process.",
    "INTERNAL: TPU initialization failed: open(/dev/vfio/0): Device or resource busy",
    "The TPU is already in use by another process probably owned by another user. Run \"$ sudo lsof -w /dev/accel0\" "
    "to figure out which process is using the TPU. If you still get this message, run \"$ sudo rm "
    "/tmp/libtpu_lockfile\".",
    # JAX 0.10.2 on a TPU v5e with a second process holding the chip (measured)
    "ABORTED: Internal error when accessing libtpu multi-process lockfile. Run \"$ sudo rm /tmp/libtpu_lockfile\".",
], ids=["pid", "vfio", "lockfile", "lockfile-v5e"])
def test_a_busy_chip_is_told_apart_from_a_missing_one_in_every_libtpus_words(cause):
    found = _explain.match(f"RuntimeError: Unable to initialize backend 'tpu': {cause} "
                           "(set JAX_PLATFORMS='' to automatically choose an available backend)")
    assert [m.id for m in found] == ["jax-backend-busy"]
    assert found[0].groups["platform"] == "tpu"


def test_entries_are_complete():
    for e in _explain.entries():
        assert e.library and e.exception and e.meaning, e.id
        assert e.remedies and all(r.strip() for r in e.remedies), e.id
        assert "gpu_dlpack" in e.avoid["call"], e.id
        assert e.avoid["before"].strip() and e.avoid["after"].strip(), e.id


def test_named_groups_fill_the_meaning():
    (m,) = _explain.match(REAL_MESSAGES["jax-version-floor"]())
    assert m.groups == {"floor": "0, 5", "major": "0", "minor": "4"}
    assert "max_version=(0, 4)" in m.meaning and "(0, 5)" in m.meaning
    assert any("GPU_DLPACK_MIN_VERSION=0.4" in r for r in m.remedies)


def test_fill_leaves_unknown_braces():
    assert _explain.fill("{a} and {b} and {}", {"a": 1}) == "1 and {b} and {}"


def test_a_message_matches_in_any_case():
    # A log, a wrapper or another release may write the same words otherwise.
    for text in ("runtimeerror: numpy only supports stream=None.", "NUMPY ONLY SUPPORTS STREAM=NONE",
                 "bufferError: cannot PACK tensors on Meta"):
        assert [m.id for m in gpu_dlpack.explain(text)][:1] in (["numpy-stream"], ["torch-meta-export"]), text
    (m,) = gpu_dlpack.explain("BUFFERERROR: JAX DOES NOT SUPPORT ANY VERSION BELOW (0, 5) BUT VERSION ((0, 4)) "
                              "WAS REQUESTED.")
    assert m.id == "jax-version-floor" and m.groups == {"floor": "0, 5", "major": "0", "minor": "4"}, m.groups


def test_the_remedy_for_tvm_ffis_requirements_works():
    tvm_ffi = _tvm_ffi()
    a, t = _unaligned_view(), np.arange(12.0).reshape(3, 4).T
    aligned = tvm_ffi.from_dlpack(gpu_dlpack.from_dlpack(a, require_alignment=64), require_alignment=64)
    compact = tvm_ffi.from_dlpack(gpu_dlpack.from_dlpack(t, require_contiguous=True), require_contiguous=True)
    np.testing.assert_array_equal(np.from_dlpack(aligned), a)
    np.testing.assert_array_equal(np.from_dlpack(compact), t)
    for x, kw in ((a, {"require_alignment": 64}), (t, {"require_contiguous": True})):
        done = gpu_dlpack.convert(x, tvm_ffi, report=True, **kw)
        np.testing.assert_array_equal(np.from_dlpack(tvm_ffi.from_dlpack(done.array, **kw)), x)
        assert done.copied and done.copied_by == "gpu_dlpack" and "require_" in done.reasons[-1]


def test_wrapped_traceback_still_matches():
    text = "Traceback (most recent call last):\n  ...\nBufferError: Cannot export readonly array\n   since signalling readonly is unsupported by DLPack"
    assert _explain.first(text).entry.id == "numpy-readonly-legacy"


def test_gpu_dlpack_wrapper_explains_the_peer_message_too():
    text = raised(lambda: gpu_dlpack.from_dlpack(Producer(1, lambda kw: (_ for _ in ()).throw(
        RuntimeError("NumPy only supports stream=None.")))))
    ids = [m.entry.id for m in _explain.match(text)]
    assert ids == ["gpu_dlpack-producer-refused", "numpy-stream"]


@pytest.mark.parametrize("entry_id", sorted(REAL_MESSAGES))
def test_no_entry_shows_an_unfilled_field(entry_id, floor):
    # Every {field} an entry quotes, in its meaning, remedies and example,
    # is filled from what its pattern captured in the real message.
    found = gpu_dlpack.explain(_real_message(entry_id))
    shown = str(found) + json.dumps(found.as_dict())
    assert not _FIELD.findall(shown), (entry_id, _FIELD.findall(shown))


def test_every_quoted_field_is_a_group_of_its_pattern():
    for e in _explain.entries():
        for text in (e.meaning, *e.remedies, *e.avoid.values()):
            assert set(_FIELD_NAME.findall(text)) <= set(e.pattern.groupindex), (e.id, text)


_FIELD = re.compile(r"\{\w+\}")
_FIELD_NAME = re.compile(r"\{(\w+)\}")


# -- gpu_dlpack.explain, in Python ---------------------------------------------


def test_explain_in_python_takes_the_exception_itself():
    try:
        _jax().numpy.arange(3.0).__dlpack__(max_version=(0, 4))
    except BufferError as exc:
        found = gpu_dlpack.explain(exc)
    assert found and [m.id for m in found] == ["jax-version-floor"]
    (m,) = found
    assert m.entry.library == "JAX" and m.groups == {"floor": "0, 5", "major": "0", "minor": "4"}
    assert any("GPU_DLPACK_MIN_VERSION=0.4" in r for r in m.remedies) and found.remedies == m.remedies
    assert set(m.avoid) == {"call", "before", "after"}
    # str() is what the command prints
    assert str(found) == _explain.run(found.text)[0]


def test_explain_in_python_reads_the_chain_of_causes():
    def refuse(kw):
        raise RuntimeError("NumPy only supports stream=None.")

    try:
        gpu_dlpack.from_dlpack(Producer(1, refuse))
    except BufferError as exc:
        found = gpu_dlpack.explain(exc)
    assert [m.id for m in found] == ["numpy-stream", "gpu_dlpack-producer-refused"]


def test_explain_in_python_of_an_unknown_message_is_false_and_says_so():
    found = gpu_dlpack.explain("the quick brown fox")
    assert not found and len(found) == 0 and found.remedies == []
    assert "No known DLPack error matched" in str(found)


def test_explain_in_python_refuses_what_is_neither_message_nor_exception():
    with pytest.raises(TypeError, match="an exception or an error message"):
        gpu_dlpack.explain(42)


def test_hazards_have_problem_and_remedy():
    for name, h in _explain.hazards().items():
        assert h["problem"] and h["remedy"], name


def test_data_file_is_package_data():
    import importlib.resources

    text = importlib.resources.files("gpu_dlpack").joinpath("explain.json").read_text(encoding="utf-8")
    assert json.loads(text)["errors"]


# -- the command -------------------------------------------------------------


def test_explain_matched_exits_0(capsys):
    status = _cli.main(["explain", "BufferError: JAX does not support any version below (0, 5) but version ((0, 4)) was requested."])
    out = capsys.readouterr().out
    assert status == 0
    assert "jax-version-floor" in out and "remedies, in order:" in out and "before:" in out


def test_explain_unknown_text_exits_1_and_suggests_doctor(capsys):
    status = _cli.main(["explain", "the quick brown fox"])
    out = capsys.readouterr().out
    assert status == 1
    assert "No known DLPack error matched" in out and "gpu-dlpack doctor" in out


def test_explain_reads_standard_input(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(REAL_MESSAGES["torch-requires-grad"]()))
    assert _cli.main(["explain"]) == 0
    assert "torch-requires-grad" in capsys.readouterr().out


def test_explain_json(capsys):
    status = _cli.main(["explain", "--json", REAL_MESSAGES["cupy-cpu-import"]()])
    doc = json.loads(capsys.readouterr().out)
    assert status == 0 and doc["matched"] is True
    (m,) = doc["matches"]
    assert m["id"] == "cupy-cpu-import" and m["library"] == "CuPy" and m["remedies"]
    assert set(m["avoid"]) == {"call", "before", "after"}


def test_explain_list(capsys):
    assert _cli.main(["explain", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(e.id in out for e in _explain.entries())


# -- the advice works ----------------------------------------------------------


class OldConsumer:
    """A consumer from before the floor existed: asks for max_version=(0, 4)
    and reads the legacy capsule it gets."""

    @staticmethod
    def from_dlpack(x):
        cap = x.__dlpack__(max_version=(0, 4))
        return gpu_dlpack.from_dlpack(cap)


class VersionedOnly(Producer):
    """A producer that answers every request with a versioned capsule."""

    def __init__(self):
        super().__init__(1, lambda kw: numpy_capsule(versioned=True))


def _jax_floor_fixed():
    with pytest.raises(BufferError, match="below"):
        OldConsumer.from_dlpack(gpu_dlpack.wrap(_jax().numpy.arange(3.0)))
    gpu_dlpack.set_min_dlpack_version((0, 4))
    # (An old consumer asks for a legacy capsule: JAX's immutable array is
    # handed over as a copy, rule 5.)
    out = OldConsumer.from_dlpack(gpu_dlpack.wrap(gpu_dlpack.from_dlpack(_jax().numpy.arange(3.0), copy=True)))
    assert out.tolist() == [0.0, 1.0, 2.0]


def _readonly_for_jax_fixed():
    a = readonly(np.arange(3.0))
    j = _jax().dlpack.from_dlpack(gpu_dlpack.wrap(a.copy()))
    assert j.tolist() == [0.0, 1.0, 2.0]
    b = gpu_dlpack.from_dlpack(a)
    assert b.ctypes.data == a.ctypes.data and not b.flags.writeable


def _writeable_import_fixed():
    a = gpu_dlpack.from_dlpack(_jax().numpy.arange(3.0), copy=True)
    a[0] = 1.0
    assert a.tolist() == [1.0, 1.0, 2.0]


def _torch_copy_through_wrap():
    a = np.arange(3.0)
    t = _torch().from_dlpack(gpu_dlpack.wrap(a), copy=True)
    assert t.data_ptr() != a.ctypes.data and t.tolist() == [0.0, 1.0, 2.0]


def _torch_reads_managed_through_gpu_dlpack():
    host = gpu_dlpack.from_dlpack(Producer(13))
    t = _torch().from_numpy(host)
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _jax_reads_managed_through_gpu_dlpack():
    j = _jax().numpy.asarray(gpu_dlpack.from_dlpack(Producer(13)))
    assert j.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _jax_gets_legacy_from_versioned_only():
    j = _jax().dlpack.from_dlpack(gpu_dlpack.wrap(VersionedOnly()))
    assert j.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _old_producer_through_gpu_dlpack():
    old = OldProducer()
    a = gpu_dlpack.from_dlpack(old, copy=False)
    assert a.ctypes.data == old.a.ctypes.data


def _raw_capsule_through_gpu_dlpack():
    a = gpu_dlpack.from_dlpack(np.arange(3.0).__dlpack__())
    assert a.tolist() == [0.0, 1.0, 2.0]


def _unaligned_shared_through_gpu_dlpack():
    view = _unaligned_view()
    assert gpu_dlpack.from_dlpack(view, copy=False).ctypes.data == view.ctypes.data


def _needs_version_fixed():
    cap = gpu_dlpack.export(np.ones(3, bool).view(np.uint8), max_version=(0, 6))
    assert gpu_dlpack.inspect(cap).dl_dtype == (1, 8, 1)


def _sharded_through_gpu_dlpack():
    j = _sharded_jax()
    np.testing.assert_array_equal(_torch().from_dlpack(gpu_dlpack.wrap(j)).numpy(), np.arange(8.0))
    np.testing.assert_array_equal(gpu_dlpack.from_dlpack(j), np.arange(8.0))


def _sharded_shard_by_shard():
    j = _sharded_jax()
    parts = gpu_dlpack.shards(j)
    assert len(parts) == 4
    for p in parts:
        np.testing.assert_array_equal(p.data, np.arange(8.0)[p.index])


# The "after" of an entry, run with the inputs that raised its real message.
def _conj_resolved_by_gpu_dlpack():
    t = _torch().tensor([1 + 2j, 3 - 4j]).conj()
    assert gpu_dlpack.from_dlpack(t).tolist() == [1 - 2j, 3 + 4j]


def _x64_kept_by_convert():
    jax = _jax()
    with jax_x64(jax, False):
        with pytest.raises(gpu_dlpack.DtypeChangeError):
            gpu_dlpack.convert(np.array([2**40]), "jax")
        with jax_x64(jax, True):
            assert gpu_dlpack.convert(np.array([2**40]), "jax").tolist() == [2**40]


AFTER_WORKS = {
    "torch-conj": _conj_resolved_by_gpu_dlpack,
    "gpu_dlpack-convert-narrowing": _x64_kept_by_convert,
    "jax-unsharded-only": _sharded_through_gpu_dlpack,
    "jax-singular-device": _sharded_through_gpu_dlpack,
    "gpu_dlpack-spread-needs-copy": _sharded_shard_by_shard,
    "jax-version-floor": _jax_floor_fixed,
    "gpu_dlpack-below-floor": _jax_floor_fixed,
    "gpu_dlpack-readonly-legacy": _readonly_for_jax_fixed,
    "numpy-readonly-legacy": _readonly_for_jax_fixed,
    "numpy-readonly-result": _writeable_import_fixed,
    "torch-capsule-kwargs": _torch_copy_through_wrap,
    "torch-unsupported-device-type": _torch_reads_managed_through_gpu_dlpack,
    "jax-unsupported-device": _jax_reads_managed_through_gpu_dlpack,
    "jax-versioned-capsule": _jax_gets_legacy_from_versioned_only,
    "old-producer-keyword": _old_producer_through_gpu_dlpack,
    "capsule-no-dlpack-attr": _raw_capsule_through_gpu_dlpack,
    "jax-unaligned-copy-false": _unaligned_shared_through_gpu_dlpack,
    "gpu_dlpack-needs-version": _needs_version_fixed,
}


@pytest.mark.parametrize("entry_id", sorted(AFTER_WORKS))
def test_the_gpu_dlpack_way_works(entry_id, floor):
    assert entry_id in {e.id for e in _explain.entries()}
    AFTER_WORKS[entry_id]()


def test_explain_without_text_on_a_terminal_says_how(capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Terminal())
    assert _cli.main(["explain"]) == 2
    assert "pipe it in" in capsys.readouterr().err


def _an_instance_of(qualified):
    """An object whose type a message names ``qualified`` (``lib.Array``)."""
    module, _, name = qualified.rpartition(".")
    return type(name, (), {"__module__": module})()


def _spread_array():
    """An array like JAX's sharded over 4 devices, 2 of them this process's."""

    class NamedSharding:
        spec = "P('x',)"
        device_set = {"cpu:0", "cpu:1", "cpu:2", "cpu:3"}
        addressable_devices = ["cpu:1", "cpu:0"]

    return SimpleNamespace(sharding=NamedSharding())


# Sample arguments for every message builder in gpu_dlpack._errors.
BUILDER_ARGS = {
    "below_floor": ((0, 4), (0, 5)),
    "bad_alignment": (-1,),
    "requirement_needs_copy": ("contiguous", 0x1000, 0, (3, 2), (4, 2)),
    "explain_takes": (3,),
    "renamed": ("ArrayView", "obj", "exporting_obj"),
    "bad_arg_indices": ([0],),
    "not_on_host": (object(), "cuda:0"),
    "array_copy_forbidden": (object(), "float64", "float32"),
    "bad_max_version": ([1, 0],),
    "bad_floor": ("x", "GPU_DLPACK_MIN_VERSION"),
    "needs_version": ("dtype bool", (0, 8), (0, 6)),
    "bad_copy": (1,),
    "bad_stream_type": ("s", "CPU", "None"),
    "bad_stream_value": (5, "CPU", "None"),
    "bad_device": ("gpu0", "'cpu'"),
    "bad_device_type": (0.5,),
    "not_dlpack": ([1],),
    "readonly_legacy": (),
    "copy_forbidden": ("cuda:0", "cpu", "the data is not addressable there"),
    "unreachable": ("cpu", "cuda:0"),
    "no_backend": ("cuda:0",),
    "placed_by_consumer": ("tpu:0", "jax"),
    "producer_refused": (_an_instance_of("lib.Array"), RuntimeError("device lost")),
    "producer_not_a_capsule": (_an_instance_of("lib.Array"), None),
    "producer_bad_device": ("lib.Array", "cpu"),
    "consumed": ("used_dltensor",),
    "not_a_capsule": (3,),
    "bad_capsule_name": ("other",),
    "unsupported_major": (2,),
    "unreadable_major": ((2, 0),),
    "malformed": ("ndim=-1",),
    "not_taken": (True, True),
    "capsule_fault": ((True, (1, 0, 0, 0, 1, 0, -1, 2, 64, 1, 0, 0, 0), None, None, 0), 64, True),
    "unsupported_platform": ("big-endian, 32-bit",),
    "subinterpreter": (),
    "gil_disabled": ("3.13.0",),
    "core_not_loaded": ("gpu_dlpack._core", ImportError("libfoo.so: cannot open shared object file")),
    "forked_after_gpu": (4242,),
    "unsupported_dtype": (2, 64, 4, "vector types (lanes != 1) have no NumPy equivalent"),
    "unsupported_numpy_dtype": ("<U1", "DLPack has no string type"),
    "numpy_refused": (BufferError("Unsupported device in DLTensor."),),
    "bad_stream_object": ("default",),
    "readonly_to_writeable": ("cuda:0",),
    "gpu_failed": ("import the capsule", TypeError("Unsupported dtype. dtype code: 7")),
    "old_cupy": ("export a versioned DLPack capsule",),
    "capture_forbids": ("copy the array to cpu", 0x5A3C10, "CUDA records no host-side work into a graph"),
    "capture_invalidated": (0x5A3C10, RuntimeError("the stream was capturing, but an error has invalidated the capture sequence")),
    "runtime_entry_differs": ("cupy_backends.cuda.api.runtime", "eventRecord", None, "PyObject *(intptr_t)"),
    "device_mismatch": (_an_instance_of("lib.Array"), "cpu", "cuda:0"),
    "device_unnamed": (_an_instance_of("jaxlib._jax.ArrayImpl"),
                       BufferError("__dlpack__ device only supported for CPU and GPU, got platform: tpu")),
    "host_device_id": ((1, 1), __import__("gpu_dlpack").Device((1, 1))),
    "bad_interface": ("__cuda_array_interface__", "it has no 'data'", {"shape": (3,)}),
    "masked_array": ("__array_interface__",),
    "interface_cannot_copy": ("cuda:0", (1, 0), None),
    "spread_needs_copy": (_spread_array(), "cpu"),
    "spread_not_addressable": (_spread_array(),),
    "bad_on_readonly": (True, ("copy", "share", "refuse")),
    "bad_consumer": (3,),
    "consumer_not_importable": ("pytorch", ModuleNotFoundError("No module named 'pytorch'")),
    "consumer_without_from_dlpack": ("math", ["math.from_dlpack"]),
    "readonly_refused": ("torch", "ignores READ_ONLY"),
    "readonly_needs_copy": ("torch", "ignores READ_ONLY"),
    "layout_needs_copy": ("torch", (6,), (-1,), "a negative stride"),
    "unaligned_needs_copy": ("jax", 0x1004, 64),
    "narrowing_refused": ("jax", "int64", "int32", "jax_enable_x64"),
    "float_narrowing_refused": ("mlx", "float64", "float32"),
    "subbyte_misread_refused": ("jax", (17, 4)),
    "consumer_copied": ("mlx",),
    "view_needs_copy": (_an_instance_of("torch.Tensor"), "the negative bit", "resolve_neg"),
    "no_gpu_consumer": ("cupy", RuntimeError("no GPU is usable by CuPy")),
    "consumer_without_gpu": ("torch", "2.13.0+cpu", __import__("gpu_dlpack").Device("cuda:0")),
    "doctor_library_not_importable": ("typo", ModuleNotFoundError("No module named 'typo'")),
    "bad_flag": ("readonly", 1),
    "bad_dl_device_type": (1,),
    "bad_dl_device": ("x", "99 is not a valid DLDeviceType"),
    "array_not_device": (__import__("numpy").zeros(1),),
    "bad_cuda_stream_protocol": (object(),),
    "exports_itself": (object(),),
    "unmade_wrapper": (__import__("gpu_dlpack").Exportable,),
    "buffer_refused": (object(), BufferError("pybind11_getbuffer(): Internal error")),
    "no_dlpack_memory": (object(),),
    "dlpack_memory_names_no_memory": (object(), object()),
    "bad_pointer_type": ("ptr", "0x10", "an int"),
    "bad_pointer_argument": ("strides", (12, 4, 1), "there is one per dimension of (2, 3)"),
}


def test_every_gpu_dlpack_message_is_known_to_explain():
    from gpu_dlpack import _errors

    builders = {
        name for name, obj in vars(_errors).items()
        if inspect.isfunction(obj) and obj.__module__ == _errors.__name__ and not name.startswith("_")
    }
    assert builders == set(BUILDER_ARGS), "add an explain.json entry and sample arguments for new messages"
    for name, args in BUILDER_ARGS.items():
        exc = getattr(_errors, name)(*args)
        found = _explain.first(f"{type(exc).__name__}: {exc}")
        assert found is not None and found.entry.library == "gpu_dlpack", name


@pytest.mark.parametrize("entry_id", ["jax-version-floor", "gpu_dlpack-below-floor"])
def test_the_floor_remedy_serves_the_one_consumer_and_leaves_the_process_floor(entry_id, floor):
    # The first gpu_dlpack remedy for an old consumer is its own floor,
    # wrap(x, min_version=...): lowering the floor of the whole process
    # would lower it for every consumer.
    (m,) = [m for m in gpu_dlpack.explain(REAL_MESSAGES[entry_id]()) if m.id == entry_id]
    assert "min_version=(0, 4)" in m.avoid["call"]
    assert any("min_version=(0, 4)))" in r and "wrap(" in r for r in m.remedies)
    names = {"gpu_dlpack": gpu_dlpack, "old_lib": OldConsumer, "j": _jax().numpy.arange(3.0), "a": np.arange(3.0)}
    before = gpu_dlpack.MIN_DLPACK_VERSION
    exec(m.avoid["after"], names)
    assert names["t"].tolist() == [0.0, 1.0, 2.0]
    assert gpu_dlpack.MIN_DLPACK_VERSION == before == (0, 5)
    with pytest.raises(BufferError, match="below"):
        OldConsumer.from_dlpack(gpu_dlpack.wrap(names["j"]))


@pytest.mark.parametrize("text, groups", [
    # the seed's message as users quote it: its tail left out
    ("BufferError: JAX does not support any version below (0, 5)", {"floor": "0, 5"}),
    ("BufferError: JAX does not support any version below (0, 5) but version (...) was requested.",
     {"floor": "0, 5"}),
    ("BufferError: JAX does not support any version below (0, 5) but version ((0, 4)) was requested.",
     {"floor": "0, 5", "major": "0", "minor": "4"}),
    ("JAX does not support any version below (0, 5) but version (0, 4) was requested",
     {"floor": "0, 5", "major": "0", "minor": "4"}),
])
def test_the_seed_message_is_explained_with_or_without_its_tail(text, groups):
    (m,) = [m for m in gpu_dlpack.explain(text) if m.id == "jax-version-floor"]
    assert m.groups == groups
    # What the text did not give is named, never left as an unfilled field.
    shown = " ".join([m.meaning, *m.remedies, *m.avoid.values()])
    assert "{major}" not in shown and "{minor}" not in shown
    assert ("<major>" in shown) == ("major" not in groups)
