# The producer side: ExportableBase, the compiled base of
# gpu_dlpack.Exportable (what wrap() returns), whose __dlpack__ runs in C
# the plan Python made at wrap time, and the DLPack C exchange API its type
# offers.
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
    # of their own where Cython's cpython package declares them raising.
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    PyObject *PyVectorcall_Call(PyObject *callable, PyObject *tuple, PyObject *dict)
    PyObject *PyObject_Vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
    PyObject *PyObject_VectorcallMethod(PyObject *name, PyObject *const *args, size_t nargsf, PyObject *kwnames)
    PyObject *PyObject_CallOneArg(PyObject *callable, PyObject *arg)
    int set_context "PyCapsule_SetContext"(PyObject *capsule, void *context)
    void *get_context "PyCapsule_GetContext"(PyObject *capsule)
    PyObject *get_attr "PyObject_GetAttr"(PyObject *o, PyObject *name)
    PyObject *new_capsule "PyCapsule_New"(void *pointer, const char *name, PyCapsule_Destructor destructor)
    void *capsule_pointer "PyCapsule_GetPointer"(PyObject *capsule, const char *name)
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

cdef extern from *:
    # The new reference a C call returned, from here Cython's (a cast: it
    # costs nothing); NULL: the error the call left set, raised on.
    object take "(PyObject *)"(PyObject *ref)

# The exchange API's entries as the table holds them (a consumer's C calls them).
ctypedef int (*from_py_t)(void *, DLManagedTensorVersioned **) noexcept
ctypedef int (*to_py_t)(DLManagedTensorVersioned *, void **) noexcept
ctypedef int (*stream_t)(int32_t, int32_t, void **) noexcept


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


cdef inline bint is_plain(PyObject *dtype) noexcept:
    """Whether dtype is one of PLAN_NUMPY's (compared by identity)."""
    cdef int i
    for i in range(state.n_plain):
        if state.plain_list[i] == dtype:
            return True
    return False


cdef inline PyObject *descr_of(PyObject *array) noexcept:
    """x.dtype of an exact NumPy array x, without an attribute lookup."""
    return <PyObject *>cnp.PyArray_DESCR(<cnp.ndarray>array)


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


# The capsule of an exact NumPy array x of a plain dtype: made here where it
# can be, else NumPy's own; None when x's dtype is not plain or NumPy refuses
# (the general path says why).
cdef inline object numpy_export(PyObject *x, bint versioned):
    cdef PyObject *made
    if versioned:
        made = numpy_versioned(x)  # made here, as NumPy makes it
        if made != NULL:
            return take(made)
    return numpy_capsule(<object>x, versioned) if is_plain(descr_of(x)) else None


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


# NumPy's versioned capsule stamped DLPACK_VERSION. Since DLPack 1.2 a tensor
# with dimensions carries strides: NumPy 2.1 to 2.3 leave a C-contiguous
# array's out (NULL) but write them right after the shape, where they are
# pointed at when Python confirmed it (numpy_strides_after_shape). -1 (no
# error set) when the capsule is not one to stamp: the general path builds it.
cdef int stamp_numpy(PyObject *capsule) noexcept:
    cdef DLManagedTensorVersioned *m = <DLManagedTensorVersioned *>capsule_pointer(capsule, VERSIONED)
    if m == NULL or (<uintptr_t>m & 7):
        PyErr_Clear()
        return -1
    cdef DLTensor *t = &m.dl_tensor
    if t.ndim > 0 and t.strides == NULL:
        if not state.numpy_strides_after_shape or t.shape == NULL:
            return -1
        t.strides = t.shape + t.ndim
    (<uint64_t *>m)[0] = verdict.word
    return 0


# NumPy's __dlpack__, read once from the ndarray type (a static type, and an
# exact ndarray has no instance dict); NULL (no error set) when it cannot be
# read.
cdef object ndarray_dlpack = None

cdef inline PyObject *numpy_dlpack() noexcept:
    global ndarray_dlpack
    cdef PyObject *found
    if ndarray_dlpack is None:
        found = get_attr(<PyObject *>cnp.ndarray, state.str_dlpack)
        if found == NULL:
            PyErr_Clear()
            return NULL
        ndarray_dlpack = take(found)
    return <PyObject *>ndarray_dlpack


# The DLPack dtype of each plain dtype, as Python told it with the dtype
# (set_dtypes: plain_pairs[i] is state.plain_list[i]'s). NumPy has two
# objects for some pairs ('q' and 'l' are both int64 on Linux): each is
# plain, each with its pair.
cdef DLDataType plain_pairs[32]


cdef bint plain_dl_dtype(PyObject *dtype, DLDataType *out) noexcept:
    cdef int i
    for i in range(state.n_plain):
        if state.plain_list[i] == dtype:
            out[0] = plain_pairs[i]
            return True
    return False


# The deleter of numpy_tensor's tensors: the array let go and the struct freed
# with the GIL, a pending exception set aside (the release may run Python);
# after finalization both are left, as NumPy's deleter leaves them.
cdef void numpy_export_deleter(DLManagedTensorVersioned *m) noexcept nogil:
    if not Py_IsInitialized():
        return
    with gil:
        numpy_export_free(m)


cdef inline void numpy_export_free(DLManagedTensorVersioned *m) noexcept:
    cdef PyObject *array = <PyObject *>m.manager_ctx
    PyMem_Free(m)
    if PyErr_Occurred() == NULL:
        Py_DECREF(<object>array)
    else:
        drop_keeping_error(array)


# NumPy's versioned tensor of an exact ndarray of a plain dtype, made here
# (NumPy 2.4 and later: numpy_layout) as its own __dlpack__ makes it (strides
# always, in items; READ_ONLY where not writeable; the array held by
# manager_ctx), stamped DLPACK_VERSION. NULL (no error set) where NumPy would
# refuse or say otherwise, or memory runs out: NumPy's own __dlpack__ runs.
cdef DLManagedTensorVersioned *numpy_tensor(PyObject *x) noexcept:
    cdef DLDataType dtype
    cdef int i, ndim = cnp.PyArray_NDIM(<cnp.ndarray>x)
    cdef Py_ssize_t itemsize
    cdef PyObject *base = cnp.PyArray_BASE(<cnp.ndarray>x)
    if not state.numpy_layout or ndim < 0 or ndim > MAX_NDIM or not plain_dl_dtype(descr_of(x), &dtype):
        return NULL
    itemsize = dtype.bits >> 3
    cdef int shift = 0
    while (1 << shift) < itemsize:
        shift += 1
    if (1 << shift) != itemsize:
        return NULL
    # The device: NumPy reads an import's from the capsule at the root of its
    # bases (CUDA_HOST...): such an array is NumPy's to export.
    while base != NULL and cnp.PyArray_Check(<object>base):
        base = cnp.PyArray_BASE(<cnp.ndarray>base)
    if base != NULL and PyCapsule_CheckExact(<object>base):
        return NULL
    cdef cnp.npy_intp *strides = cnp.PyArray_STRIDES(<cnp.ndarray>x)
    cdef cnp.npy_intp *dims = cnp.PyArray_DIMS(<cnp.ndarray>x)
    for i in range(ndim):
        if strides[i] & (itemsize - 1):
            return NULL  # not whole items: NumPy refuses it, or exports it its way
    cdef DLManagedTensorVersioned *m = <DLManagedTensorVersioned *>PyMem_Malloc(
        sizeof(DLManagedTensorVersioned) + 2 * sizeof(int64_t) * <size_t>ndim)
    if m == NULL:
        return NULL
    cdef int64_t *shape = <int64_t *>(m + 1)
    (<uint64_t *>m)[0] = verdict.word
    m.manager_ctx = <void *>x
    m.deleter = numpy_export_deleter
    m.flags = 0 if cnp.PyArray_FLAGS(<cnp.ndarray>x) & cnp.NPY_ARRAY_WRITEABLE else FLAG_READ_ONLY
    m.dl_tensor.data = cnp.PyArray_DATA(<cnp.ndarray>x)
    m.dl_tensor.device.device_type = state.cpu_type
    m.dl_tensor.device.device_id = 0
    m.dl_tensor.ndim = ndim
    m.dl_tensor.dtype = dtype
    m.dl_tensor.shape = shape if ndim > 0 else NULL
    m.dl_tensor.strides = shape + ndim if ndim > 0 else NULL
    m.dl_tensor.byte_offset = 0
    for i in range(ndim):
        shape[i] = dims[i]
        shape[ndim + i] = strides[i] >> shift  # whole items: exact
    Py_INCREF(<object>x)  # the tensor's, let go by its deleter
    return m


# The capsule of numpy_tensor's tensor, which also holds it as its context
# (for its destructor); NULL (no error set) where there is none.
cdef PyObject *numpy_versioned(PyObject *x) noexcept:
    cdef DLManagedTensorVersioned *m = numpy_tensor(x)
    if m == NULL:
        return NULL
    cdef PyObject *capsule = new_capsule(m, VERSIONED, <PyCapsule_Destructor>numpy_capsule_destructor)
    if capsule == NULL or set_context(capsule, m) != 0:
        PyErr_Clear()
        if capsule == NULL:
            numpy_export_free(m)
        Py_XDECREF(capsule)  # its destructor frees the tensor
        return NULL
    return capsule


# Its destructor: an unconsumed tensor of its own freed here (the GIL held: no
# deleter to call through); any other, as capsule_destructor frees it.
cdef void numpy_capsule_destructor(PyObject *capsule) noexcept:
    cdef DLManagedTensorVersioned *m = NULL
    if name_or_null(capsule) == VERSIONED:
        m = <DLManagedTensorVersioned *>get_context(capsule)
    if m == NULL or m.deleter != numpy_export_deleter:
        PyErr_Clear()
        capsule_destructor(capsule)
        return
    numpy_export_free(m)


# NumPy's own capsule of x (an exact ndarray), stamped (and given its strides)
# when versioned; None when NumPy refuses, or its capsule would not do.
cdef object numpy_capsule(object x, bint versioned):
    cdef PyObject *a[2]
    cdef PyObject *capsule = NULL
    cdef PyObject *method = numpy_dlpack()
    a[0] = <PyObject *>x
    if method != NULL:
        if versioned:
            a[1] = state.ask_versioned
            capsule = PyObject_Vectorcall(method, a, 1, state.kw_max_version)
        else:
            capsule = PyObject_Vectorcall(method, a, 1, NULL)
    if capsule == NULL or (versioned and stamp_numpy(capsule) != 0):
        Py_XDECREF(capsule)
        PyErr_Clear()
        return None
    return take(capsule)


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


# The DLPack C exchange API of Exportable (offered on its type).
cdef int exportable_from_py(void *obj, DLManagedTensorVersioned **out) except -1:
    cdef PyObject *a[2]
    cdef DLManagedTensorVersioned *m = NULL
    out[0] = NULL
    configured()
    if not isinstance(<object>obj, ExportableBase):
        raise TypeError("the DLPack exchange API of gpu_dlpack takes a gpu_dlpack.Exportable")
    cdef ExportableBase self = <ExportableBase>obj
    # The request is max_version=DLPACK_VERSION and nothing else: the plain
    # plans run when the version policy has accepted it against the floor in
    # force (else the general path checks it, and caches its verdict). That
    # check may run Python: the plan is checked after it, then held.
    if produced_accepted(verdict) and plan_holds(self) and self.plan != PLAN_CAPSULE:
        x = <object>members(self).x
        dtype = self.plan_dtype
        owner = self.guards_owner
        if self.plan != PLAN_NUMPY:
            m = exchange_export_of(x, self.guards)
        elif descr_of(<PyObject *>x) == <PyObject *>dtype:
            m = numpy_tensor(<PyObject *>x)  # no capsule to make and claim
            if m == NULL:
                capsule = numpy_export(<PyObject *>x, True)
                if capsule is not None:
                    m = <DLManagedTensorVersioned *>claim_tensor(<PyObject *>capsule, 1)  # renamed used_*
        if m != NULL:
            # the request of the exchange: one tuple, made by set_versions
            put(&members(self).request, <PyObject *>verdict.request)
            out[0] = m
            return 0
    # Every other case: the capsule __dlpack__(max_version=DLPACK_VERSION)
    # gives, claimed here.
    a[0] = <PyObject *>self
    a[1] = <PyObject *>verdict.produced
    capsule = take(PyObject_VectorcallMethod(state.str_dlpack, a, 1, state.kw_max_version))
    cdef void *ptr = claim_tensor(<PyObject *>capsule, 1)
    del capsule  # before the error below: its destructor may run Python
    if ptr == NULL:
        raise BufferError("gpu_dlpack produced no versioned capsule")
    out[0] = <DLManagedTensorVersioned *>ptr
    return 0


cdef int exportable_to_py(DLManagedTensorVersioned *m, void **out) except -1:
    # An owned tensor becomes what gpu_dlpack.from_dlpack makes of it. The
    # function steals the tensor (dlpack.h): out of memory for its capsule,
    # it is released before the MemoryError is raised.
    cdef PyObject *a[1]
    capsule = owning_capsule(m)
    a[0] = <PyObject *>capsule
    r = take(delegate_raw("from_dlpack", a, 1))
    Py_INCREF(r)  # the consumer's reference
    out[0] = <void *>r
    return 0


cdef int exportable_allocator(DLTensor *proto, DLManagedTensorVersioned **out, void *ctx,
                              void (*set_error)(void *, const char *, const char *) noexcept) noexcept:
    out[0] = NULL
    if set_error != NULL:  # a consumer may pass none
        set_error(ctx, "NotImplementedError", "gpu_dlpack.Exportable allocates no tensors")
    return -1


cdef int exportable_stream(int32_t device_type, int32_t device_id, void **out) except -1:
    # The stream the layer would use on that device, as Python says.
    cdef PyObject *a[2]
    out[0] = NULL
    if device_type == state.cpu_type:
        return 0
    cdef object kind = device_type, number = device_id
    a[0] = <PyObject *>kind
    a[1] = <PyObject *>number
    r = take(delegate_raw("current_stream", a, 2))
    out[0] = NULL if r is None else PyLong_AsVoidPtr(r)
    return 0


cdef DLPackExchangeAPI exportable_api
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
# while unset and are unset by del, as a Python slot is; the C exchange API.
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
    exportable_api.header.version.major = 1
    exportable_api.header.version.minor = 3
    exportable_api.header.prev_api = NULL
    exportable_api.managed_tensor_allocator = exportable_allocator
    exportable_api.managed_tensor_from_py_object_no_sync = <from_py_t>exportable_from_py
    exportable_api.managed_tensor_to_py_object_no_sync = <to_py_t>exportable_to_py
    exportable_api.dltensor_from_py_object_no_sync = NULL
    exportable_api.current_work_stream = <stream_t>exportable_stream
    tp_dict["__dlpack_c_exchange_api__"] = take(new_capsule(&exportable_api, EXCHANGE_API_NAME, NULL))
    PyType_Modified(ExportableBase)
    exportable_set_up = True  # last: what says it is done
    return 0
