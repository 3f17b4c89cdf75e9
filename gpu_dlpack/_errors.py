"""Every error and warning gpu_dlpack raises, and every message it writes.

Each message says what was asked, why it cannot be done, and what to do
instead, as the type the array API standard names (the classes below say
which is for what), or a class of its cause that is still of that type.

In this module the names ``BufferError``, ``TypeError``, ``ValueError``...
are the layer's classes of those types (each the builtin of its name and a
``GpuDlpackError``, so a traceback names it gpu_dlpack._errors.BufferError):
the causes are of them, and every message without a cause of its own builds
one.

Floor: the leaves, at the bottom: it imports nothing of the package.
"""

from __future__ import annotations

import builtins


class GpuDlpackError(Exception):
    """The base class of every error gpu_dlpack raises itself.

    Each is also the standard's type (``BufferError``, ``TypeError``,
    ``ValueError``; ``ImportError`` for a library ``convert`` cannot import),
    so ``except BufferError`` keeps working; ``except GpuDlpackError`` tells
    the layer's refusals from what a peer library raised.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> try:
    ...     gpu_dlpack.export(np.arange(3), copy="yes")
    ... except gpu_dlpack.GpuDlpackError as e:
    ...     print(isinstance(e, TypeError), e)
    True copy must be True, False or None; got 'yes'.
    """


class BufferError(GpuDlpackError, builtins.BufferError):
    """An exchange gpu_dlpack cannot make: the standard's ``BufferError``."""


class TypeError(GpuDlpackError, builtins.TypeError):
    """An argument of the wrong type: the standard's ``TypeError``."""


class ValueError(GpuDlpackError, builtins.ValueError):
    """An argument of the right type but a wrong value: the standard's ``ValueError``."""


class NotImplementedError(GpuDlpackError, builtins.NotImplementedError):
    """A hook a subclass must define."""


class RuntimeError(GpuDlpackError, builtins.RuntimeError):
    """Something of the machine gpu_dlpack runs on it cannot use as built
    (the compiled core's binding to CuPy's runtime)."""


class ImportError(GpuDlpackError, builtins.ImportError):
    """gpu_dlpack cannot run here (a subinterpreter, a platform it does not support, no compiled core)."""


class ModuleNotFoundError(ImportError, builtins.ModuleNotFoundError):
    """A library asked for by name that cannot be imported."""


class StreamWarning(UserWarning):
    """A stream value accepted but ambiguous: CUDA stream ``0``.

    ``0`` is taken as the legacy default stream; the warning names the
    caller's line. Pass ``1`` (legacy) or ``2`` (per-thread) to say which.
    """


class ConsumedCapsuleError(ValueError, BufferError):
    """The capsule was already consumed (renamed ``used_dltensor*``).

    A ``ValueError`` for `inspect` and a ``BufferError`` for an import, so
    either ``except`` clause catches it. Of threads racing for one capsule,
    one takes it and the others get this error.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> cap = np.arange(3).__dlpack__()
    >>> _ = gpu_dlpack.from_dlpack(cap)
    >>> try:
    ...     gpu_dlpack.inspect(cap)
    ... except gpu_dlpack.ConsumedCapsuleError as e:
    ...     print(type(e).__name__, isinstance(e, ValueError), isinstance(e, BufferError))
    ConsumedCapsuleError True True
    """


class NotDLPackError(TypeError, builtins.AttributeError):
    """The object speaks no DLPack, nor another array protocol.

    No ``__dlpack__`` and ``__dlpack_device__``, no array interface, no buffer.
    The standard names ``AttributeError``; ``TypeError`` is what Python users
    expect for an argument of the wrong kind: both catch it.
    """


class DLPackVersionError(BufferError):
    """The DLPack version asked for is below the floor, or too old for the data.

    Raised for a ``max_version`` below the floor in force (`MIN_DLPACK_VERSION`,
    or the ``min_version`` of the call or wrapper), and for a dtype or device
    type that came after the version asked for (bool needs 0.8, float8 needs
    1.1). A ``BufferError``.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> try:
    ...     gpu_dlpack.export(np.arange(3), max_version=(0, 4))
    ... except gpu_dlpack.DLPackVersionError as e:
    ...     print(str(e)[:73])
    gpu_dlpack does not export DLPack versions below (0, 5), but max_version=
    """


class CopyRequiredError(BufferError):
    """``copy=False``, but the exchange needs a copy.

    Another device, a gather of shards, a layout the consumer cannot import,
    read-only data for an always-writeable result. A ``BufferError``.
    """


class ReadOnlyError(BufferError):
    """Read-only data for a consumer that cannot hold it read-only.

    A legacy capsule cannot say READ_ONLY, and some libraries' arrays cannot be
    read-only (CuPy, Numba). A ``BufferError``.
    """


class DtypeChangeError(BufferError):
    """The consumer would hold the data in another dtype, losing values.

    JAX with ``jax_enable_x64`` off (its default) imports int64 as int32
    (``2**40`` becomes ``0``) and float64 as float32. `convert` refuses such
    an exchange; the message names the setting that keeps the dtype, and
    how to ask for the narrower one explicitly. A ``BufferError``.

    Examples
    --------
    >>> import numpy as np, jax, gpu_dlpack
    >>> with jax.enable_x64(False):               # JAX's default
    ...     try:
    ...         gpu_dlpack.convert(np.array([2**40, 3]), "jax")
    ...     except gpu_dlpack.DtypeChangeError as e:
    ...         print(str(e)[:44])
    jax would import int64 as int32 (by a copy):
    """


class DeviceUnreachableError(BufferError):
    """The device asked for cannot be reached from the data's, or served.

    No installed backend can make the move (no CuPy, no GPU), or the memory
    cannot be addressed from there. A ``BufferError``.
    """


class CaptureError(BufferError):
    """An exchange asked of the layer inside a CUDA graph capture needs what
    CUDA cannot record into a graph (a host wait, a copy to or from host
    memory, the legacy default stream): refused before anything is queued,
    so the capture is still valid."""


class StreamError(GpuDlpackError):
    """A stream refused for the memory it goes with.

    Never raised itself, but as `InvalidStreamError` (a ``ValueError``) or
    `StreamTypeError` (a ``TypeError``), so ``except StreamError`` catches
    both.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> try:
    ...     gpu_dlpack.export(np.arange(3), stream=1)   # host memory takes None or -1
    ... except gpu_dlpack.StreamError as e:
    ...     print(type(e).__name__, isinstance(e, ValueError))
    InvalidStreamError True
    """


class InvalidStreamError(StreamError, ValueError):
    """A stream value the memory's device does not take.

    ``stream=1`` for host memory, a negative handle... A ``ValueError``.
    """


class StreamTypeError(StreamError, TypeError):
    """An object that is no stream, nor a stream object's handle. A ``TypeError``.
    """


def _fmt_version(v) -> str:
    return "None" if v is None else f"({v[0]}, {v[1]})"


def _named(obj) -> str:
    """The type of ``obj`` as a message names it: ``module.QualName``."""
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


#: The CuPy wheels, one per GPU stack, a remedy names.
_CUPY_WHEELS = "cupy-cuda12x, cupy-cuda13x or cupy-rocm-7-0"


# -- versions ---------------------------------------------------------------

def below_floor(asked, floor) -> DLPackVersionError:
    v = _fmt_version(asked)
    return DLPackVersionError(
        f"gpu_dlpack does not export DLPack versions below {_fmt_version(floor)}, "
        f"but max_version={v} was requested. Remedies: upgrade "
        "the consuming library so that it asks for max_version=(1, 0) or newer; "
        "or call __dlpack__ without max_version to get a legacy capsule; or lower "
        f"the floor for this consumer: consumer.from_dlpack(gpu_dlpack.wrap(x, min_version={v})), "
        f"or gpu_dlpack.export(x, max_version={v}, min_version={v}); or lower it for "
        f"the whole process: gpu_dlpack.set_min_dlpack_version({v}), or the environment "
        f"variable GPU_DLPACK_MIN_VERSION={asked[0]}.{asked[1]}."
    )


def bad_max_version(value) -> TypeError:
    return TypeError(
        f"max_version must be None or a tuple of two ints (major, minor), "
        f"for example max_version=(1, 0); got {value!r}."
    )


def bad_floor(value, source) -> ValueError:
    return ValueError(
        f"{source} must be a DLPack version such as '0.8' or (0, 8), with a "
        f"major version of 0 or 1; got {value!r}."
    )


def needs_version(what, need, asked) -> DLPackVersionError:
    return DLPackVersionError(
        f"{what} needs DLPack {need[0]}.{need[1]} or newer, but the consumer asked "
        f"for max_version={_fmt_version(asked)}. Remedies: upgrade the consumer so "
        "that it asks for max_version=(1, 0), or convert the array to a type that "
        "older versions describe."
    )


# -- arguments --------------------------------------------------------------

def bad_copy(value) -> TypeError:
    return TypeError(f"copy must be True, False or None; got {value!r}.")


def bad_stream_type(value, device, valid) -> StreamTypeError:
    return StreamTypeError(
        f"stream must be an int or None; got {type(value).__name__} {value!r}. "
        f"For {device} the valid values are: {valid}."
    )


def bad_stream_value(value, device, valid) -> InvalidStreamError:
    return InvalidStreamError(f"stream={value!r} is not valid for {device}. Valid values: {valid}.")


def bad_device(value, forms) -> ValueError:
    return ValueError(f"cannot read a device from {value!r}. Accepted forms: {forms}.")


def bad_device_type(value) -> TypeError:
    return TypeError(
        f"a device must be a string, a (device_type, device_id) tuple, a "
        f"gpu_dlpack.Device, a torch.device, a cupy.cuda.Device, a JAX device or "
        f"an array-api-strict Device; got {type(value).__name__} {value!r}."
    )


def bad_flag(name, value) -> TypeError:
    return TypeError(f"{name} must be True or False; got {value!r}.")


def unmade_wrapper(cls) -> TypeError:
    return TypeError(
        f"this {cls.__qualname__} was made without __init__ and wraps no array: make one with "
        "gpu_dlpack.wrap(x) (or the class called with the array)."
    )


def bad_dl_device_type(value) -> TypeError:
    return TypeError(
        f"dl_device must be None, a (device_type, device_id) tuple such as (1, 0) "
        f"for the CPU, or a device in any form gpu_dlpack.Device reads ('cpu', "
        f"'cuda:0', a torch.device...); got {type(value).__name__} {value!r}."
    )


def bad_dl_device(value, why) -> DeviceUnreachableError:
    return DeviceUnreachableError(f"dl_device={value!r} names no DLPack device: {why}")


def array_not_device(value) -> TypeError:
    return TypeError(
        f"{type(value).__name__} is an array, not a device; use Device.of(x) "
        "to read the device of an array."
    )


def not_dlpack(obj, chunks=None) -> NotDLPackError:
    """``chunks``: the ``_peers.Chunks`` of ``obj``'s library, where its
    arrays are lazy arrays of chunks (dask's)."""
    if chunks is not None:
        return NotDLPackError(
            f"{_named(obj)} is a lazy array of chunks, with no DLPack of its own: its "
            f"values exist once computed. Compute it first (x.{chunks.compute}()) and pass "
            "the result, or convert it with gpu_dlpack.convert(x, library), which for "
            f"{' or '.join(chunks.holds)} converts each chunk as it is computed."
        )
    if isinstance(obj, type):
        return NotDLPackError(
            f"{obj.__module__}.{obj.__qualname__} is a class, not an array: gpu_dlpack "
            "exchanges arrays (instances of it), whose __dlpack__ and __dlpack_device__ "
            "are bound to their data. Pass an array, such as numpy.arange(3) or "
            "torch.zeros(3), not its type."
        )
    return NotDLPackError(
        f"{_named(obj)} does not support DLPack: "
        "it has no __dlpack__ and __dlpack_device__ methods, and it is not a "
        "DLPack capsule. Pass an array from a DLPack library (NumPy, PyTorch, "
        "JAX, CuPy, ...) or a capsule named 'dltensor' or 'dltensor_versioned'."
    )


# -- exchange rules ---------------------------------------------------------

def readonly_legacy(askers=()) -> ReadOnlyError:
    # askers: the loaded libraries whose from_dlpack asks for legacy capsules
    # itself (_peers.legacy_askers): their caller can neither ask for a
    # versioned capsule nor have the copy made, and converts instead.
    through = ""
    if askers:
        who = (f"{askers[0]} asks for legacy capsules itself" if len(askers) == 1 else
               f"{', '.join(askers[:-1])} and {askers[-1]} ask for legacy capsules themselves")
        calls = " or ".join(f"gpu_dlpack.convert(x, {name!r})" for name in askers)
        through = (
            f" If a library's from_dlpack made the request ({who}), convert instead: {calls} gives it "
            "the data in a form it can hold."
        )
    return ReadOnlyError(
        "cannot export a read-only array as a legacy 'dltensor' capsule: that "
        "format cannot say the data must not be written. Remedies: ask for a "
        "versioned capsule with max_version=(1, 0), or pass copy=True to export "
        "a writeable copy." + through
    )


def copy_forbidden(source, target, why) -> CopyRequiredError:
    return CopyRequiredError(
        f"copy=False, but exporting from {source} to {target} needs a copy ({why}). "
        "Pass copy=None to allow the copy, or keep the data on its device."
    )


def unreachable(source, target, why="") -> DeviceUnreachableError:
    extra = f" ({why})" if why else ""
    return DeviceUnreachableError(
        f"cannot move an array from {source} to {target}{extra}. "
        "Ask for dl_device=None (the array's own device) or (1, 0) for the CPU "
        "where the data is host memory."
    )


def no_backend(device, gpu: bool = True) -> DeviceUnreachableError:
    """No backend here holds arrays on ``device``; ``gpu``: a GPU's memory
    (CuPy would), else another accelerator's (a TPU, Vulkan), which only
    its own library reaches."""
    if not gpu:
        return DeviceUnreachableError(
            f"no backend can hold an array on {device}: gpu_dlpack moves the memory of the CPU and of "
            "CUDA and ROCm GPUs only. Ask the array's own library for a copy on the host, then exchange "
            "that: gpu_dlpack.from_dlpack(x, device='cpu') or numpy.from_dlpack(x, device='cpu') ask "
            "its producer for one (x.__dlpack__(dl_device=(1, 0))); JAX's jax.device_get(x) makes one. "
            "To put data there, hand it to a library that places it itself: convert(x, 'jax', "
            "device=jax.devices()[0])."
        )
    return DeviceUnreachableError(
        f"no backend can hold an array on {device}: gpu_dlpack needs CuPy and a "
        f"working GPU for that. Install the CuPy that fits your GPU (pip install {_CUPY_WHEELS}; "
        "from a gpu_dlpack clone, pip install '.[cuda12]' does the same), or ask for device='cpu'."
    )


def placed_by_consumer(device, library) -> DeviceUnreachableError:
    return DeviceUnreachableError(
        f"gpu_dlpack cannot place an array on {device}, but {library} can: pass {library}'s own device object "
        f"as device= (for JAX, one of jax.devices()), and {library} places the data there."
    )


def producer_refused(producer, exc) -> BufferError:
    return BufferError(
        f"{_named(producer)}.__dlpack__ refused the export: {type(exc).__name__}: {str(exc).removesuffix('.')}. "
        "That is the producer's own error: fix what it names, or ask the producer "
        "for an export it can make (its own device, no copy, max_version=None)."
    )


def buffer_refused(obj, exc) -> BufferError:
    return BufferError(
        f"{_named(obj)} offers the buffer protocol, but reading its buffer failed: {type(exc).__name__}: "
        f"{exc}. That is its library's own error: export it with that library's own DLPack export, or "
        "pass gpu_dlpack an array it can read (numpy.array(x), or the library's conversion to one)."
    )


def exports_itself(obj) -> BufferError:
    t = _named(obj)
    return BufferError(
        f"{t}.__dlpack__ asks gpu_dlpack to export the {type(obj).__name__} itself "
        "(gpu_dlpack.export(self) or gpu_dlpack.wrap(self) inside __dlpack__), which "
        f"would ask {t}.__dlpack__ again without end, and the object speaks no other "
        "array protocol (__cuda_array_interface__, __array_interface__, the buffer "
        "protocol) to answer with. Name the memory instead: subclass gpu_dlpack.Producer "
        "and return the array (or gpu_dlpack.from_pointer(...)) from dlpack_memory()."
    )


def producer_not_a_capsule(producer, obj) -> TypeError:
    return TypeError(
        f"{_named(producer)}.__dlpack__() returned {type(obj).__name__}, not a DLPack capsule "
        "(a PyCapsule named 'dltensor' or 'dltensor_versioned'): the producer breaks "
        "the DLPack protocol. Fix its __dlpack__, or convert the array with its own "
        "library first (for example to NumPy) and pass that."
    )


def producer_bad_device(producer, answer, error=ValueError):
    # The reading failed with ``error``: the layer's error of that standard type.
    error = TypeError if issubclass(error, builtins.TypeError) else ValueError
    return error(
        f"{producer}.__dlpack_device__() returned {answer!r}, which names no DLPack "
        "device: it must return a (device_type, device_id) pair of ints such as "
        "(1, 0) for the CPU or (2, 0) for cuda:0. The producer breaks the DLPack "
        "protocol: fix its __dlpack_device__, or convert the array with its own "
        "library first (for example to NumPy) and pass that."
    )


def renamed(record, old, new) -> DeprecationWarning:
    return DeprecationWarning(
        f"{record}.{old} is deprecated: read {record}.{new}, the same value under gpu_dlpack's one "
        f"name for it; {old} goes in a later release."
    )


def bad_arg_indices(value) -> TypeError:
    return TypeError(
        "args_viewable takes the positions of the arguments to view, a tuple of ints such as "
        f"(0, 2), as cuda.core's args_viewable_as_strided_memory does; got {value!r}."
    )


# -- the producer kit ---------------------------------------------------------

def not_on_host(obj, device) -> TypeError:
    return TypeError(
        f"{_named(obj)} holds its memory on {device}, which the "
        "host cannot address: NumPy cannot take it in place. Copy it to the host: "
        "gpu_dlpack.from_dlpack(obj, device='cpu'), or convert it to a GPU library: "
        "gpu_dlpack.convert(obj, 'cupy')."
    )


def array_copy_forbidden(obj, dtype, wanted) -> ValueError:
    return ValueError(
        f"copy=False, but {_named(obj)} holds {dtype} data and "
        f"{wanted} was asked for: only a copy converts it. Pass copy=None, or ask for {dtype}."
    )


def no_dlpack_memory(obj) -> NotImplementedError:
    return NotImplementedError(
        f"{_named(obj)} subclasses gpu_dlpack.Producer but does not name its memory: define "
        f"{type(obj).__name__}.dlpack_memory(self) to return the array to export "
        "(any DLPack array, an object with __array_interface__ or the buffer protocol, "
        "or gpu_dlpack.from_pointer(ptr, shape, dtype, owner=...))."
    )


def dlpack_memory_names_no_memory(producer, memory) -> TypeError:
    what = "itself" if memory is producer else f"{_named(memory)}, whose dlpack_memory() leads back to it"
    return TypeError(
        f"{type(producer).__name__}.dlpack_memory() returned {what}: a gpu_dlpack.Producer that speaks no "
        "other array protocol names no memory. Return the memory to export: any DLPack array, an object "
        "with __array_interface__ or the buffer protocol, or gpu_dlpack.from_pointer(ptr, shape, dtype, owner=...)."
    )


def bad_pointer_type(name, value, expected) -> TypeError:
    return TypeError(
        f"from_pointer: {name} must be {expected}; got {type(value).__name__} {value!r}. "
        "Call gpu_dlpack.from_pointer(ptr, shape, dtype, strides=None, device='cpu', owner=...)."
    )


def bad_pointer_argument(name, value, why) -> ValueError:
    return ValueError(
        f"from_pointer: {name}={value!r} cannot describe memory: {why}. "
        "Pass the address of the first element, a shape of non-negative ints, and "
        "strides in elements (one per dimension), or strides=None for C order."
    )


# -- capsules ---------------------------------------------------------------

def consumed(name) -> ConsumedCapsuleError:
    return ConsumedCapsuleError(
        f"this DLPack capsule was already consumed (its name is {name!r}); a "
        "capsule can be imported only once. Call __dlpack__ again for a new one."
    )


def not_a_capsule(obj) -> TypeError:
    return TypeError(
        f"expected a PyCapsule named 'dltensor' or 'dltensor_versioned'; got "
        f"{type(obj).__name__}."
    )


def bad_capsule_name(name) -> BufferError:
    return BufferError(
        f"a DLPack capsule must be named 'dltensor' or 'dltensor_versioned'; this "
        f"one is named {name!r}."
    )


def unsupported_major(major) -> BufferError:
    return BufferError(
        f"the producer gave a DLPack {major}.x capsule; gpu_dlpack reads major "
        "version 1 only. The capsule's deleter was called. Upgrade gpu_dlpack, "
        "or ask the producer for max_version=(1, 0)."
    )


def unreadable_major(version) -> BufferError:
    return BufferError(
        f"this capsule holds DLPack {version[0]}.{version[1]}; gpu_dlpack reads major "
        "version 1 only, so its tensor fields were not read."
    )


def subinterpreter() -> ImportError:
    return ImportError(
        "gpu_dlpack does not support subinterpreters (nor does NumPy, which it needs): "
        "import it in the main interpreter"
    )


def core_not_loaded(module, exc, shadowed=None) -> ImportError:
    # shadowed: where an installed gpu_dlpack lies that this one hides.
    hides = "" if shadowed is None else (
        f" This gpu_dlpack was imported from a folder on sys.path before the one installed at {shadowed} "
        "(Python started in a clone's root imports the clone): start Python from another folder to use "
        "the installed one, or build the core in the clone."
    )
    return ImportError(
        f"gpu_dlpack's compiled core ({module}) is not built or does not load here ({exc}), and "
        "gpu_dlpack has no other implementation." + hides + " Install a wheel built for this platform and "
        "Python, which carries the core (docs/install.md lists them), or build it from source, which needs a C "
        "compiler and the Python headers: pip install . in a clone (python setup.py build_ext --inplace "
        "to use the clone where it is)."
    )


def gil_disabled(version) -> ImportError:
    return ImportError(
        f"gpu_dlpack needs the GIL, and this free-threaded CPython {version} runs without it: "
        "the compiled core claims a capsule in one step (its name checked and renamed under the "
        "capsule's critical section), but its caches (devices, versions, dtypes, the plans of the "
        "types it has seen) are read and replaced without a lock, which only the GIL makes safe. "
        "Run with the GIL on (PYTHON_GIL=1 or python -X gil=1), or use a default (GIL) build of CPython."
    )


def unsupported_platform(what) -> ImportError:
    return ImportError(
        f"gpu_dlpack supports little-endian 64-bit interpreters only; this one is "
        f"{what}. Its capsule code reads and patches the DLPack structs "
        "with the little-endian LP64 layout of dlpack.h, which this interpreter does "
        "not have. Use a 64-bit little-endian build of Python (x86-64, arm64...)."
    )


def malformed(what) -> BufferError:
    return BufferError(f"malformed DLPack tensor: {what}.")


def not_taken(kind_now, versioned) -> BufferError:
    """The core could not claim an unconsumed capsule (discard, move,
    snapshot): ``kind_now`` what its name now says (True: versioned), which
    is the kind asked for (``versioned``) where it could not be renamed."""
    if kind_now == versioned:
        return malformed("the capsule could not be renamed")
    return malformed("the capsule changed kind while it was read")


def capsule_fault(snapshot, max_ndim: int, importing: bool) -> BufferError | None:
    """What the core found wrong in a capsule it would not read or import
    (``importing``), in words, from its ``snapshot`` (``_core.snapshot``),
    in the order of the checks of an import: another major version, an
    ndim out of range, a NULL shape, no DLPack device, a layout no importer
    can hold. None where none is."""
    versioned, fields, shape, strides, fault = snapshot
    major, minor, flags, data, dt, di, ndim, code, bits, lanes, shape_p, strides_p, offset = fields
    if versioned and major != 1:
        # Another major version may lay the struct out differently: only
        # the version and flags words are safe to read.
        return unsupported_major(major) if importing else unreadable_major((major, minor))
    if not 0 <= ndim <= max_ndim:
        return malformed(f"ndim={ndim}")
    if ndim and not shape_p:
        return malformed(f"shape is NULL with ndim={ndim}")
    if dt < 1 or di < 0:  # from 1 up, every type is a device (_devices.DLDeviceType)
        return malformed(f"no DLPack device is (device_type={dt}, device_id={di})")
    if fault:
        return malformed(_layout_words(fault, data, offset, shape, strides, max(1, (bits * lanes + 7) >> 3)))
    return None


def _layout_words(fault: int, data: int, offset: int, shape: tuple, strides, itemsize: int) -> str:
    """What the core's layout_fault found (1 to 5, in the order it checks),
    in words: no importer can hold such a tensor (a negative dimension is
    what numpy.from_dlpack refuses; a tensor without elements is checked as
    if each zero extent were one, and a step is a byte stride, an int64, to
    NumPy, CuPy and the array interfaces, even where no extent takes it)."""
    if fault == 1:
        return f"the shape {shape} has a negative dimension"
    if fault == 2:
        return f"data is NULL but the shape {shape} has elements" if shape else "data is NULL but a 0-d tensor has one element"
    if fault == 3 and 0 in shape:
        return (
            f"the extents other than 0 of the shape {shape} of {itemsize}-byte elements multiply to "
            "more than 2**63 - 1 bytes"
        )
    if fault == 3:
        return f"the shape {shape} of {itemsize}-byte elements holds more than 2**63 - 1 bytes"
    if fault == 4 and strides is not None:
        return f"the strides {strides} of the shape {shape} reach outside the 64-bit address space"
    if fault == 4:
        return (
            f"the shape {shape} at data {data:#x} + byte_offset {offset} reaches past the end of the "
            "64-bit address space"
        )
    return (
        f"the strides {strides} of the shape {shape} are steps of {itemsize}-byte elements "
        "that no int64 byte count holds"
    )


def unsupported_dtype(code, bits, lanes, why) -> BufferError:
    return BufferError(
        f"cannot exchange DLPack dtype (code={code}, bits={bits}, lanes={lanes}): {why}."
    )


def numpy_refused(exc) -> BufferError:
    """NumPy refused a capsule the layer checked and handed it (RuntimeError
    before NumPy 2.5, BufferError from it, for one it cannot read)."""
    return BufferError(f"NumPy could not import the capsule: {exc}")


def unsupported_numpy_dtype(dtype, why) -> BufferError:
    return BufferError(f"cannot export NumPy dtype {dtype}: {why}.")


# -- GPU exchanges (CuPy backend, streams) ------------------------------------

def bad_stream_object(value) -> StreamTypeError:
    return StreamTypeError(
        f"cannot read a stream from {type(value).__name__} {value!r}. Pass an int "
        "handle (-1, 1, 2 or a cudaStream_t/hipStream_t address) or a stream object: "
        "cupy.cuda.Stream, torch.cuda.Stream, a Numba stream, or anything with "
        "__cuda_stream__(), .ptr, .cuda_stream or .handle."
    )


def bad_cuda_stream_protocol(stream) -> StreamTypeError:
    return StreamTypeError(
        f"{type(stream).__name__}.__cuda_stream__() must return a (version, "
        "handle) pair of ints."
    )


def readonly_to_writeable(target) -> CopyRequiredError:
    return CopyRequiredError(
        f"copy=False, but the capsule is READ_ONLY and arrays on {target} are CuPy "
        "arrays, which are always writeable: a zero-copy import would let read-only "
        "data be written. Pass copy=None to import a writeable copy, or import to "
        "device='cpu' for a read-only NumPy view."
    )


def forked_after_gpu(pid) -> BufferError:
    return BufferError(
        f"process {pid} was forked from a process that had already used the GPU, and the CUDA "
        "(or HIP) runtime does not survive fork: no GPU exchange or copy can be made here. Start "
        "worker processes with the 'spawn' method (multiprocessing.get_context('spawn'), "
        "torch DataLoader(multiprocessing_context='spawn')), or fork before the GPU is used; "
        "host-memory exchanges work in a forked child."
    )


def gpu_failed(what, exc) -> BufferError:
    return BufferError(f"CuPy could not {what}: {type(exc).__name__}: {exc}")


def runtime_entry_differs(module, entry, found=None, expected=None) -> RuntimeError:
    """The core's CUDA calls are not bound to CuPy's runtime module: one of
    its C entries differs (``entry``), or it has none (``entry`` None)."""
    if entry is None:
        what = f"{module} publishes no C entries (__pyx_capi__), or cupy.cuda.runtime is not that module"
    else:
        state = "is missing" if found is None else f"has the C signature {found!r}"
        what = f"the entry {entry!r} of {module}.__pyx_capi__ {state}, not the {expected!r} the core calls"
    return RuntimeError(
        f"the compiled core does not bind to CuPy's runtime: {what}. The stream hand-off and copies "
        "run through CuPy's Python calls instead (the same functions, with the same results); a "
        "gpu_dlpack release made for this CuPy binds again."
    )


def capture_forbids(what, stream, why) -> CaptureError:
    return CaptureError(
        f"cannot {what} while stream {stream:#x} takes part in a CUDA graph capture: {why}. Nothing was "
        "queued and the capture is still valid. Make the exchange before the capture begins (or after it "
        "ends), or inside it hand device memory with the capturing stream as the consumer's stream "
        "(docs/guide/gpu.md, \"CUDA graphs\")."
    )


def capture_invalidated(stream, exc) -> CaptureError:
    return CaptureError(
        f"stream {stream:#x} was capturing a CUDA graph, but an earlier operation invalidated the capture "
        f"({type(exc).__name__}: {exc}): end the capture (cudaStreamEndCapture fails), find the operation "
        "CUDA refused (gpu-dlpack explain reads the error), and capture again."
    )


def old_cupy(need) -> BufferError:
    return BufferError(
        f"this CuPy is too old to {need}: upgrade to CuPy 13.4 or newer "
        f"(pip install -U {_CUPY_WHEELS}, whichever is installed)."
    )


# -- producers' views --------------------------------------------------------

def view_needs_copy(producer, what, resolve) -> CopyRequiredError:
    return CopyRequiredError(
        f"copy=False, but the {_named(producer)} has {what} set: its memory holds other values than "
        f"the tensor, which only a copy resolves ({resolve}()), and a zero-copy export would "
        f"hand the consumer the wrong values. Pass copy=None to let gpu_dlpack resolve it, "
        f"or call x.{resolve}() first."
    )


# -- producers that contradict themselves -----------------------------------

def device_unnamed(producer, exc) -> BufferError:
    return BufferError(
        f"{_named(producer)}.__dlpack_device__ names no device ({type(exc).__name__}: {exc}): its array is "
        "on a device its producer does not export through DLPack (JAX's on a TPU), so it cannot be taken "
        "where it is. Ask for the host, where the producer copies it: gpu_dlpack.from_dlpack(x, "
        "device='cpu'), or gpu_dlpack.convert(x, 'numpy') (or any library's name: 'torch', 'jax'...)."
    )


def device_mismatch(producer, said, got) -> BufferError:
    return BufferError(
        f"{_named(producer)}.__dlpack_device__ says its array is on {said}, but its capsule "
        f"holds memory on {got}. The producer contradicts itself, and gpu_dlpack acts on neither "
        "answer (a consumer chooses its stream and any copy by the device said, and reads the memory "
        "the capsule names): the capsule was refused (its deleter was called). The producer is at "
        "fault; where you know its capsule to be right, import the capsule itself: "
        "gpu_dlpack.from_dlpack(x.__dlpack__()) reads the device from the capsule alone."
    )


def host_device_id(asked, target) -> DeviceUnreachableError:
    name = target.type.name.lower()
    return DeviceUnreachableError(
        f"{asked!r} asks for {name} memory with device id {target.index}, but host "
        f"memory is one address space with device id 0 only. Ask for "
        f"({int(target.type)}, 0) or '{name}'."
    )


# -- arrays spread over several devices ----------------------------------------

def _sharding(x) -> str:
    """The sharding of the spread array ``x`` in words."""
    spec = getattr(x.sharding, "spec", None)
    shown = "" if spec is None else f"({spec})"
    return f"{type(x.sharding).__name__}{shown} over {len(x.sharding.device_set)} devices"


def spread_needs_copy(x, target) -> CopyRequiredError:
    return CopyRequiredError(
        f"the array is sharded ({_sharding(x)}): it can reach {target} only by a gather, "
        "a copy, but copy=False was asked. Remedies: pass copy=None or copy=True to "
        "gather it, or take its shards zero-copy, each on its own device, with "
        "gpu_dlpack.shards(x)."
    )


def spread_not_addressable(x) -> BufferError:
    here = sorted(str(d) for d in x.sharding.addressable_devices)
    missing = len(x.sharding.device_set) - len(here)
    return BufferError(
        f"the array is spread over devices this process cannot address ({_sharding(x)}; "
        f"{missing} of its devices belong to other processes, this one has "
        f"{', '.join(here) or 'none'}): no process can export it whole. Remedies: "
        "exchange the shards this process holds with gpu_dlpack.shards(x), or gather "
        "the array first (jax.experimental.multihost_utils.process_allgather)."
    )


# -- the other array protocols ---------------------------------------------------

def bad_interface(name, why, value) -> BufferError:
    shown = "" if value is None else f" (got {value!r})"
    return BufferError(
        f"the object's {name} cannot be read: {why}{shown}. The producer's interface is "
        "malformed; fix or upgrade the producing library, or give gpu_dlpack an object "
        "with __dlpack__."
    )


def masked_array(name) -> BufferError:
    return BufferError(
        f"the object's {name} has a mask: DLPack has no masked arrays, so the data "
        "alone would lose which elements are masked. Fill or drop the masked elements "
        "first (for example numpy.ma.filled), then exchange the result."
    )


def interface_cannot_copy(device, dl_device, copy) -> BufferError:
    return BufferError(
        f"a CUDA Array Interface object on {device} lends its memory only; it was "
        f"asked for dl_device={dl_device!r}, copy={copy!r}. Import it with "
        "gpu_dlpack.from_dlpack(x, device=..., copy=True), which copies with CuPy."
    )


# -- one call to any library (convert) ------------------------------------------

def bad_on_readonly(value, choices) -> ValueError | TypeError:
    error = ValueError if isinstance(value, str) else TypeError
    return error(
        f"on_readonly must be one of {', '.join(repr(c) for c in choices)}; got {value!r}. "
        "'copy' gives a consumer that cannot hold read-only data a writeable copy, 'share' "
        "hands it the memory anyway (its writes then change the source), 'refuse' raises "
        "gpu_dlpack.ReadOnlyError."
    )


def bad_consumer(to) -> TypeError:
    return TypeError(
        f"convert's 'to' must be an array library's module or its name (such as 'numpy', "
        f"'torch', 'jax', 'cupy', 'array_api_strict', 'numba', or any module with a "
        f"from_dlpack); got {type(to).__name__} {to!r}."
    )


def consumer_not_importable(name, exc, meant=()) -> ModuleNotFoundError:
    hint = ""
    if meant:
        hint = f" Did you mean {'one of ' if len(meant) > 1 else ''}{', '.join(repr(m) for m in meant)}?"
    return _not_importable(f"convert(x, {name!r})", name, exc, hint)


def _not_importable(asker, name, exc, hint="") -> ModuleNotFoundError:
    return ModuleNotFoundError(
        f"{asker}: no module named {name!r} can be imported here ({type(exc).__name__}: {exc}).{hint} "
        "Check the spelling, or install the library into this Python.",
        name=name,
    )


def consumer_without_from_dlpack(name, looked) -> TypeError:
    where = f"looked for {', '.join(looked)}" if looked else "a producer only, in gpu_dlpack's table of peers"
    return TypeError(
        f"convert(x, {name!r}): {name} has no from_dlpack ({where}), "
        "so it cannot import DLPack arrays. Pass a library that has one, or the module "
        "that holds it (for example 'jax.numpy')."
    )


def readonly_refused(consumer, why) -> ReadOnlyError:
    return ReadOnlyError(
        f"the data is read-only and {consumer} cannot hold it read-only ({why}); "
        "on_readonly='refuse' was asked. Remedies: on_readonly='copy' (the default) gives "
        f"{consumer} a writeable copy; on_readonly='share' hands {consumer} the memory "
        "anyway, where its writes change the source."
    )


def readonly_needs_copy(consumer, why) -> ReadOnlyError:
    return ReadOnlyError(
        f"copy=False, but the data is read-only and {consumer} cannot hold it read-only "
        f"({why}): only a copy keeps the source unchanged. Remedies: pass copy=None to "
        f"give {consumer} a writeable copy, or on_readonly='share' to hand it the memory "
        "anyway, where its writes change the source."
    )


def layout_needs_copy(consumer, shape, strides, why) -> CopyRequiredError:
    return CopyRequiredError(
        f"copy=False, but {consumer} cannot import an array of shape {shape} with strides "
        f"{strides} (in elements) without a copy: {why}. Pass copy=None to let gpu_dlpack "
        "give it a compact copy, or make the array contiguous first."
    )


def unaligned_needs_copy(consumer, address, alignment) -> CopyRequiredError:
    return CopyRequiredError(
        f"copy=False, but {consumer} copies host data not aligned to {alignment} bytes, and "
        f"this array starts at 0x{address:x} ({address % alignment} bytes past a boundary). "
        "Pass copy=None to allow the copy, or allocate the array aligned."
    )


def bad_alignment(value) -> TypeError | ValueError:
    error = ValueError if type(value) is int else TypeError
    return error(
        "require_alignment must be a number of bytes the first element's address is a "
        f"multiple of, an int such as 64 (0: none); got {value!r}."
    )


def requirement_needs_copy(what, address, alignment, shape, strides) -> CopyRequiredError:
    if what == "alignment":
        why = (f"require_alignment={alignment}, and the data starts at 0x{address:x}, "
               f"{address % alignment} bytes past a {alignment}-byte boundary")
    else:
        why = f"require_contiguous=True, and the data of shape {shape} has strides {strides} (in elements), not C order"
    return CopyRequiredError(
        f"copy=False, but {why}: only a copy meets the requirement. Pass copy=None for a "
        "compact copy aligned as asked (made only where it is needed), or drop the requirement."
    )


def narrowing_refused(consumer, dtype, narrower, setting) -> DtypeChangeError:
    return DtypeChangeError(
        f"{consumer} would import {dtype} as {narrower} (by a copy): with {setting} off, values "
        f"that do not fit {narrower} change silently (int64 2**40 is int32 0, float64 1e300 is "
        f"float32 inf). Remedies: turn "
        f"{setting} on to keep {dtype}, for the process ({consumer}.config.update('{setting}', "
        f"True), or {setting.upper()}=1 in the environment) or around this call (with "
        f"{consumer}.enable_x64(True): ..., jax.experimental.enable_x64() in older releases); or ask for {narrower} explicitly: convert "
        f"x.astype('{narrower}') (x.to(torch.{narrower}) for a tensor)."
    )


def float_narrowing_refused(consumer, dtype, narrower) -> DtypeChangeError:
    return DtypeChangeError(
        f"{consumer} would import {dtype} as {narrower} (by a copy): it has no {dtype}, and values "
        f"that do not fit {narrower} change silently (float64 1e300 is float32 inf). Remedy: ask "
        f"for {narrower} explicitly, knowing what it keeps: convert x.astype('{narrower}')."
    )


def subbyte_misread_refused(consumer, dl_dtype) -> DtypeChangeError:
    code, bits = dl_dtype
    return DtypeChangeError(
        f"{consumer} would read this {bits}-bit data (DLPack code {code}) as packed, two values a byte, where "
        f"the capsule holds one value a byte (IS_SUBBYTE_TYPE_PADDED): every element but the first would "
        f"change silently. Remedy: convert a wider dtype and cast it in {consumer}: convert(x.astype('float32'), "
        f"'{consumer}'), then .astype(x.dtype) there."
    )


def consumer_copied(consumer) -> CopyRequiredError:
    return CopyRequiredError(
        f"copy=False, but {consumer} copied the data on import (its result does not share the "
        "source's memory). Pass copy=None to allow the copy."
    )


def no_gpu_consumer(consumer, exc) -> DeviceUnreachableError:
    return DeviceUnreachableError(
        f"convert(x, {consumer!r}): {consumer} arrays live on a GPU, and gpu_dlpack cannot "
        f"reach one here ({type(exc).__name__}: {exc}). Install the CuPy that fits your "
        f"GPU (pip install {_CUPY_WHEELS}) and check `gpu-dlpack doctor`, or convert to a "
        "host library ('numpy', 'torch', 'jax')."
    )


def consumer_without_gpu(consumer, version, device) -> DeviceUnreachableError:
    who = f"{consumer} {version}" if version else consumer
    return DeviceUnreachableError(
        f"convert(x, {consumer!r}): the data is on {device}, and {who} cannot hold memory of {device} here "
        f"(a build without GPU support, or no GPU it can use), so it was not called. Pass device='cpu' "
        f"to have the data copied to the host first (gpu_dlpack.convert(x, {consumer!r}, device='cpu')), "
        f"or install the build of {consumer} for this GPU."
    )


def doctor_library_not_importable(name, exc) -> ModuleNotFoundError:
    return _not_importable(f"gpu-dlpack doctor --library {name}", name, exc)


def explain_takes(obj) -> TypeError:
    return TypeError(
        "gpu_dlpack.explain takes an exception or an error message (str); got "
        f"{type(obj).__name__} {obj!r}."
    )
