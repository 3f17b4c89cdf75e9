"""The peers: what gpu_dlpack knows of each array library it meets, one row
per library, read by the modules that act on it. A row names types,
attributes and dtypes by name; nothing here imports a peer, and nothing of
the package (a leaf: the device parser reads it too).

- ``array``: the library's array type, in ``module`` (or in
  ``array_module`` or a module under it): that exact type (a subclass may
  override what the row says of it);
- ``on_host``: an attribute of its arrays that is True when their memory is
  host memory (CPU or pinned), read where ``__dlpack_device__`` costs more
  (``_devices.known_on_host``);
- ``host_test``: how an array is cheaply known to hold memory of the CPU
  where no attribute says it (``HostTest``), read by the compiled core too;
- ``numpy_reads``: its dtypes whose host capsules ``numpy.from_dlpack``
  reads exactly as the rules say (well-formed, versioned, honest flags):
  the common import of such an array goes straight to NumPy (``_import``);
- ``exchange``: its type's DLPack C exchange API is read by the compiled
  core, with the guards its own ``__dlpack__`` checks and the exchange
  skips (``_wiring``): attributes of the array, each of which must be
  false for the plain exchange (else its ``__dlpack__`` is asked, and says
  what it refuses); other producers keep their ``__dlpack__``;
- ``devices``: how its device objects name a DLPack device
  (``_devices.Device``): those of torch, CuPy, JAX and array-api-strict.

- ``consumer``: where its ``from_dlpack`` lives, relative to ``module``
  (the first found wins), and ``submodules`` to import for it;
- ``asks``: the ``max_version`` its ``from_dlpack`` asks for, where it
  takes a capsule too (torch); ``capsule_only``: its importer takes a
  capsule and nothing else (TensorFlow's ``experimental.dlpack.from_dlpack``):
  ``convert`` hands it the capsule it would ask for (``asks``; None: a
  legacy one);
- ``lands``: where ``gpu_dlpack.convert`` lands data for it: ``"host"``
  (NumPy: ``gpu_dlpack.from_dlpack`` is the importer), ``"gpu"`` (CuPy, and
  Numba over it: CuPy arrays made by ``gpu_dlpack.from_dlpack``), None (its
  own ``from_dlpack`` imports);
- ``holds_gpu``: how to ask whether its build holds GPU memory here
  (``Probe``): ``convert`` refuses GPU data for it where it does not,
  before it is called (``_faults.before_call``);
- ``faults``: what it cannot honour as a consumer, by version (``Fault``
  rows, ids from ``FAULTS``): ``convert`` applies the remedy of each one
  active for the installed version (``_faults``), and ``gpu-dlpack doctor``
  measures them and reports what the table does not say;
- ``export_faults``: what it gets wrong as a producer, by version (``Fault``
  rows, described in docs/guide/libraries.md): every export and import of
  its arrays corrects them (``read_only``, ``views``, ``_devices.Device.of``);
- ``chunks``: its arrays are lazy arrays of chunks that other libraries
  hold, with no DLPack of their own (dask's: ``Chunks``), which ``convert``
  maps over and the errors of ``from_dlpack`` and ``wrap`` name.
"""

from __future__ import annotations

import functools
import operator
import re
import sys
from typing import Callable, NamedTuple


class HostTest(NamedTuple):
    """An array holds memory of the CPU, on one device, when the attributes
    ``device`` names, read in turn, reach its one device (an array over
    several devices has none) and that device's ``kind`` attribute is
    ``answer`` (``==``). The core and Python read it at the same points, the
    same way: an import, an export and a wrap of such an array take its
    device from it, without ``__dlpack_device__`` (``_devices``); where it
    fails or raises, ``__dlpack_device__`` is asked (an array over several
    devices then refuses, and the layer gathers it). A device's kind cannot
    change: the core keeps the last device that passed, and passes it again
    unread."""

    device: tuple
    kind: str
    answer: str


class Devices(NamedTuple):
    """How a library's device objects name a DLPack device."""

    module: str | None  # the module their type comes from (a prefix); None: any with the marks
    marks: tuple        # attributes every such object has
    kind: str | None    # the attribute naming its kind of device; None: every one is of kinds[None]
    kinds: dict         # kind (lower case) -> "cpu", "gpu", "rocm" or another DLDeviceType name in lower
                        # case ("tpu"); other kinds have no DLPack type
    index: tuple        # attributes holding a GPU's index, the first that is not None (else 0)
    rocm: Callable | None  # (device) -> whether its "gpu" is an AMD one; None: CuPy's build says
    says: str           # how a message names a kind it does not know
    name: str | None = None  # the name of their type; None: any type with the marks
    # The keyword by which the library's own from_dlpack takes such an object
    # and puts the import there (JAX's device=): convert to a device the
    # layer cannot reach (a TPU) hands the data over where it is, and the
    # library places it. None: the layer places it, or no device is reached.
    places: str | None = None


class Probe(NamedTuple):
    """A question asked of a library where it runs: ``path``, an attribute
    path from its module, called with ``args``. A true answer (a non-empty
    list of devices) is yes; a false one, or any exception, is no (JAX's
    ``devices("gpu")`` raises RuntimeError where it has no GPU backend)."""

    path: str
    args: tuple = ()


class Chunks(NamedTuple):
    """A library's lazy arrays of chunks: ``map`` maps a function over the
    chunks, lazily (``f, dtype=, meta=``: the chunks' type is ``meta``'s),
    and ``compute`` makes the whole array; its chunks are arrays of the
    libraries ``holds``. ``convert`` of such an array to one of those maps
    ``convert`` over the chunks, and converts the computed array for any
    other library."""

    map: str
    compute: str
    holds: tuple


class Fault(NamedTuple):
    """Something a library gets wrong, as a consumer or a producer, in a
    range of its versions: ``since`` the first release known to have it
    (None: every earlier one, as far as is known), ``until`` the first
    without it (None: no release is known to be fixed); ``seen`` the
    versions it was measured in, ``see`` where it is recorded upstream.
    ``unless``: a setting of the library that turns the fault off while it
    is true, an attribute path from its module read at each exchange
    (JAX's ``config.jax_enable_x64``; a function there is called: Paddle's
    ``is_compiled_with_cuda``)."""

    id: str
    since: tuple | None = None
    until: tuple | None = None
    seen: tuple = ()
    see: str = ""
    unless: str = ""


#: What each fault is, as ``gpu-dlpack doctor`` measures it: id -> (what the
#: consumer does, whom it concerns: "from_dlpack" for its importer, "arrays"
#: for the library's arrays, whoever made them).
FAULTS = {
    "read-only-ignored": (
        "imports READ_ONLY data as a writeable array: a write through it changes the source", "from_dlpack"),
    "legacy-only": (
        "asks for legacy capsules only (no max_version), which cannot say that data is read-only",
        "from_dlpack"),
    "always-writeable": ("its arrays cannot be read-only", "arrays"),
    "read-only-unknown": (
        "is not in gpu_dlpack's table: whether it honours READ_ONLY is not known", "from_dlpack"),
    "copy-shares": ("returns memory shared with the producer for copy=True", "from_dlpack"),
    "negative-strides": (
        "cannot import an array with a negative stride (torch 2.12 and 2.13 abort the process: "
        "SIGABRT; fixed builds raise RuntimeError)", "from_dlpack"),
    "non-compact-strides": (
        "imports only compact layouts (a transposition of a dense buffer): steps and negative "
        "strides raise", "from_dlpack"),
    "unaligned-copies": (
        "copies host data not aligned to 64 bytes (even for copy=False in some versions, which others "
        "refuse)", "from_dlpack"),
    "c-order-only": (
        "takes a transposed layout (Fortran order) as if only C order existed: it reads it in place "
        "with the values in the wrong places, with no error (or, in some versions, refuses it)",
        "from_dlpack"),
    "narrows-64-bit": (
        "imports 64-bit types narrowed to 32 bits, by a copy and silently (int64 as int32: "
        "2**40 becomes 0; float64 as float32; complex128 as complex64)", "from_dlpack"),
    "gpu-import-crashes": (
        "crashes the process importing from a producer whose device is a GPU, in a build without "
        "one (SIGSEGV; or frees the tensor it refuses, which its producer frees again), where it should raise",
        "from_dlpack"),
    "narrows-float64": (
        "imports float64 as float32 and complex128 as complex64, by a copy and silently "
        "(1e300 becomes inf), whatever any setting says", "from_dlpack"),
    "negative-strides-anywhere": (
        "refuses any negative stride, even on an axis of length 1 or in an empty array, where no "
        "element is reached through it", "from_dlpack"),
    "reads-padded-subbyte-packed": (
        "imports padded sub-byte data (one value a byte, as IS_SUBBYTE_TYPE_PADDED says) in place as "
        "packed, two values a byte: more than one element reads wrong, silently", "from_dlpack"),
    "nested-import-deadlock": (
        "deadlocks the process freeing a tensor it imported from one of its own tensors that it had "
        "itself imported by DLPack, once that source is freed first (its deleters' lock taken twice)",
        "from_dlpack"),
}

#: Producer faults whose arrays are read-only, whatever their capsules say.
READ_ONLY_ARRAYS = frozenset({"immutable-unflagged", "read-only-legacy-export"})


class View(NamedTuple):
    """A lazy view of a producer's arrays that its capsules do not carry:
    ``test()`` true, the values are those of ``resolve()`` (a copy), and
    only for arrays of the DLPack dtype kinds ``kinds`` (None: all). Both
    are methods of the row's array type, called as its own on its
    subclasses' arrays too (``ExportFacts.readers``)."""

    test: str
    resolve: str
    what: str
    kinds: tuple | None = None


#: The views the producer faults of that name leave unresolved.
VIEWS = {
    "negative-bit-unresolved": View("is_neg", "resolve_neg", "the negative bit"),
    "conjugate-bit-refused": View("is_conj", "resolve_conj", "the conjugate bit", ("complex",)),
}


class Hook(NamedTuple):
    """How a subclass of a row's array type may run code of its own on
    every operation: the ``method`` it overrides, the names (qualified) of
    the implementations of it that keep the subclass a plain array
    (``plain``), and where the library's switch is (``off``, a context
    manager, by its path in the library) under which the array type's own
    methods run on a subclass's instance without it."""

    method: str
    plain: tuple
    off: str | None = None


#: The alignment the "unaligned-copies" consumers import in place.
ALIGNMENT = 64


class Peer(NamedTuple):
    name: str
    module: str
    array: str | None = None
    array_module: str | None = None
    on_host: str | None = None
    host_test: HostTest | None = None
    numpy_reads: tuple = ()
    exchange: tuple | None = None
    devices: Devices | None = None
    consumer: tuple = ("from_dlpack",)
    asks: tuple | None = None
    capsule_only: bool = False
    submodules: tuple = ()
    lands: str | None = None
    faults: tuple = ()
    export_faults: tuple = ()
    chunks: Chunks | None = None
    # A subclass with a hook of its own (``Hook``: torch's ReadOnlyTensorWrapper
    # refuses every attribute but DLPack's) is no array of this row: it is
    # read through the DLPack protocol, but for the views its memory holds
    # (``export_faults``), which the row's own methods read and resolve with
    # the hook off, never running the subclass's code.
    subclass_hook: Hook | None = None
    # Where gpu_dlpack lands the data (``lands``): its consumer is called on
    # the array landed (Numba's as_cuda_array over a CuPy array), not skipped.
    wraps_landed: bool = False
    # The method by which one of its own arrays is handed to it without an
    # exchange (Paddle's detach: "nested-import-deadlock").
    itself: str | None = None
    # Whether its build, on this machine, holds memory of a GPU: convert
    # asks before handing it GPU data, which a build without one refuses
    # with an error of its own (torch's AssertionError, JAX's "Unknown
    # backend cuda"). None: not known, and the consumer is called.
    holds_gpu: Probe | None = None


def _torch_hip(device) -> bool:
    import torch  # loaded already: the device is one of its objects

    return bool(getattr(torch.version, "hip", None))


def _jax_rocm(device) -> bool:
    return "rocm" in str(getattr(getattr(device, "client", None), "platform_version", "")).lower()


# What each fault below is, and what the layer does of it: the tables of
# docs/guide/libraries.md (tests hold them to these rows).
PEERS = (
    Peer(
        "numpy", "numpy", lands="host",
        faults=(Fault("legacy-only", until=(2, 1), seen=("1.26.4",)),),
        export_faults=(Fault("legacy-only-export", until=(2, 1), seen=("1.26.4",)),),
    ),
    Peer(
        "torch", "torch", array="Tensor",
        # A tensor's __dlpack_device__ costs over 1 us; is_cpu 40 ns. CPU and
        # pinned tensors (CUDA_HOST) are both host memory.
        on_host="is_cpu",
        # torch.from_dlpack asks for (1, 0) (a legacy capsule before 2.9)
        # and takes a capsule itself: convert hands it the rules' capsule.
        asks=(1, 0),
        # A CPU build asserts "Torch not compiled with CUDA enabled" on GPU data.
        holds_gpu=Probe("cuda.is_available"),
        numpy_reads=(
            "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
            "complex64", "complex128", "uint16", "uint32", "uint64",
        ),
        # The exchange API exports what torch's __dlpack__ refuses (tensors
        # that require grad) and its views unresolved: each of the views
        # below (export_faults) is a guard too, is_conj for complex tensors
        # only (the bit is theirs).
        exchange=("requires_grad",),
        devices=Devices(
            "torch", ("type",), "type", {"cpu": "cpu", "cuda": "gpu"}, ("index",), _torch_hip,
            "torch device type",
        ),
        # nn.Parameter disables the hook (plain); 2.14's ReadOnlyTensorWrapper
        # refuses every operation but __dlpack__ and __dlpack_device__.
        subclass_hook=Hook(
            "__torch_function__", ("Tensor.__torch_function__", "_disabled_torch_function_impl"),
            "_C.DisableTorchFunctionSubclass",
        ),
        faults=(
            Fault("legacy-only", until=(2, 9)),
            Fault("read-only-ignored", since=(2, 9), seen=("2.13.0", "2.14.1", "2.15.0")),
            # Tensors have no negative strides: 2.12.1 and 2.13.0 abort on
            # them (a noexcept function throws), 2.14.1 and 2.15.0 raise RuntimeError.
            Fault("negative-strides", seen=("2.12.1", "2.13.0", "2.14.1", "2.15.0"), see="pytorch/pytorch#188023"),
        ),
        export_faults=(
            Fault("negative-bit-unresolved", seen=("2.13.0", "2.14.1", "2.15.0")),
            Fault("conjugate-bit-refused", seen=("2.13.0", "2.14.1", "2.15.0")),
        ),
    ),
    Peer(
        "cupy", "cupy", lands="gpu", faults=(Fault("always-writeable"),),
        devices=Devices("cupy", ("id",), None, {None: "gpu"}, ("id",), None, "CuPy device"),
    ),
    # JAX devices are read by their shape (jaxlib's types move between modules).
    Peer(
        "jax", "jax", array="ArrayImpl", array_module="jaxlib",
        # Its __dlpack_device__ is Python code (900 ns, half of __dlpack__). Only a
        # one-device array's sharding has _device (a deleted one's too; 25 ns each);
        # the core reads its platform once (platform() of a deleted array ends the
        # process, _arrays makes new arrays).
        host_test=HostTest(("_sharding", "_device"), "platform", "cpu"),
        devices=Devices(
            None, ("platform", "id"), "platform", {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "rocm", "tpu": "tpu"},
            ("local_hardware_id", "id"), _jax_rocm, "JAX platform", places="device",
        ),
        consumer=("dlpack.from_dlpack",), submodules=("jax.dlpack",),
        # A jaxlib without a GPU backend (or JAX_PLATFORMS without one)
        # raises "Unknown backend cuda" on GPU data.
        holds_gpu=Probe("devices", ("gpu",)),
        # Measured on each release from 0.6.2 (the newest for CPython 3.10)
        # to 0.12.1 (docs/internals/faults.md, "JAX by release").
        export_faults=(
            Fault("legacy-only-export", until=(0, 12), seen=("0.10.2",)),
            Fault("immutable-unflagged", seen=("0.10.2", "0.12.0.1", "0.12.1")),
        ),
        faults=(
            Fault("legacy-only", until=(0, 12), seen=("0.6.2", "0.10.2", "0.11.2")),
            # With jax_enable_x64 off (its default), dlpack_managed_tensor_to_buffer
            # canonicalizes the dtype by a copy.
            Fault("narrows-64-bit", seen=("0.10.2",), unless="config.jax_enable_x64"),
            # copy=True reaches dlpack_managed_tensor_to_buffer, which shares
            # host memory anyway (0.8.0 still copied; 0.12.1 copies again).
            Fault("copy-shares", since=(0, 9), until=(0, 12, 1), seen=("0.9.0", "0.10.2", "0.12.0.1")),
            Fault("non-compact-strides", seen=("0.6.2", "0.10.2", "0.12.0.1", "0.12.1")),
            Fault("unaligned-copies", seen=("0.6.2", "0.10.2", "0.12.0.1", "0.12.1")),
            # 0.6.2 and 0.7.0 read a transposed aligned array in place as C
            # order (wrong values), 0.7.2 refuses it; 0.8.0 reads it right.
            Fault("c-order-only", until=(0, 8), seen=("0.6.2", "0.7.0", "0.7.2")),
            # float4_e2m1fn data aligned to 64 bytes (it refuses the other
            # sub-byte codes; before 0.12 it asked for DLPack 1.0, which has none).
            Fault("reads-padded-subbyte-packed", since=(0, 12), seen=("0.12.1",)),
        ),
    ),
    # Numba's device arrays take the CUDA Array Interface, and cannot be
    # read-only (numba.cuda.as_cuda_array ignores its readonly flag).
    Peer(
        "numba", "numba", consumer=("cuda.as_cuda_array",), submodules=("numba.cuda",), lands="gpu", wraps_landed=True,
        faults=(Fault("always-writeable", seen=("numba-cuda 0.30.4",)),),
    ),
    Peer(
        "paddle", "paddle", array="Tensor", itself="detach",
        # Like torch's, its C exchange API exports tensors that require grad,
        # which its __dlpack__ refuses (requires_grad: not stop_gradient).
        exchange=("requires_grad",),
        faults=(
            Fault("read-only-ignored", seen=("3.3.1",)),
            Fault("negative-strides", seen=("3.3.1",)),
            Fault("gpu-import-crashes", seen=("3.3.1",), unless="is_compiled_with_cuda"),
            # PaddleDeleterManager::DeleterBridge, re-entered: convert hands
            # a Paddle tensor to Paddle as a tensor, never by an exchange.
            Fault("nested-import-deadlock", seen=("3.3.1",)),
        ),
        export_faults=(
            Fault("device-id-none", seen=("3.3.1",)),
        ),
    ),
    # TensorFlow imports through tf.experimental.dlpack.from_dlpack(capsule)
    # only, and legacy capsules only; its EagerTensors export legacy ones.
    Peer(
        "tensorflow", "tensorflow", array="EagerTensor", array_module="tensorflow",
        consumer=("experimental.dlpack.from_dlpack",), capsule_only=True,
        faults=(
            Fault("legacy-only", seen=("2.21.0",)),
            Fault("non-compact-strides", seen=("2.21.0",)),
            Fault("c-order-only", seen=("2.21.0",)),
            Fault("gpu-import-crashes", seen=("2.21.0",), unless="test.is_built_with_cuda"),
        ),
        export_faults=(
            Fault("legacy-only-export", seen=("2.21.0",)),
            Fault("immutable-unflagged", seen=("2.21.0",)),
        ),
    ),
    # MLX imports with mlx.core.from_dlpack, always by a copy (copy=False
    # raises ValueError).
    Peer(
        "mlx", "mlx", consumer=("core.from_dlpack",), submodules=("mlx.core",),
        faults=(
            Fault("negative-strides", seen=("0.32.4",)),  # ValueError
            Fault("negative-strides-anywhere", seen=("0.32.4",)),
            Fault("narrows-float64", seen=("0.32.4",)),
            Fault("legacy-only", seen=("0.32.4",)),
            Fault("unaligned-copies", seen=("0.32.4",)),
        ),
        export_faults=(Fault("legacy-only-export", seen=("0.32.4",)),),
    ),
    # pyarrow is a producer only (it imports no DLPack): its arrays of
    # values without nulls (one subclass of pyarrow.Array per type) export
    # host memory that is immutable, flagged READ_ONLY in versioned capsules
    # only; __dlpack__ takes stream=None alone (-1: NotImplementedError).
    Peer(
        "pyarrow", "pyarrow", array="Array", array_module="pyarrow", consumer=(),
        export_faults=(
            Fault("read-only-legacy-export", seen=("25.0.1", "26.0.1")),
            Fault("legacy-only-export", until=(26, 0, 1), seen=("25.0.1",)),
        ),
    ),
    # dask arrays are lazy graphs of NumPy or CuPy chunks: no DLPack of their
    # own, in either role.
    Peer(
        "dask", "dask", array="Array", array_module="dask.array", consumer=(), submodules=("dask.array",),
        chunks=Chunks("map_blocks", "compute", ("numpy", "cupy")),
    ),
    # tvm-ffi imports with tvm_ffi.from_dlpack, asking __dlpack__() with no
    # keyword (legacy capsules); a READ_ONLY versioned capsule handed to it
    # comes back out writeable (np.from_dlpack of its Tensor).
    Peer(
        "tvm_ffi", "tvm_ffi", array="Tensor", array_module="tvm_ffi",
        faults=(Fault("legacy-only", seen=("0.1.15.post2",)), Fault("read-only-ignored", seen=("0.1.15.post2",))),
    ),
    # array-api-strict's devices ("CPU_DEVICE", "device1", "device2") all
    # hold host memory: its arrays say (1, 0) in __dlpack_device__.
    Peer(
        "array_api_strict", "array_api_strict",
        devices=Devices("array_api_strict", (), None, {None: "cpu"}, (), None, "array-api-strict device", "Device"),
    ),
)


def of_array_type(t) -> Peer | None:
    """The row of the library whose array type ``t`` is, or of a subclass
    of it (``torch.nn.Parameter``; pyarrow's arrays, one class per type of
    value), or None. Read once per type by each caller, which keeps it."""
    peer, base = _row_of(t)
    return peer if base is t or (peer is not None and _plain_subclass(t, peer.subclass_hook)) else None


def _row_of(t) -> tuple:
    """``(row, array type)`` of the library whose array type ``t`` is or
    derives from, whatever hook of its own ``t`` has; ``(None, None)``."""
    for c in getattr(t, "__mro__", (t,)):
        if c is object:
            break
        module, name = getattr(c, "__module__", None), getattr(c, "__qualname__", None)
        for peer in PEERS:
            if peer.array is None or peer.array != name:
                continue
            home = peer.array_module
            if module == peer.module or (home is not None and module is not None and (
                module == home or module.startswith(home + ".")
            )):
                return peer, c
    return None, None


def _plain_subclass(t, hook) -> bool:
    """Whether subclass ``t`` keeps its row's hook (``Peer.subclass_hook``)
    plain: every operation is its base type's."""
    if hook is None:
        return True
    method = getattr(t, hook.method, None)
    method = getattr(method, "__func__", method)
    return getattr(method, "__qualname__", None) in hook.plain


def chunks_of(t) -> Chunks | None:
    """The ``Chunks`` of type ``t``'s library, where its arrays are lazy
    arrays of chunks; else None."""
    return profile(t).chunks


def export_faults_of(peer: Peer | None, version: str | None) -> frozenset:
    """The ids of ``peer``'s producer faults that its ``version`` has."""
    return frozenset() if peer is None else _in_range(peer.export_faults, version)


class ExportFacts(NamedTuple):
    """What the layer corrects in every export and import of a producer
    type's arrays, for the installed version of its library."""

    read_only: bool  # its arrays are read-only, whatever its capsules say
    views: tuple     # View rows: resolved (a copy) before any export
    device_id_none: bool  # __dlpack_device__ may answer (kDLCPU, None)
    # One (test, resolve) per view: the row's array type's own methods,
    # called on an array (x) -> result, under the library's switch of the
    # hook where its type has one of its own: how ``views`` are read and
    # resolved, the same way for the array type and every subclass.
    readers: tuple = ()


NO_EXPORT_FAULTS = ExportFacts(False, (), False)


class Profile(NamedTuple):
    """What the layer reads of a producer type from its library's row, once
    per type (``profile``), and passes down: the one cache of such facts."""

    peer: Peer | None          # its row (``of_array_type``)
    chunks: Chunks | None      # how to take its arrays, lazy arrays of chunks (dask)
    export: ExportFacts        # what every export and import of its arrays corrects
    cpu_test: Callable | None  # (x) -> its ``HostTest``: memory of the CPU, on one device
    host_test: Callable | None  # (x) -> its ``on_host`` attribute (host memory), else ``cpu_test``
    numpy_reads: frozenset | None  # the dtypes numpy.from_dlpack reads exactly, of its arrays


_PROFILES: dict = {}


def profile(t) -> Profile:
    """The ``Profile`` of producer type ``t``, read once per type from its
    row and the version of its library (loaded already: ``t`` is one of its
    types). ``forget`` drops them all."""
    found = _PROFILES.get(t)
    if found is None:
        found = _profile(t)
        if len(_PROFILES) < 1024:
            _PROFILES[t] = found
    return found


#: What convert reads of each library it hands arrays to (its row, its
#: version's faults: ``_convert.consumer_of``), kept here beside the
#: profiles so that ``forget`` drops both.
CONSUMERS: dict = {}


def forget() -> None:
    """Drop every type's ``Profile`` and every consumer convert read (after a
    change to ``PEERS``)."""
    _PROFILES.clear()
    CONSUMERS.clear()


def _profile(t) -> Profile:
    peer, base = _row_of(t)
    if peer is None:
        return Profile(None, None, NO_EXPORT_FAULTS, None, None, None)
    plain = base is t or _plain_subclass(t, peer.subclass_hook)
    library = sys.modules.get(peer.module)
    facts = NO_EXPORT_FAULTS
    if peer.export_faults:
        version = getattr(library, "__version__", None)
        found = export_faults_of(peer, None if version is None else str(version))
        # A view whose methods this version lacks is one it cannot hold.
        views = tuple(VIEWS[f] for f in VIEWS if f in found and hasattr(base, VIEWS[f].test)
                      and hasattr(base, VIEWS[f].resolve))
        # A library without the switch (off not found) runs the hook: the
        # subclass then answers for itself, as any producer does.
        hook = peer.subclass_hook
        off = None if plain or hook is None or hook.off is None else _attribute(library, hook.off)
        readers = tuple((_own(base, v.test, off), _own(base, v.resolve, off)) for v in views)
        facts = ExportFacts(bool(found & READ_ONLY_ARRAYS), views, "device-id-none" in found, readers)
    if not plain:
        # Its hook runs code of its own on every attribute: of the row, only
        # the producer faults hold for it (the facts above: of its memory,
        # and of the library's exporter its DLPack reaches); the rest is
        # read through DLPack, as of any producer.
        return Profile(None, None, facts, None, None, None)
    cpu_test = None if peer.host_test is None else functools.partial(_passes, peer.host_test)
    host_test = cpu_test if peer.on_host is None else operator.attrgetter(peer.on_host)
    reads = None
    if peer.numpy_reads and library is not None:
        reads = frozenset(getattr(library, n) for n in peer.numpy_reads if hasattr(library, n))
    return Profile(peer, peer.chunks, facts, cpu_test, host_test, reads)


def _own(base, name, off) -> Callable:
    """``base``'s own method ``name``, as (x) -> result: called under the
    library's switch ``off`` of its subclasses' hook, where the type has one
    of its own, so that a subclass's code never runs (torch's function
    modes, the user's and not the subclass's, still do)."""
    method = getattr(base, name)
    return method if off is None else functools.partial(_switched_off, off, method)


def _switched_off(off, method, x):
    with off():
        return method(x)


def _attribute(library, path):
    """The object at dotted ``path`` in module ``library``, or None."""
    try:
        return operator.attrgetter(path)(library)
    except AttributeError:
        return None


def _passes(test, x) -> bool:
    """Whether ``x`` passes its library's host test (``HostTest``); False
    when the test cannot say (``__dlpack_device__`` is then asked)."""
    try:
        device = x
        for name in test.device:
            device = getattr(device, name)
        return getattr(device, test.kind) == test.answer
    except Exception:
        return False


def export_facts(t) -> ExportFacts:
    """The export facts of producer type ``t`` (its ``Profile``'s)."""
    return profile(t).export


def owns_type(t) -> bool:
    """Whether type ``t`` is one of a peer library's own (its module is
    under a peer's, ``jaxlib`` under ``jax``'s): its methods never call
    back into gpu_dlpack."""
    module = getattr(t, "__module__", None) or ""
    return any(module.startswith(peer.module) for peer in PEERS)


def device_form(spec) -> Devices | None:
    """How to read ``spec`` as the device object of a library, or None."""
    module = type(spec).__module__ or ""
    for peer in PEERS:
        form = peer.devices
        if form is not None and (form.module is None or module.startswith(form.module)) and (
            form.name is None or type(spec).__name__ == form.name
        ) and all(hasattr(spec, mark) for mark in form.marks):
            return form
    return None


def by_name(name: str) -> Peer | None:
    """The row of the library whose top-level module is ``name``, or None."""
    top = name.partition(".")[0]
    for peer in PEERS:
        if peer.module == top or peer.name == top:
            return peer
    return None


def named_callable(root, paths) -> tuple:
    """``(obj, path)``: the first of the dotted ``paths`` (a row's
    ``consumer``) that names a callable under ``root``; ``(None, None)``
    where none does."""
    for path in paths:
        obj = _attribute(root, path)
        if callable(obj):
            return obj, path
    return None, None


def release(version: str | None) -> tuple:
    """The release numbers of a version string: ``"2.13.0+cpu"`` -> ``(2, 13, 0)``;
    () when there are none. (Only release numbers are compared: a table
    range needs no more, and gpu_dlpack depends on NumPy alone.)"""
    found = _RELEASE.match(version or "")  # "0rc1", "0+cpu": the release ends at the first non-digit
    return () if found is None else tuple(int(n) for n in found[0].split("."))


_RELEASE = re.compile(r"\d+(?:\.\d+)*")


def active_faults(peer: Peer | None, version: str | None) -> frozenset:
    """The ids of ``peer``'s faults that its ``version`` has. A library
    without a row is not known to honour READ_ONLY ("read-only-unknown");
    an unreadable version has every fault of its row."""
    if peer is None:
        return frozenset({"read-only-unknown"})
    return _in_range(peer.faults, version)


def legacy_askers() -> tuple:
    """The names of the loaded libraries (already imported: none is imported
    here) whose ``from_dlpack`` asks for legacy capsules only, at their
    installed version: a consumer that makes the request itself, so that
    its caller cannot ask for a versioned capsule instead."""
    found = []
    for peer in PEERS:
        module = sys.modules.get(peer.module)
        if module is not None and "legacy-only" in active_faults(peer, getattr(module, "__version__", None)):
            found.append(peer.name)
    return tuple(found)


def _in_range(faults, version) -> frozenset:
    have = release(version)
    return frozenset(fault.id for fault in faults if not have or (
        (fault.since is None or have >= tuple(fault.since)) and (fault.until is None or have < tuple(fault.until))
    ))
