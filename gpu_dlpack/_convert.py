"""``convert``: any array to any library's array in one call, the exchange
done right for that consumer.

Each consumer is read once (its module, version, ``from_dlpack`` and active
faults, from its row in ``_peers``) and kept. It imports from a ``Served``
producer: ``wrap(x)`` asked for a versioned capsule with the caller's
device, ``copy`` and stream, then what ``_faults`` decides for the capsule's
flags and layout done. The layer makes every copy itself (flagged
IS_COPIED), so a consumer whose ``copy=True`` shares memory (JAX) is never
asked for one. NumPy and CuPy are landed in by ``gpu_dlpack.from_dlpack``
itself, Numba over CuPy. A plain NumPy array asked for nothing goes
straight through; read-only host data (a read-only NumPy array, a JAX
array) for a consumer that would hold it writeable goes as NumPy's copy of
it, flagged IS_COPIED, the copy the general path makes.

Floor: the faces, beside ``_wiring`` and ``_explain``: it stands on both
directions.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import math
import operator
import sys
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Literal, NamedTuple, TypedDict, overload

import numpy as np

from . import _backends, _capsule, _dtypes, _errors, _faults, _peers, _rules, _streams, _versions
from . import _compiled
from ._devices import CPU, DEVICE_ACCESSIBLE, Device, DLDeviceType, cupy_is_rocm, known_on_host, types
from ._export import export, wrap
from ._import import from_dlpack
from ._typing import DeviceLike, StreamLike

if TYPE_CHECKING:
    import array_api_strict._array_object
    import cupy
    import jax
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    import torch
    from typing_extensions import Unpack

_ndarray = np.ndarray
_VERSION = _versions.DLPACK_VERSION
_GPU_TYPES = types(array="cupy")

OnReadOnly = Literal["copy", "share", "refuse"]
#: The libraries ``convert`` knows by name (its type checkers' view of ``to``:
#: any other importable module is passed as the module itself).
Library = Literal["numpy", "torch", "jax", "cupy", "array_api_strict", "numba"]


class Consumer(NamedTuple):
    """A library as ``convert`` calls it, read once."""

    name: str
    module: ModuleType
    version: str | None
    call: Callable           # its from_dlpack (Numba: as_cuda_array)
    lands: str | None        # "host", "gpu": gpu_dlpack lands the data (``_peers``)
    faults: frozenset        # the faults that matter, for the installed version
    plain: Callable          # (ndarray) -> whether it goes straight through
    switches: tuple = ()     # (fault id, getter, setting): a fault off while getter() is true
    capsules: bool = False   # straight through as the rules' capsule, not a wrapper
    asks: tuple | None = None  # ...asked for this max_version, as the consumer asks
    capsule_only: bool = False  # it takes a capsule only, in every case (TensorFlow)
    wraps_landed: bool = False  # ``call`` takes the array gpu_dlpack lands (Numba)
    itself: str | None = None   # the method handing it one of its own arrays (``_peers``)
    holds_gpu: Callable | None = None  # () -> whether it holds GPU memory here (its row's probe)
    copies_read_only: bool = False  # read-only data is handed to it as a copy (its faults, _faults.READ_ONLY)

    def active(self) -> frozenset:
        """Its faults now: those a setting turns off left out (JAX's x64)."""
        if not self.switches:
            return self.faults
        off = set()
        for fault, getter, _setting in self.switches:
            try:
                if getter():
                    off.add(fault)
            except Exception:  # a setting that cannot be read leaves the fault on
                pass
        return self.faults - off if off else self.faults

    def settings(self) -> dict:
        return {fault: setting for fault, _getter, setting in self.switches}


@dataclass(frozen=True)
class Conversion:
    """What ``convert(..., report=True)`` did: the result and how it got there.

    ``str()`` of it is a line per step.

    Attributes
    ----------
    array : object
        The result, an array of the library asked for.
    library : str
        The consumer's name (``"torch"``).
    version : str or None
        The consumer's version, where it has one.
    copied : bool or None
        Whether the result holds memory of its own (None: not known).
    copied_by : str or None
        Who copied: ``"gpu_dlpack"`` or the consumer's name (JAX copies
        unaligned host data itself); None when nothing was copied.
    shared_readonly : bool
        Read-only data handed over writeable (``on_readonly="share"``;
        ``shared_read_only`` is its deprecated alias).
    faults : tuple of str
        The consumer's faults the layer acted on (``"read-only-ignored"``...).
    reasons : tuple of str
        What was done and why, a sentence each.

    Examples
    --------
    >>> import numpy as np, gpu_dlpack
    >>> done = gpu_dlpack.convert(np.arange(3.0), "numpy", report=True)
    >>> done.library, done.copied, done.faults
    ('numpy', False, ())
    """

    array: Any
    library: str
    version: str | None
    copied: bool | None      # the result holds memory of its own (None: unknown)
    copied_by: str | None    # "gpu_dlpack" or the consumer's name, when copied
    shared_readonly: bool    # read-only data handed over writeable (on_readonly='share')
    faults: tuple[str, ...]  # the consumer's faults the layer acted on
    reasons: tuple[str, ...]  # what was done and why, a sentence each

    @property
    def shared_read_only(self) -> bool:
        """Deprecated: `shared_readonly`."""
        warnings.warn(_errors.renamed("Conversion", "shared_read_only", "shared_readonly"), stacklevel=2)
        return self.shared_readonly

    def __str__(self) -> str:
        how = "zero-copy" if self.copied is False else (
            f"copied by {self.copied_by}" if self.copied else "copy unknown")
        lines = [f"{self.library} {self.version or ''}".rstrip() + f": {how}"]
        lines += [f"  {r}" for r in self.reasons]
        return "\n".join(lines)


# -- the consumers -------------------------------------------------------------

_consumers = _peers.CONSUMERS  # to -> its Consumer, once read (_wiring.forget() drops them)


def consumer_of(to) -> Consumer:
    """The consumer ``to`` names (a module or a module's name), read once."""
    try:
        found = _consumers.get(to)
    except TypeError:  # unhashable
        raise _errors.bad_consumer(to) from None
    if found is None:
        found = _consumers[to] = _read_consumer(to)
    return found


def _read_consumer(to) -> Consumer:
    if isinstance(to, str):
        name = to
        try:
            module = importlib.import_module(to)
        except (ImportError, ValueError) as exc:  # ValueError: an empty name
            raise _errors.consumer_not_importable(to, exc, _meant(to)) from None
    elif isinstance(to, ModuleType):
        module, name = to, to.__name__
    else:
        raise _errors.bad_consumer(to)
    peer = _peers.by_name(name)
    version = _version_of(name.partition(".")[0], module)
    call = _from_dlpack_of(module, name, peer)
    faults = _faults.for_landing(_peers.active_faults(peer, version), peer.lands if peer else None)
    if peer is None:
        return Consumer(name, module, version, call, None, faults, _plain_test(faults))
    root = importlib.import_module(peer.module)
    switches = tuple(
        (f.id, functools.partial(_read_setting, root, f.unless), f.unless.rpartition(".")[2])
        for f in peer.faults if f.unless and f.id in faults
    )
    # A consumer that takes a capsule is handed the one it would ask a
    # wrapper for (the same capsule, without its Python round trip).
    # One that takes nothing else (TensorFlow) is handed one in every case.
    capsules = peer.capsule_only or (
        peer.asks is not None and peer.lands is None and call is getattr(root, "from_dlpack", None))
    asks = None if not capsules or "legacy-only" in faults else peer.asks
    holds_gpu = None if peer.holds_gpu is None else functools.partial(_answer, root, peer.holds_gpu)
    return Consumer(
        peer.name, module, version, call, peer.lands, faults, _plain_test(faults), switches, capsules, asks,
        peer.capsule_only, peer.wraps_landed, peer.itself, holds_gpu, bool(faults & _faults._READ_ONLY),
    )


def _read_setting(root, path):
    obj = operator.attrgetter(path)(root)
    return bool(obj() if callable(obj) else obj)


def _answer(root, probe: _peers.Probe) -> bool:
    """The library's answer to its row's ``probe``: an exception is no."""
    try:
        return bool(operator.attrgetter(probe.path)(root)(*probe.args))
    except Exception:
        return False


def _meant(name: str) -> tuple[str, ...]:
    """The libraries of ``_peers`` a name that cannot be imported may mean:
    the same name in another case, else the closest spelling; every one
    for an empty name. Only the libraries that import (pyarrow does not)."""
    known = [peer.name for peer in _peers.PEERS if peer.consumer]
    if not name.strip():
        return tuple(known)
    same = [k for k in known if k.casefold() == name.casefold()]
    return tuple(same or difflib.get_close_matches(name.casefold(), known, n=1, cutoff=0.6))


def _version_of(top: str, module: ModuleType) -> str | None:
    """The version of the distribution ``module`` comes from (its top-level
    package's), or None where none can be read: a module made at run time,
    in no package sys.modules holds, has none."""
    held = module if module.__name__ == top else sys.modules.get(top)
    if held is None:
        try:
            held = importlib.import_module(top)
        except ImportError:
            return None
    v = getattr(held, "__version__", None)
    if isinstance(v, str):
        return v
    try:
        from importlib import metadata

        return metadata.version(top)
    except Exception:
        return None


def _from_dlpack_of(module, name, peer) -> Callable:
    if peer is not None and peer.lands is not None and not peer.wraps_landed:
        return from_dlpack  # gpu_dlpack lands in NumPy and CuPy itself
    own = getattr(module, "from_dlpack", None)
    if callable(own) and (peer is None or peer.module != name or peer.consumer == ("from_dlpack",)):
        return own
    if peer is None:
        raise _errors.consumer_without_from_dlpack(name, [f"{module.__name__}.from_dlpack"])
    for sub in peer.submodules:
        try:
            importlib.import_module(sub)
        except ImportError:
            pass
    root = importlib.import_module(peer.module)
    found, _ = _peers.named_callable(root, peer.consumer)
    if found is not None:
        return found
    raise _errors.consumer_without_from_dlpack(name, [f"{root.__name__}.{p}" for p in peer.consumer])


def _plain_test(faults) -> Callable:
    """The test a NumPy array passes to go straight to the consumer: none
    of its faults can meet it (read-only data, a layout it cannot take)."""
    writeable = bool(faults & _faults._READ_ONLY)
    compact = "non-compact-strides" in faults
    negative = "negative-strides" in faults
    anywhere = "negative-strides-anywhere" in faults
    narrows = "narrows-64-bit" in faults
    narrows_floats = "narrows-float64" in faults
    packs = "reads-padded-subbyte-packed" in faults
    c_order = "c-order-only" in faults

    def plain(x) -> bool:
        flags = x.flags
        if writeable and not flags.writeable:
            return False
        if c_order and not flags.c_contiguous:
            return False  # a transposition it would read as C order
        if narrows and x.dtype in _WIDE:
            return False  # the setting that keeps the dtype is read by the general path
        if narrows_floats and x.dtype in _WIDE_FLOATS:
            return False  # refused by the general path
        if packs and x.dtype.name in _SUB_BYTE:
            return False  # refused by the general path
        if anywhere and min(x.strides, default=0) < 0:
            return False  # even where the walked-axes test sees none
        if compact:
            return flags.c_contiguous or flags.f_contiguous
        if negative and not flags.c_contiguous:
            return not _faults.has_negative(x.shape, x.strides)
        return True

    return plain


_WIDE = frozenset(np.dtype(t) for t in ("int64", "uint64", "float64", "complex128"))
_WIDE_FLOATS = frozenset(np.dtype(t) for t in ("float64", "complex128"))
_SUB_BYTE = frozenset(name for name, (_, bits) in _dtypes.ML_DTYPES.items() if bits < 8)


# -- the producer a consumer imports from ----------------------------------------

class Served:
    """``x`` served to one consumer: a versioned capsule under the rules,
    then what the consumer cannot honour handled (``_faults.fix``)."""

    __slots__ = (
        "_w", "_consumer", "_target", "_copy", "_stream", "_policy", "_required", "lands_on", "record", "refused",
    )

    def __init__(self, x, consumer: Consumer, target: Device | None, copy, stream, policy, required=(0, False)):
        self._w = wrap(x)
        self._required = required
        self._consumer = consumer
        self._target = target
        self._copy = copy
        self._stream = stream
        self._policy = policy
        #: Where gpu_dlpack's own import lands the capsule (NumPy, CuPy): a
        #: capsule elsewhere is copied there, so no read-only data is shared.
        self.lands_on: Device | None = None
        self.record: dict | None = None
        #: The layer's error this producer raised to the consumer, which may
        #: not pass it on (MLX's nanobind makes any of them a TypeError).
        self.refused: BaseException | None = None

    def __dlpack_device__(self) -> tuple[int, int]:
        if self._target is not None:
            return self._target.dlpack
        return self._w.__dlpack_device__()

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        try:
            return self._served(stream, max_version, dl_device, copy)
        except _errors.GpuDlpackError as exc:
            self.refused = exc
            raise

    def _served(self, stream, max_version, dl_device, copy):
        c = self._consumer
        dl = self._target.dlpack if self._target is not None else dl_device
        asked_copy = self._copy if self._copy is not None else copy
        s = self._stream if self._stream is not None else stream
        if s is None and _streams.in_block():
            s = _streams.block_stream(Device(dl if dl is not None else self._w.__dlpack_device__()))
        # A copy for a consumer that takes only aligned host data in place is
        # made here, aligned; every other copy by the layer's export.
        own_copy = asked_copy is True and "unaligned-copies" in c.faults and (
            Device(dl if dl is not None else self._w.__dlpack_device__()).is_host_accessible
        )
        capsule = self._w.__dlpack__(
            stream=s, max_version=_VERSION, dl_device=dl, copy=None if own_copy else asked_copy,
        )
        info = _capsule.read(capsule)
        address = info.data + info.byte_offset
        moves = self.lands_on is not None and info.device != self.lands_on
        fix = _faults.fix(
            c.name, c.active(), read_only=info.readonly and not moves, shape=info.shape, strides=info.strides,
            host=info.device.is_host_accessible, address=address, copy=asked_copy, on_readonly=self._policy,
            dtype=info.dl_dtype, settings=c.settings(),
        )
        applied, reasons = list(fix.applied), list(fix.reasons)
        alignment, contiguous = self._required
        unmet = None
        if self.lands_on is None and (alignment or contiguous):
            # What the consumer imports meets the kernel's requirements (a
            # consumer the layer lands data in gets them from from_dlpack).
            unmet = _rules.unmet(address, info.shape, info.strides, alignment, contiguous)
            if unmet is not None:
                if asked_copy is False:
                    raise _errors.requirement_needs_copy(unmet, address, alignment, info.shape, info.strides)
                reasons.append(_required_reason(unmet, address, alignment, info.shape, info.strides))
        if asked_copy is True:
            if "copy-shares" in c.faults:
                applied.append("copy-shares")
            reasons.append(f"copied by gpu_dlpack, as copy=True asked ({c.name} is not asked to copy)")
        if fix.copy or own_copy or unmet is not None:
            need = _peers.ALIGNMENT if fix.align or own_copy else 0
            if self.lands_on is None and alignment:
                need = math.lcm(need, alignment) if need else alignment
            capsule = _copy_of(capsule, info, need, s)
            info = _capsule.read(capsule)
        elif fix.share:
            _capsule.set_flags(capsule, info.flags & ~_capsule.READ_ONLY)
        self.record = {
            "address": info.data + info.byte_offset, "dtype": info.dl_dtype, "copied": info.is_copied,
            "shape": info.shape, "strides": info.strides, "required": self._required,
            "share": fix.share,
            "applied": tuple(applied), "reasons": tuple(reasons), "consumer_copies": fix.consumer_copies,
        }
        if max_version is None or max_version[0] < 1:
            # A legacy consumer: the capsule of the other kind over the same memory.
            return export(capsule, max_version=max_version)
        return capsule


def _copy_of(capsule, info, alignment: int, stream):
    """A versioned capsule of a compact, writeable copy of what ``capsule``
    holds (consumed here), flagged IS_COPIED, on the same kind of memory:
    host memory to the CPU, GPU memory on its own device, the copy queued
    on ``stream``; its first element at a multiple of ``alignment`` bytes
    (0: as allocated)."""
    device = None if info.device.is_host_accessible else info.device
    if device is None:
        stream = None
    out = from_dlpack(capsule, device=device, copy=True, stream=stream, require_alignment=alignment,
                      require_contiguous=True)
    copied = export(out, max_version=_VERSION, stream=stream)
    code, bits, _lanes = info.dl_dtype
    _capsule.set_dtype(copied, code, bits)  # a dtype NumPy carries as unsigned keeps its code
    flags = _capsule.read(copied).flags
    _capsule.set_flags(copied, (flags | _capsule.IS_COPIED) & ~_capsule.READ_ONLY)
    return copied


# -- convert --------------------------------------------------------------------

class _Options(TypedDict, total=False):  # convert's keywords besides report, for its overloads
    device: DeviceLike | None
    copy: bool | None
    stream: StreamLike | None
    on_readonly: OnReadOnly
    require_alignment: int
    require_contiguous: bool


@overload
def convert(x: Any, to: Literal["numpy"], /, *, report: Literal[False] = ..., **kw: Unpack[_Options]) -> np.ndarray: ...
@overload
def convert(x: Any, to: Literal["torch"], /, *, report: Literal[False] = ..., **kw: Unpack[_Options]) -> torch.Tensor: ...
@overload
def convert(x: Any, to: Literal["jax"], /, *, report: Literal[False] = ..., **kw: Unpack[_Options]) -> jax.Array: ...
@overload
def convert(x: Any, to: Literal["cupy"], /, *, report: Literal[False] = ..., **kw: Unpack[_Options]) -> cupy.ndarray: ...
@overload
def convert(x: Any, to: Literal["array_api_strict"], /, *, report: Literal[False] = ...,
            **kw: Unpack[_Options]) -> array_api_strict._array_object.Array: ...
@overload
def convert(x: Any, to: Literal["numba"], /, *, report: Literal[False] = ..., **kw: Unpack[_Options]) -> DeviceNDArray: ...
@overload
def convert(x: Any, to: Library | ModuleType, /, *, report: Literal[True], **kw: Unpack[_Options]) -> Conversion: ...
@overload
def convert(x: Any, to: Library | ModuleType, /, *, report: bool = ..., **kw: Unpack[_Options]) -> Any: ...


def convert(x: Any, to: Library | ModuleType, /, *, device: DeviceLike | None = None, copy: bool | None = None,
            stream: StreamLike | None = None, on_readonly: OnReadOnly = "copy", report: bool = False,
            require_alignment: int = 0, require_contiguous: bool = False) -> Any:
    """``x`` as an array of library ``to``, exchanged as that library needs.

    It is ``to.from_dlpack(gpu_dlpack.wrap(x))`` with what that consumer cannot
    honour handled by the layer, never dropped and never a crash: the faults
    of its row in ``gpu_dlpack/_peers.py``, by version (READ_ONLY ignored by
    torch, ``copy=True`` that shares in JAX, negative strides that abort torch
    2.12 and 2.13, layouts JAX cannot import...). Type checkers see the
    result's type for the named libraries (``torch.Tensor`` for ``"torch"``).

    Parameters
    ----------
    x : object
        Any DLPack producer, an object of another array protocol, or a raw
        DLPack capsule.
    to : str or module
        The consumer: ``"numpy"``, ``"torch"``, ``"jax"``, ``"cupy"``,
        ``"array_api_strict"``, ``"numba"``, or any module with a
        ``from_dlpack`` (the module itself, or its name). Type checkers take
        the six names (a misspelt one is an error there) and modules; a
        name that cannot be imported is a ``ModuleNotFoundError`` that says
        which library was meant.
    device : str, tuple, Device or device object, optional
        Where the result lives, in any form `Device` reads. Default: where
        ``x`` is; the current GPU for CuPy and Numba.
    copy : bool, optional
        As in the standard: ``True`` always (the layer copies, flagged
        IS_COPIED), ``False`` never, ``None`` when needed.
    stream : int or stream object, optional
        The GPU stream the result will be used on. Default: the enclosing
        `use_stream` block's, else the consumer's own.
    on_readonly : {"copy", "share", "refuse"}, default "copy"
        Read-only data for a consumer that cannot hold it read-only: a
        writeable copy (so that no write through the result changes the
        source), the memory itself, writeable (the caller answers for the
        writes), or `ReadOnlyError`.
    report : bool, default False
        Return a `Conversion` (the result, whether it was copied and by whom,
        every fault acted on) instead of the bare result.
    require_alignment : int, default 0
        What a kernel asks of the data the consumer gets, as tvm-ffi's
        ``from_dlpack`` does: the first element's address a multiple of this
        many bytes (0: any). Data that is not is copied, aligned, by the
        layer (``report=True`` says so); ``copy=False`` refuses it.
    require_contiguous : bool, default False
        The same for a C-order layout: a compact copy where the data is not.

    Returns
    -------
    array or Conversion
        The array of ``to`` (``numpy.ndarray``, ``torch.Tensor``,
        ``jax.Array``...), or its `Conversion` with ``report=True``.

    Raises
    ------
    ReadOnlyError
        Read-only data with ``on_readonly="refuse"``, or with ``copy=False``
        for a consumer that would share it writeable.
    CopyRequiredError
        ``copy=False`` where the consumer needs a copy (a layout it cannot
        import, another device, data that does not meet
        ``require_alignment`` or ``require_contiguous``).
    DeviceUnreachableError
        No GPU for a GPU library, or a device the data cannot reach.
    ModuleNotFoundError
        ``to`` names a module that cannot be imported here (an
        ``ImportError``).
    TypeError
        ``to`` is no module or name, or one without a ``from_dlpack``.
    ValueError
        ``on_readonly`` is not one of the three.

    See Also
    --------
    wrap : The producer ``convert`` hands the consumer.

    Examples
    --------
    >>> import numpy as np, torch, gpu_dlpack
    >>> r = np.arange(3.0); r.flags.writeable = False
    >>> t = gpu_dlpack.convert(r, "torch")     # torch ignores READ_ONLY: a copy
    >>> t[0] = 42; float(r[0])
    0.0
    >>> done = gpu_dlpack.convert(r, "torch", report=True)
    >>> done.copied_by, done.faults
    ('gpu_dlpack', ('read-only-ignored',))
    """
    c = _consumers.get(to) if type(to) is str else None
    if c is None:
        c = consumer_of(to)
    if require_alignment.__class__ is not int or require_alignment or require_contiguous is not False:
        _rules.check_requirements(require_alignment, require_contiguous)
        return _convert(x, c, device, copy, stream, on_readonly, report, (require_alignment, require_contiguous))
    if (
        device is None and copy is None and stream is None and report is False
        and type(on_readonly) is str and on_readonly in _POLICIES
    ):
        # What the general path would do, at once: to a library gpu_dlpack
        # lands on the host, the import to the CPU (within a use_stream
        # block too: from_dlpack reads the block, as the general path's
        # call does); to another, outside a block, the exchange.
        if type(x) is _ndarray:
            if c.plain(x):
                if c.lands == "host":
                    return from_dlpack(x)
                if c.lands is None and not _streams.in_block():
                    return c.call(export(x, max_version=c.asks) if c.capsules else wrap(x))
            elif (on_readonly == "copy" and c.copies_read_only and c.lands is None and not x.flags.writeable
                  and not _streams.in_block()):
                done = _handed_copy(x, c)
                if done is not None:
                    return done
        elif (seen := _profiles.get(type(x))) is not None and seen.chunks is None:
            # Another library's array (a JAX array, a torch tensor), once
            # its type is known to be no lazy array of chunks (the core
            # takes data already on the CPU at once).
            if c.lands == "host":
                return from_dlpack(x, device=CPU)
            if (on_readonly == "copy" and c.copies_read_only and seen.export.read_only and c.lands is None
                    and not _streams.in_block()):
                # Immutable data (JAX's) on the CPU, which the consumer would
                # hold writeable: the layer's import of it, copied.
                view = _compiled.import_host(x)
                done = None if type(view) is not _ndarray else _handed_copy(view, c)
                if done is not None:
                    return done
    return _convert(x, c, device, copy, stream, on_readonly, report, _NOTHING_REQUIRED)


def _handed_copy(x, c: Consumer):
    """The consumer's array of a writeable copy of read-only NumPy data
    ``x`` (the general path's copy for a consumer that would hold it
    writeable: compact, flagged IS_COPIED), or None where the general path
    has more to do (a copy aligned for the consumer, a fault the copy still
    meets)."""
    if "unaligned-copies" in c.faults:
        return None
    copied = x.copy()
    if not c.plain(copied):
        return None
    if not c.capsules:
        return c.call(wrap(copied))
    capsule = export(copied, max_version=c.asks)
    if c.asks is not None and c.asks[0] >= 1:
        _capsule.set_flags(capsule, _capsule.IS_COPIED)  # NumPy's own of a writeable array: no other flag
    return c.call(capsule)


# The public functions are the core's fronts (core/export.pxi): plain cases there, the rest the function above.
if not TYPE_CHECKING:
    convert = _compiled.front("convert", convert)

_POLICIES = frozenset(_faults.POLICIES)  # read on every call: a set of _faults' names


_NOTHING_REQUIRED = (0, False)

_profiles = _peers._PROFILES  # type -> its Profile, once read


def _convert(x, c: Consumer, device, copy, stream, on_readonly, report, required):
    if type(on_readonly) is not str or on_readonly not in _POLICIES:
        raise _errors.bad_on_readonly(on_readonly, _faults.POLICIES)
    t = type(x)
    profile = _peers.profile(t)
    if profile.chunks is not None:
        return _convert_chunks(x, profile.chunks, c, device, copy, stream, on_readonly, report, required)
    if copy is not None and copy is not True and copy is not False:
        raise _errors.bad_copy(copy)
    if copy is not True and device is None and c.itself is not None and "nested-import-deadlock" in c.faults and (
            getattr(profile.peer, "name", "") == c.name):
        # The consumer's own tensor goes over as a tensor: imported by DLPack,
        # it could become an import of an import, which it deadlocks freeing
        # (a copy, made apart from the source, cannot).
        why = f"handed over as a {c.name} tensor, not by DLPack: {c.name} {_peers.FAULTS['nested-import-deadlock'][0]}"
        return _told(getattr(x, c.itself)(), c, report, False, ("nested-import-deadlock",), why)
    if (copy is not True and device is None and required is _NOTHING_REQUIRED and profile.export.read_only
            and getattr(profile.peer, "name", "") == c.name):
        # An immutable array of the consumer's own library (JAX's): any
        # exchange would give the consumer this array again, or a copy.
        why = f"returned as it is: a {c.name} array, and {c.name}'s arrays are immutable"
        return _told(x, c, report, False, (), why)
    target = None if device is None else Device(device)
    placed = _placed_by_consumer(c, device, target)
    if placed:
        target = None  # the data goes over where it is; the consumer places it
    handle = stream if stream is None or type(stream) is int else _streams.handle_of(stream)
    served: Any = None  # a Served wherever the consumer imports from it or a report reads it
    if c.lands is None or c.lands == "gpu" or report:
        # Where gpu_dlpack lands the data (NumPy, CuPy; Numba over CuPy), its
        # from_dlpack asks for the caller's device, copy and stream.
        asked = (target, copy, handle) if c.lands is None else (None, None, None)
        try:
            served = Served(x, c, *asked, on_readonly, required)
        except BufferError:
            hosted = _hosted_by_its_producer(x, copy)
            if hosted is None:
                raise
            result = _convert(hosted, c, device, None, stream, on_readonly, report, required)
            if not report:
                return result
            why = ("copied to the host by its producer: it does not say where its data is (an accelerator "
                   "DLPack cannot reach), and gpu_dlpack copied that copy, writeable, for the consumer")
            return Conversion(result.array, result.library, result.version, True, "gpu_dlpack",
                              result.shared_readonly, result.faults, (why, *result.reasons))
    if c.lands is not None:
        where = target
        if c.lands == "gpu":
            if where is None:
                here = Device(served._w.__dlpack_device__())
                if here.type not in _GPU_TYPES:  # to the current GPU (GPU data stays on its device)
                    if _backends.cupy_backend.device_count() == 0:
                        raise _errors.no_gpu_consumer(c.name, RuntimeError("no GPU is usable by CuPy"))
                    try:
                        import cupy

                        index = int(cupy.cuda.runtime.getDevice())
                    except Exception as exc:
                        raise _errors.no_gpu_consumer(c.name, exc) from None
                    where = Device(("rocm" if cupy_is_rocm() else "cuda") + f":{index}")
            served.lands_on = where if where is not None else here
        elif served is not None:
            where = served.lands_on = where if where is not None else CPU
        elif where is None and not (type(x) is _ndarray or known_on_host(x)):
            where = CPU
        keywords = {}
        if required is not _NOTHING_REQUIRED:
            keywords = {"require_alignment": required[0], "require_contiguous": required[1]}
        result = from_dlpack(served if served is not None else x, device=where, copy=copy, stream=stream, **keywords)
        if c.wraps_landed:
            result = c.call(result)
    else:
        if target is not None and target.dlpack != served._w.__dlpack_device__():
            # A move the layer makes: the consumer (which reads the device
            # first) is not called for a device nothing here can serve.
            _backends.for_device(target)
        if c.faults & _faults.BEFORE_CALL or c.holds_gpu is not None:
            _faults.before_call(c.name, c.version, c.active(), Device(served.__dlpack_device__()), c.holds_gpu)
        try:
            result = c.call(served.__dlpack__(max_version=c.asks) if c.capsule_only else served, **placed)
        except Exception:
            if served.refused is not None:
                raise served.refused from None  # the layer's own refusal, whatever the consumer made of it
            raise
    return _reported(result, c, served.record if served is not None else None, copy, report)


def _placed_by_consumer(c: Consumer, device, target) -> dict:
    """The keyword by which the consumer places its import on ``device``
    (JAX's ``device=`` a TPU) where that is a device the layer does not
    reach and ``device`` is the consumer's own device object (its row's
    ``Devices.places``); {} where the layer places the data itself."""
    if target is None or c.lands is not None or target.type is DLDeviceType.CPU or target.type in DEVICE_ACCESSIBLE:
        return {}
    peer = _peers.by_name(c.name)
    own = None if peer is None else peer.devices
    if own is None or own.places is None:
        return {}
    if _peers.device_form(device) is not own:
        raise _errors.placed_by_consumer(target, c.name)
    return {own.places: device}


def _hosted_by_its_producer(x, copy):
    """A writeable host copy of ``x`` whose producer does not say where its
    data is (JAX's ``__dlpack_device__`` on a TPU refuses), made by asking
    it for the host (``from_dlpack``'s ``device="cpu"``); None when ``x``
    names its device (the refusal was another one)."""
    try:
        Device.of(x)
    except BufferError:
        return from_dlpack(x, device=CPU, copy=copy is not False)
    except Exception:
        return None
    return None


def _told(result, c: Consumer, report, copied, faults, *reasons):
    """``result``, or for ``report`` its `Conversion`: nothing copied by
    the layer (``copied``: whether the result holds memory of its own)."""
    return Conversion(result, c.name, c.version, copied, None, False, faults, reasons) if report else result


def _reported(result, c: Consumer, record, copy, report):
    """``result`` as ``convert`` returns it, or its `Conversion` for
    ``report``, once the consumer is known not to have copied what
    ``copy=False`` forbids."""
    if record is None:
        return _told(result, c, report, None, ())
    if not report and (copy is not False or c.lands is not None):
        return result
    try:  # (address of the first element, DLPack dtype) of the result, where it gives a capsule
        info = _capsule.read(export(result, max_version=_VERSION))
        landed = info.data + info.byte_offset, info.dl_dtype
    except Exception:
        landed = None
    if copy is False and c.lands is None and landed is not None and landed[0] != record["address"]:
        raise _errors.consumer_copied(c.name)
    if not report:
        return result
    reasons = list(record["reasons"])
    by = ["gpu_dlpack"] if record["copied"] else []
    if landed is not None and landed[0] != record["address"]:
        who = c.name if c.lands is None else "gpu_dlpack"
        if who not in by:
            by.append(who)
        alignment, contiguous = record["required"]
        unmet = c.lands is not None and _rules.unmet(
            record["address"], record["shape"], record["strides"], alignment, contiguous)
        if unmet:  # the landing met the kernel's requirements by a copy
            reasons.append(_required_reason(unmet, record["address"], alignment, record["shape"], record["strides"]))
        else:
            reasons.append(
                f"copied: {record['consumer_copies']}" if record["consumer_copies"] else f"copied by {who} on import"
            )
    if landed is not None and landed[1] != record["dtype"]:
        reasons.append(f"{c.name} changed the dtype from {_dtype_name(record['dtype'])} to {_dtype_name(landed[1])}")
    copied = True if by else (None if landed is None else False)
    return Conversion(
        result, c.name, c.version, copied, " and ".join(by) or None, record["share"], record["applied"],
        tuple(reasons),
    )


def _required_reason(what, address, alignment, shape, strides) -> str:
    if what == "alignment":
        return (f"copied by gpu_dlpack: require_alignment={alignment}, and the data started "
                f"{address % alignment} bytes past a {alignment}-byte boundary")
    return f"copied by gpu_dlpack: require_contiguous=True, and the strides {strides} of shape {shape} are not C order"


def _dtype_name(dtype) -> str:
    try:
        return str(_dtypes.to_numpy(*dtype).numpy)
    except Exception:
        return "DLPack dtype (code={}, bits={}, lanes={})".format(*dtype)


# -- lazy arrays of chunks (dask) ---------------------------------------------------

def _convert_chunks(x, chunks, c: Consumer, device, copy, stream, on_readonly, report, required):
    """A lazy array of chunks (``_peers.Chunks``) to ``c``: for a library
    its chunks can be arrays of (dask's: NumPy, CuPy), a lazy array over
    the same graph, each chunk converted by ``convert`` when computed
    (zero-copy where the pair allows); for any other, the computed array
    converted."""
    keywords = dict(device=device, copy=copy, stream=stream, on_readonly=on_readonly,
                    require_alignment=required[0], require_contiguous=required[1])
    if c.name not in chunks.holds:
        return convert(getattr(x, chunks.compute)(), c.module, report=report, **keywords)
    # The chunks' type, told by an empty array of the consumer's (dask's meta).
    meta = convert(np.empty((0,) * x.ndim, x.dtype), c.module)
    mapped = getattr(x, chunks.map)(functools.partial(_chunk, c.module, keywords), dtype=x.dtype, meta=meta)
    return _told(mapped, c, report, None, (), f"a lazy array of chunks: each chunk converted to {c.name} when computed")


def _chunk(module, keywords, block):
    return convert(block, module, **keywords)
