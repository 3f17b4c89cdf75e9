# The DLPack C exchange API, consumer side: a producer type's tensor as a
# NumPy array (import_host), or handed on for the stream hand-off
# (exchange), as Python said the type may be read; and the host producers
# whose capsules the core asks itself (JAX).


# NumPy's C API where a failure is answered on the spot (the tensor freed or
# the base disarmed first): its headers' functions, NULL or -1 as they come
# (cnp leaves the one out, and declares the other to raise).
# PyArray_SetBaseObject steals base, also when it fails.
cdef extern from "numpy/arrayobject.h":
    PyObject *new_from_descr "PyArray_NewFromDescr"(PyTypeObject *subtype, cnp.PyArray_Descr *descr, int nd,
                                                    const cnp.npy_intp *dims, const cnp.npy_intp *strides,
                                                    void *data, int flags, PyObject *obj)
    int set_base_object "PyArray_SetBaseObject"(cnp.PyArrayObject *arr, PyObject *base)

cdef const char *IMPORT_ENTRY = "gpu_dlpack.import_entry"

cdef enum:
    GUARD_METHODS = 8  # the most guard methods a producer type has (Python gives fewer)


# What Python said of a producer type (import_entry): its exchange API and
# the guards that must be false for the plain exchange, and its host test,
# where the core may ask its __dlpack__ itself (JAX).
cdef struct ImportEntry:
    const DLPackExchangeAPI *api  # NULL: not read
    PyObject *api_owner  # the capsule of the table: it lives as long as the entry
    PyObject *attrs    # data descriptors whose value (their __get__) must be false for the plain export
    PyObject *methods  # callables whose result for the array must be false ...
    uint32_t method_codes[GUARD_METHODS]  # ... each for these dtype codes (bit per code)
    PyObject *host_device  # the host test (_peers.HostTest), or NULL: these attributes in turn reach ...
    PyObject *host_kind    # ... an array's one device, whose attribute of this name ...
    PyObject *host_answer  # ... is this for host memory
    PyObject *host_kept    # the last device that passed (a device's kind cannot change), or NULL
    bint read_only     # its arrays are read-only whatever its capsules say (_peers.READ_ONLY_ARRAYS)


cdef inline int cleared() noexcept:
    """After a failed call into Python: 0 with the error cleared when it is an
    Exception (the general path runs and reports it), -1 with it left set
    when it is not (KeyboardInterrupt, SystemExit: the caller returns it)."""
    if PyErr_ExceptionMatches(Exception):
        PyErr_Clear()
        return 0
    return -1


cdef void entry_destructor(object capsule) noexcept:
    cdef ImportEntry *e = <ImportEntry *>pointer_or_null(<PyObject *>capsule, IMPORT_ENTRY)
    if e == NULL:
        PyErr_Clear()
        return
    Py_XDECREF(e.api_owner)
    Py_XDECREF(e.attrs)
    Py_XDECREF(e.methods)
    Py_XDECREF(e.host_device)
    Py_XDECREF(e.host_kind)
    Py_XDECREF(e.host_answer)
    Py_XDECREF(e.host_kept)
    PyMem_Free(e)


cdef void exchanged_destructor(PyObject *capsule) noexcept:
    # The base of an imported array frees its tensor; an array may die while
    # an exception is pending (release_tensor sets it aside).
    if named(capsule, EXCHANGED):
        release_tensor(pointer_or_null(capsule, EXCHANGED), 1)
    elif named(capsule, EXCHANGED_LEGACY):
        release_tensor(pointer_or_null(capsule, EXCHANGED_LEGACY), 0)


cdef const DLPackExchangeAPI *api_of(object capsule) noexcept:
    """The table of an exchange API capsule, if its major version is ours."""
    if not PyCapsule_IsValid(capsule, EXCHANGE_API_NAME):
        return NULL
    cdef const DLPackExchangeAPIHeader *h = <const DLPackExchangeAPIHeader *>pointer_or_null(
        <PyObject *>capsule, EXCHANGE_API_NAME)
    while h != NULL and h.version.major != 1:
        h = h.prev_api
    cdef const DLPackExchangeAPI *api = <const DLPackExchangeAPI *>h
    if api == NULL or api.managed_tensor_from_py_object_no_sync == NULL:
        return NULL
    return api


cdef object learned_entry(object producer_type):
    """First sight of the type: Python decides whether it may be imported
    this way, and with which guards. The entry's capsule, or None."""
    plan = policy.learn_import(producer_type)
    if plan is None:
        return None
    cdef PyObject *cap
    cdef PyObject *attrs
    cdef PyObject *methods
    cdef PyObject *codes
    cdef PyObject *host
    cdef int read_only = 0
    PyArg_ParseTuple(plan, "OO!O!O!Op", &cap, <PyObject *>tuple, &attrs, <PyObject *>tuple, &methods,
                     <PyObject *>tuple, &codes, &host, &read_only)
    # One mask of dtype codes per method: the method is asked of arrays of those codes only.
    cdef uint32_t masks[GUARD_METHODS]
    cdef Py_ssize_t nm = PyTuple_GET_SIZE(<object>methods), i
    if nm > GUARD_METHODS or PyTuple_GET_SIZE(<object>codes) != nm:
        raise ValueError("an import plan has one code mask per guard method, at most 8")
    for i in range(PyTuple_GET_SIZE(<object>attrs)):
        if (<TypeSlots *>PyTuple_GET_ITEM(<object>attrs, i).ob_type).tp_descr_get == NULL:
            raise TypeError("an import plan's guard attributes are descriptors (read by their __get__)")
    for i in range(nm):
        if not callable(<object>PyTuple_GET_ITEM(<object>methods, i)):
            raise TypeError("an import plan's guard methods are callables (called with the array)")
    for i in range(nm):
        masks[i] = <uint32_t>PyLong_AsUnsignedLong(<object>PyTuple_GET_ITEM(<object>codes, i))
    cdef const DLPackExchangeAPI *api = NULL
    if cap != <PyObject *>None:
        api = api_of(<object>cap)
    cdef PyObject *hd = NULL
    cdef PyObject *hk = NULL
    cdef PyObject *ha = NULL
    if host != <PyObject *>None:
        PyArg_ParseTuple(<object>host, "O!UU", <PyObject *>tuple, &hd, &hk, &ha)  # a name not a str: never passes
    if api == NULL and hd == NULL:
        return None
    cdef ImportEntry *e = <ImportEntry *>PyMem_Calloc(1, sizeof(ImportEntry))
    if e == NULL:
        PyErr_NoMemory()
    cdef PyObject *entry = capsule_or_null(e, IMPORT_ENTRY, entry_destructor)
    if entry == NULL:
        PyMem_Free(e)
        raise_pending()
    # Filled once the capsule owns it: its destructor releases what is set.
    e.api = api
    if api != NULL:
        e.api_owner = cap
        Py_INCREF(<object>cap)
    e.attrs = attrs
    e.methods = methods
    Py_INCREF(<object>attrs)
    Py_INCREF(<object>methods)
    for i in range(nm):
        e.method_codes[i] = masks[i]
    e.host_device = hd
    e.host_kind = hk
    e.host_answer = ha
    e.read_only = read_only
    Py_XINCREF(hd)
    Py_XINCREF(hk)
    Py_XINCREF(ha)
    return take(entry)


# What Python said of each producer type: type -> its ImportEntry capsule, or
# None (forget() clears it).
cdef dict import_types = {}

# The keyword of a versioned request, and NumPy's (a tuple the call's
# keyword names are).
cdef tuple MAX_VERSION_KEYWORD = ("max_version",)
cdef tuple ASK_VERSIONED = (1, 0)


cdef ImportEntry *import_entry(PyTypeObject *type, PyObject **hold) except NULL:
    """The entry of a producer type (Py_None: not imported this way), and in
    *hold a new reference to what keeps it alive, which the caller releases:
    the guards it runs are Python, which may clear the table meanwhile
    (core.forget())."""
    hold[0] = NULL
    cdef object got
    cdef PyObject *found = PyDict_GetItemWithError(import_types, <object>type)
    if found == NULL:
        got = learned_entry(<object>type)
        import_types[<object>type] = got
    else:
        got = <object>found
    Py_INCREF(got)
    hold[0] = <PyObject *>got
    if got is None:
        return <ImportEntry *><PyObject *>None  # known: not imported this way
    cdef ImportEntry *e = <ImportEntry *>pointer_or_null(<PyObject *>got, IMPORT_ENTRY)
    if e == NULL:
        Py_CLEAR(hold[0])
    return e


cdef inline bint is_false(PyObject *v) noexcept:
    """Whether v (a new reference, consumed) is false; not when it is true,
    NULL or cannot say (the error cleared)."""
    if v == NULL:
        PyErr_Clear()
        return False
    cdef int truth = 0 if <object>v is False else (1 if <object>v is True else raw_is_true(v))
    Py_DECREF(<object>v)
    if truth != 0:
        PyErr_Clear()
        return False
    return True


cdef int guards_pass(ImportEntry *e, PyObject *x, int code) noexcept:
    """1 when every guard of the entry is false for x, 0 when one is true or
    cannot be read (the error cleared: the general path asks again and reports)."""
    cdef Py_ssize_t i
    cdef PyObject *d
    for i in range(PyTuple_GET_SIZE(<object>e.attrs)):
        d = PyTuple_GET_ITEM(<object>e.attrs, i)
        if not is_false((<TypeSlots *>d.ob_type).tp_descr_get(d, x, <PyObject *>x.ob_type)):
            return 0
    for i in range(PyTuple_GET_SIZE(<object>e.methods)):
        if code < 0 or code >= 32 or not ((e.method_codes[i] >> code) & 1):
            continue
        if not is_false(PyObject_Vectorcall(PyTuple_GET_ITEM(<object>e.methods, i), &x, 1, NULL)):
            return 0
    return 1


cdef int host_test(ImportEntry *e, PyObject *x) except -1:
    """1 when x passes its type's host test (told by Python: _peers.HostTest),
    as _devices reads it: the attributes in turn reach x's one device (an
    array over several has none), whose kind is the answer (host memory; a
    deleted JAX array keeps its device, and its __dlpack__ then says it is
    deleted). The last device that passed is kept: the same object passes
    again unread. 0 when it does not, or the test cannot say (the error
    cleared, as Python clears it: then __dlpack_device__ says where the
    memory is); -1 with an error that is no Exception (an interrupt)
    pending."""
    if e.host_device == NULL:
        return 0
    device = <object>x
    try:
        for name in <tuple>e.host_device:
            device = getattr(device, name)
        with cython.critical_section(kept_lock):
            if <PyObject *>device == e.host_kept:
                return 1
        if (getattr(device, <object>e.host_kind) == <object>e.host_answer) is not True:
            return 0
    except Exception:
        return 0
    cdef PyObject *old
    Py_INCREF(device)
    with cython.critical_section(kept_lock):
        old, e.host_kept = e.host_kept, <PyObject *>device
    Py_XDECREF(old)  # after the swap: its release may run Python
    return 1


cdef PyObject *ask_capsule(PyObject *x, int versioned) noexcept:
    """x.__dlpack__(max_version=DLPACK_VERSION), or x.__dlpack__() for a legacy
    request: the call the Python path makes (_producer.request, which asks
    for nothing with no keyword at all). A new reference, or NULL with the
    producer's error set."""
    cdef PyObject *args[2]
    args[0] = x
    args[1] = <PyObject *>verdict.produced
    return PyObject_VectorcallMethod(<PyObject *>"__dlpack__", args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                 <PyObject *>MAX_VERSION_KEYWORD if versioned else NULL)


cdef PyObject *taken_error() except NULL:
    """After a producer's __dlpack__ raised: its exception taken (a new
    reference, with its traceback) when it is an Exception, for the Python
    function that goes on from it as the Python path does; NULL with it left
    set when it is not (an interrupt: the caller raises it as it is)."""
    if not PyErr_ExceptionMatches(Exception):
        return NULL
    cdef PyObject *etype
    cdef PyObject *value
    cdef PyObject *tb
    PyErr_Fetch(&etype, &value, &tb)
    PyErr_NormalizeException(&etype, &value, &tb)
    if value != NULL and tb != NULL:
        raw_set_traceback(value, tb)
    Py_XDECREF(etype)
    Py_XDECREF(tb)
    if value == NULL:  # cannot be: a normalized exception has a value
        PyErr_SetString(SystemError, "gpu_dlpack._core lost a producer's error")
    return value


cdef bint numpy_holds(DLTensor *t) noexcept:
    """Whether a tensor is well-formed, of a NumPy dtype of its own (one
    lane; the others go through a carrier, which needs ml_dtypes) and
    within NumPy's dimensions."""
    cdef int nbytes = bit_index(t.dtype.bits)
    return (well_formed(t) and t.ndim <= policy.numpy_maxdims and t.dtype.lanes == 1 and t.dtype.code < 32
            and nbytes != 0 and policy.numpy_descr[t.dtype.code][nbytes] != NULL)


@cython.cdivision(True)
cdef bint host_plain(void *ptr, int versioned) noexcept:
    """Whether an unconsumed tensor of the given kind is one whose NumPy
    import the core makes as numpy.from_dlpack would (host memory, a NumPy
    dtype, versioned: major 1 and no flag but READ_ONLY)."""
    cdef DLTensor *t = tensor_of(ptr, versioned)
    if not major_one(ptr, versioned) or (versioned and (<DLManagedTensorVersioned *>ptr).flags & ~FLAG_READ_ONLY):
        return False
    if not numpy_holds(t) or not host_type(t.device.device_type):
        return False
    cdef int i
    if t.strides != NULL:
        for i in range(t.ndim):
            if t.strides[i] > PY_SSIZE_T_MAX // 16 or t.strides[i] < -(PY_SSIZE_T_MAX // 16):
                return False
    return True


cdef PyObject *ndarray_of(void *ptr, int versioned, bint read_only=False) noexcept:
    """A NumPy array over an owned tensor that host_plain() took: writeable
    unless READ_ONLY, legacy (as numpy.from_dlpack makes legacy imports) or
    read_only (its producer's arrays are, whatever its capsule says), its
    base a capsule that frees the tensor once. NULL with an error set on
    failure (the caller still owns the tensor)."""
    cdef DLTensor *t = tensor_of(ptr, versioned)
    cdef int nbytes = bit_index(t.dtype.bits)
    cdef PyObject *descr = policy.numpy_descr[t.dtype.code][nbytes]
    cdef cnp.npy_intp shape[MAX_NDIM]
    cdef cnp.npy_intp strides[MAX_NDIM]
    cdef cnp.npy_intp *byte_strides = strides if t.strides != NULL else NULL
    cdef int i
    for i in range(t.ndim):
        shape[i] = <cnp.npy_intp>t.shape[i]
        if t.strides != NULL:
            strides[i] = <cnp.npy_intp>t.strides[i] * nbytes
    cdef bint writeable = versioned and not read_only and not (
        (<DLManagedTensorVersioned *>ptr).flags & FLAG_READ_ONLY)
    Py_INCREF(<object>descr)  # stolen
    cdef PyObject *arr = new_from_descr(
        <PyTypeObject *>cnp.ndarray, <cnp.PyArray_Descr *>descr, t.ndim, shape, byte_strides,
        <void *>(<uintptr_t>t.data + t.byte_offset), cnp.NPY_ARRAY_WRITEABLE if writeable else 0, NULL)
    if arr == NULL:
        return NULL
    cdef PyObject *base = capsule_or_null(ptr, EXCHANGED if versioned else EXCHANGED_LEGACY,
                                          <PyCapsule_Destructor>exchanged_destructor)
    if base == NULL:
        drop_keeping_error(arr)
        return NULL
    # SetBaseObject steals a reference, also when it fails (it then drops
    # it): one of our own keeps the base alive to be disarmed.
    Py_INCREF(<object>base)
    if set_base_object(<cnp.PyArrayObject *>arr, base) < 0:
        rename(base, USED_VERSIONED)  # frees nothing: the caller frees the tensor
        drop_keeping_error(base)
        drop_keeping_error(arr)
        return NULL
    Py_DECREF(<object>base)
    return arr


cdef object capsule_import(object x, ImportEntry *e, bint cpu_only=False):
    """from_dlpack(x) of a producer with a host test (JAX): its capsule for the
    request the Python path makes, imported here when it is the plain case,
    else handed to _import.host_capsule with x (or the error x raised
    instead). None when the test fails (an array over
    several devices among them: the general path gathers it)."""
    if not policy.numpy_layout:
        return None  # the Python import, which older NumPy's rules shape
    if not host_test(e, <PyObject *>x):
        return None
    cdef PyObject *args[3]
    args[0] = <PyObject *>x
    cdef PyObject *capsule = ask_capsule(<PyObject *>x, 1)
    if capsule == NULL:
        # The producer's error goes on as the Python path's would: never
        # dropped, and the producer never asked the same again.
        error = take(taken_error())
        args[1] = <PyObject *>None
        args[2] = <PyObject *>error
        fn = policy.host_capsule
        return take(hand_back(fn, args, 3))
    cdef int versioned
    cdef void *ptr = unconsumed(capsule, &versioned)
    cdef void *got = claim_tensor(capsule, versioned) if ptr != NULL and host_plain(ptr, versioned) and (
        not cpu_only or tensor_of(ptr, versioned).device.device_type == kDLCPU) else NULL
    cdef PyObject *arr
    if got != NULL and got == ptr:
        arr = ndarray_of(ptr, versioned, e.read_only)
        if arr == NULL:
            release_tensor(ptr, versioned)  # taken: freed once, the error raised
    else:
        if got != NULL:
            release_tensor(got, versioned)  # another tensor put in meanwhile: taken, so freed
        PyErr_Clear()
        args[1] = capsule
        fn = policy.host_capsule
        arr = hand_back(fn, args, 2)
    # The producer's destructor (its capsule now used_* or handed on) may
    # clear an error raised above.
    drop_keeping_error(capsule)
    return take(arr)


cdef object core_import_host(object x, bint cpu_only=False):
    """import_host(x): x as a NumPy array through its type's C exchange API,
    or None when the exchange is not the plain one Python was told about.
    cpu_only (from_dlpack's device=CPU): the data must be the CPU's (pinned
    and managed memory take the general path)."""
    configured()
    cdef PyObject *hold
    cdef ImportEntry *e = import_entry(Py_TYPE(x), &hold)
    owner = take(hold)
    if <PyObject *>e == <PyObject *>None:
        return None
    if e.api == NULL:
        return capsule_import(x, e, cpu_only)
    cdef DLTensor view
    if e.api.dltensor_from_py_object_no_sync != NULL:
        # Where the data is, without an owned export: device memory takes
        # the general path (the backend of its device and the hand-off).
        if e.api.dltensor_from_py_object_no_sync(<void *>x, &view) != 0:
            PyErr_Clear()
            return None
        if not host_type(view.device.device_type) or (cpu_only and view.device.device_type != kDLCPU):
            return None
    cdef DLManagedTensorVersioned *m = NULL
    if e.api.managed_tensor_from_py_object_no_sync(<void *>x, &m) != 0 or m == NULL:
        PyErr_Clear()
        return None
    cdef PyObject *arr = NULL
    if (guards_pass(e, <PyObject *>x, m.dl_tensor.dtype.code) and host_plain(m, 1) and
            (not cpu_only or m.dl_tensor.device.device_type == kDLCPU)):
        arr = ndarray_of(m, 1, e.read_only)
    if arr == NULL:  # not the plain case: freed, and the general path says why
        PyErr_Clear()
        if m.deleter != NULL:
            m.deleter(m)
        return None
    return take(arr)


@cython.embedsignature.format("clinic")
def import_host(x, /):
    """A NumPy array of a producer's C exchange API, or None."""
    return core_import_host(x)


@cython.embedsignature.format("clinic")
def exchange(x, /):
    """A GPU producer's tensor through its C exchange API."""
    # (capsule, stream) or None: x's versioned tensor through its type's C
    # exchange API, exported without synchronizing, and the producer's
    # current work stream on x's device (0 for none), for the caller to hand
    # off. None when the type was not told to the core, a guard holds, or the
    # producer refuses (the caller asks __dlpack__, which says why).
    configured()
    cdef PyObject *hold
    cdef ImportEntry *e = import_entry(Py_TYPE(x), &hold)
    owner = take(hold)
    if <PyObject *>e == <PyObject *>None or e.api == NULL:
        return None
    cdef DLManagedTensorVersioned *m = NULL
    if e.api.managed_tensor_from_py_object_no_sync(<void *>x, &m) != 0 or m == NULL:
        PyErr_Clear()
        return None
    cdef void *stream = NULL
    if (not guards_pass(e, <PyObject *>x, m.dl_tensor.dtype.code) or m.version.major != 1 or
            (m.dl_tensor.device.device_type != kDLCPU and e.api.current_work_stream != NULL and
             e.api.current_work_stream(m.dl_tensor.device.device_type, m.dl_tensor.device.device_id, &stream) != 0)):
        PyErr_Clear()
        if m.deleter != NULL:
            m.deleter(m)
        return None
    cdef PyObject *capsule = capsule_or_null(m, VERSIONED, <PyCapsule_Destructor>capsule_destructor)
    if capsule == NULL:
        release_tensor(m, 1)
    # Dropped on a failure below, the capsule frees m.
    return take(capsule), PyLong_FromVoidPtr(stream)

