# cython: language_level=3, binding=False, embedsignature=True, embedsignature.format=clinic
"""The compiled hot path of gpu_dlpack."""

# The module's face: the core's state, what Python tells the core
# (configure), what it forgets, and module setup. The concepts are one file
# each in core/, included below in floor order, lowest first
# (docs/internals/core.md).

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_DECREF, Py_XDECREF
from cpython.exc cimport PyErr_Occurred, PyErr_SetString
from cpython.long cimport PyLong_FromVoidPtr
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_GetName
from cpython.unicode cimport PyUnicode_InternFromString
from libc.string cimport memset

from dlpack cimport CoreState, MAX_NDIM, unicode_or_null, item_or_null, call_or_null, format_error

# The core's state, one struct: what Python tells the core (configure), what
# it keeps of that, and the names and arguments module setup makes once.
cdef CoreState state
state.cpu_type = 1


cdef int configured() except 0:
    """1 once Python has told the core what it decided (configure): every
    entry point refuses before then, since what it would read (the Python
    implementation, the tables) is not there yet."""
    if state.py_impl == NULL:
        raise RuntimeError("gpu_dlpack._core is not configured: import gpu_dlpack, which configures it, "
                           "instead of calling the core directly")
    return 1


# The hand-back to Python: every case the core does not run goes, unchanged,
# to the Python implementation it was given.
cdef PyObject *delegate_raw(const char *name, PyObject **args, Py_ssize_t nargs) noexcept:
    """The Python implementation `name` called with the arguments: a new
    reference, or NULL with the error set (an error looking it up, no memory
    for the key, is the one set)."""
    if state.py_impl == NULL:
        PyErr_SetString(RuntimeError, "gpu_dlpack._core is not configured: import gpu_dlpack, which configures "
                                      "it, instead of calling the core directly")
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


cdef object delegate(const char *name, PyObject **args, Py_ssize_t nargs):
    """delegate_raw's answer as Cython holds it: NULL raises the error set."""
    cdef PyObject *r = delegate_raw(name, args, nargs)
    if r == NULL:
        raise_pending()
    answer = <object>r
    Py_DECREF(answer)  # the reference delegate_raw handed over, now answer's
    return answer


include "capsule.pxi"
include "info.pxi"
include "adapt.pxi"
include "runtime.pxi"
include "consumer.pxi"
include "exportable.pxi"
include "export.pxi"

cdef inline void _hold(PyObject **slot, object value):
    """Set a state slot to a new reference to value (None stays None)."""
    cdef PyObject *old = slot[0]
    Py_INCREF(value)
    slot[0] = <PyObject *>value
    Py_XDECREF(old)


cdef inline void _clear(PyObject **slot):
    cdef PyObject *old = slot[0]
    slot[0] = NULL
    Py_XDECREF(old)


def configure(dict impl not None, type header_type not None, unsigned long long device_types,
              unsigned long long host_types, known, numpy_dtypes, numpy_api, versions, produced,
              unsigned long long version_word, learn_import, exportable_fallback, type exportable_class not None,
              cpu_device, cpu_dlpack, dict plain_dtypes not None, bint numpy_strides_after_shape=False,
              type capsule_info=None, device_class=None, int numpy_maxdims=32, bint numpy_layout=False):
    """What Python tells the core, once every module is loaded."""
    cdef int code, bits, nbytes, t, i, c, b
    if numpy_maxdims < 1 or numpy_maxdims > MAX_NDIM:
        raise ValueError(f"numpy_maxdims must be within [1, {MAX_NDIM}]")
    state.numpy_maxdims = numpy_maxdims
    state.numpy_layout = numpy_layout
    if capsule_info is None:
        _clear(<PyObject **>&state.info_type)
    else:
        _hold(<PyObject **>&state.info_type, capsule_info)
    if device_class is None:
        _clear(&state.device_class)
    else:
        _hold(&state.device_class, device_class)
    for t in range(64):
        for i in range(16):
            _clear(&state.devices[t][i])
    if not issubclass(exportable_class, ExportableBase):
        raise TypeError("exportable_class must subclass ExportableBase")
    _hold(<PyObject **>&state.exportable_class, exportable_class)
    _hold(&state.cpu_device, cpu_device)
    _hold(&state.cpu_dlpack, cpu_dlpack)
    _hold(&state.plain_dtypes, plain_dtypes)
    state.n_plain = 0
    for key in plain_dtypes:
        if state.n_plain >= 32:
            break
        state.plain_list[state.n_plain] = <PyObject *>key  # held by plain_dtypes
        state.n_plain += 1
    if not issubclass(header_type, tuple):
        raise TypeError("header_type must be a tuple subclass")
    memset(state.known_dtypes, 0, sizeof(state.known_dtypes))
    state.known_128 = 0
    for item in known:
        code, bits = item
        if 0 <= code < 32:
            if 1 <= bits <= 64:
                state.known_dtypes[code] |= 1ULL << (bits - 1)
            elif bits == 128:
                state.known_128 |= 1U << code
    for c in range(32):
        for b in range(17):
            _clear(&state.numpy_descr[c][b])
    if not isinstance(numpy_dtypes, dict):
        raise TypeError("numpy_dtypes must be a dict")
    for key, value in (<dict>numpy_dtypes).items():
        code, bits = key
        nbytes = bit_index(<unsigned>bits)
        if 0 <= code < 32 and nbytes:
            _hold(&state.numpy_descr[code][nbytes], value)
    state.numpy_api = NULL
    if numpy_api is not None:
        state.numpy_api = <void **>PyCapsule_GetPointer(numpy_api, PyCapsule_GetName(numpy_api))
        _hold(<PyObject **>&state.ndarray_type, <object>state.numpy_api[2])
    # The calls under way with a floor of their own (export(x,
    # min_version=...)): while there is one, the cached verdicts of the
    # floor in force are not used.
    under_floor = (<dict>versions).get("_under_floor") if isinstance(versions, dict) else None
    if type(under_floor) is not list:
        raise TypeError("versions must hold _under_floor, a list")
    _hold(&state.import_types, {})
    _hold(<PyObject **>&state.header_type, header_type)
    _hold(&state.versions_dict, versions)
    _hold(&state.under_floor, under_floor)
    _hold(&state.produced_version, produced)
    _hold(&state.produced_request, (None, produced, None, None))
    _hold(&state.learn_import, learn_import)
    _hold(&state.exportable_fallback, exportable_fallback)
    state.device_types = device_types
    state.host_types = host_types
    state.version_word = version_word
    state.numpy_strides_after_shape = numpy_strides_after_shape
    # Last: the core counts as configured once everything above is set.
    _hold(&state.py_impl, impl)


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
    _hold(&state.str_accepted, PyUnicode_InternFromString(b"_accepted"))
    _hold(&state.str_floor, PyUnicode_InternFromString(b"_floor"))
    _hold(&state.str_under_floor, PyUnicode_InternFromString(b"_under_floor"))
    _hold(&state.str_dlpack, PyUnicode_InternFromString(b"__dlpack__"))
    _hold(&state.str_dtype, PyUnicode_InternFromString(b"dtype"))
    _hold(&state.str_view, PyUnicode_InternFromString(b"view"))
    _hold(&state.str_max_version, PyUnicode_InternFromString(b"max_version"))
    _hold(&state.kw_max_version, (<object>state.str_max_version,))
    _hold(&state.ask_versioned, (1, 0))
    _hold(&state.str_legacy, PyUnicode_InternFromString(LEGACY))
    _hold(&state.str_versioned, PyUnicode_InternFromString(VERSIONED))
    cdef const char *info_keys[10]
    info_keys[:] = [b"name", b"versioned", b"version", b"flags", b"device", b"dl_dtype", b"shape", b"strides",
                    b"byte_offset", b"data"]
    cdef int i
    for i in range(10):
        _hold(&state.info_keys[i], PyUnicode_InternFromString(info_keys[i]))
    state.set_up = 1  # last: what says it is done
    return 0


setup_once()
set_up_exportable()
set_up_exporter()
EXCHANGE_API = ExportableBase.__dict__["__dlpack_c_exchange_api__"]
# The addresses of the core's owning capsule destructors, by kind.
OWNING_DESTRUCTORS = (PyLong_FromVoidPtr(<void *>legacy_capsule_destructor),
                      PyLong_FromVoidPtr(<void *>capsule_destructor))
