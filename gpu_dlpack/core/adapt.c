/* The capsule of the other kind over the same memory, in C: a legacy
 * DLManagedTensor becomes a DLManagedTensorVersioned whose manager_ctx holds
 * it and whose deleter calls its deleter once (and a versioned one a legacy
 * one, the same way round), on any device, touching no data. The Python
 * reference (_exchange.python_rebuild) does it through NumPy: an import
 * that records the address, then an export; the struct made here is the
 * one NumPy's export makes (data + byte_offset and an offset of 0, strides
 * always, a legacy import READ_ONLY), so both paths give the same capsule.
 * Every other case is the Python one's. */

#include "adapt.h"

typedef struct {
    DLManagedTensorVersioned tensor;  /* manager_ctx: the legacy tensor */
    int64_t strides[];                /* where the legacy tensor has none */
} VersionedOver;

typedef struct {
    DLManagedTensor tensor;  /* manager_ctx: the versioned tensor */
    int64_t strides[];
} LegacyOver;

/* malloc and free: a deleter runs on any thread, with or without the GIL,
 * also once the interpreter is gone. */
static void
versioned_over_deleter(DLManagedTensorVersioned *self)
{
    DLManagedTensor *legacy = self->manager_ctx;
    free(self);
    if (legacy->deleter)
        legacy->deleter(legacy);
}

static void
legacy_over_deleter(DLManagedTensor *self)
{
    DLManagedTensorVersioned *v = self->manager_ctx;
    free(self);
    if (v->deleter)
        v->deleter(v);
}

/* 1 when the tensor of an unconsumed capsule of the given kind is one whose
 * rebuild through NumPy the core makes as NumPy would: well-formed, a NumPy
 * dtype of its own (the others go through a carrier, which needs ml_dtypes
 * at the time of the export), data that is not NULL (NumPy allocates for
 * NULL), at least one dimension (NumPy before 2.1 exports a 0-d tensor
 * without strides), versioned: major 1 and not READ_ONLY (a read-only
 * tensor has no legacy capsule). Else 0: the Python rebuild runs. */
int
adaptable(void *ptr, int versioned)
{
    DLTensor *t = tensor_of(ptr, versioned);
    if (!state.numpy_layout)
        return 0;  /* NumPy before 2.1 lays its exports out otherwise (no strides, empty data moved) */
    if (versioned) {
        DLManagedTensorVersioned *m = ptr;
        if (m->version.major != 1 || (m->flags & FLAG_READ_ONLY))
            return 0;
    }
    if (!well_formed(t) || t->ndim < 1 || t->ndim > state.numpy_maxdims || t->dtype.lanes != 1 || t->dtype.code >= 32 ||
        (uintptr_t)t->data + t->byte_offset == 0)
        return 0;
    int bytes = bit_index(t->dtype.bits);
    return bytes && state.numpy_descr[t->dtype.code][bytes] != NULL;
}

/* Copy the tensor as NumPy exports it: data + byte_offset and an offset
 * of 0, the shape the source holds, strides always (row-major where the
 * source has none, an extent of 0 counted as 1, as NumPy fills them). */
static void
copy_tensor(DLTensor *to, const DLTensor *from, int64_t *strides, DLDevice device)
{
    *to = *from;
    /* as an address: an offset may reach past any object C knows of */
    to->data = (void *)((uintptr_t)from->data + from->byte_offset);
    to->byte_offset = 0;
    to->device = device;
    if (from->strides == NULL) {
        int64_t step = 1;
        for (int i = from->ndim - 1; i >= 0; i--) {
            strides[i] = step;
            if (from->shape[i])
                step *= from->shape[i];  /* within int64: layout_ok bounds the elements */
        }
        to->strides = strides;
    }
}

DLManagedTensorVersioned *
versioned_over(DLManagedTensor *legacy, uint64_t flags, DLDevice device)
{
    int ndim = legacy->dl_tensor.ndim;
    VersionedOver *self = malloc(sizeof(VersionedOver) + sizeof(int64_t) * (size_t)(ndim > 0 ? ndim : 1));
    if (self == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    DLManagedTensorVersioned *v = &self->tensor;
    *(uint64_t *)v = state.version_word;
    v->manager_ctx = legacy;
    v->deleter = versioned_over_deleter;
    v->flags = flags;
    copy_tensor(&v->dl_tensor, &legacy->dl_tensor, self->strides, device);
    return v;
}

DLManagedTensor *
legacy_over(DLManagedTensorVersioned *v, DLDevice device)
{
    int ndim = v->dl_tensor.ndim;
    LegacyOver *self = malloc(sizeof(LegacyOver) + sizeof(int64_t) * (size_t)(ndim > 0 ? ndim : 1));
    if (self == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    DLManagedTensor *m = &self->tensor;
    m->manager_ctx = v;
    m->deleter = legacy_over_deleter;
    copy_tensor(&m->dl_tensor, &v->dl_tensor, self->strides, device);
    return m;
}

/* The capsule of the other kind over the tensor of an unconsumed capsule
 * that adaptable() took, labelled `device`: the capsule taken (renamed
 * used_*), the new one owns its tensor, whose deleter runs once, when the
 * new capsule is consumed and freed or dropped unconsumed. As move() does,
 * the new capsule is made first, owning nothing (a used_* name), and the
 * claim and the hand-over are one step in which no Python code runs: out of
 * memory (NULL, the error set) the capsule given is left as it was; NULL
 * without an error when another consumer took it first. */
PyObject *
adapted_capsule(PyObject *capsule, int versioned, DLDevice device)
{
    void *ptr = PyCapsule_GetPointer(capsule, versioned ? VERSIONED : LEGACY);
    if (ptr == NULL) {
        PyErr_Clear();
        return NULL;
    }
    void *made = versioned ? (void *)legacy_over(ptr, device) : (void *)versioned_over(ptr, FLAG_READ_ONLY, device);
    if (made == NULL)
        return NULL;
    PyObject *out = versioned ? PyCapsule_New(made, USED_LEGACY, legacy_capsule_destructor)
                              : PyCapsule_New(made, USED_VERSIONED, capsule_destructor);
    if (out == NULL) {
        free(made);  /* only the struct made above: the tensor is still the capsule's */
        return NULL;
    }
    void *got = claim(capsule, versioned);
    if (got != ptr) {
        Py_DECREF(out);  /* owns nothing: its destructor frees nothing */
        free(made);
        if (got != NULL)
            release_tensor(got, versioned);  /* another tensor put in meanwhile: taken, so freed */
        return NULL;
    }
    /* Renaming a capsule just made cannot fail. */
    (void)PyCapsule_SetName(out, versioned ? LEGACY : VERSIONED);
    return out;
}

/* rebuild(capsule, versioned, header, want_versioned, read_only, device=None):
 * _exchange.python_rebuild's plain cases in C (the same arguments: a
 * checked capsule; device a (type, id) tuple or None for the tensor's
 * own), every other one by it. */
PyObject *
core_rebuild(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 5 || nargs > 6 || !configured() || !PyBool_Check(args[1]) || !PyBool_Check(args[3]) ||
        !PyBool_Check(args[4]))
        return delegate("rebuild", args, nargs);
    PyObject *capsule = args[0];
    int versioned = args[1] == Py_True, want = args[3] == Py_True, read_only = args[4] == Py_True;
    /* versioned -> legacy of read-only data is refused by the Python one */
    if (want == versioned || (!want && read_only) || kind_of(capsule) != versioned)
        return delegate("rebuild", args, nargs);
    void *ptr = PyCapsule_GetPointer(capsule, versioned ? VERSIONED : LEGACY);
    if (ptr == NULL) {
        PyErr_Clear();
        return delegate("rebuild", args, nargs);
    }
    if (!adaptable(ptr, versioned))
        return delegate("rebuild", args, nargs);
    DLDevice device = tensor_of(ptr, versioned)->device;
    if (nargs == 6 && args[5] != Py_None) {
        PyObject *d = args[5];
        if (!PyTuple_CheckExact(d) || PyTuple_GET_SIZE(d) != 2 || !PyLong_CheckExact(PyTuple_GET_ITEM(d, 0)) ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(d, 1)))
            return delegate("rebuild", args, nargs);
        long dt = PyLong_AsLong(PyTuple_GET_ITEM(d, 0)), di = PyLong_AsLong(PyTuple_GET_ITEM(d, 1));
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return delegate("rebuild", args, nargs);
        }
        if (dt < 0 || dt >= 64 || !((state.device_types >> dt) & 1) || di < 0 || di > INT32_MAX)
            return delegate("rebuild", args, nargs);
        device.device_type = (int32_t)dt;
        device.device_id = (int32_t)di;
    }
    PyObject *out = adapted_capsule(capsule, versioned, device);
    if (out == NULL && !PyErr_Occurred())
        return delegate("rebuild", args, nargs);  /* says what the capsule now is */
    return out;
}
