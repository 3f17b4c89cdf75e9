/* inspect(capsule) in one C call: what _capsule.read returns, a CapsuleInfo
 * of an unconsumed capsule, under the same snapshot rule (the struct, shape
 * and strides copied while the GIL, or the capsule's critical section on a
 * free-threaded build, is held and no Python code runs, so a consumer on
 * another thread cannot free them halfway; consumed before: the Python read
 * raises ConsumedCapsuleError). Every case it does not read (not an
 * unconsumed DLPack capsule, another major version, a malformed header) is
 * the Python read's, which words the error. */

#include "info.h"

/* The Device of (type, id), made by Python once per pair and kept (a
 * Device is immutable); NULL with no error set when Python refuses it. */
static PyObject *
device_of(int32_t type, int32_t id)
{
    if (type < 0 || type >= 64 || !((state.device_types >> type) & 1) || id < 0)
        return NULL;
    PyObject **slot = id < 16 ? &state.devices[type][id] : NULL;
    if (slot != NULL && *slot != NULL)
        return Py_NewRef(*slot);
    PyObject *pair = Py_BuildValue("(ii)", type, id);
    PyObject *dev = pair == NULL ? NULL : PyObject_CallOneArg(state.device_class, pair);
    Py_XDECREF(pair);
    if (dev == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (slot != NULL)
        *slot = Py_NewRef(dev);
    return dev;
}

/* (major, minor), kept for the versions of major 1 */
static PyObject *
version_of(DLPackVersion version)
{
    PyObject **slot = version.major == 1 && version.minor < 16 ? &state.versions_seen[version.minor] : NULL;
    if (slot != NULL && *slot != NULL)
        return Py_NewRef(*slot);
    PyObject *v = Py_BuildValue("(kk)", (unsigned long)version.major, (unsigned long)version.minor);
    if (v != NULL && slot != NULL)
        *slot = Py_NewRef(v);
    return v;
}

/* (code, bits, lanes), kept for one lane of whole bytes */
static PyObject *
dtype_of(DLDataType dt)
{
    int bytes = bit_index(dt.bits);
    PyObject **slot = dt.lanes == 1 && dt.code < 32 && bytes ? &state.dtypes_seen[dt.code][bytes] : NULL;
    if (slot != NULL && *slot != NULL)
        return Py_NewRef(*slot);
    PyObject *v = Py_BuildValue("(iii)", dt.code, dt.bits, dt.lanes);
    if (v != NULL && slot != NULL)
        *slot = Py_NewRef(v);
    return v;
}

static PyObject *
int64s(const int64_t *values, int n)
{
    PyObject *t = PyTuple_New(n);
    if (t == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

PyObject *
core_read(PyObject *mod, PyObject *capsule)
{
    if (!configured() || state.info_type == NULL || state.device_class == NULL)
        return delegate("read", &capsule, 1);
    union {
        DLManagedTensorVersioned v;
        DLManagedTensor l;
    } head;
    int64_t shape[MAX_NDIM], strides[MAX_NDIM];
    int versioned = -1, readable = 0;
    void *ptr = NULL;
#ifdef Py_GIL_DISABLED
    Py_BEGIN_CRITICAL_SECTION(capsule);
#endif
    versioned = kind_of(capsule);
    ptr = versioned < 0 ? NULL : PyCapsule_GetPointer(capsule, versioned ? VERSIONED : LEGACY);
    if (ptr != NULL) {
        memcpy(&head, ptr, versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor));
        DLTensor *t = tensor_of(&head, versioned);
        readable = (!versioned || head.v.version.major == 1) && t->ndim >= 0 && t->ndim <= MAX_NDIM &&
                   (t->ndim == 0 || t->shape != NULL);
        if (readable && t->ndim > 0) {
            memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            if (t->strides != NULL)
                memcpy(strides, t->strides, sizeof(int64_t) * (size_t)t->ndim);
        }
    }
#ifdef Py_GIL_DISABLED
    Py_END_CRITICAL_SECTION();
#endif
    if (ptr == NULL)
        PyErr_Clear();
    if (!readable)
        return delegate("read", &capsule, 1);  /* raises what is wrong */
    DLTensor *t = tensor_of(&head, versioned);
    PyObject *device = device_of(t->device.device_type, t->device.device_id);
    if (device == NULL)
        return delegate("read", &capsule, 1);
    PyObject *v[10];
    v[0] = Py_NewRef(versioned ? state.str_versioned : state.str_legacy);
    v[1] = Py_NewRef(versioned ? Py_True : Py_False);
    if (versioned) {
        v[2] = version_of(head.v.version);
        v[3] = PyLong_FromUnsignedLongLong(head.v.flags);
    } else {
        v[2] = Py_NewRef(Py_None);
        v[3] = PyLong_FromLong(0);
    }
    v[4] = device;
    v[5] = dtype_of(t->dtype);
    v[6] = int64s(shape, t->ndim);
    v[7] = t->strides == NULL ? Py_NewRef(Py_None) : int64s(strides, t->ndim);
    v[8] = PyLong_FromUnsignedLongLong(t->byte_offset);
    v[9] = PyLong_FromVoidPtr(t->data);
    PyObject *info = NULL;
    int ok = 1;
    for (int i = 0; i < 10; i++)
        ok = ok && v[i] != NULL;
    /* What _capsule._capsule_info makes: the dataclass's fields in the new
     * instance's dict, without its __init__. The dict is the instance's own,
     * asked of it (PyObject_GenericGetDict) and filled in place: from CPython
     * 3.13 a plain class keeps its attributes in inline values, which a dict
     * installed with PyObject_GenericSetDict would bypass, so that lookups
     * found none of the fields there. */
    if (ok)
        info = state.info_type->tp_alloc(state.info_type, 0);
    PyObject *fields = info == NULL ? NULL : PyObject_GenericGetDict(info, NULL);
    if (fields == NULL)
        Py_CLEAR(info);
    for (int i = 0; i < 10 && info != NULL; i++)
        if (PyDict_SetItem(fields, state.info_keys[i], v[i]) < 0)
            Py_CLEAR(info);
    Py_XDECREF(fields);
    for (int i = 0; i < 10; i++)
        Py_XDECREF(v[i]);
    return info;
}
