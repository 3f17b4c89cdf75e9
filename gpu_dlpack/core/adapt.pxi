# The capsule of the other kind over the same memory: a legacy
# DLManagedTensor becomes a DLManagedTensorVersioned whose manager_ctx holds
# it and whose deleter calls its deleter once (and a versioned one a legacy
# one, the same way round), on any device, touching no data. The Python
# reference (_exchange.python_rebuild) does it through NumPy: an import
# that records the address, then an export; the struct made here is the
# one NumPy's export makes (data + byte_offset and an offset of 0, strides
# always, a legacy import READ_ONLY), so both paths give the same capsule.
# Every other case is the Python one's.

from libc.stdint cimport int32_t, int64_t, uint64_t, uintptr_t, INT32_MAX
from libc.stdlib cimport malloc, free
from cpython.exc cimport PyErr_NoMemory, PyErr_Occurred, PyErr_Clear
from cpython.ref cimport Py_DECREF

from dlpack cimport DLDevice, DLTensor, DLManagedTensor, DLManagedTensorVersioned, FLAG_READ_ONLY

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


cdef bint numpy_holds(DLTensor *t) noexcept:
    """Whether a tensor is well-formed, of a NumPy dtype of its own (one
    lane; the others go through a carrier, which needs ml_dtypes) and
    within NumPy's dimensions."""
    cdef int nbytes = bit_index(t.dtype.bits)
    return (well_formed(t) and t.ndim <= state.numpy_maxdims and t.dtype.lanes == 1 and t.dtype.code < 32
            and nbytes != 0 and state.numpy_descr[t.dtype.code][nbytes] != NULL)


cdef int adaptable(void *ptr, int versioned) noexcept:
    """1 when the tensor of an unconsumed capsule of the given kind is one
    whose rebuild through NumPy the core makes as NumPy would: numpy_holds
    it, data that is not NULL (NumPy allocates for NULL), at least one
    dimension (NumPy before 2.1 exports a 0-d tensor without strides),
    versioned: major 1 and not READ_ONLY (a read-only tensor has no legacy
    capsule). Else 0: the Python rebuild runs."""
    cdef DLTensor *t = tensor_of(ptr, versioned)
    if not state.numpy_layout:
        return 0  # NumPy before 2.1 lays its exports out otherwise (no strides, empty data moved)
    if not major_one(ptr, versioned) or (versioned and (<DLManagedTensorVersioned *>ptr).flags & FLAG_READ_ONLY):
        return 0
    return numpy_holds(t) and t.ndim >= 1 and <uintptr_t>t.data + t.byte_offset != 0


cdef inline void copy_tensor_as_numpy_exports(DLTensor *to, const DLTensor *src, int64_t *strides,
                                              DLDevice device) noexcept:
    """Copy the tensor as NumPy exports it: data + byte_offset and an offset
    of 0, the shape the source holds, strides always (row-major where the
    source has none, an extent of 0 counted as 1, as NumPy fills them)."""
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
    copy_tensor_as_numpy_exports(tensor_of(made, not versioned), t, <int64_t *>(<char *>made + size), device)
    return made


cdef PyObject *adapted_capsule(PyObject *capsule, int versioned, DLDevice device) except? NULL:
    """The capsule of the other kind over the tensor of an unconsumed capsule
    that adaptable() took, labelled `device`: the capsule taken (renamed
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
    type; 0 for anything else (the Python rebuild decides)."""
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


def rebuild(capsule, versioned, header, want_versioned, read_only, device=None, /):
    """The capsule of the other kind over the same tensor (the plain cases of _exchange.python_rebuild).

    The same arguments: a checked capsule; device a (type, id) tuple or None
    for the tensor's own. Every other case is the Python rebuild's."""
    cdef int is_versioned, want, kind
    cdef void *ptr = NULL
    cdef DLDevice to
    cdef PyObject *out = NULL
    configured()
    if isinstance(versioned, bool) and isinstance(want_versioned, bool) and isinstance(read_only, bool):
        is_versioned = versioned is True
        want = want_versioned is True
        # versioned -> legacy of read-only data is refused by the Python one
        if want != is_versioned and (want or read_only is False):
            ptr = unconsumed(<PyObject *>capsule, &kind)
        if ptr != NULL and kind == is_versioned and adaptable(ptr, kind):
            to = tensor_of(ptr, kind).device
            if device is None or device_from_tuple(device, &to):
                out = adapted_capsule(<PyObject *>capsule, kind, to)
    if out == NULL:  # not a plain case, or taken meanwhile: the Python rebuild says what the capsule now is
        return hand_back(b"rebuild", (capsule, versioned, header, want_versioned, read_only, device))
    adapted = <object>out
    Py_DECREF(adapted)  # the reference adapted_capsule handed over, now adapted's
    return adapted
