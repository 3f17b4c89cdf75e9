# The exported object: ExportableBase, the compiled base of
# gpu_dlpack.Exportable (what wrap() returns). Its state is typed fields,
# written once, where it is made (__init__, or wrap()'s plain cases); the plan
# it runs is made here from them (plan_of), once; its __dlpack__ runs the
# plan in C, every other case the general path the policy names (exportable_fallback).
# NumPy's capsule is core/numpy_export.pxi's, the DLPack C exchange API its
# type offers core/exchange_api.pxi's.


# The plan of a wrapper (plan_of): the general path (Python's), NumPy's own
# capsule, the producer's C exchange API, or a host producer's capsule (JAX).
cdef enum:
    PLAN_GENERAL = 0
    PLAN_NUMPY = 1
    PLAN_EXCHANGE = 2
    PLAN_CAPSULE = 3


# What run_plan() and export_plain() give when theirs is not a plain case (not
# None, which the Python functions a plain case hands on to may return).
cdef object NOT_PLAIN = object()


cdef inline bint is_entry(ImportEntry *e) noexcept:
    """Whether import_entry found an entry (None: not imported this way)."""
    return <PyObject *>e != <PyObject *>None


@cython.auto_pickle(False)
cdef class ExportableBase:
    """The compiled part of gpu_dlpack.Exportable: its state and __dlpack__."""
    # Its state, read-only to Python: the array, whether the export is
    # read-only, the wrapper's own floor (None: the one in force), the Device
    # of the data and its (type, id) pair, the Device its label depends on
    # (managed memory; None: none), and the latest request. _held is
    # Python's (the interface it gave last).
    cdef readonly object _x
    cdef readonly bint _readonly
    cdef readonly object _floor, _source, _device, _reported, _request
    cdef public object _held
    # The plan, made from the state by plan_of (the type and dtype of _x it
    # was made for; the producer type's entry and what keeps it alive).
    cdef int plan
    cdef object plan_type, plan_dtype, guards_owner
    cdef ImportEntry *guards
    cdef object __weakref__

    def __init__(self, x, bint readonly, floor, source, device, reported):
        """__init__($self, x, readonly, floor, source, device, reported, /)
--

The state of the wrapper, as gpu_dlpack.Exportable read it, and its plan."""
        configured()
        made(self, x, readonly, floor, source, device, reported)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the wrapped array, under the rules (the standard's
``__dlpack__``).

Parameters
----------
stream : int or stream object, optional
    The stream the consumer uses the data on (``None`` or ``-1`` for host
    memory).
max_version : tuple of int, optional
    The newest DLPack version the consumer reads; ``None`` asks for a
    legacy capsule.
dl_device : tuple of int, optional
    The ``(device_type, device_id)`` to export to (``None``: in place).
copy : bool, optional
    ``True`` always copies, ``False`` never, ``None`` when it must.

Returns
-------
PyCapsule
    A ``dltensor`` or ``dltensor_versioned`` capsule.

Raises
------
BufferError, TypeError, ValueError
    What the rules refuse, as `export` raises it."""
        cdef PyObject *a[5]
        configured()
        if self.plan != PLAN_GENERAL and stream is None and dl_device is None and copy is None:
            capsule = run_plan(self, max_version, max_version is not None)
            if capsule is not NOT_PLAIN:
                return capsule
        if self._device is None:
            raise layer_error("unmade_wrapper", (type(self),))
        self._request = (stream, max_version, dl_device, copy)  # a dict only when read
        a[:] = [<PyObject *>self, <PyObject *>stream, <PyObject *>max_version, <PyObject *>dl_device, <PyObject *>copy]
        fallback = policy.exportable_fallback
        return take(PyObject_Vectorcall(<PyObject *>fallback, a, 5, NULL))

    def __dlpack_device__(self):
        """The ``(device_type, device_id)`` of the wrapped array.

Returns
-------
tuple of int
    The DLPack device pair, as read when the wrapper was made."""
        if self._device is None:
            raise layer_error("unmade_wrapper", (type(self),))
        return self._device


# Sets the state of a wrapper and makes its plan: the plain plans for one
# that is not read-only, has no floor of its own and no label that depends
# on the consumer (plan_of says which), the general path for any other.
# Python may run in plan_of (a host test, the type's first entry), before
# any field is set; none runs while they are set.
cdef int made(ExportableBase self, object x, bint readonly, object floor, object source, object device,
              object reported) except -1:
    cdef PyObject *hold = NULL
    cdef ImportEntry *e = NULL
    cdef int plan = PLAN_GENERAL
    # (Every plain plan is of data on the CPU: data Python placed elsewhere is
    # not probed again.)
    if (not readonly and floor is None and reported is None and
            PyObject_RichCompareBool(device, policy.cpu_dlpack, Py_EQ)):
        plan = plan_of(<PyObject *>x, &e, &hold)
    owner = None if hold == NULL else take(hold)
    # Made anew (__init__ again): what it held is let go only once every
    # field is set, so that a finalizer it runs sees the wrapper whole.
    held = None
    if self._device is not None:
        held = (self._x, self._floor, self._source, self._device, self._reported, self._request, self._held,
                self.plan_type, self.plan_dtype, self.guards_owner)
    # (A field already None is left as it is: its reference count is not
    # touched, on the path every plain wrap takes.)
    self._x = x
    self._readonly = readonly
    if floor is not None or self._floor is not None:
        self._floor = floor
    self._source = source
    self._device = device
    if reported is not None or self._reported is not None:
        self._reported = reported
    if self._request is not None:
        self._request = None
    if self._held is not None:
        self._held = None
    self.plan = plan
    self.plan_type = type(x) if plan != PLAN_GENERAL else None
    if plan == PLAN_NUMPY or self.plan_dtype is not None:
        self.plan_dtype = <object>descr_of(<PyObject *>x) if plan == PLAN_NUMPY else None
    if owner is not None or self.guards_owner is not None:
        self.guards_owner = owner
    self.guards = e
    del held
    return 0


# The plan for x, a wrapper's array: NumPy's capsule for an exact NumPy array
# of a plain dtype; the C exchange API of a producer type whose entry has
# one, for data it says is on the CPU; the capsule of a producer type with a
# host test (JAX) that its array passes; else the general path. For the
# last two, *e is the type's entry and *hold a new reference to what keeps
# it alive, which the caller releases.
cdef int plan_of(PyObject *x, ImportEntry **e, PyObject **hold) except -1:
    cdef PyObject *got = NULL
    cdef ImportEntry *entry
    cdef int plan = PLAN_GENERAL
    if x.ob_type == <PyTypeObject *>cnp.ndarray:
        return PLAN_NUMPY if is_plain(descr_of(x)) else PLAN_GENERAL
    entry = import_entry(x.ob_type, &got)
    owner = take(got)
    if is_entry(entry) and entry.api != NULL:
        if exchange_on_cpu(entry, x, True):
            plan = PLAN_EXCHANGE
    elif is_entry(entry):
        # Host memory on one device by its type's host test: the CPU, as
        # its __dlpack_device__ says.
        if host_test(entry, x) > 0:
            plan = PLAN_CAPSULE
    if plan != PLAN_GENERAL:
        e[0] = entry
        Py_INCREF(owner)
        hold[0] = <PyObject *>owner
    return plan


# 1 when the plan may run now: the array is still of the type (and an exact
# NumPy array still of the dtype, checked where it runs) it was made for.
# What it reads is held by the caller for the rest of the call (run_plan):
# Python run meanwhile may make the wrapper anew.
cdef inline bint plan_holds(ExportableBase self) noexcept:
    return (self.plan != PLAN_GENERAL and <PyObject *>Py_TYPE(self._x) == <PyObject *>self.plan_type and
            (self.plan == PLAN_NUMPY or self.guards != NULL))


# The versioned tensor of a PLAN_EXCHANGE export where the rules pass it on as
# it is; NULL (no error) when they do not.
cdef DLManagedTensorVersioned *exchange_export_of(object x, ImportEntry *e) noexcept:
    cdef DLManagedTensorVersioned *m = NULL
    if e.api.managed_tensor_from_py_object_no_sync(<PyObject *>x, &m) != 0 or m == NULL:
        PyErr_Clear()
        return NULL
    cdef DLTensor *t = &m.dl_tensor
    if (not guards_pass(e, <PyObject *>x, t.dtype.code) or m.version.major != 1 or not well_formed(t) or
            t.device.device_type != kDLCPU or not dtype_known(t.dtype) or t.dtype.bits < 8 or
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
    fn = policy.host_export  # the general path, held for the calls
    a[0] = <PyObject *>x
    a[1] = <PyObject *>max_version
    a[2] = <PyObject *>None
    # The verdict on max_version is read before and after the producer runs
    # (Python, which may set another floor), as the Python path reads it.
    if versioned and not accepted_versioned(verdict, <PyObject *>max_version):
        return take(hand_back(fn, a, 2))
    # A C reference: dropped with drop_keeping_error (its destructor may run Python).
    cdef PyObject *answer = ask_capsule(<PyObject *>x, versioned)
    if answer == NULL:
        error = take(taken_error())  # not an Exception (an interrupt): raised as it is, as in Python
        a[3] = <PyObject *>error
        return take(hand_back(fn, a, 4))
    cdef int kind = -1 if versioned and not accepted_versioned(verdict, <PyObject *>max_version) else kind_of(answer)
    cdef void *ptr = NULL if kind < 0 else pointer_or_null(answer, VERSIONED if kind else LEGACY)
    if ptr == NULL:
        PyErr_Clear()
    cdef DLTensor *t = NULL if ptr == NULL else tensor_of(ptr, kind)
    # The checks of every capsule passed on: well-formed, a dtype exchanged
    # whole bytes wide, on the device the host test said (the CPU, any id).
    cdef bint plain = (t != NULL and (not kind or (<DLManagedTensorVersioned *>ptr).version.major == 1) and
                       well_formed(t) and t.device.device_type == kDLCPU and dtype_known(t.dtype) and
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
        cpu.device_type = kDLCPU
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
    out = hand_back(fn, a, 3)
    drop_keeping_error(answer)
    return take(out)


# The capsule that owns the versioned tensor m; out of memory, m is released
# and the MemoryError raised.
cdef object owning_capsule(DLManagedTensorVersioned *m):
    cdef PyObject *made = capsule_or_null(m, VERSIONED, <PyCapsule_Destructor>capsule_destructor)
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
    return t.device.device_type == kDLCPU and (t.device.device_id == 0 or not id_zero)


# The request a wrapper holds (its _request), when it is the one of a call
# asked for this max_version (the same object) and nothing else; else None.
cdef inline object same_request(object request, object max_version):
    if (not PyTuple_CheckExact(request) or PyTuple_GET_SIZE(request) != 4 or
            PyTuple_GET_ITEM(request, 1) != <PyObject *>max_version or
            PyTuple_GET_ITEM(request, 0) != <PyObject *>None or
            PyTuple_GET_ITEM(request, 2) != <PyObject *>None or
            PyTuple_GET_ITEM(request, 3) != <PyObject *>None):
        return None
    return request


# The request of a plain call asked for max_version (the same object) and
# nothing else, made once where it can be: a legacy request's is a constant;
# for an exact tuple, the last one made is kept (a tuple cannot change), so
# that a consumer that asks each new wrapper the same (torch's from_dlpack,
# its max_version a constant) makes none.
cdef tuple LEGACY_REQUEST = (None, None, None, None)
cdef object kept_request = None
cdef object kept_request_lock = object()  # a free-threaded build's: the GIL's elsewhere


cdef inline object plain_request(object max_version):
    global kept_request
    if max_version is None:
        return LEGACY_REQUEST
    if not PyTuple_CheckExact(max_version):
        return (None, max_version, None, None)
    with cython.critical_section(kept_request_lock):
        request = same_request(kept_request, max_version)
        if request is None:
            request = kept_request = (None, max_version, None, None)
    return request


# The capsule of the plan asked for max_version (and nothing else), or
# NOT_PLAIN: the general path runs.
cdef object run_plan(ExportableBase self, object max_version, bint versioned):
    cdef DLManagedTensorVersioned *m
    # The request first, as the general path sets it first: its allocation
    # may run finalizers, which may make the wrapper anew, so the plan is
    # checked after it, and held.
    request = same_request(self._request, max_version)
    if request is None:
        request = plain_request(max_version)
    if not plan_holds(self) or (versioned and not accepted_versioned(verdict, <PyObject *>max_version)):
        return NOT_PLAIN
    # The plan held for the rest of the call: the array, the dtype, what
    # keeps the type's entry alive.
    cdef int plan = self.plan
    x = self._x
    dtype = self.plan_dtype
    cdef ImportEntry *guards = self.guards
    owner = self.guards_owner
    if plan == PLAN_NUMPY:
        capsule = None if descr_of(<PyObject *>x) != <PyObject *>dtype else numpy_export(<PyObject *>x, versioned)
        if capsule is None:
            # NumPy refused (a read-only array as legacy...), or the dtype
            # changed: the general path says why, in gpu_dlpack's words.
            return NOT_PLAIN
        self._request = request
        return capsule
    if plan == PLAN_CAPSULE:
        self._request = request  # also when the export raises, as on the general path
        return capsule_export(x, max_version, versioned, guards.read_only)
    if not versioned:
        return NOT_PLAIN
    # PLAN_EXCHANGE, asked for a versioned capsule
    m = exchange_export_of(x, guards)
    if m == NULL:
        return NOT_PLAIN
    capsule = owning_capsule(m)
    self._request = request
    return capsule
