/* The consumer side of the C exchange API: a producer type's tensor as a
 * NumPy array (import_host), or handed on for the stream hand-off
 * (exchange), as Python said the type may be read. */

#include "consumer.h"

typedef PyObject *(*NewFromDescr_t)(PyTypeObject *, PyObject *, int, const Py_ssize_t *,
                                    const Py_ssize_t *, void *, int, PyObject *);
typedef int (*SetBaseObject_t)(PyObject *, PyObject *);

static void
entry_destructor(PyObject *capsule)
{
    ImportEntry *e = PyCapsule_GetPointer(capsule, "gpu_dlpack.import_entry");
    if (e != NULL) {
        Py_XDECREF(e->api_owner);
        Py_XDECREF(e->attrs);
        Py_XDECREF(e->methods);
        Py_XDECREF(e->host_method);
        Py_XDECREF(e->host_answer);
        Py_XDECREF(e->host_pieces);
        PyMem_Free(e);
    } else {
        PyErr_Clear();
    }
}

static void
exchanged_destructor(PyObject *capsule)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  /* an array may die while an exception is pending */
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, EXCHANGED);
    if (m == NULL)
        PyErr_Clear();
    else if (m->deleter)
        m->deleter(m);
    PyErr_Restore(et, ev, tb);
}

static void
exchanged_legacy_destructor(PyObject *capsule)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  /* as exchanged_destructor */
    DLManagedTensor *m = PyCapsule_GetPointer(capsule, EXCHANGED_LEGACY);
    if (m == NULL)
        PyErr_Clear();
    else if (m->deleter)
        m->deleter(m);
    PyErr_Restore(et, ev, tb);
}

/* The table of an exchange API capsule, if its major version is ours. */
static const DLPackExchangeAPI *
api_of(PyObject *capsule)
{
    if (!PyCapsule_IsValid(capsule, EXCHANGE_API))
        return NULL;
    const DLPackExchangeAPIHeader *h = PyCapsule_GetPointer(capsule, EXCHANGE_API);
    while (h != NULL && h->version.major != 1)
        h = h->prev_api;
    const DLPackExchangeAPI *api = (const DLPackExchangeAPI *)h;
    if (api == NULL || api->managed_tensor_from_py_object_no_sync == NULL)
        return NULL;
    return api;
}

ImportEntry *
import_entry(PyTypeObject *type, PyObject **hold)
{
    *hold = NULL;
    PyObject *got = PyDict_GetItemWithError(state.import_types, (PyObject *)type);
    if (got == NULL) {
        if (PyErr_Occurred())
            return NULL;
        /* First sight of the type: Python decides whether it may be imported
         * this way, and with which guards. */
        PyObject *plan = PyObject_CallOneArg(state.learn_import, (PyObject *)type);
        if (plan == NULL)
            return NULL;
        if (plan != Py_None) {
            PyObject *cap, *attrs, *methods, *codes, *host;
            if (!PyArg_ParseTuple(plan, "OO!O!O!O", &cap, &PyTuple_Type, &attrs, &PyTuple_Type, &methods,
                                  &PyTuple_Type, &codes, &host)) {
                Py_DECREF(plan);
                return NULL;
            }
            /* One mask of dtype codes per method: the method is asked of arrays of those codes only. */
            uint32_t masks[GUARD_METHODS];
            Py_ssize_t nm = PyTuple_GET_SIZE(methods);
            if (nm > GUARD_METHODS || PyTuple_GET_SIZE(codes) != nm) {
                Py_DECREF(plan);
                PyErr_SetString(PyExc_ValueError, "an import plan has one code mask per guard method, at most 8");
                return NULL;
            }
            for (Py_ssize_t i = 0; i < nm; i++) {
                unsigned long mask = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(codes, i));
                if (mask == (unsigned long)-1 && PyErr_Occurred()) {
                    Py_DECREF(plan);
                    return NULL;
                }
                masks[i] = (uint32_t)mask;
            }
            const DLPackExchangeAPI *api = cap == Py_None ? NULL : api_of(cap);
            PyObject *hm = NULL, *ha = NULL, *hp = NULL;
            if (host != Py_None && !PyArg_ParseTuple(host, "UUU", &hm, &ha, &hp)) {
                Py_DECREF(plan);
                return NULL;
            }
            if (api != NULL || hm != NULL) {
                ImportEntry *e = PyMem_Calloc(1, sizeof(ImportEntry));
                if (e == NULL) {
                    Py_DECREF(plan);
                    PyErr_NoMemory();
                    return NULL;
                }
                e->api = api;
                e->api_owner = api != NULL ? Py_NewRef(cap) : NULL;
                e->attrs = Py_NewRef(attrs);
                e->methods = Py_NewRef(methods);
                for (Py_ssize_t i = 0; i < nm; i++)
                    e->method_codes[i] = masks[i];
                e->host_method = Py_XNewRef(hm);
                e->host_answer = Py_XNewRef(ha);
                e->host_pieces = Py_XNewRef(hp);
                got = PyCapsule_New(e, "gpu_dlpack.import_entry", entry_destructor);
                if (got == NULL) {
                    Py_XDECREF(e->api_owner);
                    Py_DECREF(attrs);
                    Py_DECREF(methods);
                    Py_XDECREF(hm);
                    Py_XDECREF(ha);
                    Py_XDECREF(hp);
                    PyMem_Free(e);
                    Py_DECREF(plan);
                    return NULL;
                }
            }
        }
        Py_DECREF(plan);
        if (got == NULL)
            got = Py_NewRef(Py_None);
        int rc = PyDict_SetItem(state.import_types, (PyObject *)type, got);
        if (rc < 0) {
            Py_DECREF(got);
            return NULL;
        }
        *hold = got;  /* the dict holds it too */
    } else {
        *hold = Py_NewRef(got);
    }
    if (got == Py_None)
        return (ImportEntry *)Py_None;  /* known: not imported this way */
    ImportEntry *e = PyCapsule_GetPointer(got, "gpu_dlpack.import_entry");
    if (e == NULL)
        Py_CLEAR(*hold);
    return e;
}

/* 1 when v (a new reference, consumed) is false; 0 when it is true, NULL or
 * cannot say (the error cleared). */
static int
is_false(PyObject *v)
{
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    int truth = v == Py_False ? 0 : (v == Py_True ? 1 : PyObject_IsTrue(v));
    Py_DECREF(v);
    if (truth != 0) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* 1 when every guard of the entry is false for x, 0 when one is true or
 * cannot be read (the error cleared: the general path asks again and reports). */
int
guards_pass(ImportEntry *e, PyObject *x, int code)
{
    Py_ssize_t n = PyTuple_GET_SIZE(e->attrs);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!is_false(PyObject_GetAttr(x, PyTuple_GET_ITEM(e->attrs, i))))
            return 0;
    }
    n = PyTuple_GET_SIZE(e->methods);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (code < 0 || code >= 32 || !((e->method_codes[i] >> code) & 1))
            continue;
        if (!is_false(PyObject_CallMethodNoArgs(x, PyTuple_GET_ITEM(e->methods, i))))
            return 0;
    }
    return 1;
}

/* 1 when x passes its type's host test (told by Python: _peers.HostTest),
 * as _devices reads it: len(x.<pieces>) == 1 and x.<method>() == answer is
 * True (one device, host memory; a deleted JAX array's pieces are None, and
 * platform() is never asked of it: it crashes the process). 0 when it does
 * not, or the test cannot say (the error cleared, as Python clears it: then
 * __dlpack_device__ says where the memory is); -1 with an error that is no
 * Exception (an interrupt) pending. */
int
host_test(ImportEntry *e, PyObject *x)
{
    if (e->host_method == NULL)
        return 0;
    PyObject *pieces = PyObject_GetAttr(x, e->host_pieces);
    if (pieces == NULL)
        return cleared();
    Py_ssize_t n = PyObject_Length(pieces);
    Py_DECREF(pieces);
    if (n < 0)
        return cleared();
    if (n != 1)
        return 0;
    PyObject *r = PyObject_CallMethodNoArgs(x, e->host_method);
    if (r == NULL)
        return cleared();
    PyObject *eq = PyObject_RichCompare(r, e->host_answer, Py_EQ);
    Py_DECREF(r);
    if (eq == NULL)
        return cleared();
    int host = eq == Py_True;
    Py_DECREF(eq);
    return host;
}

/* x.__dlpack__(max_version=DLPACK_VERSION), or x.__dlpack__() for a legacy
 * request: the call the Python path makes (_producer.request, which asks
 * for nothing with no keyword at all). A new reference, or NULL with the
 * producer's error set. */
PyObject *
ask_capsule(PyObject *x, int versioned)
{
    PyObject *a[2] = {x, state.produced_version};
    return PyObject_VectorcallMethod(state.str_dlpack, a, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                     versioned ? state.kw_max_version : NULL);
}

PyObject *
taken_error(void)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (value == NULL)  /* cannot be: a normalized exception has a value */
        PyErr_SetString(PyExc_SystemError, "gpu_dlpack._core lost a producer's error");
    return value;
}

/* 1 when an unconsumed tensor of the given kind is one whose NumPy import
 * the core makes as numpy.from_dlpack would (host memory, a NumPy dtype,
 * versioned: major 1 and no flag but READ_ONLY), else 0. */
static int
host_plain(void *ptr, int versioned)
{
    DLTensor *t = tensor_of(ptr, versioned);
    if (versioned) {
        DLManagedTensorVersioned *m = ptr;
        if (m->version.major != 1 || (m->flags & ~FLAG_READ_ONLY))
            return 0;
    }
    if (!well_formed(t) || t->ndim > state.numpy_maxdims || !((state.host_types >> t->device.device_type) & 1) ||
        t->dtype.lanes != 1 ||
        t->dtype.code >= 32)
        return 0;
    int bytes = bit_index(t->dtype.bits);
    if (!bytes || state.numpy_descr[t->dtype.code][bytes] == NULL)
        return 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->strides != NULL && (t->strides[i] > PY_SSIZE_T_MAX / 16 || t->strides[i] < -(PY_SSIZE_T_MAX / 16)))
            return 0;
    return 1;
}

/* A NumPy array over an owned tensor that host_plain() took: writeable
 * unless READ_ONLY or legacy (as numpy.from_dlpack makes legacy imports),
 * its base a capsule that frees the tensor once. NULL with an error set on
 * failure (the caller still owns the tensor). */
static PyObject *
ndarray_of(void *ptr, int versioned)
{
    DLTensor *t = tensor_of(ptr, versioned);
    int bytes = bit_index(t->dtype.bits);
    PyObject *descr = state.numpy_descr[t->dtype.code][bytes];
    Py_ssize_t shape[MAX_NDIM], strides[MAX_NDIM];
    for (int i = 0; i < t->ndim; i++) {
        shape[i] = (Py_ssize_t)t->shape[i];
        if (t->strides != NULL)
            strides[i] = (Py_ssize_t)t->strides[i] * bytes;
    }
    int writeable = versioned && !(((DLManagedTensorVersioned *)ptr)->flags & FLAG_READ_ONLY);
    Py_INCREF(descr);  /* stolen */
    PyObject *arr = ((NewFromDescr_t)state.numpy_api[94])(
        state.ndarray_type, descr, t->ndim, shape, t->strides ? strides : NULL,
        (void *)((uintptr_t)t->data + t->byte_offset), writeable ? 0x0400 /* WRITEABLE */ : 0, NULL);
    if (arr == NULL)
        return NULL;
    PyObject *base = versioned ? PyCapsule_New(ptr, EXCHANGED, exchanged_destructor)
                               : PyCapsule_New(ptr, EXCHANGED_LEGACY, exchanged_legacy_destructor);
    if (base == NULL) {
        drop_keeping_error(arr);
        return NULL;
    }
    /* SetBaseObject steals a reference, also when it fails (it then drops
     * it): one of our own keeps the base alive to be disarmed. */
    Py_INCREF(base);
    if (((SetBaseObject_t)state.numpy_api[282])(arr, base) < 0) {
        PyCapsule_SetName(base, USED_VERSIONED);  /* frees nothing: the caller frees the tensor */
        drop_keeping_error(base);
        drop_keeping_error(arr);
        return NULL;
    }
    Py_DECREF(base);
    return arr;
}

/* A NumPy array over an owned, versioned tensor of host memory, or NULL with
 * no error set when the tensor is not the plain case (the caller frees it). */
static PyObject *
ndarray_over(DLManagedTensorVersioned *m)
{
    if (!host_plain(m, 1))
        return NULL;
    PyObject *arr = ndarray_of(m, 1);
    if (arr == NULL)
        PyErr_Clear();
    return arr;
}

/* from_dlpack(x) of a producer with a host test (JAX): its capsule for the
 * request the Python path makes, imported here when it is the plain case,
 * else handed to _import.host_capsule with x (an error it raised to
 * _import.host_refused_import). None when the test fails (an array over
 * several devices among them: the general path gathers it). */
static PyObject *
capsule_import(PyObject *x, ImportEntry *e)
{
    if (!state.numpy_layout)
        return Py_NewRef(Py_None);  /* the Python import, which older NumPy's rules shape */
    int host = host_test(e, x);
    if (host <= 0)
        return host < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *capsule = ask_capsule(x, 1);
    if (capsule == NULL) {
        /* The producer's error, to _import.host_refused, which goes on from
         * it as the Python path does: never asked the same again (a
         * producer that imports itself would be asked twice at every
         * level of its recursion), never dropped. */
        PyObject *error = taken_error();
        if (error == NULL)
            return NULL;
        PyObject *a[2] = {x, error};
        PyObject *arr = delegate("host_refused_import", a, 2);
        Py_DECREF(error);
        return arr;
    }
    int versioned = kind_of(capsule);
    void *ptr = versioned < 0 ? NULL : PyCapsule_GetPointer(capsule, versioned ? VERSIONED : LEGACY);
    PyObject *arr = NULL;
    void *got = ptr != NULL && host_plain(ptr, versioned) ? claim(capsule, versioned) : NULL;
    if (got != NULL && got == ptr) {
        arr = ndarray_of(ptr, versioned);
        if (arr == NULL)
            release_tensor(ptr, versioned);  /* taken: freed once, the error raised */
    } else {
        if (got != NULL)
            release_tensor(got, versioned);  /* another tensor put in meanwhile: taken, so freed */
        PyErr_Clear();
        PyObject *a[2] = {x, capsule};
        arr = delegate("host_capsule", a, 2);
    }
    /* The producer's destructor (its capsule now used_* or handed on) may
     * clear an error raised above. */
    drop_keeping_error(capsule);
    return arr;
}

static PyObject *import_host_with(PyObject *x, ImportEntry *e);

/* import_host(x): x as a NumPy array through its type's C exchange API, or
 * None when the exchange is not the plain one Python was told about. */
PyObject *
core_import_host(PyObject *mod, PyObject *x)
{
    if (!configured())
        return NULL;
    if (state.numpy_api == NULL)
        Py_RETURN_NONE;
    PyObject *hold;
    ImportEntry *e = import_entry(Py_TYPE(x), &hold);
    if (e == NULL)
        return NULL;
    PyObject *arr = import_host_with(x, e);
    Py_DECREF(hold);
    return arr;
}

static PyObject *
import_host_with(PyObject *x, ImportEntry *e)
{
    if ((PyObject *)e == Py_None)
        Py_RETURN_NONE;
    if (e->api == NULL)
        return capsule_import(x, e);
    if (e->api->dltensor_from_py_object_no_sync != NULL) {
        /* Where the data is, without an owned export: device memory takes
         * the general path (the backend of its device and the hand-off). */
        DLTensor view;
        if (e->api->dltensor_from_py_object_no_sync(x, &view) != 0) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (view.device.device_type < 0 || view.device.device_type >= 64 ||
            !((state.host_types >> view.device.device_type) & 1))
            Py_RETURN_NONE;
    }
    DLManagedTensorVersioned *m = NULL;
    if (e->api->managed_tensor_from_py_object_no_sync(x, &m) != 0 || m == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *arr = guards_pass(e, x, m->dl_tensor.dtype.code) ? ndarray_over(m) : NULL;
    if (arr == NULL) {
        if (m->deleter)
            m->deleter(m);
        Py_RETURN_NONE;
    }
    return arr;
}

static PyObject *exchange_with(PyObject *x, ImportEntry *e);

/* exchange(x) -> (capsule, stream) or None: x's versioned tensor through its
 * type's C exchange API, exported without synchronizing, and the producer's
 * current work stream on x's device (0 for none), for the caller to hand
 * off. None when the type was not told to the core, a guard holds, or the
 * producer refuses (the caller asks __dlpack__, which says why). */
PyObject *
core_exchange(PyObject *mod, PyObject *x)
{
    if (!configured())
        return NULL;
    PyObject *hold;
    ImportEntry *e = import_entry(Py_TYPE(x), &hold);
    if (e == NULL)
        return NULL;
    PyObject *r = exchange_with(x, e);
    Py_DECREF(hold);
    return r;
}

static PyObject *
exchange_with(PyObject *x, ImportEntry *e)
{
    if ((PyObject *)e == Py_None || e->api == NULL)
        Py_RETURN_NONE;
    DLManagedTensorVersioned *m = NULL;
    if (e->api->managed_tensor_from_py_object_no_sync(x, &m) != 0 || m == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    void *stream = NULL;
    if (!guards_pass(e, x, m->dl_tensor.dtype.code) || m->version.major != 1 ||
        (m->dl_tensor.device.device_type != state.cpu_type && e->api->current_work_stream != NULL &&
         e->api->current_work_stream(m->dl_tensor.device.device_type, m->dl_tensor.device.device_id, &stream) != 0)) {
        PyErr_Clear();
        if (m->deleter)
            m->deleter(m);
        Py_RETURN_NONE;
    }
    PyObject *capsule = PyCapsule_New(m, VERSIONED, capsule_destructor);
    if (capsule == NULL) {
        release_tensor(m, 1);
        return NULL;
    }
    /* On failure Py_BuildValue drops the capsule, whose destructor frees m. */
    return Py_BuildValue("(NN)", capsule, PyLong_FromVoidPtr(stream));
}
