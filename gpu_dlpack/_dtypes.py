"""The dtype map: NumPy dtypes (with ``ml_dtypes`` for bfloat16, float8/6/4
and sub-byte ints) to DLPack ``(code, bits, lanes)`` and back.

NumPy exports and imports only its own numeric types. Every other type
travels through NumPy as an unsigned carrier of the same width, with the
DLPack code patched into the capsule: that is the ``carrier`` below.

Floor: the leaves, over ``_errors``.
"""

from __future__ import annotations

import functools

import numpy as np

from . import _errors

INT, UINT, FLOAT, OPAQUE, BFLOAT, COMPLEX, BOOL = 0, 1, 2, 3, 4, 5, 6

CODE_NAMES = {
    0: "int", 1: "uint", 2: "float", 3: "opaque_handle", 4: "bfloat", 5: "complex",
    6: "bool", 7: "float8_e3m4", 8: "float8_e4m3", 9: "float8_e4m3b11fnuz",
    10: "float8_e4m3fn", 11: "float8_e4m3fnuz", 12: "float8_e5m2",
    13: "float8_e5m2fnuz", 14: "float8_e8m0fnu", 15: "float6_e2m3fn",
    16: "float6_e3m2fn", 17: "float4_e2m1fn", 18: "bcomplex",
}

# ml_dtypes name -> (code, bits). Bits below 8 are stored one per byte
# (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED). The float8/6/4 types have the
# names of their DLPack codes, with their bits in the name.
ML_DTYPES = {
    "bfloat16": (BFLOAT, 16),
    **{name: (code, int(name[5])) for code, name in CODE_NAMES.items() if code > BOOL and name.startswith("float")},
    "int4": (INT, 4),
    "uint4": (UINT, 4),
    "int2": (INT, 2),
    "uint2": (UINT, 2),
}
_ML_BY_CODE = {v: k for k, v in ML_DTYPES.items()}

_NUMPY_KINDS = {"i": INT, "u": UINT, "f": FLOAT, "c": COMPLEX, "b": BOOL}
_CARRIERS = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}


def describe_code(code) -> str:
    return CODE_NAMES.get(code, f"unknown code {code}")


class DType:
    """How one dtype travels: its DLPack triple, whether it is a padded
    sub-byte type, and the NumPy carrier it travels as (None when NumPy
    handles it natively)."""

    __slots__ = ("code", "bits", "lanes", "padded", "carrier", "numpy")

    def __init__(self, code, bits, numpy_dtype, carrier=None):
        self.code, self.bits, self.lanes = code, bits, 1
        self.padded = bits < 8
        self.numpy = numpy_dtype
        self.carrier = carrier


@functools.lru_cache(maxsize=None)
def _ml_dtypes():
    try:
        import ml_dtypes
    except ImportError:
        return None
    return ml_dtypes


@functools.lru_cache(maxsize=256)
def from_numpy(dtype: np.dtype) -> DType:
    """How a NumPy dtype travels; BufferError when DLPack cannot describe it."""
    if getattr(dtype.type, "__module__", "").startswith("ml_dtypes") and dtype.name in ML_DTYPES:
        code, bits = ML_DTYPES[dtype.name]
        return DType(code, bits, dtype, _CARRIERS[dtype.itemsize])
    if not dtype.isnative and dtype.itemsize > 1:
        raise _errors.unsupported_numpy_dtype(
            dtype, "DLPack has no byte order, so only native-endian data can travel; "
            "convert first with x.astype(x.dtype.newbyteorder('='))"
        )
    code = _NUMPY_KINDS.get(dtype.kind)
    # NumPy's own dtype objects are known by identity: no hash to compute
    # (out of memory, NumPy's dtype hash misses with an exception set).
    if _id(dtype) not in PLAIN and (code is None or dtype.newbyteorder("=") not in _NATIVE_DTYPES):
        raise _errors.unsupported_numpy_dtype(
            dtype, "DLPack carries booleans, integers, floats and complex numbers "
            "(and bfloat16/float8 through ml_dtypes) only"
        )
    return DType(code, dtype.itemsize * 8, dtype)


@functools.lru_cache(maxsize=256)
def to_numpy(code: int, bits: int, lanes: int) -> DType:
    """How a DLPack dtype becomes a NumPy one; BufferError when it cannot."""
    if lanes != 1:
        raise _errors.unsupported_dtype(code, bits, lanes, "vector types (lanes != 1) have no NumPy equivalent")
    if code not in CODE_NAMES:
        raise _errors.unsupported_dtype(code, bits, lanes, "the code is not a DLPack dtype code")
    name = _ML_BY_CODE.get((code, bits))
    if name is not None:
        ml = _ml_dtypes()
        if ml is None or not hasattr(ml, name):
            raise _errors.unsupported_dtype(
                code, bits, lanes, f"this is {name}, which NumPy holds only with the "
                "ml_dtypes package: pip install ml_dtypes"
            )
        dtype = np.dtype(getattr(ml, name))
        return DType(code, bits, dtype, _CARRIERS[dtype.itemsize])
    dtype = NATIVE.get((code, bits))
    if dtype is None:
        raise _errors.unsupported_dtype(code, bits, lanes, "NumPy has no such type")
    return DType(code, bits, dtype)


#: The NumPy dtype of every (code, bits) pair NumPy holds itself (no ml_dtypes).
NATIVE = {
    (_NUMPY_KINDS[d.kind], d.itemsize * 8): d
    for d in map(np.dtype, ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16", "?"))
}
_NATIVE_DTYPES = frozenset(NATIVE.values())
_id = id

#: A plain NumPy dtype: one of NumPy's own dtype objects that DLPack 1.0
#: describes as it is (no carrier, no newer code), by ``id`` (each is one
#: object for the life of the process, held here: no hash to compute). The
#: plain cases of both directions (NumPy's own capsule, the view shortcut)
#: take these alone.
PLAIN = {id(d): d for d in (np.dtype(c) for c in "?bBhHiIlLqQefdFD")}

#: Every (code, bits) pair gpu_dlpack exchanges, with or without ml_dtypes.
KNOWN = frozenset(NATIVE) | frozenset(ML_DTYPES.values())


def not_exchanged(code: int, bits: int, lanes: int) -> BufferError:
    """The refusal of a dtype that is not one of ``KNOWN`` (what gpu_dlpack
    may pass on from another producer), saying why. The check itself is the
    compiled core's, over the table its ``Policy`` gives it (``known``): ``checked``
    calls this for the dtypes it refuses."""
    if lanes != 1:
        return _errors.unsupported_dtype(code, bits, lanes, "vector types (lanes != 1) are not exchanged")
    why = "the code is not a DLPack dtype code" if code not in CODE_NAMES else (
        f"DLPack {describe_code(code)} has no {bits}-bit type that gpu_dlpack knows"
    )
    return _errors.unsupported_dtype(code, bits, lanes, why)
