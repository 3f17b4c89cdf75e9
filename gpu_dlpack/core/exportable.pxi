# The exported object: ExportableBase, the compiled base of
# gpu_dlpack.Exportable (what wrap() returns), whose __dlpack__ runs in C
# the plan Python made at wrap time. NumPy's capsule is
# core/numpy_export.pxi's, the DLPack C exchange API its type offers
# core/exchange_api.pxi's.
#
# Reading the code: a state pointer (state.x, a PyObject *) is copied to a
# local before it is cast to an object, for Cython to pass it on without a
# reference of its own; <PyObject *>False is Cython's 0, so the booleans are
# Py_True and Py_False.

cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.pycapsule cimport PyCapsule_CheckExact
from cpython.object cimport PyObject, PyTypeObject, PyMethodDef, PyCFunction
from cpython.ref cimport Py_INCREF, Py_DECREF, Py_XDECREF
from cpython.exc cimport PyErr_Clear, PyErr_ExceptionMatches, PyErr_Occurred
from cpython.list cimport PyList_GET_SIZE
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.long cimport PyLong_CheckExact, PyLong_AsLongAndOverflow, PyLong_AsVoidPtr
from cpython.type cimport PyType_Check, PyType_Modified
from cpython.unicode cimport PyUnicode_CompareWithASCIIString
from cpython.pycapsule cimport PyCapsule_Destructor
cimport numpy as cnp

from dlpack cimport (DLDevice, DLDataType, DLTensor, DLManagedTensorVersioned, FLAG_READ_ONLY, DLPackExchangeAPI,
                     TypeSlots, MAX_NDIM, name_or_null)

cdef extern from "Python.h":
    # Calls whose NULL the core handles where it gets it (an error cleared,
    # or raised on with take()), as Python.h declares them, or under a name
    # of their own where Cython's cpython package declares them raising
    # (and those of core/numpy_export.pxi).
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    PyObject *PyVectorcall_Call(PyObject *callable, PyObject *tuple, PyObject *dict)
    PyObject *PyObject_VectorcallMethod(PyObject *name, PyObject *const *args, size_t nargsf, PyObject *kwnames)
    PyObject *PyObject_CallOneArg(PyObject *callable, PyObject *arg)
    PyObject *PyDescr_NewMethod(PyTypeObject *type, PyMethodDef *meth)
    PyObject *Py_True
    PyObject *Py_False
    int METH_FASTCALL, METH_KEYWORDS
    unsigned long Py_TPFLAGS_HAVE_VECTORCALL

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
        const char *doc
    int T_OBJECT_EX
    PyObject *PyDescr_NewMember(PyTypeObject *type, PyMemberDef *member)



cpdef enum:
    # The plan of a wrapper, which Python makes at wrap time (_export._plan):
    # the general path (the Python method), NumPy's own capsule, the
    # producer's C exchange API, or a host producer's capsule (JAX).
    PLAN_GENERAL = 0
    PLAN_NUMPY = 1
    PLAN_EXCHANGE = 2
    PLAN_CAPSULE = 3


# What run_plan() and export_plain() give when theirs is not a plain case (not
# None, which the Python functions a plain case hands on to may return).
cdef object NOT_PLAIN = object()


cdef inline void put(PyObject **slot, PyObject *value) noexcept:
    """Set a member to a new reference to value; the old one is dropped after
    (its finalizer may run Python, which then sees the new one)."""
    cdef PyObject *old = slot[0]
    Py_INCREF(<object>value)
    slot[0] = value
    Py_XDECREF(old)


cdef inline void fill(PyObject **slot, PyObject *value) noexcept:
    """Set a member tp_alloc left NULL to a new reference to value."""
    Py_INCREF(<object>value)
    slot[0] = value


cdef inline void unset(PyObject **slot) noexcept:
    cdef PyObject *old = slot[0]
    slot[0] = NULL
    Py_XDECREF(old)


cdef inline bint is_entry(ImportEntry *e) noexcept:
    """Whether import_entry found an entry (None: not imported this way)."""
    return <PyObject *>e != <PyObject *>None


# Python's state of a wrapper: its members, in the order its struct holds
# them (object pointers one after another, from x).
cdef tuple MEMBER_NAMES = (b"_x", b"_readonly", b"_floor", b"_source", b"_device", b"_request", b"_reported",
                           b"_held")
cdef enum:
    N_MEMBERS = 8


@cython.auto_pickle(False)
cdef public class ExportableBase [object Exportable, type ExportableType]:  # public: its struct is named (Members)
    """The compiled part of gpu_dlpack.Exportable."""
    # Python's state of the wrapper, its members _x, _readonly... (Members
    # below): unset (NULL) until Python sets them, as a Python slot is.
    cdef object x, readonly, floor, source, device, request, reported, held
    # The plan (None: none).
    cdef object plan_dtype    # PLAN_NUMPY: the dtype the plan was made for
    cdef object plan_type     # the type of x the plan was made for
    cdef object guards_owner  # what keeps the entry below alive
    cdef const DLPackExchangeAPI *api  # PLAN_EXCHANGE
    cdef ImportEntry *guards           # PLAN_EXCHANGE, PLAN_CAPSULE: the producer type's entry
    cdef int plan
    cdef object __weakref__

    def __cinit__(self):
        # Cython sets every object member to None: Python's start unset.
        cdef PyObject **slots = &members(self).x
        cdef int i
        for i in range(N_MEMBERS):
            unset(&slots[i])

    # The docstring is the Python method's (gpu_dlpack/_export.py), word for
    # word (tests/test_conventions.py compares them).
    @cython.embedsignature(False)
    def __dlpack_device__(self):
        """__dlpack_device__($self, /)
--

The ``(device_type, device_id)`` of the wrapped array.

Returns
-------
tuple of int
    The DLPack device pair, as read when the wrapper was made."""
        cdef PyObject *device = members(self).device
        if device == NULL:  # deleted, or never set: what Python raises
            return getattr(self, "_device")
        return <object>device

    @cython.embedsignature(False)
    def _set_plan(self, int plan, arg=None, /):
        """_set_plan($self, plan, arg=None, /)
--

The plan __dlpack__ runs in C (set by Python at wrap time)."""
        cdef PyObject *hold
        cdef ImportEntry *e
        configured()
        self.plan = PLAN_GENERAL
        self.plan_dtype = None
        self.plan_type = None
        self.guards_owner = None
        self.api = NULL
        self.guards = NULL
        if plan == PLAN_NUMPY:
            self.plan_dtype = arg
            self.plan_type = cnp.ndarray
            self.plan = plan
        elif (plan == PLAN_EXCHANGE or plan == PLAN_CAPSULE) and PyType_Check(arg):
            e = import_entry(<PyTypeObject *>arg, &hold)
            owner = take(hold)
            # A plan the type's entry allows: its exchange API, or its host test
            if is_entry(e) and (e.api != NULL if plan == PLAN_EXCHANGE else e.host_method != NULL):
                self.api = e.api
                self.guards = e
                self.guards_owner = owner
                self.plan_type = arg
                self.plan = plan
        return self.plan


cdef extern from *:
    # ExportableBase's object members as C holds them: Python's state may be
    # NULL (unset), which Cython's attributes cannot be (Cython still visits,
    # clears and frees them all).
    ctypedef struct Members "struct Exportable":
        PyObject *x
        PyObject *readonly
        PyObject *floor
        PyObject *source
        PyObject *device
        PyObject *request
        PyObject *reported
        PyObject *held
        PyObject *plan_dtype
        PyObject *plan_type
        PyObject *guards_owner
    Py_ssize_t X_OFFSET "offsetof(struct Exportable, x)"


cdef inline Members *members(ExportableBase self) noexcept:
    return <Members *><PyObject *>self


# The versioned tensor of a PLAN_EXCHANGE export where the rules pass it on as
# it is; NULL (no error) when they do not.
cdef DLManagedTensorVersioned *exchange_export_of(object x, ImportEntry *e) noexcept:
    cdef DLManagedTensorVersioned *m = NULL
    if e.api.managed_tensor_from_py_object_no_sync(<PyObject *>x, &m) != 0 or m == NULL:
        PyErr_Clear()
        return NULL
    cdef DLTensor *t = &m.dl_tensor
    if (not guards_pass(e, <PyObject *>x, t.dtype.code) or m.version.major != 1 or not well_formed(t) or
            t.device.device_type != state.cpu_type or not dtype_known(t.dtype) or t.dtype.bits < 8 or
            (t.ndim and t.strides == NULL) or (m.flags & FLAG_READ_ONLY)):
        if m.deleter:
            m.deleter(m)
        return NULL
    (<uint64_t *>m)[0] = verdict.word
    return m


# The capsule of export(x, max_version=...) (no other argument) for a host
# producer on the host by its host test (JAX): its answer passed on where it
# obeys the rules, adapted where it is of the other kind; any other answer, or
# the error it raised, handed to _exchange.host_export (the producer is not
# asked the same again, and the error is not dropped). read_only: its arrays
# are read-only whatever its capsules say (the type's entry): a versioned
# capsule passed on says READ_ONLY, as the Python path's does.
cdef object capsule_export(object x, object max_version, bint versioned, bint read_only):
    cdef PyObject *a[4]
    cdef PyObject *out
    cdef DLDevice cpu
    a[0] = <PyObject *>x
    a[1] = <PyObject *>max_version
    a[2] = <PyObject *>None
    # The verdict on max_version is read before and after the producer runs
    # (Python, which may set another floor), as the Python path reads it.
    if versioned and not accepted_versioned(verdict, <PyObject *>max_version):
        return take(delegate_raw("host_export", a, 2))
    # A C reference: dropped with drop_keeping_error (its destructor may run Python).
    cdef PyObject *answer = ask_capsule(<PyObject *>x, versioned)
    if answer == NULL:
        error = owned(taken_error())  # not an Exception (an interrupt): raised as it is, as in Python
        a[3] = <PyObject *>error
        return take(delegate_raw("host_export", a, 4))
    cdef int kind = -1 if versioned and not accepted_versioned(verdict, <PyObject *>max_version) else kind_of(answer)
    cdef void *ptr = NULL if kind < 0 else capsule_pointer(answer, VERSIONED if kind else LEGACY)
    if ptr == NULL:
        PyErr_Clear()
    cdef DLTensor *t = NULL if ptr == NULL else tensor_of(ptr, kind)
    # The checks of every capsule passed on: well-formed, a dtype exchanged
    # whole bytes wide, on the device the host test said (the CPU, any id).
    cdef bint plain = (t != NULL and (not kind or (<DLManagedTensorVersioned *>ptr).version.major == 1) and
                       well_formed(t) and t.device.device_type == state.cpu_type and dtype_known(t.dtype) and
                       t.dtype.bits >= 8)
    # Legacy for legacy is Python's: whether the data may be handed over
    # writeable is the producer's row (JAX's arrays are immutable: rule 5).
    if (plain and kind and versioned and (t.strides != NULL or t.ndim == 0) and
            not ((<DLManagedTensorVersioned *>ptr).flags & ~FLAG_READ_ONLY)):
        (<uint64_t *>ptr)[0] = verdict.word  # versioned for versioned: stamped
        if read_only:
            (<DLManagedTensorVersioned *>ptr).flags |= FLAG_READ_ONLY
        return take(answer)
    if plain and not kind and versioned:
        # The data of a legacy capsule counts as read-only (rule 6), on the
        # CPU as NumPy labels it.
        cpu.device_type = state.cpu_type
        cpu.device_id = 0
        try:
            out = adapted_capsule(answer, 0, cpu)
        except BaseException:
            drop_keeping_error(answer)
            raise
        if out != NULL:
            drop_keeping_error(answer)
            return take(out)
    a[2] = answer
    out = delegate_raw("host_export", a, 3)
    drop_keeping_error(answer)
    return take(out)


# 1 when the plain plan may run now: its members are as the plan was made.
# Python may delete or replace them, also during a call (any allocation or
# call out may run it): what is checked here is checked again after those, or
# held (run_plan, plan_tensor).
cdef inline bint plan_holds(ExportableBase self) noexcept:
    cdef Members *m = members(self)
    return (self.plan != PLAN_GENERAL and m.x != NULL and m.readonly == Py_False and
            m.reported == <PyObject *>None and m.floor == <PyObject *>None and self.plan_type is not None and
            <PyObject *>m.x.ob_type == m.plan_type and
            (self.plan != PLAN_NUMPY or self.plan_dtype is not None) and
            (self.plan == PLAN_NUMPY or (self.guards != NULL and self.guards_owner is not None)))


# The capsule that owns the versioned tensor m; out of memory, m is released
# and the MemoryError raised.
cdef object owning_capsule(DLManagedTensorVersioned *m):
    cdef PyObject *made = new_capsule(m, VERSIONED, <PyCapsule_Destructor>capsule_destructor)
    if made == NULL:
        release_tensor(m, 1)
    return take(made)


# 1 when x's data is on the CPU (device id 0 where id_zero) as its type's C
# exchange API says (dltensor_from_py_object_no_sync; an error it sets is
# cleared: then not), else 0.
cdef bint exchange_on_cpu(ImportEntry *e, PyObject *x, bint id_zero) noexcept:
    cdef DLTensor t
    if e.api.dltensor_from_py_object_no_sync == NULL:
        return False
    if e.api.dltensor_from_py_object_no_sync(x, &t) != 0:
        PyErr_Clear()
        return False
    return t.device.device_type == state.cpu_type and (t.device.device_id == 0 or not id_zero)


# The general __dlpack__ (the Python method), called as this one was.
cdef object exportable_general(ExportableBase self, PyObject *const *args, size_t nargsf, PyObject *kwnames):
    cdef PyObject *stack[8]
    cdef Py_ssize_t i, nargs = PyVectorcall_NARGS(nargsf)
    cdef Py_ssize_t nkw = 0 if kwnames == NULL else PyTuple_GET_SIZE(<object>kwnames)
    configured()
    if nargs + nkw > 7:
        raise TypeError("__dlpack__() takes keyword arguments only")
    stack[0] = <PyObject *>self
    for i in range(nargs + nkw):
        stack[i + 1] = args[i]
    return take(PyObject_Vectorcall(state.exportable_fallback, stack, nargs + 1, kwnames))


# The keywords of the fronts' plain cases, one bit each (KEYWORD_NAMES[i] is
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


# __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None): the
# plan, asked for nothing but max_version; every other call, and every case
# the plan does not take, the Python method. A METH_FASTCALL function of its
# own (set_up_exportable), not a def: the call is handed on as it came.
cdef object exportable_dlpack(ExportableBase self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames):
    cdef PyObject *max_version = <PyObject *>None
    configured()
    if (PyVectorcall_NARGS(nargsf) != 0 or not plan_holds(self) or
            not plain_keywords(args, kwnames, KW_DLPACK, &max_version)):
        return exportable_general(self, args, nargsf, kwnames)
    # The verdict on max_version is read in run_plan, after its allocation.
    capsule = run_plan(self, <object>max_version, max_version != <PyObject *>None)
    if capsule is not NOT_PLAIN:
        return capsule
    return exportable_general(self, args, nargsf, kwnames)


# The request a wrapper holds (its _request), when it is the one of a call
# asked for this max_version (the same object) and nothing else; else None.
cdef inline object same_request(PyObject *request, object max_version):
    if (request == NULL or not PyTuple_CheckExact(<object>request) or PyTuple_GET_SIZE(<object>request) != 4 or
            PyTuple_GET_ITEM(<object>request, 1) != <PyObject *>max_version or
            PyTuple_GET_ITEM(<object>request, 0) != <PyObject *>None or
            PyTuple_GET_ITEM(<object>request, 2) != <PyObject *>None or
            PyTuple_GET_ITEM(<object>request, 3) != <PyObject *>None):
        return None
    return <object>request


# The capsule of the plan asked for max_version (and nothing else), or
# NOT_PLAIN: the general path runs.
cdef object run_plan(ExportableBase self, object max_version, bint versioned):
    cdef DLManagedTensorVersioned *m
    # The request first, as the Python method sets it first: its allocation
    # may run finalizers, which may change the members, so they are checked
    # after it, and held.
    request = same_request(members(self).request, max_version)
    if request is None:
        request = (None, max_version, None, None)
    if not plan_holds(self) or (versioned and not accepted_versioned(verdict, <PyObject *>max_version)):
        return NOT_PLAIN
    # The plan held for the rest of the call (Python run meanwhile may drop
    # the members): the array, the dtype, what keeps the type's entry alive.
    cdef int plan = self.plan
    x = <object>members(self).x
    dtype = self.plan_dtype
    cdef ImportEntry *guards = self.guards
    owner = self.guards_owner
    if plan == PLAN_NUMPY:
        capsule = None if descr_of(<PyObject *>x) != <PyObject *>dtype else numpy_export(<PyObject *>x, versioned)
        if capsule is None:
            # NumPy refused (a read-only array as legacy...), or the dtype
            # changed: the general path says why, in gpu_dlpack's words.
            return NOT_PLAIN
        put(&members(self).request, <PyObject *>request)
        return capsule
    if plan == PLAN_CAPSULE:
        put(&members(self).request, <PyObject *>request)  # also when the export raises, as in Python
        return capsule_export(x, max_version, versioned, guards.read_only)
    if not versioned:
        return NOT_PLAIN
    # PLAN_EXCHANGE, asked for a versioned capsule
    m = exchange_export_of(x, guards)
    if m == NULL:
        return NOT_PLAIN
    capsule = owning_capsule(m)
    put(&members(self).request, <PyObject *>request)
    return capsule


# What wrap() makes of a plain case (export.pxi: data on the CPU), as tp_alloc
# leaves it: every member set here, the plan with it.
cdef object new_exportable(PyObject *x, int plan, PyObject *dtype, ImportEntry *e, PyObject *hold):
    cdef PyTypeObject *cls = state.exportable_class
    cdef ExportableBase self = <ExportableBase>(<TypeSlots *>cls).tp_alloc(cls, 0)
    cdef Members *m = members(self)
    fill(&m.x, x)
    fill(&m.readonly, Py_False)
    fill(&m.floor, <PyObject *>None)
    fill(&m.source, state.cpu_device)
    fill(&m.device, state.cpu_dlpack)
    fill(&m.request, <PyObject *>None)
    fill(&m.held, <PyObject *>None)
    fill(&m.reported, <PyObject *>None)
    self.plan = plan
    fill(&m.plan_type, <PyObject *>x.ob_type)
    if plan == PLAN_NUMPY:
        fill(&m.plan_dtype, dtype)
        fill(&m.guards_owner, <PyObject *>None)
    else:
        # the entry the caller looked up, and what keeps it alive
        fill(&m.plan_dtype, <PyObject *>None)
        self.api = e.api
        self.guards = e
        fill(&m.guards_owner, hold)
    return self


cdef PyMethodDef dlpack_method
cdef PyMemberDef exportable_members[N_MEMBERS]

# __dlpack__'s docstring: its signature, then the Python method's docstring,
# which the Python source owns (document_dlpack, told by set_python).
cdef bytes dlpack_doc = (b"__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n"
                         b"--\n\n")
cdef bytes dlpack_signature = dlpack_doc


cdef int document_dlpack(object general) except -1:
    global dlpack_doc
    doc = general.__doc__
    if doc is not None:  # None under python -OO
        import inspect
        doc = dlpack_signature + inspect.cleandoc(doc).encode()
        dlpack_method.ml_doc = doc  # before the old one is let go
        dlpack_doc = doc
    return 0


# Made once per process, in the main interpreter (module setup, after
# setup_once): what ExportableBase's type holds besides Cython's methods:
# __dlpack__ (above); Python's state as members that raise AttributeError
# while unset and are unset by del, as a Python slot is (the C exchange API:
# set_up_exchange_api, core/exchange_api.pxi).
cdef bint exportable_set_up = False

cdef int set_up_exportable() except -1:
    global exportable_set_up
    cdef int i
    cdef PyTypeObject *tp = <PyTypeObject *>ExportableBase
    if exportable_set_up:
        return 0
    tp_dict = <dict>(<TypeSlots *>tp).tp_dict
    dlpack_method.ml_name = "__dlpack__"
    dlpack_method.ml_meth = <PyCFunction><void *>exportable_dlpack
    dlpack_method.ml_flags = METH_FASTCALL | METH_KEYWORDS
    dlpack_method.ml_doc = dlpack_doc
    tp_dict["__dlpack__"] = take(PyDescr_NewMethod(tp, &dlpack_method))
    for i in range(N_MEMBERS):
        exportable_members[i].name = <bytes>MEMBER_NAMES[i]  # a constant of the module: never freed
        exportable_members[i].type = T_OBJECT_EX
        exportable_members[i].offset = X_OFFSET + i * sizeof(PyObject *)
        exportable_members[i].flags = 0
        exportable_members[i].doc = NULL
        tp_dict[MEMBER_NAMES[i].decode()] = take(PyDescr_NewMember(tp, &exportable_members[i]))
    PyType_Modified(ExportableBase)
    exportable_set_up = True  # last: what says it is done
    return 0
