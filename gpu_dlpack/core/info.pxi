# inspect(capsule) in one call: what _capsule.read returns, a CapsuleInfo of
# an unconsumed capsule, from its copy_unconsumed; every case it does not
# read (not an unconsumed DLPack capsule, another major version, a malformed
# header) is the Python read's, which words the error.


# What the core keeps of what it made (a Device, a version, a dtype: each
# immutable), per pair; the Devices, and the record kept (record_kept), are
# forgotten when a policy is put in force (its device_class makes them).
cdef PyObject *devices_made[64][16]      # [type][id]: the Device
cdef PyObject *versions_made[16]         # [minor]: (1, minor)
cdef PyObject *dtypes_made[32][17]       # [code][bytes]: (code, bits, 1)
cdef PyObject *kept_record = NULL        # the last record inspect made (record_kept)
cdef int64_t kept_key[13 + 2 * MAX_NDIM]
cdef int kept_key_n = 0


cdef void forget_devices() noexcept:
    cdef int t, i
    cdef PyObject *old
    keep_record(None, kept_key, 0)  # no record's type
    for t in range(64):
        for i in range(16):
            old = devices_made[t][i]
            devices_made[t][i] = NULL
            Py_XDECREF(old)


cdef inline object device_of(int32_t type, int32_t id):
    """The Device of (type, id), made by Python once per pair and kept (a
    Device is immutable); None when Python refuses it as no device (its
    ValueError or TypeError). Anything else it raises (an interrupt, a
    MemoryError) is raised."""
    if type < 1 or id < 0:
        return None
    cdef PyObject **slot = &devices_made[type][id] if type < 64 and id < 16 else NULL
    if slot != NULL and slot[0] != NULL:
        return <object>slot[0]
    try:
        device = policy.device_class((type, id))
    except (ValueError, TypeError):  # refused: the Python read says why
        return None
    if slot != NULL:
        Py_INCREF(device)
        slot[0] = <PyObject *>device
    return device


cdef inline object version_of(DLPackVersion version):
    """(major, minor), kept for the versions of major 1"""
    cdef PyObject **slot = &versions_made[version.minor] if version.major == 1 and version.minor < 16 else NULL
    if slot != NULL and slot[0] != NULL:
        return <object>slot[0]
    v = (version.major, version.minor)
    if slot != NULL:
        Py_INCREF(v)
        slot[0] = <PyObject *>v
    return v


cdef inline object dtype_of(DLDataType dt):
    """(code, bits, lanes), kept for one lane of whole bytes"""
    cdef int nbytes = bit_index(dt.bits)
    cdef PyObject **slot = &dtypes_made[dt.code][nbytes] if dt.lanes == 1 and dt.code < 32 and nbytes else NULL
    if slot != NULL and slot[0] != NULL:
        return <object>slot[0]
    v = (dt.code, dt.bits, dt.lanes)
    if slot != NULL:
        Py_INCREF(v)
        slot[0] = <PyObject *>v
    return v


# The last shape and strides tuples read (0 and 1), with their values, given
# again while the values are the same (a tuple cannot change): records of
# tensors of one shape share them.
cdef PyObject *kept_tuples[2]
cdef int kept_n[2]
cdef int64_t kept_values[2][MAX_NDIM]
cdef object kept_lock = object()  # a free-threaded build's, for all the core keeps: the GIL's elsewhere


cdef inline tuple int64s_kept(int which, const int64_t *values, int n):
    with cython.critical_section(kept_lock):
        if (kept_tuples[which] != NULL and kept_n[which] == n and
                memcmp(kept_values[which], values, sizeof(int64_t) * <size_t>n) == 0):
            return <tuple>kept_tuples[which]
    t = int64s(values, n)
    with cython.critical_section(kept_lock):
        Py_XDECREF(kept_tuples[which])
        Py_INCREF(t)
        kept_tuples[which] = <PyObject *>t
        kept_n[which] = n
        memcpy(kept_values[which], values, sizeof(int64_t) * <size_t>n)
    return t


# The last record made and its fields (record_key), given again for a
# capsule of the same fields (a record is frozen), without reading the
# device and the layout again: the capsules of one array make one record.
cdef inline int record_key(int64_t *key, CapsuleHead *head, int versioned, DLTensor *t, const int64_t *shape,
                           const int64_t *strides) noexcept:
    """What a record holds of a copied header, as int64s in key (the data
    address first: the field most likely to differ); their count."""
    cdef int i, n = t.ndim
    key[0:13] = [<int64_t><uintptr_t>t.data, head.v.version.major if versioned else -1,
                 head.v.version.minor if versioned else -1, head.v.flags if versioned else 0, t.device.device_type,
                 t.device.device_id, t.dtype.code, t.dtype.bits, t.dtype.lanes, t.byte_offset, versioned, n,
                 t.strides != NULL]
    for i in range(n):
        key[13 + i] = shape[i]
        key[13 + n + i] = strides[i] if t.strides != NULL else 0
    return 13 + 2 * n


cdef inline object record_kept(const int64_t *key, int n):
    """The record kept for these fields, of the record type in force, or None."""
    cdef int i
    with cython.critical_section(kept_lock):
        if kept_record == NULL or kept_key_n != n or Py_TYPE(<object>kept_record) != <PyTypeObject *>policy.capsule_info:
            return None
        for i in range(n):
            if kept_key[i] != key[i]:
                return None
        return <object>kept_record


cdef inline void keep_record(object info, const int64_t *key, int n) noexcept:
    global kept_record, kept_key_n
    cdef PyObject *old = NULL
    with cython.critical_section(kept_lock):
        old, kept_record, kept_key_n = kept_record, <PyObject *>info, n
        memcpy(kept_key, key, sizeof(int64_t) * <size_t>n)
        Py_INCREF(info)
    Py_XDECREF(old)  # after the section: its finalizer may run Python


# The fields of the record inspect returns, held in the object: the base of
# _capsule.CapsuleInfo, the record's face (a frozen dataclass of these fields
# with the properties derived from them), which read() makes directly.
@cython.auto_pickle(False)
cdef class CapsuleFields:
    """The fields of a CapsuleInfo, held by the compiled core."""
    cdef readonly object name, versioned, version, flags, device, dl_dtype, shape, strides, byte_offset, data
    cdef object __weakref__

    def __init__(self, name, versioned, version, flags, device, dl_dtype, shape, strides, byte_offset, data):
        self.name = name
        self.versioned = versioned
        self.version = version
        self.flags = flags
        self.device = device
        self.dl_dtype = dl_dtype
        self.shape = shape
        self.strides = strides
        self.byte_offset = byte_offset
        self.data = data

    # vars(info): the fields, as a dataclass instance's dict holds them.
    @property
    def __dict__(self):
        return {"name": self.name, "versioned": self.versioned, "version": self.version, "flags": self.flags,
                "device": self.device, "dl_dtype": self.dl_dtype, "shape": self.shape, "strides": self.strides,
                "byte_offset": self.byte_offset, "data": self.data}

    # Pickled and copied as made: the class and its fields, in order.
    def __reduce__(self):
        return type(self), (self.name, self.versioned, self.version, self.flags, self.device, self.dl_dtype,
                            self.shape, self.strides, self.byte_offset, self.data)


# Whether the record type Python told of (CapsuleInfo) is made of
# CapsuleFields, checked once per type told.
cdef PyTypeObject *info_type_checked = NULL

cdef inline bint info_type_fits(PyTypeObject *tp) noexcept:
    global info_type_checked
    if tp == info_type_checked:
        return True
    if not PyType_IsSubtype(<type>tp, CapsuleFields):
        return False
    info_type_checked = tp
    return True


cdef inline object read_info(object capsule):
    if not policy.made or not info_type_fits(<PyTypeObject *>policy.capsule_info):
        configured()
        raise layer_error("malformed", ("the capsule's record type was not told",))
    cdef CapsuleHead head
    cdef int64_t shape[MAX_NDIM]
    cdef int64_t strides[MAX_NDIM]
    cdef int versioned
    cdef bint readable
    if copy_unconsumed(capsule, &head, shape, strides, &versioned, &readable) == NULL or not readable:
        raise capsule_fault(capsule, False)  # what is wrong
    cdef DLTensor *t = tensor_of(&head, versioned)
    cdef int64_t key[13 + 2 * MAX_NDIM]
    cdef int n = record_key(key, &head, versioned, t, shape, strides)
    kept = record_kept(key, n)
    if kept is not None:
        return kept
    device = device_of(t.device.device_type, t.device.device_id)
    if device is None:
        raise capsule_fault(capsule, False)
    # The layout check of every import, on the copy: a tensor no importer
    # can hold is refused here too (the Python read words it).
    t.shape = shape
    t.strides = NULL if t.strides == NULL else strides
    if layout_fault(t):
        raise capsule_fault(capsule, False)
    # The record made by CapsuleFields' own tp_new (Cython's, which sets the
    # fields to None) for the record type, without parsing arguments, then
    # filled in place: never the type's own slot, which a __new__ assigned
    # to the Python class replaces and which may return anything.
    cdef CapsuleFields info = <CapsuleFields>(<PyTypeObject *>CapsuleFields).tp_new(
        policy.capsule_info, <PyObject *>(), NULL)
    info.name = "dltensor_versioned" if versioned else "dltensor"
    info.versioned = versioned != 0
    info.version = version_of(head.v.version) if versioned else None
    info.flags = head.v.flags if versioned else 0
    info.device = device
    info.dl_dtype = dtype_of(t.dtype)
    info.shape = int64s_kept(0, shape, t.ndim)
    info.strides = None if t.strides == NULL else int64s_kept(1, strides, t.ndim)
    info.byte_offset = t.byte_offset
    info.data = PyLong_FromVoidPtr(t.data)
    keep_record(info, key, n)
    return info


@cython.embedsignature.format("clinic")
def read(capsule, /):
    """The CapsuleInfo of an unconsumed capsule (inspect), read in one step."""
    return read_info(capsule)

