# The CUDA runtime calls: the stream hand-off and a copy with what follows
# it, through the C entries of CuPy's own runtime module, each bound only
# where its capsule's name is the C signature called here. The entries
# release the GIL themselves around each CUDA call that may wait; an error
# is CuPy's own CUDARuntimeError (docs/internals/core.md).


cdef extern from "Python.h":
    size_t PyLong_AsSize_t(object pylong) except? <size_t>-1

# The entries as CuPy's runtime module publishes them (Cython's C
# signatures). A call answers a new reference (None), or NULL with the error
# set; getDevice answers -1 with the error set. Python binds them
# (bind_runtime); the tests bind stand-ins.
ctypedef int (*get_device_t)(int) except? -1
ctypedef PyObject *(*set_device_t)(int, int) noexcept
ctypedef PyObject *(*event_record_t)(intptr_t, intptr_t, int) noexcept
ctypedef PyObject *(*stream_wait_t)(intptr_t, intptr_t, int, void *) noexcept
ctypedef PyObject *(*memcpy_async_t)(intptr_t, intptr_t, size_t, int, intptr_t, int) noexcept
ctypedef PyObject *(*stream_sync_t)(intptr_t, int) noexcept
ctypedef int (*is_capturing_t)(intptr_t, int) noexcept  # except *: the error is read after it

cdef enum:
    RT_GET_DEVICE
    RT_SET_DEVICE
    RT_EVENT_RECORD
    RT_STREAM_WAIT
    RT_MEMCPY_ASYNC
    RT_STREAM_SYNC
    RT_IS_CAPTURING
    RT_ENTRIES

cdef struct Runtime:
    get_device_t get_device
    set_device_t set_device
    event_record_t event_record
    stream_wait_t stream_wait
    memcpy_async_t memcpy_async
    stream_sync_t stream_sync
    is_capturing_t is_capturing

# The calls (bind_runtime: all or none), and the capsules they come from,
# held while bound (None: unbound).
cdef Runtime bound_rt
cdef object rt_owner = None

# The entries, in the order of RT_*, and their signatures as Cython writes them.
RUNTIME_ENTRIES = (
    ("getDevice", "int (int __pyx_skip_dispatch)"),
    ("setDevice", "PyObject *(int, int __pyx_skip_dispatch)"),
    ("eventRecord", "PyObject *(intptr_t, intptr_t, int __pyx_skip_dispatch)"),
    ("streamWaitEvent", "PyObject *(intptr_t, intptr_t, int __pyx_skip_dispatch, "
                        "struct __pyx_opt_args_13cupy_backends_4cuda_3api_7runtime_streamWaitEvent "
                        "*__pyx_optional_args)"),
    ("memcpyAsync", "PyObject *(intptr_t, intptr_t, size_t, int, intptr_t, int __pyx_skip_dispatch)"),
    ("streamSynchronize", "PyObject *(intptr_t, int __pyx_skip_dispatch)"),
    ("streamIsCapturing", "int (intptr_t, int __pyx_skip_dispatch)"),
)
cdef tuple runtime_entries = RUNTIME_ENTRIES  # what bind_runtime reads, whatever Python sets

cdef enum:
    MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: the direction read from the addresses


def bind_runtime(capi, /):
    """Bind the CUDA runtime calls to CuPy's runtime module's __pyx_capi__ (None: unbind); None, or (entry, found, expected) when one differs.

    All of them or none: a missing entry (found None) or one whose signature
    differs is named, for Python to word, and nothing is bound."""
    cdef void *found[RT_ENTRIES]
    cdef PyObject *entry
    cdef const char *name
    cdef int i
    global rt_owner
    if capi is None:
        rt_owner = None
        memset(&bound_rt, 0, sizeof(bound_rt))
        return None
    if not isinstance(capi, dict):
        raise TypeError("bind_runtime(capi): a __pyx_capi__ dict, or None")
    kept = []  # the capsules, held while bound
    for i in range(RT_ENTRIES):
        wanted, signature = runtime_entries[i]
        entry = PyDict_GetItem(capi, wanted)
        if entry == NULL or not PyCapsule_CheckExact(<object>entry):
            return wanted, None, signature
        cap = <object>entry  # held from here: an allocation may run Python, which may change capi
        name = PyCapsule_GetName(cap)
        found_name = "(no name)" if name == NULL else name.decode()
        if found_name != signature:
            return wanted, found_name, signature
        found[i] = PyCapsule_GetPointer(cap, name)
        kept.append(cap)
    bound_rt.get_device = <get_device_t>found[RT_GET_DEVICE]
    bound_rt.set_device = <set_device_t>found[RT_SET_DEVICE]
    bound_rt.event_record = <event_record_t>found[RT_EVENT_RECORD]
    bound_rt.stream_wait = <stream_wait_t>found[RT_STREAM_WAIT]
    bound_rt.memcpy_async = <memcpy_async_t>found[RT_MEMCPY_ASYNC]
    bound_rt.stream_sync = <stream_sync_t>found[RT_STREAM_SYNC]
    bound_rt.is_capturing = <is_capturing_t>found[RT_IS_CAPTURING]
    rt_owner = kept
    return None


cdef inline int answered(PyObject *r) noexcept:
    """Drop a runtime call's answer (a new reference); -1, the error set, where it raised."""
    if r == NULL:
        return -1
    Py_DECREF(<object>r)
    return 0


cdef inline int switch_device(const Runtime *rt, int device, int *current) noexcept:
    """Make `device` current unless it is; -1, the error set, where that failed."""
    if current[0] == device:
        return 0
    if answered(rt.set_device(device, 0)) < 0:
        return -1
    current[0] = device
    return 0


cdef int restore_device(const Runtime *rt, int before, int *current, bint failed) except -1:
    """The current device set back to `before`. An error already raised stays
    the one raised; one of the restore alone is raised."""
    cdef PyObject *et
    cdef PyObject *ev
    cdef PyObject *tb
    if failed:
        PyErr_Fetch(&et, &ev, &tb)
        if switch_device(rt, before, current) < 0:
            PyErr_Clear()
        PyErr_Restore(et, ev, tb)
        return -1
    return switch_device(rt, before, current)


cdef inline object bound_runtime(Runtime *rt, str what):
    """The runtime as it is now, and what keeps its entries alive for the
    call (an entry may run Python, which may bind another meanwhile)."""
    if rt_owner is None:
        raise RuntimeError(f"gpu_dlpack._core has no CUDA runtime for {what}")
    rt[0] = bound_rt
    return rt_owner


def handoff(event, producer, consumer, device, consumer_device, /):
    """The stream hand-off in one call: record `event` on `producer` (GPU
    `device`) and make `consumer` (GPU `consumer_device`) wait for it, each
    on its stream's device, the current device restored."""
    cdef Runtime rt
    owner = bound_runtime(&rt, "the stream hand-off")
    # Each converted before the next: a conversion may run Python (__index__).
    cdef void *event_ptr = PyLong_AsVoidPtr(event)
    cdef void *producer_ptr = PyLong_AsVoidPtr(producer)
    cdef void *consumer_ptr = PyLong_AsVoidPtr(consumer)
    cdef int gpu = PyLong_AsLong(device)
    cdef int consumer_gpu = PyLong_AsLong(consumer_device)
    cdef int before = rt.get_device(0)
    cdef int current = before
    cdef bint failed = (
        switch_device(&rt, gpu, &current) < 0
        or answered(rt.event_record(<intptr_t>event_ptr, <intptr_t>producer_ptr, 0)) < 0
        or switch_device(&rt, consumer_gpu, &current) < 0
        or answered(rt.stream_wait(<intptr_t>consumer_ptr, <intptr_t>event_ptr, 0, NULL)) < 0)
    restore_device(&rt, before, &current, failed)
    return None


def copy(dst, src, nbytes, stream, device, event, synchronize, /):
    """A copy and what follows it, in one call: cudaMemcpyAsync (the
    direction read from the addresses) on `stream` of GPU `device`, then
    cudaEventRecord of `event` unless 0, then cudaStreamSynchronize when
    `synchronize`; the current device switched only when another, and restored."""
    cdef Runtime rt
    owner = bound_runtime(&rt, "copies")
    # Each converted before the next: a conversion may run Python (__index__).
    cdef void *dst_ptr = PyLong_AsVoidPtr(dst)
    cdef void *src_ptr = PyLong_AsVoidPtr(src)
    cdef size_t size = PyLong_AsSize_t(nbytes)
    cdef void *stream_ptr = PyLong_AsVoidPtr(stream)
    cdef int gpu = PyLong_AsLong(device)
    cdef void *event_ptr = PyLong_AsVoidPtr(event)
    cdef bint sync = PyObject_IsTrue(synchronize)
    cdef int before = rt.get_device(0)
    cdef int current = before
    cdef bint failed = (
        switch_device(&rt, gpu, &current) < 0
        or answered(rt.memcpy_async(<intptr_t>dst_ptr, <intptr_t>src_ptr, size, MEMCPY_DEFAULT,
                                    <intptr_t>stream_ptr, 0)) < 0
        or (event_ptr != NULL and answered(rt.event_record(<intptr_t>event_ptr, <intptr_t>stream_ptr, 0)) < 0)
        or (sync and answered(rt.stream_sync(<intptr_t>stream_ptr, 0)) < 0))
    restore_device(&rt, before, &current, failed)
    return None


def capturing(stream, device, /):
    """Whether `stream` is capturing a CUDA graph (cudaStreamIsCapturing),
    asked on GPU `device` unless it is negative (a stream's own handle needs
    none), the current device restored. An error is CuPy's, for Python to
    word (_handoff.capture_of)."""
    cdef Runtime rt
    owner = bound_runtime(&rt, "the capture check")
    cdef void *stream_ptr = PyLong_AsVoidPtr(stream)
    cdef int gpu = PyLong_AsLong(device)
    cdef int before = gpu if gpu < 0 else rt.get_device(0)
    cdef int current = before
    cdef int answer = 0
    cdef bint failed = switch_device(&rt, gpu, &current) < 0
    if not failed:
        answer = rt.is_capturing(<intptr_t>stream_ptr, 0)
        failed = PyErr_Occurred() != NULL
    restore_device(&rt, before, &current, failed)
    return answer != 0
