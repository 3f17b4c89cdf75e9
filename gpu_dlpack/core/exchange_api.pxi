# The DLPack C exchange API of Exportable, offered on its type
# (__dlpack_c_exchange_api__): a consumer's C takes an owned versioned
# tensor of a wrapper (the plain plans run here, every other case is the
# capsule __dlpack__ gives), hands one back as what gpu_dlpack.from_dlpack
# makes of it, and asks the stream the layer would use on a device.


# The exchange API's entries as the table holds them (a consumer's C calls them).
ctypedef int (*from_py_t)(void *, DLManagedTensorVersioned **) noexcept
ctypedef int (*to_py_t)(DLManagedTensorVersioned *, void **) noexcept
ctypedef int (*stream_t)(int32_t, int32_t, void **) noexcept


# The DLPack C exchange API of Exportable (offered on its type).
cdef int exportable_from_py(void *obj, DLManagedTensorVersioned **out) except -1:
    cdef PyObject *a[2]
    cdef DLManagedTensorVersioned *m = NULL
    out[0] = NULL
    configured()
    if <PyTypeObject *>Py_TYPE(<object>obj) != <PyTypeObject *>policy.exportable_class and not isinstance(<object>obj, ExportableBase):
        raise TypeError("the DLPack exchange API of gpu_dlpack takes a gpu_dlpack.Exportable")
    cdef ExportableBase self = <ExportableBase>obj
    # The request is max_version=DLPACK_VERSION and nothing else: the plain
    # plans run when the version policy has accepted it against the floor in
    # force (else the general path checks it, and caches its verdict). That
    # check may run Python: the plan is checked after it, then held.
    if produced_accepted(verdict) and plan_holds(self) and self.plan != PLAN_CAPSULE:
        x = self._x
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
            # the request of the exchange: one tuple, made by the version check in force
            self._request = verdict.request
            out[0] = m
            return 0
    # Every other case: the capsule __dlpack__(max_version=DLPACK_VERSION)
    # gives, claimed here.
    a[0] = <PyObject *>self
    a[1] = <PyObject *>verdict.produced
    capsule = take(PyObject_VectorcallMethod(<PyObject *>"__dlpack__", a, 1, <PyObject *>MAX_VERSION_KEYWORD))
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
    fn = policy.from_dlpack
    r = take(hand_back(fn, a, 1))
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
    if device_type == kDLCPU:
        return 0
    cdef object kind = device_type, number = device_id
    a[0] = <PyObject *>kind
    a[1] = <PyObject *>number
    fn = policy.current_stream
    r = take(hand_back(fn, a, 2))
    out[0] = NULL if r is None else PyLong_AsVoidPtr(r)
    return 0


cdef DLPackExchangeAPI exportable_api
cdef bint exchange_api_set_up = False


# Made once per process, in the main interpreter (module setup): the table, offered on ExportableBase's type.
cdef int set_up_exchange_api() except -1:
    global exchange_api_set_up
    if exchange_api_set_up:
        return 0
    cdef PyTypeObject *tp = <PyTypeObject *>ExportableBase
    tp_dict = <dict>(<TypeSlots *>tp).tp_dict
    exportable_api.header.version.major = 1
    exportable_api.header.version.minor = 3
    exportable_api.header.prev_api = NULL
    exportable_api.managed_tensor_allocator = exportable_allocator
    exportable_api.managed_tensor_from_py_object_no_sync = <from_py_t>exportable_from_py
    exportable_api.managed_tensor_to_py_object_no_sync = <to_py_t>exportable_to_py
    exportable_api.dltensor_from_py_object_no_sync = NULL
    exportable_api.current_work_stream = <stream_t>exportable_stream
    tp_dict["__dlpack_c_exchange_api__"] = take(capsule_or_null(&exportable_api, EXCHANGE_API_NAME, NULL))
    PyType_Modified(ExportableBase)
    exchange_api_set_up = True  # last: what says it is done
    return 0
