/* The CUDA runtime calls: the stream hand-off and a copy with what follows
 * it, through CuPy's own runtime module.
 *
 * CuPy 13 and 14 link the CUDA runtime statically into
 * cupy_backends.cuda.api.runtime: no libcudart is loaded, and no symbol of
 * that runtime is exported. CuPy's other modules reach it through the C
 * functions the module publishes in __pyx_capi__, one PyCapsule per
 * function, named by its C signature. The core binds to the same entries,
 * so its calls go to the runtime instance that made the producer's streams
 * and events (on ROCm builds, the same module over HIP). A capsule whose
 * name is not the signature below is refused: calling it would be a call
 * through the wrong type. The functions hold the GIL when called and
 * release it themselves around each CUDA call that may wait; an error is
 * CuPy's own CUDARuntimeError, as on the Python path. */

#include "runtime.h"

/* The entries, their signatures as Cython writes them, and where each goes. */
static const struct {
    const char *name, *signature;
} entries[RT_ENTRIES] = {
    [RT_GET_DEVICE] = {"getDevice", "int (int __pyx_skip_dispatch)"},
    [RT_SET_DEVICE] = {"setDevice", "PyObject *(int, int __pyx_skip_dispatch)"},
    [RT_EVENT_RECORD] = {"eventRecord", "PyObject *(intptr_t, intptr_t, int __pyx_skip_dispatch)"},
    [RT_STREAM_WAIT] = {"streamWaitEvent",
                        "PyObject *(intptr_t, intptr_t, int __pyx_skip_dispatch, "
                        "struct __pyx_opt_args_13cupy_backends_4cuda_3api_7runtime_streamWaitEvent "
                        "*__pyx_optional_args)"},
    [RT_MEMCPY_ASYNC] = {"memcpyAsync", "PyObject *(intptr_t, intptr_t, size_t, int, intptr_t, int __pyx_skip_dispatch)"},
    [RT_STREAM_SYNC] = {"streamSynchronize", "PyObject *(intptr_t, int __pyx_skip_dispatch)"},
};

PyObject *
core_runtime_entries(void)
{
    PyObject *out = PyTuple_New(RT_ENTRIES);
    if (out == NULL)
        return NULL;
    for (int i = 0; i < RT_ENTRIES; i++) {
        PyObject *pair = Py_BuildValue("(ss)", entries[i].name, entries[i].signature);
        if (pair == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, pair);
    }
    return out;
}

/* bind_runtime(capi) -> None, or (name, found, expected): bind the core to
 * the entries of `capi` (CuPy's runtime module's __pyx_capi__), all of them
 * or none. None unbinds. A missing entry (found None) or one whose signature
 * differs is named in the answer and nothing is bound; Python words it. */
PyObject *
core_bind_runtime(PyObject *mod, PyObject *capi)
{
    if (capi == Py_None) {
        Py_CLEAR(state.rt_owner);
        memset(&state.rt, 0, sizeof state.rt);
        Py_RETURN_NONE;
    }
    if (!PyDict_Check(capi)) {
        PyErr_SetString(PyExc_TypeError, "bind_runtime(capi): a __pyx_capi__ dict, or None");
        return NULL;
    }
    void *found[RT_ENTRIES];
    PyObject *kept = PyTuple_New(RT_ENTRIES);  /* the capsules, held while bound */
    if (kept == NULL)
        return NULL;
    for (int i = 0; i < RT_ENTRIES; i++) {
        PyObject *cap = PyDict_GetItemString(capi, entries[i].name);
        if (cap == NULL || !PyCapsule_CheckExact(cap)) {
            Py_DECREF(kept);
            return Py_BuildValue("(sOs)", entries[i].name, Py_None, entries[i].signature);
        }
        const char *name = PyCapsule_GetName(cap);
        if (name == NULL || strcmp(name, entries[i].signature) != 0) {
            PyErr_Clear();
            Py_DECREF(kept);
            return Py_BuildValue("(sss)", entries[i].name, name ? name : "(no name)", entries[i].signature);
        }
        found[i] = PyCapsule_GetPointer(cap, name);
        if (found[i] == NULL) {
            Py_DECREF(kept);
            return NULL;
        }
        PyTuple_SET_ITEM(kept, i, Py_NewRef(cap));
    }
    state.rt.get_device = (get_device_t)found[RT_GET_DEVICE];
    state.rt.set_device = (set_device_t)found[RT_SET_DEVICE];
    state.rt.event_record = (event_record_t)found[RT_EVENT_RECORD];
    state.rt.stream_wait = (stream_wait_t)found[RT_STREAM_WAIT];
    state.rt.memcpy_async = (memcpy_async_t)found[RT_MEMCPY_ASYNC];
    state.rt.stream_sync = (stream_sync_t)found[RT_STREAM_SYNC];
    Py_XSETREF(state.rt_owner, kept);
    Py_RETURN_NONE;
}

/* A call that answers a new reference (None) or NULL with the error set. */
static int
done(PyObject *r)
{
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int
on_device(const Runtime *rt, int device, int *current)
{
    if (*current == device)
        return 0;
    if (done(rt->set_device(device, 0)) < 0)
        return -1;
    *current = device;
    return 0;
}

/* The current device set back to `before`. An error already raised stays
 * the one raised; one of the restore alone is raised. */
static PyObject *
restore(const Runtime *rt, int before, int *current, int failed)
{
    if (failed) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (on_device(rt, before, current) < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    if (on_device(rt, before, current) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* The runtime as it is now, and what keeps its entries alive for the call:
 * an entry may run Python (a stand-in in the tests), which may bind another
 * runtime (or none) meanwhile. NULL with a RuntimeError when unbound. */
static PyObject *
current_runtime(Runtime *rt, const char *what)
{
    if (state.rt_owner == NULL) {
        PyErr_Format(PyExc_RuntimeError, "gpu_dlpack._core has no CUDA runtime for %s", what);
        return NULL;
    }
    *rt = state.rt;
    return Py_NewRef(state.rt_owner);
}

/* handoff(event, producer, consumer, device, consumer_device) -> None:
 * record `event` on `producer` (GPU `device`) and make `consumer` (on GPU
 * `consumer_device`) wait for it, each call made on its stream's device, the
 * current device restored. What _handoff.handoff does through CuPy, as one
 * C call; whether to call it is for Python to say. An error of the runtime
 * is CuPy's CUDARuntimeError. */
PyObject *
core_handoff(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "handoff(event, producer, consumer, device, consumer_device)");
        return NULL;
    }
    Runtime rt;
    PyObject *owner = current_runtime(&rt, "the stream hand-off");
    if (owner == NULL)
        return NULL;
    PyObject *out = NULL;
    /* Each checked before the next: a conversion may run Python (__index__). */
    void *event = PyLong_AsVoidPtr(args[0]), *producer = NULL, *consumer = NULL;
    int device = -1, consumer_device = -1;
    if ((event == NULL && PyErr_Occurred()) ||
        ((producer = PyLong_AsVoidPtr(args[1])) == NULL && PyErr_Occurred()) ||
        ((consumer = PyLong_AsVoidPtr(args[2])) == NULL && PyErr_Occurred()) ||
        ((device = PyLong_AsLong(args[3])) == -1 && PyErr_Occurred()) ||
        ((consumer_device = PyLong_AsLong(args[4])) == -1 && PyErr_Occurred()))
        goto end;
    int before = rt.get_device(0);
    if (before == -1 && PyErr_Occurred())
        goto end;
    int current = before;
    int failed = on_device(&rt, device, &current) < 0 ||
                 done(rt.event_record((intptr_t)event, (intptr_t)producer, 0)) < 0 ||
                 on_device(&rt, consumer_device, &current) < 0 ||
                 done(rt.stream_wait((intptr_t)consumer, (intptr_t)event, 0, NULL)) < 0;
    out = restore(&rt, before, &current, failed);
end:
    Py_DECREF(owner);
    return out;
}

#define MEMCPY_DEFAULT 4 /* cudaMemcpyDefault: the direction read from the addresses */

/* copy(dst, src, nbytes, stream, device, event, synchronize) -> None:
 * cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream) on GPU
 * `device`, then cudaEventRecord(event, stream) when `event` is not 0 (what
 * keeps the copy's buffers alive), then cudaStreamSynchronize(stream) when
 * `synchronize` (a copy the host reads at once). The current device is
 * switched only when it is another, and restored; CuPy's functions release
 * the GIL around the copy and the wait. Whether to copy, and whether to
 * wait, is for Python to say. */
PyObject *
core_copy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "copy(dst, src, nbytes, stream, device, event, synchronize)");
        return NULL;
    }
    Runtime rt;
    PyObject *owner = current_runtime(&rt, "copies");
    if (owner == NULL)
        return NULL;
    PyObject *out = NULL;
    /* Each checked before the next: a conversion may run Python (__index__). */
    void *dst = PyLong_AsVoidPtr(args[0]), *src = NULL, *stream = NULL, *event = NULL;
    size_t nbytes = 0;
    int device = -1, sync = -1;
    if ((dst == NULL && PyErr_Occurred()) ||
        ((src = PyLong_AsVoidPtr(args[1])) == NULL && PyErr_Occurred()) ||
        ((nbytes = PyLong_AsSize_t(args[2])) == (size_t)-1 && PyErr_Occurred()) ||
        ((stream = PyLong_AsVoidPtr(args[3])) == NULL && PyErr_Occurred()) ||
        ((device = PyLong_AsLong(args[4])) == -1 && PyErr_Occurred()) ||
        ((event = PyLong_AsVoidPtr(args[5])) == NULL && PyErr_Occurred()) ||
        (sync = PyObject_IsTrue(args[6])) < 0)
        goto end;
    int before = rt.get_device(0);
    if (before == -1 && PyErr_Occurred())
        goto end;
    int current = before;
    int failed = on_device(&rt, device, &current) < 0 ||
                 done(rt.memcpy_async((intptr_t)dst, (intptr_t)src, nbytes, MEMCPY_DEFAULT, (intptr_t)stream, 0)) < 0 ||
                 (event != NULL && done(rt.event_record((intptr_t)event, (intptr_t)stream, 0)) < 0) ||
                 (sync && done(rt.stream_sync((intptr_t)stream, 0)) < 0);
    out = restore(&rt, before, &current, failed);
end:
    Py_DECREF(owner);
    return out;
}
