# export(), wrap(), from_dlpack() and inspect(): the plain cases in C, the
# rest in Python, behind a front (Exporter) that is the Python function to
# every reader.

cimport numpy as cnp
from cpython.unicode cimport PyUnicode_CompareWithASCIIString

cdef extern from "Python.h":
    ctypedef PyObject *(*vectorcallfunc)(PyObject *callable, PyObject *const *args, size_t nargsf,
                                         PyObject *kwnames)
    object PyMethod_New(object func, object self)
    ctypedef PyObject *(*getter)(PyObject *, void *)
    ctypedef int (*setter)(PyObject *, PyObject *, void *)
    ctypedef struct PyGetSetDef:
        const char *name
        getter get
        setter set
        const char *doc
        void *closure
    PyObject *PyDescr_NewGetSet(PyTypeObject *type, PyGetSetDef *getset)
    PyObject *generic_get_dict "PyObject_GenericGetDict"(PyObject *o, void *context)
    int generic_set_dict "PyObject_GenericSetDict"(PyObject *o, PyObject *value, void *context)


# wrap(x, readonly): the Exportable of the plain cases made here (a NumPy array
# of a NumPy dtype; a host producer whose C exchange API says where its data
# is), every other one by the Python wrap.
@cython.embedsignature(False)
def wrap(x, readonly, /):
    """wrap($module, x, readonly, /)
--

wrap() of the plain cases, the rest in Python."""
    return core_wrap(<PyObject *>x, <PyObject *>readonly)


cdef object core_wrap(PyObject *x, PyObject *readonly):
    cdef PyObject *a[2]
    configured()
    if state.exportable_class != NULL and readonly == Py_False:
        made = wrap_plain(x)
        if made is not None:
            return made
    a[0] = x
    a[1] = readonly
    return take(delegate_raw("wrap", a, 2))


# The Exportable of a plain case, or None (the Python wrap makes it): made
# as Exportable.__init__ makes one over data on the CPU, plan and all (the
# plan says whether it is a plain case).
cdef object wrap_plain(PyObject *x):
    cdef PyTypeObject *cls = state.exportable_class
    # the type's tp_new (ExportableBase's: every field None, no plan), called
    # as Cython's own __new__ of a class calls it
    cdef ExportableBase self = <ExportableBase>(<TypeSlots *>cls).tp_new(cls, (), NULL)
    made(self, <object>x, False, None, <object>state.cpu_device, <object>state.cpu_dlpack, None)
    return None if self.plan == PLAN_GENERAL else self


# The keywords of the fronts' plain cases (the Exporter calls below), one bit each (KEYWORD_NAMES[i] is
# bit 1 << i), and those each front takes.
cdef const char *KEYWORD_NAMES[7]
KEYWORD_NAMES[:] = [b"max_version", b"readonly", b"stream", b"dl_device", b"copy", b"min_version", b"device"]

cdef enum:
    KW_MAX_VERSION = 1
    KW_READONLY = 2
    KW_DLPACK = 1 | 4 | 8 | 16  # __dlpack__: max_version, stream, dl_device, copy
    KW_EXPORT = KW_DLPACK | KW_READONLY | 32  # export: and readonly, min_version
    KW_IMPORT = 4 | 16 | 64  # from_dlpack: stream, copy, device


# 1 when a front's keywords (kwnames, their values at values) are its plain
# case's: each one it takes, max_version (its value read into max_version),
# readonly False, any other None. Else 0: the call goes to Python unparsed,
# which parses it once, in the layer's words.
cdef bint plain_keywords(PyObject *const *values, PyObject *kwnames, int taken, PyObject **max_version) noexcept:
    cdef Py_ssize_t i
    cdef int bit
    cdef PyObject *k
    for i in range(0 if kwnames == NULL else PyTuple_GET_SIZE(<object>kwnames)):
        k = PyTuple_GET_ITEM(<object>kwnames, i)
        if k == state.str_max_version and taken & KW_MAX_VERSION:
            max_version[0] = values[i]
            continue
        for bit in range(7):
            if taken & (1 << bit) and PyUnicode_CompareWithASCIIString(<object>k, KEYWORD_NAMES[bit]) == 0:
                break
        else:
            return False
        if bit == 0:
            max_version[0] = values[i]
        elif values[i] != (Py_False if bit == 1 else <PyObject *>None):
            return False
    return True


# The front's call when the front does not run it: the Python function, called
# as the front was.
cdef inline object handed_back(Exporter self, PyObject *const *args, size_t nargsf, PyObject *kwnames):
    return take(PyObject_Vectorcall(<PyObject *>self.fallback, args, nargsf, kwnames))


# wrap(x, *, readonly=False): core_wrap, whose every other case calls the
# Python wrap through impl["wrap"].
cdef object wrapper_call(Exporter self, PyObject *const *args, size_t nargsf, PyObject *kwnames):
    if (PyVectorcall_NARGS(nargsf) != 1 or state.py_impl == NULL or
            not plain_keywords(args + 1, kwnames, KW_READONLY, NULL)):
        return handed_back(self, args, nargsf, kwnames)
    return core_wrap(args[0], Py_False)


# export(x, *, max_version=None, ...): the plain cases (a NumPy array of a
# NumPy dtype, a host producer with a C exchange API or a host test, asked for
# nothing but max_version), every other case the Python function.
cdef object exporter_call(Exporter self, PyObject *const *args, size_t nargsf, PyObject *kwnames):
    cdef PyObject *max_version = <PyObject *>None
    if (PyVectorcall_NARGS(nargsf) != 1 or state.py_impl == NULL or state.plain_dtypes == NULL or
            not plain_keywords(args + 1, kwnames, KW_EXPORT, &max_version)):
        return handed_back(self, args, nargsf, kwnames)
    cdef bint versioned = max_version != <PyObject *>None
    if versioned and not accepted_versioned(verdict, max_version):
        return handed_back(self, args, nargsf, kwnames)
    capsule = export_plain(args[0], max_version, versioned)
    if capsule is not NOT_PLAIN:
        return capsule
    return handed_back(self, args, nargsf, kwnames)


# The capsule of a plain export, or NOT_PLAIN: the Python function runs.
cdef object export_plain(PyObject *x, PyObject *max_version, bint versioned):
    cdef PyObject *hold
    cdef DLManagedTensorVersioned *m
    if x.ob_type == <PyTypeObject *>cnp.ndarray:
        capsule = numpy_export(x, versioned)
        return NOT_PLAIN if capsule is None else capsule
    cdef ImportEntry *e = import_entry(x.ob_type, &hold)
    owner = take(hold)
    if is_entry(e) and e.api == NULL:  # a producer with a host test (JAX), on the host by it
        return capsule_export(<object>x, <object>max_version, versioned, e.read_only) if host_test(e, x) > 0 else NOT_PLAIN
    if versioned and is_entry(e) and exchange_on_cpu(e, x, False):
        m = exchange_export_of(<object>x, e)
        if m != NULL:
            return owning_capsule(m)
    return NOT_PLAIN


# from_dlpack(a) of an exact NumPy array: the Python function's first shortcut,
# a view, for a C-contiguous array of a plain dtype (the Python function gives
# the same view of the rest). NULL with no error set when it is not that case.
cdef PyObject *numpy_view(PyObject *x) noexcept:
    cdef PyObject *a[2]
    if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x) or not is_plain(descr_of(x)):
        return NULL
    a[0] = x
    a[1] = <PyObject *>cnp.ndarray
    return PyObject_VectorcallMethod(state.str_view, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)


from cpython.long cimport PyLong_CheckExact
from cpython.object cimport PyObject_RichCompareBool, Py_EQ
from cpython.set cimport PySet_Contains
from cpython.tuple cimport PyTuple_CheckExact
from cpython.unicode cimport PyUnicode_CheckExact


cdef int names_cpu(PyObject *device) except -1:
    """1 where a device= names the CPU as every caller writes it: a Device
    equal to the CPU's, "cpu", or (1, 0) of exact ints (any other form, 0:
    the Python path, which reads it as Device does). An error of the
    comparison (an interrupt in Device.__eq__) is raised, never dropped."""
    if device == state.cpu_device:
        return True
    if state.device_class != NULL and <PyObject *>device.ob_type == state.device_class:
        return PyObject_RichCompareBool(<object>device, <object>state.cpu_device, Py_EQ)
    if PyUnicode_CheckExact(<object>device):
        return PyUnicode_CompareWithASCIIString(<object>device, "cpu") == 0
    if not PyTuple_CheckExact(<object>device) or PyTuple_GET_SIZE(<object>device) != 2:
        return False
    cdef PyObject *kind = PyTuple_GET_ITEM(<object>device, 0)
    cdef PyObject *index = PyTuple_GET_ITEM(<object>device, 1)
    return (PyLong_CheckExact(<object>kind) and PyLong_CheckExact(<object>index) and
            <object>kind == 1 and <object>index == 0)


# from_dlpack(x, *, device=None, copy=None, stream=None): asked for nothing but
# x (or device= the CPU, as names_cpu reads it, for data on the CPU: the same import),
# the view of a NumPy array, or the core's import of a producer it was told
# about (core_import_host); every other case the Python function. (The view is
# a C reference, as it comes: a Cython local would cost a reference count.)
cdef object importer_call(Exporter self, PyObject *const *args, size_t nargsf, PyObject *kwnames):
    cdef PyObject *got
    cdef bint to_cpu = False
    if PyVectorcall_NARGS(nargsf) != 1 or state.py_impl == NULL or state.plain_dtypes == NULL:
        return handed_back(self, args, nargsf, kwnames)
    if not plain_keywords(args + 1, kwnames, KW_IMPORT, NULL):
        to_cpu = (state.cpu_device != NULL and PyTuple_GET_SIZE(<object>kwnames) == 1 and names_cpu(args[1])
                  and PyUnicode_CompareWithASCIIString(<object>PyTuple_GET_ITEM(<object>kwnames, 0), "device") == 0)
        if not to_cpu:
            return handed_back(self, args, nargsf, kwnames)
    if args[0].ob_type == <PyTypeObject *>cnp.ndarray:
        got = numpy_view(args[0])
        if got != NULL or PyErr_Occurred() != NULL:
            return take(got)
        return handed_back(self, args, nargsf, kwnames)
    imported = core_import_host(<object>args[0], to_cpu)
    if imported is not None:
        return imported
    return handed_back(self, args, nargsf, kwnames)


# convert(x, to): to a library gpu_dlpack lands on the host with nothing to
# correct (state.host_consumers, set_convert: NumPy), what convert's Python
# function makes of it where the core makes it (from_dlpack(x)'s view of a
# NumPy array, from_dlpack(x, device=CPU)'s import of another); every other
# call, the Python function.
cdef object converter_call(Exporter self, PyObject *const *args, size_t nargsf, PyObject *kwnames):
    cdef PyObject *got
    if (PyVectorcall_NARGS(nargsf) != 2 or kwnames != NULL or state.host_consumers == NULL or
            state.py_impl == NULL or state.plain_dtypes == NULL or
            not PyUnicode_CheckExact(<object>args[1])):
        return handed_back(self, args, nargsf, kwnames)
    cdef int host = PySet_Contains(<object>state.host_consumers, <object>args[1])
    if host != 1:
        PyErr_Clear()
        return handed_back(self, args, nargsf, kwnames)
    if args[0].ob_type == <PyTypeObject *>cnp.ndarray:
        got = numpy_view(args[0])
        if got != NULL or PyErr_Occurred() != NULL:
            return take(got)
        return handed_back(self, args, nargsf, kwnames)
    imported = core_import_host(<object>args[0], True)
    if imported is not None:
        return imported
    return handed_back(self, args, nargsf, kwnames)


# inspect(capsule): the core's read (which hands to the Python read every case
# it does not read); any other call, the Python function.
cdef object reader_call(Exporter self, PyObject *const *args, size_t nargsf, PyObject *kwnames):
    if PyVectorcall_NARGS(nargsf) != 1 or kwnames != NULL or state.py_impl == NULL:
        return handed_back(self, args, nargsf, kwnames)
    return read_info(<object>args[0])


cdef enum:
    EXPORTER_EXPORT = 0
    EXPORTER_WRAP = 1
    EXPORTER_IMPORT = 2
    EXPORTER_INSPECT = 3
    EXPORTER_CONVERT = 4


# An Exporter is the Python function it fronts, to every reader: the same
# repr, class (isinstance and inspect.isfunction: pydoc and Sphinx read it as
# that function), binding as a class attribute, pickling by name, and every
# attribute the front does not hold (__code__, __defaults__...) read from the
# function. functools.update_wrapper gives it __name__, __qualname__,
# __module__, __doc__ and __wrapped__, whose signature inspect reads. Only
# type() tells the two apart.
@cython.final
@cython.auto_pickle(False)
cdef public class Exporter [object Exporter, type ExporterType]:  # public: its struct is named (below)
    """export(), wrap(), from_dlpack(), inspect() or convert() with their plain cases in C."""
    cdef vectorcallfunc vectorcall  # the call of its kind (set_up_exporter)
    cdef object fallback            # the Python function
    cdef dict __dict__              # __doc__, __wrapped__...: functools.update_wrapper

    def __cinit__(self, fallback, int kind=EXPORTER_EXPORT, /):
        if kind < EXPORTER_EXPORT or kind > EXPORTER_CONVERT:
            raise ValueError(f"Exporter: no kind {kind} (0 export, 1 wrap, 2 from_dlpack, 3 inspect, 4 convert)")
        self.vectorcall = <vectorcallfunc>(wrapper_call if kind == EXPORTER_WRAP else
                                           importer_call if kind == EXPORTER_IMPORT else
                                           reader_call if kind == EXPORTER_INSPECT else
                                           converter_call if kind == EXPORTER_CONVERT else
                                           exporter_call)
        self.fallback = fallback

    def __get__(self, obj, type):
        if obj is None:
            return self
        return PyMethod_New(self, obj)

    def __repr__(self):
        return repr(self.fallback)

    def __getattr__(self, name):
        return getattr(self.fallback, name)

    @property
    def __class__(self):
        return type(self.fallback)

    # Pickled by reference, as a function is: the name its module gives it.
    def __reduce__(self):
        return self.__qualname__


cdef extern from *:
    Py_ssize_t VECTORCALL_OFFSET "offsetof(struct Exporter, vectorcall)"


cdef PyGetSetDef exporter_dict


# Made once per process, in the main interpreter (module setup): Cython gives
# a class no vectorcall of its own (3.3 leaves tp_vectorcall_offset empty, and
# a __call__ is tp_call, which takes a tuple and a dict), so the front sets it
# here: each front is called as a function is, through the call of its kind.
# Its __dict__ may be replaced, as a function's may (Cython's is read-only).
cdef int set_up_exporter() except -1:
    cdef TypeSlots *tp = <TypeSlots *>Exporter
    tp.tp_vectorcall_offset = VECTORCALL_OFFSET
    tp.tp_call = PyVectorcall_Call
    tp.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL
    exporter_dict.name = "__dict__"
    exporter_dict.get = generic_get_dict
    exporter_dict.set = generic_set_dict
    exporter_dict.doc = NULL
    exporter_dict.closure = NULL
    (<dict>tp.tp_dict)["__dict__"] = take(PyDescr_NewGetSet(<PyTypeObject *>Exporter, &exporter_dict))
    PyType_Modified(Exporter)
    return 0
