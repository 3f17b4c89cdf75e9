# cython: language_level=3, binding=False, embedsignature=True, embedsignature.format=clinic
"""The compiled hot path of gpu_dlpack."""

# The module's face: the core's state, what Python tells the core (the
# set_* setters), what it forgets, and module setup. The concepts are one file
# each in core/, included below in floor order, lowest first
# (docs/internals/core.md).

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_DECREF, Py_XDECREF
from cpython.exc cimport PyErr_Occurred, PyErr_SetString
from cpython.long cimport PyLong_FromVoidPtr
from cpython.unicode cimport PyUnicode_InternFromString
from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy, memset
cimport numpy as cnp

from dlpack cimport CoreState, DLPackVersion, MAX_NDIM, unicode_or_null, item_or_null, call_or_null, format_error

# The core's state, one struct: what Python tells the core (set_*), what
# it keeps of that, and the names and arguments module setup makes once.
cdef CoreState state
state.cpu_type = 1

# NumPy's C API, through its own headers (cnp): its table is loaded here,
# once per load of the module. A NumPy that cannot be imported, or whose C
# API is older than the one the core was built for, is the core's
# ImportError.
cnp.import_array()


cdef const char *NOT_CONFIGURED = (b"gpu_dlpack._core is not configured: import gpu_dlpack, which configures it, "
                                   b"instead of calling the core directly")


cdef int configured() except 0:
    """1 once Python has told the core what it decided (set_python, last): every
    entry point refuses before then, since what it would read (the Python
    implementation, the tables) is not there yet."""
    if state.py_impl == NULL:
        PyErr_SetString(RuntimeError, NOT_CONFIGURED)
        return 0
    return 1


# The hand-back to Python: every case the core does not run goes, unchanged,
# to the Python implementation it was given.
cdef PyObject *delegate_raw(const char *name, PyObject **args, Py_ssize_t nargs) noexcept:
    """The Python implementation `name` called with the arguments: a new
    reference, or NULL with the error set (an error looking it up, no memory
    for the key, is the one set)."""
    if state.py_impl == NULL:
        PyErr_SetString(RuntimeError, NOT_CONFIGURED)
        return NULL
    cdef PyObject *key = unicode_or_null(name)
    if key == NULL:
        return NULL
    cdef PyObject *fn = item_or_null(state.py_impl, key)
    Py_DECREF(<object>key)
    if fn == NULL:
        if PyErr_Occurred() == NULL:
            format_error(<PyObject *>RuntimeError, "gpu_dlpack._core has no Python %s", name)
        return NULL
    Py_INCREF(<object>fn)  # the call may replace the dict's entry
    cdef PyObject *r = call_or_null(fn, args, nargs, NULL)
    Py_DECREF(<object>fn)
    return r


cdef object layer_error(str factory, tuple args):
    """The layer's error made by _errors' `factory` (its words), to raise;
    the core's refusal to run unconfigured where _errors was never given
    (the core loaded by its file, without the package)."""
    if state.errors == NULL:
        return RuntimeError(NOT_CONFIGURED.decode())
    return (<dict>state.errors)[factory](*args)


cdef inline void put(PyObject **slot, PyObject *value) noexcept:
    """Set a slot of the state to a new reference to value; the old one is
    dropped after (its finalizer may run Python, which then sees the new one)."""
    cdef PyObject *old = slot[0]
    Py_INCREF(<object>value)
    slot[0] = value
    Py_XDECREF(old)


cdef inline void unset(PyObject **slot) noexcept:
    cdef PyObject *old = slot[0]
    slot[0] = NULL
    Py_XDECREF(old)


include "capsule.pxi"
include "info.pxi"
include "versions.pxi"
include "adapt.pxi"
include "runtime.pxi"
include "consumer.pxi"
include "numpy_export.pxi"
include "exportable.pxi"
include "exchange_api.pxi"
include "export.pxi"

cdef inline void _hold(PyObject **slot, object value):
    put(slot, <PyObject *>value)  # (value may be a temporary, which put cannot take)


# What Python tells the core, once every module is loaded (_wiring.install):
# one setter per concept, each handed the public names of the module that
# owns it. set_python comes last: until it has run, every entry point
# refuses (configured()).
cdef enum:
    TOLD_DTYPES = 1
    TOLD_DEVICES = 2
    TOLD_NUMPY = 4
    TOLD_VERSIONS = 8
    TOLD_ALL = 15

cdef int told = 0


def set_dtypes(known, numpy_dtypes, plain):
    """The dtypes: the pairs exchanged, the NumPy dtype of each pair, the plain NumPy dtypes.

    known: every (code, bits) pair exchanged (_dtypes.KNOWN); numpy_dtypes:
    {(code, bits): dtype} of the pairs the core imports and adapts; plain:
    (dtype, code, bits) of each NumPy dtype whose capsule the core makes
    for an export as NumPy makes it (compared by identity, at most 32)."""
    global told
    cdef int code, bits, nbytes, c, b
    cdef uint64_t known_dtypes[32]
    cdef uint32_t known_128 = 0
    memset(known_dtypes, 0, sizeof(known_dtypes))
    for code, bits in known:
        if 0 <= code < 32:
            if 1 <= bits <= 64:
                known_dtypes[code] |= 1ULL << (bits - 1)
            elif bits == 128:
                known_128 |= 1U << code
    numpy_dtypes = dict(numpy_dtypes)
    triples = tuple(plain)
    plain = tuple(t[0] for t in triples)
    for _, code, bits in triples:
        if not (0 <= code < 32 and bit_index(<unsigned>bits)):
            raise ValueError("a plain dtype's pair is a DLPack code under 32 and a whole number of bytes")
    if len(plain) > 32:
        raise ValueError("at most 32 plain dtypes")
    memcpy(state.known_dtypes, known_dtypes, sizeof(known_dtypes))
    state.known_128 = known_128
    for c in range(32):
        for b in range(17):
            unset(&state.numpy_descr[c][b])
    for (code, bits), value in (<dict>numpy_dtypes).items():
        nbytes = bit_index(<unsigned>bits)
        if 0 <= code < 32 and nbytes:
            _hold(&state.numpy_descr[code][nbytes], value)
    _hold(&state.plain_dtypes, plain)
    state.n_plain = 0
    for dtype, code, bits in triples:
        plain_pairs[state.n_plain].code = code
        plain_pairs[state.n_plain].bits = bits
        plain_pairs[state.n_plain].lanes = 1
        state.plain_list[state.n_plain] = <PyObject *>dtype  # held by plain_dtypes
        state.n_plain += 1
    told |= TOLD_DTYPES


def set_devices(host_types, cpu_device, device_class):
    """The devices: the host ones, the CPU, the Device class (every device
    type from 1 up is a device).

    host_types: those whose memory the core's NumPy imports take;
    cpu_device: the CPU as a Device; device_class: what makes the Device of
    a (type, id) pair."""
    global told
    cdef uint64_t host = 0
    cdef int t, i
    for t in host_types:
        if 0 <= t < 64:
            host |= 1ULL << t
    cpu_dlpack = cpu_device.dlpack
    state.host_types = host
    _hold(&state.cpu_device, cpu_device)
    _hold(&state.cpu_dlpack, cpu_dlpack)
    _hold(&state.device_class, device_class)
    for t in range(64):
        for i in range(16):
            unset(&state.devices[t][i])
    told |= TOLD_DEVICES


def set_numpy(int maxdims, bint layout, bint strides_after_shape):
    """NumPy as the core uses it: what it takes and how it lays capsules out.

    maxdims: the most dimensions it takes; layout: whether it lays out
    imports and exports as the core does (2.4 and later);
    strides_after_shape: whether it leaves a C-contiguous array's strides
    out, right after the shape (2.1 to 2.3)."""
    global told
    if maxdims < 1 or maxdims > MAX_NDIM:
        raise ValueError(f"maxdims must be within [1, {MAX_NDIM}]")
    state.numpy_maxdims = maxdims
    state.numpy_layout = layout
    state.numpy_strides_after_shape = strides_after_shape
    told |= TOLD_NUMPY


def set_versions(Verdict versions not None):
    """The version check in force: _versions.VERDICT, made there with the
    version produced and the policy the check reads."""
    global told, verdict
    if versions.produced is None or versions.first_floor is None or versions.thread is None:
        raise TypeError("versions must be a Verdict made with produced, first_floor and thread")
    verdict = versions
    told |= TOLD_VERSIONS


def set_python(dict impl not None, learn_import, exportable_fallback, type exportable_class not None,
               type header_type not None, type capsule_info not None, dict errors not None):
    """The Python side, last: the core is configured once this has run.

    impl: the Python implementation of every case the core hands back, by
    name; learn_import: what the core may do with a producer type (its
    import plan); exportable_fallback: the general Exportable.__dlpack__;
    exportable_class: gpu_dlpack.Exportable; header_type: _capsule.Header;
    capsule_info: _capsule.CapsuleInfo; errors: the namespace of _errors (its dict), whose
    factories word every error the core raises in the layer's words."""
    if told != TOLD_ALL:
        raise RuntimeError("set_python comes last: set_dtypes, set_devices, set_numpy and set_versions first")
    if not issubclass(exportable_class, ExportableBase):
        raise TypeError("exportable_class must subclass ExportableBase")
    if not issubclass(header_type, tuple):
        raise TypeError("header_type must be a tuple subclass")
    _hold(<PyObject **>&state.exportable_class, exportable_class)
    _hold(<PyObject **>&state.header_type, header_type)
    _hold(<PyObject **>&state.info_type, capsule_info)
    _hold(&state.learn_import, learn_import)
    _hold(&state.exportable_fallback, exportable_fallback)
    _hold(&state.import_types, {})
    _hold(&state.errors, errors)
    # Last: the core counts as configured once everything above is set.
    _hold(&state.py_impl, impl)


def set_convert(frozenset host_consumers not None):
    """convert's policy, read at each call: the names of the libraries it
    lands on the host with nothing to correct (their arrays are NumPy's),
    whose plain cases the convert front makes."""
    _hold(&state.host_consumers, host_consumers)


def forget():
    """Forget what Python said of each producer type."""
    if state.import_types != NULL:
        (<dict>state.import_types).clear()


# Made once per process, in the main interpreter: the names and arguments
# the calls use. A second load of the module in the main interpreter (its
# entry dropped from sys.modules) finds them made.
cdef int setup_once() except -1:
    if state.set_up:
        return 0
    _hold(&state.str_dlpack, PyUnicode_InternFromString(b"__dlpack__"))
    _hold(&state.str_view, PyUnicode_InternFromString(b"view"))
    _hold(&state.str_max_version, PyUnicode_InternFromString(b"max_version"))
    _hold(&state.kw_max_version, (<object>state.str_max_version,))
    _hold(&state.ask_versioned, (1, 0))
    _hold(&state.str_legacy, PyUnicode_InternFromString(LEGACY))
    _hold(&state.str_versioned, PyUnicode_InternFromString(VERSIONED))
    state.set_up = 1  # last: what says it is done
    return 0


setup_once()
set_up_exchange_api()
EXCHANGE_API = ExportableBase.__dict__["__dlpack_c_exchange_api__"]
# The addresses of the core's owning capsule destructors, by kind.
OWNING_DESTRUCTORS = (PyLong_FromVoidPtr(<void *>legacy_capsule_destructor),
                      PyLong_FromVoidPtr(<void *>capsule_destructor))
