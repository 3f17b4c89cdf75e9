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
- ``host_test``: how an array is cheaply known to hold host memory where
  no attribute says it: an attribute whose ``len()`` is 1 for an array on
  one device (read first), a method called without arguments, and its
  answer for host memory (``_devices.known_on_host``). The compiled core reads it too, and
  asks such an array's ``__dlpack__`` itself for the plain cases
  (``_wiring``);
- ``numpy_reads``: its dtypes whose host capsules ``numpy.from_dlpack``
  reads exactly as the rules say (well-formed, versioned, honest flags):
  the common import of such an array goes straight to NumPy (``_import``);
- ``exchange``: its type's DLPack C exchange API is read by the compiled
  core, with the guards its own ``__dlpack__`` checks and the exchange
  skips (``_wiring``); other producers keep their ``__dlpack__``;
- ``devices``: how its device objects name a DLPack device
  (``_devices.Device``).

What a library gets wrong, by version (as a consumer: torch ignoring
READ_ONLY, say), belongs in its row the same way: one more field, of
(versions, the rule it breaks, the remedy) rows, found by the same lookups.
"""

from __future__ import annotations

from typing import Callable, NamedTuple


class Exchange(NamedTuple):
    """Guards of a producer's C exchange API: each must be false for the
    plain exchange; else its ``__dlpack__`` is asked, and says what it refuses."""

    attrs: tuple        # attributes of the array
    methods: tuple      # methods of the array, called without arguments...
    method_kinds: tuple  # ...for arrays of these DLPack dtype kinds only (``_dtypes.CODE_NAMES``)


class HostTest(NamedTuple):
    """An array holds host memory, on one device, when ``len()`` of its
    ``pieces`` attribute is 1 and then ``method()`` answers ``answer``.
    ``deleted()`` answers True once its memory is gone: the compiled core's
    import asks it before ``method()`` in place of the pieces (an array
    over several devices refuses the export that follows, and the general
    path then gathers it)."""

    method: str
    answer: str
    pieces: str
    deleted: str


class Devices(NamedTuple):
    """How a library's device objects name a DLPack device."""

    module: str | None  # the module their type comes from (a prefix); None: any with the marks
    marks: tuple        # attributes every such object has
    kind: str | None    # the attribute naming its kind of device; None: always a GPU
    kinds: dict         # kind (lower case) -> "cpu", "gpu" or "rocm"; other kinds have no DLPack type
    index: tuple        # attributes holding a GPU's index, the first that is not None (else 0)
    rocm: Callable | None  # (device) -> whether its "gpu" is an AMD one; None: CuPy's build says
    says: str           # how a message names a kind it does not know


class Peer(NamedTuple):
    name: str
    module: str
    array: str | None = None
    array_module: str | None = None
    on_host: str | None = None
    host_test: HostTest | None = None
    numpy_reads: tuple = ()
    exchange: Exchange | None = None
    devices: Devices | None = None


def _torch_hip(device) -> bool:
    import torch  # loaded already: the device is one of its objects

    return bool(getattr(torch.version, "hip", None))


def _jax_rocm(device) -> bool:
    return "rocm" in str(getattr(getattr(device, "client", None), "platform_version", "")).lower()


PEERS = (
    Peer(
        "torch", "torch", array="Tensor",
        # A tensor's __dlpack_device__ costs over 1 us; is_cpu 40 ns. CPU and
        # pinned tensors (CUDA_HOST) are both host memory.
        on_host="is_cpu",
        numpy_reads=(
            "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
            "complex64", "complex128", "uint16", "uint32", "uint64",
        ),
        # The exchange API exports what torch's __dlpack__ refuses: tensors
        # that require grad, and conjugate views (unresolved). is_conj is
        # asked of complex tensors only (the bit is theirs).
        exchange=Exchange(("requires_grad",), ("is_conj",), ("complex",)),
        devices=Devices(
            "torch", ("type",), "type", {"cpu": "cpu", "cuda": "gpu"}, ("index",), _torch_hip,
            "torch device type",
        ),
    ),
    Peer("cupy", "cupy", devices=Devices("cupy", ("id",), None, {}, ("id",), None, "CuPy device")),
    # JAX devices are read by their shape (jaxlib's types move between modules).
    Peer(
        "jax", "jax", array="ArrayImpl", array_module="jaxlib",
        # Its __dlpack_device__ is Python code (900 ns, half of __dlpack__):
        # it reads the per-device _arrays (one, or it refuses; None once the
        # array is deleted) and platform() (C, 30 ns), as this test does;
        # _arrays makes a list of new arrays (50 ns), is_deleted() is C.
        host_test=HostTest("platform", "cpu", "_arrays", "is_deleted"),
        devices=Devices(
            None, ("platform", "id"), "platform", {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "rocm"},
            ("local_hardware_id", "id"), _jax_rocm, "JAX platform",
        ),
    ),
)


def of_array_type(t) -> Peer | None:
    """The row of the library whose array type ``t`` is, or None."""
    module, name = getattr(t, "__module__", None), getattr(t, "__qualname__", None)
    for peer in PEERS:
        if peer.array is None or peer.array != name:
            continue
        home = peer.array_module
        if module == peer.module or (home is not None and module is not None and (
            module == home or module.startswith(home + ".")
        )):
            return peer
    return None


def device_form(spec) -> Devices | None:
    """How to read ``spec`` as the device object of a library, or None."""
    module = type(spec).__module__ or ""
    for peer in PEERS:
        form = peer.devices
        if form is not None and (form.module is None or module.startswith(form.module)) and all(
            hasattr(spec, mark) for mark in form.marks
        ):
            return form
    return None
