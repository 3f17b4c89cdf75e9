# NumPy's capsule of an exact NumPy array of a plain dtype: made here, as
# NumPy 2.4's own __dlpack__ makes it (the versioned tensor, held by the
# array), or NumPy's own stamped DLPACK_VERSION (and given the strides NumPy
# 2.1 to 2.3 leave out). The exported object's plain NumPy plan, export()'s
# plain case and the C exchange API of wrap() make theirs here.


cdef inline bint is_plain(PyObject *dtype) noexcept:
    """Whether dtype is one of PLAN_NUMPY's (compared by identity)."""
    cdef int i
    for i in range(policy.n_plain):
        if policy.plain_list[i] == dtype:
            return True
    return False


cdef inline PyObject *descr_of(PyObject *array) noexcept:
    """x.dtype of an exact NumPy array x, without an attribute lookup."""
    return <PyObject *>cnp.PyArray_DESCR(<cnp.ndarray>array)


# NumPy's versioned capsule stamped DLPACK_VERSION. Since DLPack 1.2 a tensor
# with dimensions carries strides: NumPy 2.1 to 2.3 leave a C-contiguous
# array's out (NULL) but write them right after the shape, where they are
# pointed at when Python confirmed it (numpy_strides_after_shape). -1 (no
# error set) when the capsule is not one to stamp: the general path builds it.
cdef int stamp_numpy(PyObject *capsule) noexcept:
    cdef DLManagedTensorVersioned *m = <DLManagedTensorVersioned *>pointer_or_null(capsule, VERSIONED)
    if m == NULL or (<uintptr_t>m & 7):
        PyErr_Clear()
        return -1
    cdef DLTensor *t = &m.dl_tensor
    if t.ndim > 0 and t.strides == NULL:
        if not policy.numpy_strides_after_shape or t.shape == NULL:
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
        found = raw_getattr(<PyObject *>cnp.ndarray, <PyObject *>"__dlpack__")
        if found == NULL:
            PyErr_Clear()
            return NULL
        ndarray_dlpack = take(found)
    return <PyObject *>ndarray_dlpack


# The DLPack dtype of a plain dtype, as the policy pairs them (its
# plain_pairs[i] is its plain_list[i]'s). NumPy has two objects for some
# pairs ('q' and 'l' are both int64 on Linux): each is plain, each with its
# pair.
cdef bint plain_dl_dtype(PyObject *dtype, DLDataType *out) noexcept:
    cdef int i
    for i in range(policy.n_plain):
        if policy.plain_list[i] == dtype:
            out[0] = policy.plain_pairs[i]
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
    if not policy.numpy_layout or ndim < 0 or ndim > MAX_NDIM or not plain_dl_dtype(descr_of(x), &dtype):
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
    m.dl_tensor.device.device_type = kDLCPU
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
    cdef PyObject *capsule = capsule_or_null(m, VERSIONED, <PyCapsule_Destructor>numpy_capsule_destructor)
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
            a[1] = <PyObject *>ASK_VERSIONED
            capsule = PyObject_Vectorcall(method, a, 1, <PyObject *>MAX_VERSION_KEYWORD)
        else:
            capsule = PyObject_Vectorcall(method, a, 1, NULL)
    if capsule == NULL or (versioned and stamp_numpy(capsule) != 0):
        Py_XDECREF(capsule)
        PyErr_Clear()
        return None
    return take(capsule)


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
