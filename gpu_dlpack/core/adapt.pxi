# The capsule of the other kind over the same memory ({ref}`rule 6 <rule-6>`):
# a legacy DLManagedTensor becomes a DLManagedTensorVersioned whose
# manager_ctx holds it and whose deleter calls its deleter once (and a
# versioned one a legacy one, the same way round), for every capsule the
# checks pass: any dtype exchanged, any number of dimensions (0 too), empty
# tensors and NULL data, on any device, touching no data and no NumPy. The
# struct made is laid out as NumPy 2.4 exports: data + byte_offset and an
# offset of 0, strides always; a versioned one over a legacy tensor is
# READ_ONLY (a legacy capsule cannot say whether its data may be written),
# and a read-only tensor has no legacy capsule.


# The producer's deleter, called as the one of the struct over it is: with
# the GIL or without (a DLPack deleter is plain C; dlpack.pxd declares it
# GIL-requiring only because Cython cannot tell).
ctypedef void (*legacy_deleter_t)(DLManagedTensor *) noexcept nogil
ctypedef void (*versioned_deleter_t)(DLManagedTensorVersioned *) noexcept nogil


# malloc and free: a deleter runs on any thread, with or without the GIL,
# also once the interpreter is gone. Each struct is followed by room for
# the strides, where the tensor it is made over has none.
cdef void versioned_over_deleter(DLManagedTensorVersioned *self) noexcept nogil:
    cdef DLManagedTensor *legacy = <DLManagedTensor *>self.manager_ctx
    free(self)
    cdef legacy_deleter_t deleter = <legacy_deleter_t><void *>legacy.deleter
    if deleter != NULL:
        deleter(legacy)


cdef void legacy_over_deleter(DLManagedTensor *self) noexcept nogil:
    cdef DLManagedTensorVersioned *v = <DLManagedTensorVersioned *>self.manager_ctx
    free(self)
    cdef versioned_deleter_t deleter = <versioned_deleter_t><void *>v.deleter
    if deleter != NULL:
        deleter(v)


cdef inline void copy_tensor_over(DLTensor *to, const DLTensor *src, int64_t *strides,
                                              DLDevice device) noexcept:
    """Copy the tensor as NumPy 2.4 exports it: data + byte_offset and an
    offset of 0, the shape the source holds, strides always (row-major where
    the source has none, an extent of 0 counted as 1, as NumPy fills them)."""
    cdef int64_t step = 1
    cdef int i
    to[0] = src[0]
    # as an address: an offset may reach past any object C knows of
    to.data = <void *>(<uintptr_t>src.data + src.byte_offset)
    to.byte_offset = 0
    to.device = device
    if src.strides == NULL:
        for i in range(src.ndim - 1, -1, -1):
            strides[i] = step
            if src.shape[i]:
                step *= src.shape[i]  # within int64: layout_fault bounds the elements
        to.strides = strides


cdef void *struct_over(void *src, int versioned, DLDevice device) except NULL:
    """The struct of the other kind over the tensor of src (of the given
    kind), followed by room for the strides: its manager_ctx holds src,
    whose deleter its own calls once; a versioned one READ_ONLY (a legacy
    import is read-only)."""
    cdef DLTensor *t = tensor_of(src, versioned)
    cdef size_t size = sizeof(DLManagedTensor) if versioned else sizeof(DLManagedTensorVersioned)
    cdef void *made = malloc(size + sizeof(int64_t) * <size_t>(t.ndim if t.ndim > 0 else 1))
    if made == NULL:
        PyErr_NoMemory()
    cdef DLManagedTensor *m = <DLManagedTensor *>made
    cdef DLManagedTensorVersioned *v = <DLManagedTensorVersioned *>made
    if versioned:
        m.manager_ctx = src
        m.deleter = legacy_over_deleter
    else:
        (<uint64_t *>v)[0] = verdict.word
        v.manager_ctx = src
        v.deleter = versioned_over_deleter
        v.flags = FLAG_READ_ONLY
    copy_tensor_over(tensor_of(made, not versioned), t, <int64_t *>(<char *>made + size), device)
    return made


cdef PyObject *adapted_capsule(PyObject *capsule, int versioned, DLDevice device) except? NULL:
    """The capsule of the other kind over the tensor of an unconsumed,
    checked capsule (adapt_refusal() passes it), labelled `device`: the capsule taken (renamed
    used_*), the new one owns its tensor, whose deleter runs once, when the
    new capsule is consumed and freed or dropped unconsumed. As move() does,
    the new capsule is made first, owning nothing (a used_* name), and the
    claim and the hand-over are one step in which no Python code runs: out
    of memory (NULL, the error set) the capsule given is left as it was;
    NULL without an error when another consumer took it first."""
    cdef const char *name = VERSIONED if versioned else LEGACY
    if not named(capsule, name):
        return NULL
    cdef void *ptr = pointer_or_null(capsule, name)
    cdef void *made = struct_over(ptr, versioned, device)
    cdef PyObject *out = capsule_or_null(made, USED_LEGACY if versioned else USED_VERSIONED,
                                         <PyCapsule_Destructor>legacy_capsule_destructor if versioned
                                         else <PyCapsule_Destructor>capsule_destructor)
    if out == NULL:
        free(made)  # only the struct made above: the tensor is still the capsule's
        return NULL
    cdef void *got = claim_tensor(capsule, versioned)
    if got != ptr:
        Py_DECREF(<object>out)  # owns nothing: its destructor frees nothing
        free(made)
        if got != NULL:
            release_tensor(got, versioned)  # another tensor put in meanwhile: taken, so freed
        return NULL
    rename(out, LEGACY if versioned else VERSIONED)  # a capsule just made: cannot fail
    return out


cdef inline bint device_from_tuple(object d, DLDevice *device) noexcept:
    """Write the device of a (type, id) tuple of plain ints, a DLPack device
    type; 0 for anything else."""
    cdef long dt, di
    if type(d) is not tuple or len(<tuple>d) != 2 or type((<tuple>d)[0]) is not int or type((<tuple>d)[1]) is not int:
        return 0
    dt = as_long((<tuple>d)[0])
    di = as_long((<tuple>d)[1])
    if PyErr_Occurred():
        PyErr_Clear()
        return 0
    if dt < 1 or dt > INT32_MAX or di < 0 or di > INT32_MAX:
        return 0
    device.device_type = <int32_t>dt
    device.device_id = <int32_t>di
    return 1


cdef object adapt_refusal(object capsule, void *ptr, int kind, bint read_only):
    """The layer's error for a capsule the adaptation refuses, or None:
    one the checks refuse (a struct of another major version, malformed), a
    dtype that is not exchanged, read-only data (a flag, or `read_only`)
    for a legacy capsule."""
    if ptr == NULL or not major_one(ptr, kind) or not well_formed(tensor_of(ptr, kind)):
        return capsule_fault(capsule, False)
    cdef DLDataType dt = tensor_of(ptr, kind).dtype
    if not dtype_known(dt):
        return layer_error("unsupported_dtype", (dt.code, dt.bits, dt.lanes, "not a dtype gpu_dlpack exchanges"))
    if kind and (read_only or (<DLManagedTensorVersioned *>ptr).flags & FLAG_READ_ONLY):
        return layer_error("readonly_legacy", ())
    return None


def rebuild(capsule, want_versioned, read_only, device=None, /):
    """The capsule of the other kind over the same tensor, no data touched.

    capsule: an unconsumed DLPack capsule, whose name says its kind;
    want_versioned: True for a versioned capsule over a legacy one, False
    for a legacy one over a versioned one; read_only: whether the data must
    not be written (a versioned one over a legacy tensor is READ_ONLY
    anyway; read-only data has no legacy capsule: ReadOnlyError); device: a
    (type, id) pair to label it with, None for the tensor's own. The capsule
    is taken: its deleter runs once, when the new capsule is freed, or now
    where the adaptation is refused (the layer's error)."""
    cdef int kind = -1
    cdef void *ptr
    cdef DLDevice to, label
    cdef PyObject *out = NULL
    configured()
    if type(want_versioned) is not bool or type(read_only) is not bool:
        raise TypeError(f"want_versioned and read_only must be bools, got {want_versioned!r} and {read_only!r}")
    if device is not None and not device_from_tuple(device, &label):
        raise ValueError(f"device must be None or a (type, id) pair of DLPack ints, got {device!r}")
    while out == NULL:  # again only where another consumer took the capsule meanwhile
        ptr = unconsumed(<PyObject *>capsule, &kind)
        if ptr == NULL:
            raise capsule_fault(capsule, False)
        if kind == (want_versioned is True):
            raise ValueError(f"the capsule is already {'versioned' if kind else 'legacy'}: no adaptation to make")
        err = adapt_refusal(capsule, ptr, kind, read_only is True)
        if err is not None:
            ptr = claim_tensor(<PyObject *>capsule, kind)
            if ptr != NULL:
                release_tensor(ptr, kind)
            raise err
        to = tensor_of(ptr, kind).device if device is None else label
        out = adapted_capsule(<PyObject *>capsule, kind, to)
    adapted = <object>out
    Py_DECREF(adapted)  # the reference adapted_capsule handed over, now adapted's
    return adapted
