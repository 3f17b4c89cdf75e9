"""The layer's own destructor of versioned capsules, for NumPy < 2.1, which
has none to lend (``_capsule.handover`` borrows NumPy's otherwise): it frees
an unconsumed capsule's tensor, for any producer's tensor (the versioned
capsules ``_backends/_old_numpy`` builds, and the layer's hand-over
capsules). A ctypes callback, kept alive for the life of the process (a
capsule may outlive every module at shutdown). Mechanism under the capsule
ABI: it imports nothing of the package.
"""

from __future__ import annotations

import ctypes

_VERSIONED = b"dltensor_versioned"
_DELETER_AT = 16  # DLManagedTensorVersioned.deleter

_api = ctypes.pythonapi
# Function objects of the layer's own, each with its own prototype (those
# of ctypes.pythonapi are shared: any library may set their argtypes).
_IsValid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_GetPointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))
_IncRef = ctypes.PYFUNCTYPE(None, ctypes.py_object)(("Py_IncRef", _api))

_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _destructor(capsule):
    # What every producer's destructor does (dlpack.h): an unconsumed
    # capsule's tensor is freed by its deleter; a consumed one was renamed.
    # Any producer's tensor (the layer's hand-over capsules use it too).
    if _IsValid(capsule, _VERSIONED):
        ptr = _GetPointer(capsule, _VERSIONED)
        deleter = ctypes.c_void_p.from_address(ptr + _DELETER_AT).value
        if deleter:
            _Deleter(deleter)(ptr)


# Never freed: a capsule may call them during shutdown.
for _keep in (_destructor, _IsValid, _GetPointer):
    _IncRef(_keep)

#: A versioned capsule destructor that frees an unconsumed capsule's tensor,
#: for any producer's tensor (NumPy before 2.1 has none to lend).
OWNING_DESTRUCTOR = ctypes.cast(_destructor, ctypes.c_void_p).value
