/* The CUDA runtime calls: the stream hand-off and a copy with what follows
 * it, through the runtime library CuPy has already loaded. */

#include "runtime.h"

/* --- the stream hand-off, through the CUDA runtime already loaded --------- */

PyObject *
core_set_runtime(PyObject *mod, PyObject *args)
{
    unsigned long long g, s, r, w;
    if (!PyArg_ParseTuple(args, "KKKK", &g, &s, &r, &w))
        return NULL;
    if (!(g && s && r && w))
        g = s = r = w = 0;  /* all or none */
    state.rt_get_device = (get_device_t)(uintptr_t)g;
    state.rt_set_device = (set_device_t)(uintptr_t)s;
    state.rt_event_record = (event_record_t)(uintptr_t)r;
    state.rt_stream_wait = (stream_wait_t)(uintptr_t)w;
    return PyBool_FromLong(g != 0);
}

static int
on_device(set_device_t set_device, int device, int *current)
{
    if (*current == device)
        return 0;
    int rc = set_device(device);
    if (rc == 0)
        *current = device;
    return rc;
}

/* handoff(event, producer, consumer, device, consumer_device) -> status:
 * record `event` on `producer` (GPU `device`) and make `consumer` (on GPU
 * `consumer_device`) wait for it, each call made on its stream's device, the
 * current device restored. What _handoff.handoff does through CuPy, as one
 * C call; whether to call it is for Python to say. 0, or the runtime's
 * error code. */
PyObject *
core_handoff(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "handoff(event, producer, consumer, device, consumer_device)");
        return NULL;
    }
    /* The runtime as it is now: a stand-in's calls may run Python, which
     * may set another runtime (or none) meanwhile. */
    get_device_t get_device = state.rt_get_device;
    set_device_t set_device = state.rt_set_device;
    event_record_t event_record = state.rt_event_record;
    stream_wait_t stream_wait = state.rt_stream_wait;
    if (event_record == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpu_dlpack._core has no CUDA runtime");
        return NULL;
    }
    /* Each checked before the next: a conversion may run Python (__index__). */
    void *event = PyLong_AsVoidPtr(args[0]), *producer = NULL, *consumer = NULL;
    int device = -1, consumer_device = -1;
    if ((event == NULL && PyErr_Occurred()) ||
        ((producer = PyLong_AsVoidPtr(args[1])) == NULL && PyErr_Occurred()) ||
        ((consumer = PyLong_AsVoidPtr(args[2])) == NULL && PyErr_Occurred()) ||
        ((device = PyLong_AsLong(args[3])) == -1 && PyErr_Occurred()) ||
        ((consumer_device = PyLong_AsLong(args[4])) == -1 && PyErr_Occurred()))
        return NULL;
    int before = -1, current, rc, restore;
    rc = get_device(&before);
    if (rc != 0)
        return PyLong_FromLong(rc);
    current = before;
    if ((rc = on_device(set_device, device, &current)) == 0 && (rc = event_record(event, producer)) == 0 &&
        (rc = on_device(set_device, consumer_device, &current)) == 0)
        rc = stream_wait(consumer, event, 0);
    restore = on_device(set_device, before, &current);
    return PyLong_FromLong(rc != 0 ? rc : restore);
}

/* --- a copy and what follows it, through the same runtime ------------------- */

#define MEMCPY_DEFAULT 4 /* cudaMemcpyDefault: the direction read from the addresses */

PyObject *
core_set_copy_runtime(PyObject *mod, PyObject *args)
{
    unsigned long long m, s;
    if (!PyArg_ParseTuple(args, "KK", &m, &s))
        return NULL;
    if (!(m && s))
        m = s = 0; /* both or neither */
    state.rt_memcpy_async = (memcpy_async_t)(uintptr_t)m;
    state.rt_stream_sync = (stream_sync_t)(uintptr_t)s;
    return PyBool_FromLong(m != 0);
}

/* copy(dst, src, nbytes, stream, device, event, synchronize) -> status:
 * cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream) on GPU
 * `device`, then cudaEventRecord(event, stream) when `event` is not 0 (what
 * keeps the copy's buffers alive), then cudaStreamSynchronize(stream) when
 * `synchronize` (a copy the host reads at once). The current device is
 * switched only when it is another, and restored; the GIL is released
 * around the runtime calls (a wait, or the driver staging pageable memory).
 * Whether to copy, and whether to wait, is for Python to say. 0, or the
 * error code of the first call that failed. */
PyObject *
core_copy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "copy(dst, src, nbytes, stream, device, event, synchronize)");
        return NULL;
    }
    /* The runtime as it is now, read with the GIL held: the calls below run
     * without it, while another thread may set another runtime (or none). */
    get_device_t get_device = state.rt_get_device;
    set_device_t set_device = state.rt_set_device;
    event_record_t event_record = state.rt_event_record;
    memcpy_async_t memcpy_async = state.rt_memcpy_async;
    stream_sync_t stream_sync = state.rt_stream_sync;
    if (memcpy_async == NULL || get_device == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpu_dlpack._core has no CUDA runtime for copies");
        return NULL;
    }
    /* Each checked before the next: a conversion may run Python (__index__). */
    void *dst = PyLong_AsVoidPtr(args[0]), *src = NULL, *stream = NULL, *event = NULL;
    size_t nbytes = 0;
    int device = -1;
    if ((dst == NULL && PyErr_Occurred()) ||
        ((src = PyLong_AsVoidPtr(args[1])) == NULL && PyErr_Occurred()) ||
        ((nbytes = PyLong_AsSize_t(args[2])) == (size_t)-1 && PyErr_Occurred()) ||
        ((stream = PyLong_AsVoidPtr(args[3])) == NULL && PyErr_Occurred()) ||
        ((device = PyLong_AsLong(args[4])) == -1 && PyErr_Occurred()) ||
        ((event = PyLong_AsVoidPtr(args[5])) == NULL && PyErr_Occurred()))
        return NULL;
    int sync = PyObject_IsTrue(args[6]);
    if (sync < 0)
        return NULL;
    int before = -1, current, rc, restore = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = get_device(&before);
    if (rc == 0) {
        current = before;
        if ((rc = on_device(set_device, device, &current)) == 0 &&
            (rc = memcpy_async(dst, src, nbytes, MEMCPY_DEFAULT, stream)) == 0 &&
            (event == NULL || (rc = event_record(event, stream)) == 0) && sync)
            rc = stream_sync(stream);
        restore = on_device(set_device, before, &current);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc != 0 ? rc : restore);
}
