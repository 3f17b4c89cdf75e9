# The capsule primitives: reading a header and the checks every exchange
# makes, claiming a capsule in one step, the snapshot of an unconsumed one,
# writing its version and flags; and the small ones every file inlines.


cdef extern from "Python.h":
    int Py_IsInitialized() nogil

cdef extern from *:
    ctypedef long long int128 "__int128"


cdef const char *LEGACY = "dltensor"
cdef const char *VERSIONED = "dltensor_versioned"
cdef const char *USED_LEGACY = "used_dltensor"
cdef const char *USED_VERSIONED = "used_dltensor_versioned"
cdef const char *EXCHANGED = "gpu_dlpack.exchanged"  # the base of an imported array
cdef const char *EXCHANGED_LEGACY = "gpu_dlpack.exchanged_legacy"  # ... of a legacy tensor
cdef const char *EXCHANGE_API_NAME = "dlpack_exchange_api"


# -- the small ones --------------------------------------------------------------

cdef inline int bit_index(unsigned bits) noexcept:
    """8..128 bits in whole bytes -> bytes; 0 for anything else"""
    return <int>(bits // 8) if bits % 8 == 0 and 8 <= bits <= 128 else 0


cdef inline bint dtype_known(DLDataType dt) noexcept:
    if dt.lanes != 1 or dt.code >= 32 or dt.bits == 0:
        return False
    if dt.bits <= 64:
        return (policy.known_dtypes[dt.code] >> (dt.bits - 1)) & 1
    return dt.bits == 128 and ((policy.known_128 >> dt.code) & 1)


cdef inline int kind_of(PyObject *capsule) noexcept:
    """1 versioned, 0 legacy, -1 anything else (no error set)."""
    if not PyCapsule_CheckExact(<object>capsule):
        return -1
    cdef const char *name = name_or_null(capsule)
    if name == NULL:
        PyErr_Clear()
        return -1
    if strcmp(name, VERSIONED) == 0:
        return 1
    if strcmp(name, LEGACY) == 0:
        return 0
    return -1


cdef inline void *unconsumed(PyObject *capsule, int *versioned) noexcept:
    """The pointer of an unconsumed DLPack capsule, its kind in *versioned;
    NULL (no error set) for anything else."""
    versioned[0] = kind_of(capsule)
    if versioned[0] < 0:
        return NULL
    cdef void *ptr = pointer_or_null(capsule, VERSIONED if versioned[0] else LEGACY)
    if ptr == NULL:
        PyErr_Clear()
    return ptr


cdef inline DLTensor *tensor_of(void *ptr, int versioned) noexcept:
    return &(<DLManagedTensorVersioned *>ptr).dl_tensor if versioned else &(<DLManagedTensor *>ptr).dl_tensor


cdef inline bint major_one(void *ptr, int versioned) noexcept:
    """Whether the struct is laid out as the core reads it: legacy, or major version 1."""
    return not versioned or (<DLManagedTensorVersioned *>ptr).version.major == 1


cdef inline bint well_formed(DLTensor *t) noexcept:
    """Whether the tensor is well-formed (what _errors.capsule_fault words):
    every device type from 1 up is a device (DLPack adds them within a
    version)."""
    if t.ndim < 0 or t.ndim > MAX_NDIM:
        return False
    if t.ndim and t.shape == NULL:
        return False
    if t.device.device_type < 1 or t.device.device_id < 0:
        return False
    return layout_fault(t) == 0


cdef inline bint host_type(int32_t device_type) noexcept:
    """Whether the core's NumPy imports take memory of this device type."""
    return 0 < device_type < 64 and (policy.host_types >> device_type) & 1


cdef inline void run_deleter(void *ptr, int versioned) noexcept:
    cdef DLManagedTensorVersioned *v = <DLManagedTensorVersioned *>ptr
    cdef DLManagedTensor *m = <DLManagedTensor *>ptr
    if versioned and v.deleter != NULL:
        v.deleter(v)
    elif not versioned and m.deleter != NULL:
        m.deleter(m)


cdef inline void release_tensor(void *ptr, int versioned) noexcept:
    """run_deleter on an error path, or wherever an exception may be pending
    (a capsule destructor): the pending exception is set aside while the
    deleter runs (it may run Python code) and restored after it."""
    cdef PyObject *et
    cdef PyObject *ev
    cdef PyObject *tb
    PyErr_Fetch(&et, &ev, &tb)
    run_deleter(ptr, versioned)
    PyErr_Restore(et, ev, tb)


cdef inline void drop_keeping_error(PyObject *o) noexcept:
    """Py_DECREF where an exception may be pending: a destructor it runs (a
    producer's, on a capsule renamed used_*) may clear or replace it."""
    cdef PyObject *et
    cdef PyObject *ev
    cdef PyObject *tb
    PyErr_Fetch(&et, &ev, &tb)
    Py_DECREF(<object>o)
    PyErr_Restore(et, ev, tb)


# -- the refusals: what is wrong, in the layer's words (_errors' factories) --------

cdef object name_refused(object obj, object raw):
    """The error of anything but an unconsumed DLPack capsule: not a
    capsule, a consumed one, another name (raw: its name as bytes, None
    for NULL)."""
    if not PyCapsule_CheckExact(obj):
        return layer_error("not_a_capsule", (obj,))
    name = None if raw is None else (<bytes>raw).decode(errors="replace")
    if name == "used_dltensor" or name == "used_dltensor_versioned":
        return layer_error("consumed", (name,))
    return layer_error("bad_capsule_name", (name,))


cdef object not_taken(object capsule, object versioned):
    """The error of a claim that failed (discard, move, snapshot): what the
    name now is (kind's errors), else that it could not be renamed or
    changed kind meanwhile."""
    return layer_error("not_taken", (kind(capsule), versioned))


cdef object capsule_fault(object capsule, bint importing):
    """The error of a capsule the core will not read or import, from its
    snapshot (which raises what its name is wrong for)."""
    err = layer_error("capsule_fault", (snapshot(capsule), MAX_NDIM, importing))
    return err if err is not None else layer_error("malformed", ("the capsule changed while it was read",))


cdef int raise_pending() except -1:
    """Raise the exception a C API call has set (checked once after several)."""
    return -1


cdef inline void tuple_fill(object tup, Py_ssize_t i, object value) noexcept:
    Py_INCREF(value)
    PyTuple_SET_ITEM(tup, i, value)


# -- the checks ------------------------------------------------------------------

cdef enum:
    # What layout_fault finds, in this order; _capsule.LAYOUT_FAULTS words each.
    NEGATIVE_DIMENSION = 1
    NULL_DATA = 2
    TOO_MANY_BYTES = 3
    OUTSIDE_ADDRESSES = 4
    STEP_TOO_LARGE = 5


cdef int layout_fault(DLTensor *t) noexcept:
    """0 when the shape and strides can be held: no negative dimension, no
    NULL data with elements, at most 2**63 - 1 bytes, strides inside the
    64-bit address space from either end, each step an int64 byte count;
    else the first fault found."""
    cdef int128 MAX_BYTES = ((<int128>1) << 63) - 1
    cdef int128 LIMIT = (<int128>1) << 100
    cdef int128 count = 1, itemsize, low = 0, high = 0, reach, first, step
    cdef bint empty = False
    cdef int i
    for i in range(t.ndim):
        if t.shape[i] < 0:
            return NEGATIVE_DIMENSION
    for i in range(t.ndim):
        if t.shape[i] == 0:
            empty = True
            continue
        count *= t.shape[i]
        if count > MAX_BYTES:
            count = MAX_BYTES + 1  # saturate: too big either way
    if t.data == NULL and not empty:
        return NULL_DATA
    itemsize = (<unsigned>t.dtype.bits * t.dtype.lanes + 7) >> 3
    if itemsize < 1:
        itemsize = 1
    if count * itemsize > MAX_BYTES:
        return TOO_MANY_BYTES
    if t.strides == NULL:
        high = count - 1
    else:
        for i in range(t.ndim):
            if t.shape[i] == 0:
                continue  # reaches nowhere, as an extent of one
            reach = <int128>(t.shape[i] - 1) * t.strides[i]
            if reach < 0:
                low += reach
            else:
                high += reach
            if low < -LIMIT or high > LIMIT:
                return OUTSIDE_ADDRESSES
    first = <int128><uintptr_t>t.data + <int128>t.byte_offset
    low = first + low * itemsize
    high = first + (high + 1) * itemsize
    if low < 0 or high > ((<int128>1) << 64) or high - low > MAX_BYTES:
        return OUTSIDE_ADDRESSES
    if t.strides != NULL:  # each step an int64 byte count, even where no extent takes it
        for i in range(t.ndim):
            step = <int128>t.strides[i] * itemsize
            if step > MAX_BYTES or step < -MAX_BYTES - 1:
                return STEP_TOO_LARGE
    return 0


cdef object new_header(void *ptr, int versioned):
    cdef DLTensor *t = tensor_of(ptr, versioned)
    cdef DLManagedTensorVersioned *m = <DLManagedTensorVersioned *>ptr
    address = PyLong_FromVoidPtr(ptr)
    if versioned:
        major, minor, flags = m.version.major, m.version.minor, m.flags
    else:
        major, minor, flags = None, None, 0
    device_type, device_id = t.device.device_type, t.device.device_id
    code, bits, lanes, ndim = t.dtype.code, t.dtype.bits, t.dtype.lanes, t.ndim
    strides = PyLong_FromVoidPtr(t.strides)
    h = (<TypeSlots *><PyTypeObject *>policy.header_type).tp_alloc(<PyTypeObject *>policy.header_type, 11)
    tuple_fill(h, 0, address)
    tuple_fill(h, 1, major)
    tuple_fill(h, 2, minor)
    tuple_fill(h, 3, flags)
    tuple_fill(h, 4, device_type)
    tuple_fill(h, 5, device_id)
    tuple_fill(h, 6, code)
    tuple_fill(h, 7, bits)
    tuple_fill(h, 8, lanes)
    tuple_fill(h, 9, ndim)
    tuple_fill(h, 10, strides)
    return h


@cython.embedsignature.format("clinic")
def checked(capsule, likely=True, not_exchanged=None, /):
    """(versioned, Header) of a capsule, checked; where not_exchanged is
    given, its dtype too: one the policy did not name as exchanged (known) is
    refused with the error not_exchanged(code, bits, lanes) returns."""
    configured()
    cdef int versioned
    cdef void *ptr = unconsumed(<PyObject *>capsule, &versioned)
    if ptr == NULL or not major_one(ptr, versioned) or not well_formed(tensor_of(ptr, versioned)):
        err = capsule_fault(capsule, True)
        discard(capsule)
        raise err
    cdef DLTensor *t = tensor_of(ptr, versioned)
    # Read before the dtype check runs Python code, as the Python checked()
    # does: meanwhile another thread may consume the capsule and free the
    # tensor.
    cdef DLDataType dtype = t.dtype
    head = new_header(ptr, versioned)
    if not_exchanged is not None and not dtype_known(dtype):
        err = not_exchanged(dtype.code, dtype.bits, dtype.lanes)
        ptr = claim_tensor(<PyObject *>capsule, versioned)
        if ptr != NULL:
            run_deleter(ptr, versioned)
        raise err
    return (versioned != 0, head)


# -- claiming --------------------------------------------------------------------

cdef void *claim_tensor(PyObject *capsule, int versioned) noexcept:
    """Claim an unconsumed capsule of the given kind: check its name and
    rename it used_* in one step (the GIL, or the capsule's critical section
    on a free-threaded build, is held throughout and no Python code runs), so
    two threads racing for it cannot both take it. Its pointer, or NULL (no
    error set) when it is not such a capsule."""
    cdef void *ptr = NULL
    with cython.critical_section(<object>capsule):
        if kind_of(capsule) == versioned:
            ptr = pointer_or_null(capsule, VERSIONED if versioned else LEGACY)
            if ptr != NULL and rename(capsule, USED_VERSIONED if versioned else USED_LEGACY) != 0:
                ptr = NULL
    if ptr == NULL:
        PyErr_Clear()
    return ptr


cdef void capsule_destructor(PyObject *capsule) noexcept:
    # What every producer's capsule does: free an unconsumed tensor (any
    # producer's: it also owns the tensors Python hands over with move()).
    # A capsule may die while an exception is pending (one dropped as an
    # interrupt unwinds the stack): it is set aside while the deleter runs.
    if named(capsule, VERSIONED):
        release_tensor(pointer_or_null(capsule, VERSIONED), 1)


cdef void legacy_capsule_destructor(PyObject *capsule) noexcept:
    if named(capsule, LEGACY):
        release_tensor(pointer_or_null(capsule, LEGACY), 0)


@cython.embedsignature.format("clinic")
def discard(capsule, /):
    """Claim a capsule and run its deleter; its name says its kind."""
    # Every claim of the layer goes through the core (this, move, checked),
    # so no two claims interleave.
    configured()
    cdef int v = kind_of(<PyObject *>capsule)
    cdef void *ptr = NULL if v < 0 else claim_tensor(<PyObject *>capsule, v)
    if ptr == NULL:
        raise not_taken(capsule, v == 1)
    release_tensor(ptr, v)


@cython.embedsignature.format("clinic")
def move(capsule, /):
    """A new unconsumed capsule of the same kind holding the tensor, the given one renamed used_*, in one step."""
    # Its name says its kind; the new capsule's destructor frees the tensor
    # if it is dropped unconsumed. The claim and the hand-over are one step
    # in which no Python code runs (docs/internals/core.md, "Claims under
    # races"); out of memory, the capsule given is left as it was.
    configured()
    cdef int v = -1
    cdef PyCapsule_Destructor free_tensor
    cdef bint moved = False
    cdef void *ptr = NULL
    out = None
    with cython.critical_section(capsule):
        v = kind_of(<PyObject *>capsule)
        free_tensor = <PyCapsule_Destructor>capsule_destructor if v == 1 else \
            <PyCapsule_Destructor>legacy_capsule_destructor
        if v >= 0:
            ptr = pointer_or_null(<PyObject *>capsule, VERSIONED if v else LEGACY)
        if ptr != NULL:
            # Made owning nothing (a used_* name), then both renamed.
            out = PyCapsule_New(ptr, USED_VERSIONED if v else USED_LEGACY, free_tensor)
            if rename(<PyObject *>out, VERSIONED if v else LEGACY) == 0:
                if rename(<PyObject *>capsule, USED_VERSIONED if v else USED_LEGACY) == 0:
                    moved = True
                else:
                    rename(<PyObject *>out, USED_VERSIONED if v else USED_LEGACY)  # owns nothing again
    if moved:
        return out
    # Not renamed (never so for a capsule whose pointer was just read), or
    # not such a capsule: the new one owns nothing and goes.
    out = None
    PyErr_Clear()
    raise not_taken(capsule, v == 1)


# -- reading ---------------------------------------------------------------------

cdef union CapsuleHead:
    DLManagedTensorVersioned v
    DLManagedTensor l


cdef void *copy_unconsumed(object capsule, CapsuleHead *head, int64_t *shape, int64_t *strides,
                           int *versioned, bint *readable) noexcept:
    """Copy an unconsumed capsule's struct, and its shape and strides where
    they can be read (*readable: major version 1, 0 <= ndim <= MAX_NDIM, a
    shape where ndim > 0), while the GIL (or the capsule's critical section)
    is held and nothing is allocated, so that no consumer, on another thread
    or in a finalizer, frees them halfway. Its pointer, or NULL (no error
    set) for anything but an unconsumed capsule."""
    cdef void *ptr
    cdef DLTensor *t
    readable[0] = False
    with cython.critical_section(capsule):
        ptr = unconsumed(<PyObject *>capsule, versioned)
        if ptr != NULL:
            memcpy(head, ptr, sizeof(DLManagedTensorVersioned) if versioned[0] else sizeof(DLManagedTensor))
            t = tensor_of(head, versioned[0])
            readable[0] = major_one(head, versioned[0]) and 0 <= t.ndim <= MAX_NDIM and (t.ndim == 0 or t.shape != NULL)
            if readable[0] and t.ndim > 0:
                memcpy(shape, t.shape, sizeof(int64_t) * <size_t>t.ndim)
                if t.strides != NULL:
                    memcpy(strides, t.strides, sizeof(int64_t) * <size_t>t.ndim)
    return ptr


cdef inline tuple int64s(const int64_t *values, int n):
    cdef tuple t = PyTuple_New(n)
    cdef int i
    cdef object v
    for i in range(n):
        v = values[i]
        Py_INCREF(v)
        PyTuple_SET_ITEM(t, i, v)
    return t


@cython.embedsignature.format("clinic")
def snapshot(capsule, /):
    """(versioned, fields, shape, strides, layout fault) of an unconsumed capsule, copied in one step."""
    # For _errors.capsule_fault, which words what is wrong: fields
    # (major, minor, flags, data, device_type, device_id, ndim, code, bits,
    # lanes, shape pointer, strides pointer, byte_offset), a legacy tensor's
    # version None and flags 0, as laid out in major version 1; the shape
    # and strides None where copy_unconsumed could not read them (strides
    # also where NULL), else with the copy's layout_fault. Anything but an
    # unconsumed capsule raises what its name is wrong for.
    configured()
    cdef CapsuleHead head
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef int versioned
    cdef bint readable
    if copy_unconsumed(capsule, &head, shape, strides, &versioned, &readable) == NULL:
        raise not_taken(capsule, None)
    cdef DLTensor *t = tensor_of(&head, versioned)
    version = (head.v.version.major, head.v.version.minor, head.v.flags) if versioned else (None, None, 0)
    fields = version + (PyLong_FromVoidPtr(t.data), t.device.device_type, t.device.device_id, t.ndim, t.dtype.code,
                        t.dtype.bits, t.dtype.lanes, PyLong_FromVoidPtr(t.shape), PyLong_FromVoidPtr(t.strides),
                        t.byte_offset)
    if not readable:
        return (versioned != 0, fields, None, None, 0)
    t.shape = shape
    t.strides = NULL if t.strides == NULL else strides
    return (versioned != 0, fields, int64s(shape, t.ndim), None if t.strides == NULL else int64s(strides, t.ndim),
            layout_fault(t))


# -- writing the version and flags -----------------------------------------------

@cython.embedsignature.format("clinic")
def stamp_version(capsule, word, /):
    """Write the version word into a versioned capsule."""
    configured()
    if not isinstance(word, int):
        raise stamp_refused(capsule, word)
    cdef uint64_t w = PyLong_AsUnsignedLongLong(word)
    cdef void *ptr = pointer_or_null(<PyObject *>capsule, VERSIONED)
    if ptr == NULL or (<uintptr_t>ptr & 7):
        PyErr_Clear()
        raise stamp_refused(capsule, word)
    (<uint64_t *>ptr)[0] = w


cdef object stamp_refused(object capsule, object word):
    if not kind(capsule):
        return layer_error("malformed", ("a legacy capsule has no version to stamp",))
    ptr = pointer(capsule, True)
    if ptr & 7:
        return layer_error("malformed", (f"DLManagedTensorVersioned at {ptr:#x} is not 8-byte aligned",))
    return TypeError(f"a version word is an int, not {type(word).__name__}")


cdef void *struct_of(object capsule, int *versioned) noexcept:
    """The struct of a DLPack capsule, unconsumed or consumed by the layer
    or NumPy (used_*): its kind, from its name, in *versioned. NULL (no
    error set) for anything else."""
    versioned[0] = -1
    if not PyCapsule_CheckExact(capsule):
        return NULL
    cdef const char *name = name_or_null(<PyObject *>capsule)
    if name == NULL:
        PyErr_Clear()
        return NULL
    if strcmp(name, VERSIONED) == 0 or strcmp(name, USED_VERSIONED) == 0:
        versioned[0] = 1
    elif strcmp(name, LEGACY) == 0 or strcmp(name, USED_LEGACY) == 0:
        versioned[0] = 0
    else:
        return NULL
    cdef void *ptr = pointer_or_null(<PyObject *>capsule, name)
    if ptr == NULL:
        PyErr_Clear()
        versioned[0] = -1
    return ptr


cdef object not_written(object capsule, object what, object value):
    # The core writes into the struct of a DLPack capsule (dltensor,
    # dltensor_versioned, or used_* once the layer or NumPy took it), a
    # version or flags into a versioned one only.
    return ValueError(f"no {what} {value!r} is written into {capsule!r}: a DLPack capsule's struct takes a dtype's "
                      "code and bits (uint8s) and a device (int32s), a versioned one a version (uint32s) and "
                      "flags (uint64)")


@cython.embedsignature.format("clinic")
def set_flags(capsule, flags, /):
    """Write a versioned capsule's flags."""
    cdef int v
    cdef DLManagedTensorVersioned *m = <DLManagedTensorVersioned *>struct_of(capsule, &v)
    cdef uint64_t f = as_u64(flags)
    if PyErr_Occurred() or m == NULL or v != 1:
        PyErr_Clear()
        raise not_written(capsule, "flags", flags)
    m.flags = f


@cython.embedsignature.format("clinic")
def set_version(capsule, version, /):
    """Write a versioned capsule's version."""
    cdef int v
    cdef DLManagedTensorVersioned *m = <DLManagedTensorVersioned *>struct_of(capsule, &v)
    if type(version) is not tuple or len(<tuple>version) != 2 or m == NULL or v != 1:
        raise not_written(capsule, "version", version)
    cdef unsigned long major = as_ulong((<tuple>version)[0])
    cdef unsigned long minor = as_ulong((<tuple>version)[1])
    if PyErr_Occurred() or major > UINT32_MAX or minor > UINT32_MAX:
        PyErr_Clear()
        raise not_written(capsule, "version", version)
    m.version.major = <uint32_t>major
    m.version.minor = <uint32_t>minor


# -- capsules over a struct Python built ----------------------------------------
# The versioned capsules of NumPy before 2.1 (_old_numpy) and those
# gpu_dlpack.testing hands an importer: manager_ctx holds what keeps the
# struct's memory (and the array) alive, and an int64 after the struct counts
# the deleter's calls. The first lets keep go (the checker holds it too: the
# struct outlives every call), every one counts: an importer that frees a
# tensor twice is seen, not a crash. Safe on any thread; after finalization
# it leaks rather than touch Python.
cdef void count_call(int64_t *calls, void **ctx) noexcept nogil:
    cdef PyObject *keep
    if not Py_IsInitialized():
        return
    with gil:
        calls[0] += 1
        keep = <PyObject *>ctx[0]
        ctx[0] = NULL
        if keep != NULL:
            drop_keeping_error(keep)


cdef void counted_versioned(DLManagedTensorVersioned *m) noexcept nogil:
    count_call(<int64_t *>(m + 1), &m.manager_ctx)


cdef void counted_legacy(DLManagedTensor *m) noexcept nogil:
    count_call(<int64_t *>(m + 1), &m.manager_ctx)


@cython.embedsignature.format("clinic")
def counted_capsule(ptr, keep, versioned, /):
    """A capsule over a struct and the count after it, holding keep until its deleter runs."""
    # Making the capsule and taking the reference is one step: no interrupt
    # or error can land between them and leak keep.
    cdef void *p = PyLong_AsVoidPtr(ptr)
    if p == NULL:
        raise ValueError("counted_capsule() needs the address of a struct")
    capsule = PyCapsule_New(p, VERSIONED if versioned else LEGACY, <PyCapsule_Destructor>capsule_destructor
                            if versioned else <PyCapsule_Destructor>legacy_capsule_destructor)
    Py_INCREF(keep)
    if versioned:
        (<DLManagedTensorVersioned *>p).manager_ctx = <void *>keep
        (<DLManagedTensorVersioned *>p).deleter = counted_versioned
    else:
        (<DLManagedTensor *>p).manager_ctx = <void *>keep
        (<DLManagedTensor *>p).deleter = counted_legacy
    return capsule


# -- a capsule's kind and pointer, and the patches of a tensor's fields ------------
# What Python reads of a capsule by its name, and writes into a tensor the
# layer has just made (its dtype, its device, the strides NumPy 2.1 to 2.3
# leave out), with no Python code run in between; a refusal writes nothing
# and raises what is wrong.

@cython.embedsignature.format("clinic")
def kind(capsule, /):
    """True for an unconsumed versioned capsule, False for a legacy one."""
    # The name is read once, in one step: what any other name means (a
    # consumed capsule, not DLPack, not a capsule) is name_refused's error.
    cdef int versioned
    cdef const char *name
    raw = None
    with cython.critical_section(capsule):
        versioned = kind_of(<PyObject *>capsule)
        if versioned < 0 and PyCapsule_CheckExact(capsule):
            name = name_or_null(<PyObject *>capsule)
            if name != NULL:
                raw = <bytes>name
    if versioned >= 0:
        return versioned != 0
    PyErr_Clear()
    raise name_refused(capsule, raw)


@cython.embedsignature.format("clinic")
def is_unconsumed(capsule, /):
    """Whether the capsule is named dltensor or dltensor_versioned."""
    return kind_of(<PyObject *>capsule) >= 0


@cython.embedsignature.format("clinic")
def pointer(capsule, versioned, /):
    """The pointer of an unconsumed capsule of the given kind."""
    # ValueError (the C API's) for anything else.
    return PyLong_FromVoidPtr(PyCapsule_GetPointer(capsule, VERSIONED if versioned else LEGACY))


@cython.embedsignature.format("clinic")
def set_dtype(capsule, code, bits, /):
    """Write a capsule's dtype: code and bits, one lane."""
    cdef int v
    cdef void *p = struct_of(capsule, &v)
    cdef unsigned long c = as_ulong(code)
    cdef unsigned long b = as_ulong(bits)
    if PyErr_Occurred() or p == NULL or c > 255 or b > 255:
        PyErr_Clear()
        raise not_written(capsule, "dtype", (code, bits))
    cdef DLTensor *t = tensor_of(p, v)
    t.dtype.code = <uint8_t>c
    t.dtype.bits = <uint8_t>b
    t.dtype.lanes = 1


@cython.embedsignature.format("clinic")
def set_device(capsule, device_type, device_id, /):
    """Write a capsule's device."""
    cdef int v
    cdef void *p = struct_of(capsule, &v)
    cdef long dt = as_long(device_type)
    cdef long di = as_long(device_id)
    if (PyErr_Occurred() or p == NULL or not INT32_MIN <= dt <= INT32_MAX or
            not INT32_MIN <= di <= INT32_MAX):
        PyErr_Clear()
        raise not_written(capsule, "device", (device_type, device_id))
    cdef DLTensor *t = tensor_of(p, v)
    t.device.device_type = <int32_t>dt
    t.device.device_id = <int32_t>di


@cython.embedsignature.format("clinic")
def point_strides_after_shape(capsule, /):
    """Point a versioned capsule's left-out strides at the ndim int64s after its shape."""
    # For a capsule NumPy 2.1 to 2.3 has just made (_backends/numpy.py). True
    # when they were left out (NULL with 0 < ndim <= 64 and a shape); writes
    # the strides field only, and reads nothing past the shape. ValueError
    # (the C API's) for anything but an unconsumed versioned capsule.
    cdef DLManagedTensorVersioned *m
    cdef DLTensor *t
    cdef bint pointed = False
    with cython.critical_section(capsule):
        m = <DLManagedTensorVersioned *>pointer_or_null(<PyObject *>capsule, VERSIONED)
        if m != NULL:
            t = &m.dl_tensor
            if 0 < t.ndim <= MAX_NDIM and t.shape != NULL and t.strides == NULL:
                t.strides = t.shape + t.ndim
                pointed = True
    if m == NULL:
        raise_pending()
    return pointed
