/* The capsule primitives: reading a header and the checks every exchange
 * makes, claiming a capsule in one step, the snapshot of an unconsumed one,
 * writing its version and flags. */

#include "capsule.h"

/* 1 when the shape and strides can be held (what _capsule._check_layout
 * checks: no negative dimension, no NULL data with elements, at most 2**63 - 1
 * bytes, strides inside the 64-bit address space from either end), else 0. */
int
layout_ok(DLTensor *t)
{
    const __int128 MAX_BYTES = (((__int128)1) << 63) - 1, LIMIT = ((__int128)1) << 100;
    int empty = 0;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return 0;
    __int128 count = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 0) {
            empty = 1;
            continue;
        }
        count *= t->shape[i];
        if (count > MAX_BYTES)
            count = MAX_BYTES + 1;  /* saturate: too big either way */
    }
    if (t->data == NULL && !empty)
        return 0;
    __int128 itemsize = ((unsigned)t->dtype.bits * t->dtype.lanes + 7) >> 3;
    if (itemsize < 1)
        itemsize = 1;
    if (count * itemsize > MAX_BYTES)
        return 0;
    __int128 low = 0, high = 0;
    if (t->strides == NULL) {
        high = count - 1;
    } else {
        for (int i = 0; i < t->ndim; i++) {
            if (t->shape[i] == 0)
                continue;  /* reaches nowhere, as an extent of one */
            __int128 reach = (__int128)(t->shape[i] - 1) * t->strides[i];
            if (reach < 0)
                low += reach;
            else
                high += reach;
            if (low < -LIMIT || high > LIMIT)
                return 0;
        }
    }
    __int128 first = (__int128)(uintptr_t)t->data + (__int128)t->byte_offset;
    low = first + low * itemsize;
    high = first + (high + 1) * itemsize;
    if (low < 0 || high > (((__int128)1) << 64) || high - low > MAX_BYTES)
        return 0;
    if (t->strides != NULL)  /* each step an int64 byte count, even where no extent takes it */
        for (int i = 0; i < t->ndim; i++) {
            __int128 step = (__int128)t->strides[i] * itemsize;
            if (step > MAX_BYTES || step < -MAX_BYTES - 1)
                return 0;
        }
    return 1;
}

PyObject *
new_header(void *ptr, int versioned)
{
    DLTensor *t = tensor_of(ptr, versioned);
    PyObject *v[11] = {NULL};
    v[0] = PyLong_FromVoidPtr(ptr);
    if (versioned) {
        DLManagedTensorVersioned *m = ptr;
        v[1] = PyLong_FromUnsignedLong(m->version.major);
        v[2] = PyLong_FromUnsignedLong(m->version.minor);
        v[3] = PyLong_FromUnsignedLongLong(m->flags);
    } else {
        v[1] = Py_NewRef(Py_None);
        v[2] = Py_NewRef(Py_None);
        v[3] = PyLong_FromLong(0);
    }
    v[4] = PyLong_FromLong(t->device.device_type);
    v[5] = PyLong_FromLong(t->device.device_id);
    v[6] = PyLong_FromLong(t->dtype.code);
    v[7] = PyLong_FromLong(t->dtype.bits);
    v[8] = PyLong_FromLong(t->dtype.lanes);
    v[9] = PyLong_FromLong(t->ndim);
    v[10] = PyLong_FromVoidPtr(t->strides);
    PyObject *h = NULL;
    int complete = 1;
    for (int i = 0; i < 11; i++)
        complete &= v[i] != NULL;
    if (complete)
        h = state.header_type->tp_alloc(state.header_type, 11);
    if (h == NULL) {
        /* Each value is released once, here: none is in a tuple yet. */
        for (int i = 0; i < 11; i++)
            Py_XDECREF(v[i]);
        return NULL;
    }
    for (int i = 0; i < 11; i++)
        PyTuple_SET_ITEM(h, i, v[i]);  /* steals */
    return h;
}

/* Claim an unconsumed capsule of the given kind: check its name and rename
 * it used_* in one step (the GIL, or the capsule's critical section on a
 * free-threaded build, is held throughout and no Python code runs), so two
 * threads racing for it cannot both take it. Returns its pointer, or NULL
 * (no error set) when it is not such a capsule. */
void *
claim(PyObject *capsule, int versioned)
{
    void *ptr = NULL;
    if (!PyCapsule_CheckExact(capsule))
        return NULL;
#ifdef Py_GIL_DISABLED
    Py_BEGIN_CRITICAL_SECTION(capsule);
#endif
    const char *name = PyCapsule_GetName(capsule);
    if (name != NULL && strcmp(name, versioned ? VERSIONED : LEGACY) == 0) {
        ptr = PyCapsule_GetPointer(capsule, name);
        if (ptr != NULL && PyCapsule_SetName(capsule, versioned ? USED_VERSIONED : USED_LEGACY) != 0)
            ptr = NULL;
    }
#ifdef Py_GIL_DISABLED
    Py_END_CRITICAL_SECTION();
#endif
    if (ptr == NULL)
        PyErr_Clear();
    return ptr;
}

void
capsule_destructor(PyObject *capsule)
{
    /* What every producer's capsule does: free an unconsumed tensor (any
     * producer's: it also owns the tensors Python hands over with move()).
     * A capsule may die while an exception is pending (one dropped as an
     * interrupt unwinds the stack): it is set aside while the deleter runs. */
    if (PyCapsule_IsValid(capsule, VERSIONED))
        release_tensor(PyCapsule_GetPointer(capsule, VERSIONED), 1);
}

void
legacy_capsule_destructor(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, LEGACY))
        release_tensor(PyCapsule_GetPointer(capsule, LEGACY), 0);
}

PyObject *
core_header(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !configured())
        return delegate("header", args, nargs);
    void *ptr = PyLong_AsVoidPtr(args[0]);
    int versioned = PyObject_IsTrue(args[1]);
    if ((ptr == NULL && PyErr_Occurred()) || versioned < 0)
        return NULL;
    if (ptr == NULL || (versioned && ((DLManagedTensorVersioned *)ptr)->version.major != 1) ||
        !well_formed(tensor_of(ptr, versioned)))
        return delegate("header", args, nargs);
    return new_header(ptr, versioned);
}

/* checked(capsule, likely_versioned=True, check_dtype=None) */
PyObject *
core_checked(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 3 || !configured())
        return delegate("checked", args, nargs);
    PyObject *capsule = args[0];
    PyObject *check = nargs > 2 ? args[2] : Py_None;
    int versioned = kind_of(capsule);
    if (versioned < 0)
        return delegate("checked", args, nargs);
    void *ptr = PyCapsule_GetPointer(capsule, versioned ? VERSIONED : LEGACY);
    if (ptr == NULL) {
        PyErr_Clear();
        return delegate("checked", args, nargs);
    }
    DLTensor *t = tensor_of(ptr, versioned);
    if ((versioned && ((DLManagedTensorVersioned *)ptr)->version.major != 1) || !well_formed(t))
        return delegate("checked", args, nargs);  /* words the error, discards */
    /* Read before the dtype check runs Python code, as the Python checked()
     * does: meanwhile another thread may consume the capsule and free the
     * tensor. */
    DLDataType dtype = t->dtype;
    PyObject *head = new_header(ptr, versioned);
    if (head == NULL)
        return NULL;
    if (check != Py_None) {
        if (dtype_known(dtype) && PyDict_GetItemString(state.py_impl, "check_known") == check) {
            /* the told table says check_known passes */
        } else {
            PyObject *r = PyObject_CallFunction(check, "iii", dtype.code, dtype.bits, dtype.lanes);
            if (r == NULL) {
                Py_DECREF(head);
                if (PyErr_ExceptionMatches(PyExc_BufferError)) {
                    PyObject *et, *ev, *tb;
                    PyErr_Fetch(&et, &ev, &tb);
                    void *p = claim(capsule, versioned);
                    if (p != NULL)
                        run_deleter(p, versioned);
                    PyErr_Restore(et, ev, tb);
                }
                return NULL;
            }
            Py_DECREF(r);
        }
    }
    PyObject *out = PyTuple_New(2);
    if (out == NULL) {
        Py_DECREF(head);
        return NULL;
    }
    PyTuple_SET_ITEM(out, 0, Py_NewRef(versioned ? Py_True : Py_False));
    PyTuple_SET_ITEM(out, 1, head);
    return out;
}

/* claim(capsule, versioned) -> the pointer, the capsule renamed used_*; the
 * Python claim() on anything else (it raises what is wrong). Every claim of
 * the layer goes through here, so C and Python claims never interleave. */
PyObject *
core_claim(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !configured())
        return delegate("claim", args, nargs);
    int versioned = PyObject_IsTrue(args[1]);
    if (versioned < 0)
        return NULL;
    void *ptr = claim(args[0], versioned);
    if (ptr == NULL)
        return delegate("claim", args, nargs);  /* raises what the name now is */
    return PyLong_FromVoidPtr(ptr);
}

PyObject *
core_discard(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !configured())
        return delegate("discard", args, nargs);
    int versioned = PyObject_IsTrue(args[1]);
    if (versioned < 0)
        return NULL;
    void *ptr = claim(args[0], versioned);
    if (ptr == NULL)
        return delegate("discard", args, nargs);
    release_tensor(ptr, versioned);
    Py_RETURN_NONE;
}

/* move(capsule, versioned, destructor) -> a new unconsumed capsule of the
 * same kind holding the tensor, with `destructor` (a C function that frees
 * an unconsumed capsule's tensor); the capsule given is renamed used_*.
 * Checking the name, making the new capsule and renaming both is one step
 * in which no Python code runs, so no interrupt or error can land between
 * the claim and the hand-over: at every point exactly one of the two
 * capsules owns the tensor. Out of memory, the capsule given is left as it
 * was. The Python move() on anything but an unconsumed capsule of that kind
 * (it raises what is wrong). */
PyObject *
core_move(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !configured())
        return delegate("move", args, nargs);
    int versioned = PyObject_IsTrue(args[1]);
    if (versioned < 0)
        return NULL;
    PyCapsule_Destructor destructor = (PyCapsule_Destructor)PyLong_AsVoidPtr(args[2]);
    if (destructor == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "move() needs the address of an owning capsule destructor");
        return NULL;
    }
    PyObject *capsule = args[0], *out = NULL;
    if (!PyCapsule_CheckExact(capsule))
        return delegate("move", args, nargs);
    int moved = 0;
#ifdef Py_GIL_DISABLED
    Py_BEGIN_CRITICAL_SECTION(capsule);
#endif
    const char *name = PyCapsule_GetName(capsule);
    void *ptr = NULL;
    if (name != NULL && strcmp(name, versioned ? VERSIONED : LEGACY) == 0)
        ptr = PyCapsule_GetPointer(capsule, name);
    if (ptr != NULL) {
        /* Made owning nothing (a used_* name), then both renamed. */
        out = PyCapsule_New(ptr, versioned ? USED_VERSIONED : USED_LEGACY, destructor);
        if (out != NULL && PyCapsule_SetName(out, versioned ? VERSIONED : LEGACY) == 0) {
            if (PyCapsule_SetName(capsule, versioned ? USED_VERSIONED : USED_LEGACY) == 0)
                moved = 1;
            else
                PyCapsule_SetName(out, versioned ? USED_VERSIONED : USED_LEGACY);  /* owns nothing again */
        }
    }
#ifdef Py_GIL_DISABLED
    Py_END_CRITICAL_SECTION();
#endif
    if (moved)
        return out;
    if (out != NULL || ptr == NULL) {
        /* Not renamed (never so for a capsule whose pointer was just read),
         * or not such a capsule: the new one owns nothing and goes. */
        Py_XDECREF(out);
        PyErr_Clear();
        return delegate("move", args, nargs);
    }
    return NULL;  /* no memory for the new capsule: the given one is untouched */
}

/* snapshot(capsule) -> (versioned, struct bytes, shape bytes or None,
 * strides bytes or None), what _capsule.snapshot returns, copied while the
 * GIL (or the capsule's critical section) is held, so no consumer on another
 * thread frees the tensor halfway; the Python snapshot() on anything but an
 * unconsumed capsule (it raises what is wrong). */
PyObject *
core_snapshot(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 || !configured())
        return delegate("snapshot", args, nargs);
    PyObject *capsule = args[0], *raw = NULL, *shape = Py_None, *strides = Py_None, *out = NULL;
    int versioned = -1;
#ifdef Py_GIL_DISABLED
    Py_BEGIN_CRITICAL_SECTION(capsule);
#endif
    versioned = kind_of(capsule);
    void *ptr = versioned < 0 ? NULL : PyCapsule_GetPointer(capsule, versioned ? VERSIONED : LEGACY);
    if (ptr != NULL) {
        raw = PyBytes_FromStringAndSize(ptr, versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor));
        DLTensor *t = tensor_of(ptr, versioned);
        if (raw != NULL && (!versioned || ((DLManagedTensorVersioned *)ptr)->version.major == 1) &&
            t->ndim > 0 && t->ndim <= MAX_NDIM) {
            if (t->shape != NULL)
                shape = PyBytes_FromStringAndSize((const char *)t->shape, 8 * (Py_ssize_t)t->ndim);
            if (shape != NULL && t->strides != NULL)
                strides = PyBytes_FromStringAndSize((const char *)t->strides, 8 * (Py_ssize_t)t->ndim);
        }
    }
#ifdef Py_GIL_DISABLED
    Py_END_CRITICAL_SECTION();
#endif
    if (ptr == NULL) {
        PyErr_Clear();
        return delegate("snapshot", args, nargs);
    }
    if (raw != NULL && shape != NULL && strides != NULL)
        out = Py_BuildValue("(OOOO)", versioned ? Py_True : Py_False, raw, shape, strides);
    Py_XDECREF(raw);
    if (shape != Py_None)
        Py_XDECREF(shape);
    if (strides != Py_None)
        Py_XDECREF(strides);
    return out;
}

int
stamp(PyObject *capsule, uint64_t word)
{
    void *ptr = PyCapsule_GetPointer(capsule, VERSIONED);
    if (ptr == NULL || ((uintptr_t)ptr & 7)) {
        PyErr_Clear();
        return -1;
    }
    *(uint64_t *)ptr = word;
    return 0;
}

PyObject *
core_stamp_version(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !configured() || !PyLong_Check(args[1]))
        return delegate("stamp_version", args, nargs);
    uint64_t word = PyLong_AsUnsignedLongLong(args[1]);
    if (word == (uint64_t)-1 && PyErr_Occurred())
        return NULL;
    if (!PyCapsule_CheckExact(args[0]) || stamp(args[0], word) != 0)
        return delegate("stamp_version", args, nargs);
    Py_RETURN_NONE;
}

PyObject *
core_set_flags(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return delegate("set_flags", args, nargs);
    void *ptr = PyLong_AsVoidPtr(args[0]);
    uint64_t flags = PyLong_AsUnsignedLongLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (ptr == NULL)
        return delegate("set_flags", args, nargs);
    ((DLManagedTensorVersioned *)ptr)->flags = flags;
    Py_RETURN_NONE;
}

PyObject *
core_set_version(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyTuple_CheckExact(args[1]) || PyTuple_GET_SIZE(args[1]) != 2)
        return delegate("set_version", args, nargs);
    void *ptr = PyLong_AsVoidPtr(args[0]);
    unsigned long major = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(args[1], 0));
    unsigned long minor = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(args[1], 1));
    if (PyErr_Occurred() || major > UINT32_MAX || minor > UINT32_MAX) {
        PyErr_Clear();
        return delegate("set_version", args, nargs);
    }
    if (ptr == NULL)
        return delegate("set_version", args, nargs);
    ((DLManagedTensorVersioned *)ptr)->version.major = (uint32_t)major;
    ((DLManagedTensorVersioned *)ptr)->version.minor = (uint32_t)minor;
    Py_RETURN_NONE;
}

/* --- versioned capsules for NumPy before 2.1 ------------------------------- */

/* The deleter of the versioned tensors Python builds for NumPy before 2.1
 * (_old_numpy): manager_ctx holds the Python object that keeps the struct's
 * memory and the array alive. Safe on any thread; after finalization it
 * leaks rather than touch Python. */
static void
kept_deleter(DLManagedTensorVersioned *m)
{
    if (!Py_IsInitialized())
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *keep = m->manager_ctx;  /* read first: m lives in memory keep holds */
    m->manager_ctx = NULL;
    Py_XDECREF(keep);
    PyErr_Restore(et, ev, tb);
    PyGILState_Release(gil);
}

/* kept_capsule(ptr, keep) -> a versioned capsule over the struct at ptr,
 * filled but for manager_ctx and deleter, holding keep until the deleter
 * runs. Making the capsule and taking the reference is one step: no
 * interrupt or error can land between them and leak keep. */
PyObject *
core_kept_capsule(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "kept_capsule(ptr, keep)");
        return NULL;
    }
    DLManagedTensorVersioned *m = PyLong_AsVoidPtr(args[0]);
    if (m == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "kept_capsule() needs the address of a struct");
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(m, VERSIONED, capsule_destructor);
    if (capsule == NULL)
        return NULL;
    m->manager_ctx = Py_NewRef(args[1]);
    m->deleter = kept_deleter;
    return capsule;
}
