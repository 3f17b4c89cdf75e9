/* gpu_dlpack._core: the compiled hot path.
 *
 * Mechanism only, like _capsule.py: it reads and writes DLPack structs,
 * claims capsules, and runs exchanges whose plan Python decided. Whenever a
 * case is not the plain one it was told about (a name it does not expect, a
 * malformed header, a dtype or device outside its tables, a producer error),
 * it hands the whole call back to the Python implementation, which decides
 * and words the error: both paths give the same results by construction.
 *
 * Built with the Python headers only: the DLPack structs are declared here
 * (dlpack.h 1.3, LP64), NumPy is reached through its C-API table
 * (numpy._core._multiarray_umath._ARRAY_API, whose indices are ABI), and no
 * CUDA header is needed.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* --- DLPack 1.3 ----------------------------------------------------------- */

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define FLAG_READ_ONLY 1ULL

typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct {
    DLPackExchangeAPIHeader header;
    int (*managed_tensor_allocator)(DLTensor *, DLManagedTensorVersioned **, void *,
                                    void (*)(void *, const char *, const char *));
    int (*managed_tensor_from_py_object_no_sync)(void *, DLManagedTensorVersioned **);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *, void **);
    int (*dltensor_from_py_object_no_sync)(void *, DLTensor *);
    int (*current_work_stream)(int32_t, int32_t, void **);
} DLPackExchangeAPI;

static const char LEGACY[] = "dltensor";
static const char VERSIONED[] = "dltensor_versioned";
static const char USED_LEGACY[] = "used_dltensor";
static const char USED_VERSIONED[] = "used_dltensor_versioned";
static const char EXCHANGED[] = "gpu_dlpack.exchanged";  /* the base of an imported array */
static const char EXCHANGE_API[] = "dlpack_exchange_api";

#define MAX_NDIM 64

/* --- what Python tells the core (configure) ------------------------------- */

static PyObject *py_impl;            /* dict: name -> the Python implementation */
static PyTypeObject *header_type;    /* _capsule.Header (a tuple subclass) */
static uint64_t device_types;        /* bit t: t is a DLPack device type */
static uint64_t host_types;          /* bit t: host-readable memory */
static uint64_t known_dtypes[32];    /* [code]: bit b-1 set when (code, b bits) is exchanged */
static uint32_t known_128;           /* bit code: (code, 128 bits) is exchanged */
static PyObject *numpy_descr[32][17];/* [code][bytes]: the NumPy dtype, or NULL */
static PyTypeObject *ndarray_type;
static void **numpy_api;
static PyObject *versions_dict;      /* _versions.__dict__ (its verdict cache) */
static PyObject *str_accepted, *str_floor, *str_dlpack, *str_dtype, *str_max_version;
static PyObject *kw_max_version;     /* ("max_version",) */
static PyObject *ask_versioned;      /* (1, 0): what NumPy is asked */
static PyObject *produced_version;   /* DLPACK_VERSION, as Python has it */
static uint64_t version_word;        /* DLPACK_VERSION as written in a capsule */
static int32_t cpu_type = 1;
static PyObject *import_types;       /* dict: type -> ImportEntry capsule or None */
static PyObject *learn_import;       /* Python: type -> (api capsule, attrs, methods) or None */
static PyObject *exportable_fallback;/* Python: the general Exportable.__dlpack__ */

typedef PyObject *(*NewFromDescr_t)(PyTypeObject *, PyObject *, int, const Py_ssize_t *,
                                    const Py_ssize_t *, void *, int, PyObject *);
typedef int (*SetBaseObject_t)(PyObject *, PyObject *);

/* 1 once Python has told the core what it decided (configure), else 0 with
 * a RuntimeError set: every entry point refuses before then, since what it
 * would read (the Python implementation, the tables) is not there yet. */
static int
configured(void)
{
    if (py_impl == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "gpu_dlpack._core is not configured: import gpu_dlpack, which configures it, "
                        "instead of calling the core directly");
        return 0;
    }
    return 1;
}

/* The Python implementation `name` called with the arguments. An error
 * looking it up (no memory for the key) is raised as it is. */
static PyObject *
delegate(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured())
        return NULL;
    PyObject *key = PyUnicode_FromString(name);
    if (key == NULL)
        return NULL;
    PyObject *fn = PyDict_GetItemWithError(py_impl, key);
    Py_DECREF(key);
    if (fn == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_RuntimeError, "gpu_dlpack._core has no Python %s", name);
        return NULL;
    }
    Py_INCREF(fn);  /* the call may replace the dict's entry */
    PyObject *r = PyObject_Vectorcall(fn, args, nargs, NULL);
    Py_DECREF(fn);
    return r;
}

static inline int
bit_index(unsigned bits)
{
    /* 8..128 bits in whole bytes -> bytes; 0 for anything else */
    return (bits % 8 == 0 && bits >= 8 && bits <= 128) ? (int)(bits / 8) : 0;
}

static inline int
dtype_known(DLDataType dt)
{
    if (dt.lanes != 1 || dt.code >= 32 || dt.bits == 0)
        return 0;
    if (dt.bits <= 64)
        return (known_dtypes[dt.code] >> (dt.bits - 1)) & 1;
    return dt.bits == 128 && ((known_128 >> dt.code) & 1);
}

/* --- capsule primitives --------------------------------------------------- */

/* 1 versioned, 0 legacy, -1 anything else (no error set). */
static inline int
kind_of(PyObject *capsule)
{
    if (!PyCapsule_CheckExact(capsule))
        return -1;
    const char *name = PyCapsule_GetName(capsule);
    if (name == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (strcmp(name, VERSIONED) == 0)
        return 1;
    if (strcmp(name, LEGACY) == 0)
        return 0;
    return -1;
}

static inline DLTensor *
tensor_of(void *ptr, int versioned)
{
    return versioned ? &((DLManagedTensorVersioned *)ptr)->dl_tensor : &((DLManagedTensor *)ptr)->dl_tensor;
}

/* 1 when the shape and strides can be held (what _capsule._check_layout
 * checks: no negative dimension, no NULL data with elements, at most 2**63 - 1
 * bytes, strides inside the 64-bit address space from either end), else 0. */
static int
layout_ok(DLTensor *t)
{
    const __int128 MAX_BYTES = (((__int128)1) << 63) - 1, LIMIT = ((__int128)1) << 100;
    if (t->ndim == 0)
        return 1;
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return 0;
    __int128 count = 1;
    for (int i = 0; i < t->ndim; i++) {
        count *= t->shape[i];
        if (count > MAX_BYTES)
            count = MAX_BYTES + 1;  /* saturate: too big either way, unless a later 0 */
        if (count == 0)
            return 1;
    }
    if (t->data == NULL)
        return 0;
    __int128 itemsize = ((unsigned)t->dtype.bits * t->dtype.lanes + 7) >> 3;
    if (itemsize < 1)
        itemsize = 1;
    if (count * itemsize > MAX_BYTES)
        return 0;
    if (t->strides == NULL)
        return 1;
    __int128 low = 0, high = 0;
    for (int i = 0; i < t->ndim; i++) {
        __int128 reach = (__int128)(t->shape[i] - 1) * t->strides[i];
        if (reach < 0)
            low += reach;
        else
            high += reach;
        if (low < -LIMIT || high > LIMIT)
            return 0;
    }
    __int128 first = (__int128)(uintptr_t)t->data + (__int128)t->byte_offset;
    low = first + low * itemsize;
    high = first + (high + 1) * itemsize;
    return !(low < 0 || high > (((__int128)1) << 64) || high - low > MAX_BYTES);
}

/* 1 when the tensor is well-formed (what _capsule.header checks), else 0. */
static inline int
well_formed(DLTensor *t)
{
    if (t->ndim < 0 || t->ndim > MAX_NDIM)
        return 0;
    if (t->ndim && t->shape == NULL)
        return 0;
    if (t->device.device_type < 0 || t->device.device_type >= 64 ||
        !((device_types >> t->device.device_type) & 1) || t->device.device_id < 0)
        return 0;
    return layout_ok(t);
}

static PyObject *
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
        h = header_type->tp_alloc(header_type, 11);
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
static void *
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

static inline void
run_deleter(void *ptr, int versioned)
{
    if (versioned) {
        DLManagedTensorVersioned *m = ptr;
        if (m->deleter)
            m->deleter(m);
    } else {
        DLManagedTensor *m = ptr;
        if (m->deleter)
            m->deleter(m);
    }
}

/* run_deleter on an error path, or wherever an exception may be pending (a
 * capsule destructor): the pending exception is set aside while the
 * deleter runs (it may run Python code) and restored after it. */
static void
release_tensor(void *ptr, int versioned)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    run_deleter(ptr, versioned);
    PyErr_Restore(et, ev, tb);
}

static PyObject *
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
static PyObject *
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
    if (check != Py_None) {
        if (dtype_known(t->dtype) && PyDict_GetItemString(py_impl, "check_known") == check) {
            /* the told table says check_known passes */
        } else {
            PyObject *r = PyObject_CallFunction(check, "iii", t->dtype.code, t->dtype.bits, t->dtype.lanes);
            if (r == NULL) {
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
    PyObject *head = new_header(ptr, versioned);
    if (head == NULL)
        return NULL;
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
static PyObject *
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

static PyObject *
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
static PyObject *
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
static PyObject *
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

static int
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

static PyObject *
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

static PyObject *
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

static PyObject *
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

/* --- the consumer side of the C exchange API: import as a NumPy array ---- */

typedef struct {
    const DLPackExchangeAPI *api;
    PyObject *attrs;    /* attributes that must be false for the plain export */
    PyObject *methods;  /* methods whose result must be false ... */
    uint32_t method_codes; /* ... for these dtype codes (bit per code) */
} ImportEntry;

static void
entry_destructor(PyObject *capsule)
{
    ImportEntry *e = PyCapsule_GetPointer(capsule, "gpu_dlpack.import_entry");
    if (e != NULL) {
        Py_XDECREF(e->attrs);
        Py_XDECREF(e->methods);
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

static ImportEntry *
import_entry(PyTypeObject *type)
{
    PyObject *got = PyDict_GetItemWithError(import_types, (PyObject *)type);
    if (got == NULL) {
        if (PyErr_Occurred())
            return NULL;
        /* First sight of the type: Python decides whether it may be imported
         * this way, and with which guards. */
        PyObject *plan = PyObject_CallOneArg(learn_import, (PyObject *)type);
        if (plan == NULL)
            return NULL;
        const DLPackExchangeAPI *api = NULL;
        if (plan != Py_None) {
            PyObject *cap, *attrs, *methods;
            unsigned int codes;
            if (!PyArg_ParseTuple(plan, "OO!O!I", &cap, &PyTuple_Type, &attrs, &PyTuple_Type, &methods, &codes)) {
                Py_DECREF(plan);
                return NULL;
            }
            api = api_of(cap);
            if (api != NULL) {
                ImportEntry *e = PyMem_Calloc(1, sizeof(ImportEntry));
                if (e == NULL) {
                    Py_DECREF(plan);
                    PyErr_NoMemory();
                    return NULL;
                }
                e->api = api;
                e->attrs = Py_NewRef(attrs);
                e->methods = Py_NewRef(methods);
                e->method_codes = codes;
                got = PyCapsule_New(e, "gpu_dlpack.import_entry", entry_destructor);
                if (got == NULL) {
                    Py_DECREF(attrs);
                    Py_DECREF(methods);
                    PyMem_Free(e);
                    Py_DECREF(plan);
                    return NULL;
                }
            }
        }
        Py_DECREF(plan);
        if (got == NULL)
            got = Py_NewRef(Py_None);
        int rc = PyDict_SetItem(import_types, (PyObject *)type, got);
        Py_DECREF(got);  /* the dict holds it */
        if (rc < 0)
            return NULL;
    }
    if (got == Py_None) {
        return (ImportEntry *)Py_None;  /* known: not imported this way */
    }
    return PyCapsule_GetPointer(got, "gpu_dlpack.import_entry");
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
static int
guards_pass(ImportEntry *e, PyObject *x, int code)
{
    Py_ssize_t n = PyTuple_GET_SIZE(e->attrs);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!is_false(PyObject_GetAttr(x, PyTuple_GET_ITEM(e->attrs, i))))
            return 0;
    }
    n = (code >= 0 && code < 32 && ((e->method_codes >> code) & 1)) ? PyTuple_GET_SIZE(e->methods) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!is_false(PyObject_CallMethodNoArgs(x, PyTuple_GET_ITEM(e->methods, i))))
            return 0;
    }
    return 1;
}

/* A NumPy array over an owned, versioned tensor of host memory, or NULL with
 * no error set when the tensor is not the plain case (the caller frees it). */
static PyObject *
ndarray_over(DLManagedTensorVersioned *m)
{
    DLTensor *t = &m->dl_tensor;
    if (m->version.major != 1 || !well_formed(t) || t->device.device_type >= 64 ||
        !((host_types >> t->device.device_type) & 1) || t->dtype.lanes != 1 ||
        t->dtype.code >= 32 || (m->flags & ~FLAG_READ_ONLY))
        return NULL;
    int bytes = bit_index(t->dtype.bits);
    PyObject *descr = bytes ? numpy_descr[t->dtype.code][bytes] : NULL;
    if (descr == NULL)
        return NULL;
    Py_ssize_t shape[MAX_NDIM], strides[MAX_NDIM];
    for (int i = 0; i < t->ndim; i++) {
        shape[i] = (Py_ssize_t)t->shape[i];
        if (t->shape[i] < 0)
            return NULL;
        if (t->strides != NULL) {
            if (t->strides[i] > PY_SSIZE_T_MAX / 16 || t->strides[i] < -(PY_SSIZE_T_MAX / 16))
                return NULL;
            strides[i] = (Py_ssize_t)t->strides[i] * bytes;
        }
    }
    Py_INCREF(descr);  /* stolen */
    PyObject *arr = ((NewFromDescr_t)numpy_api[94])(
        ndarray_type, descr, t->ndim, shape, t->strides ? strides : NULL,
        (char *)t->data + t->byte_offset, (m->flags & FLAG_READ_ONLY) ? 0 : 0x0400 /* WRITEABLE */,
        NULL);
    if (arr == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *base = PyCapsule_New(m, EXCHANGED, exchanged_destructor);
    if (base == NULL) {
        Py_DECREF(arr);
        PyErr_Clear();
        return NULL;
    }
    /* PyArray_SetBaseObject steals base, also when it fails (it then drops
     * it): a reference of our own keeps it until it owns nothing. */
    Py_INCREF(base);
    if (((SetBaseObject_t)numpy_api[282])(arr, base) < 0) {
        PyCapsule_SetName(base, USED_VERSIONED);  /* its destructor frees nothing: the caller frees m */
        Py_DECREF(base);
        Py_DECREF(arr);
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(base);  /* the array's reference remains */
    return arr;
}

/* import_host(x): x as a NumPy array through its type's C exchange API, or
 * None when the exchange is not the plain one Python was told about. */
static PyObject *
core_import_host(PyObject *mod, PyObject *x)
{
    if (!configured())
        return NULL;
    if (numpy_api == NULL)
        Py_RETURN_NONE;
    ImportEntry *e = import_entry(Py_TYPE(x));
    if (e == NULL)
        return NULL;
    if ((PyObject *)e == Py_None)
        Py_RETURN_NONE;
    if (e->api->dltensor_from_py_object_no_sync != NULL) {
        /* Where the data is, without an owned export: device memory takes
         * the general path (the backend of its device and the hand-off). */
        DLTensor view;
        if (e->api->dltensor_from_py_object_no_sync(x, &view) != 0) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (view.device.device_type < 0 || view.device.device_type >= 64 ||
            !((host_types >> view.device.device_type) & 1))
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

/* --- the producer side: Exportable ---------------------------------------- */

enum { PLAN_GENERAL = 0, PLAN_NUMPY = 1, PLAN_EXCHANGE = 2 };

typedef struct {
    PyObject_HEAD
    PyObject *x;
    PyObject *readonly;
    PyObject *source;
    PyObject *device;
    PyObject *request;
    PyObject *reported;
    PyObject *held;
    PyObject *plan_dtype;   /* PLAN_NUMPY: the dtype the plan was made for */
    PyObject *weakrefs;
    const DLPackExchangeAPI *api;  /* PLAN_EXCHANGE */
    ImportEntry *guards;           /* PLAN_EXCHANGE: the producer's guards */
    PyObject *guards_owner;
    int plan;
} Exportable;

static PyTypeObject ExportableType;

static void
capsule_destructor(PyObject *capsule)
{
    /* What every producer's capsule does: free an unconsumed tensor (any
     * producer's: it also owns the tensors Python hands over with move()).
     * A capsule may die while an exception is pending (one dropped as an
     * interrupt unwinds the stack): it is set aside while the deleter runs. */
    if (PyCapsule_IsValid(capsule, VERSIONED))
        release_tensor(PyCapsule_GetPointer(capsule, VERSIONED), 1);
}

static void
legacy_capsule_destructor(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, LEGACY))
        release_tensor(PyCapsule_GetPointer(capsule, LEGACY), 0);
}

/* Python sets the plan (at wrap time): _set_plan(kind, dtype_or_api, guards) */
static PyObject *
exportable_set_plan(Exportable *self, PyObject *args)
{
    int plan;
    PyObject *arg = Py_None;
    if (!configured() || !PyArg_ParseTuple(args, "i|O", &plan, &arg))
        return NULL;
    self->plan = PLAN_GENERAL;
    Py_CLEAR(self->plan_dtype);
    Py_CLEAR(self->guards_owner);
    self->api = NULL;
    self->guards = NULL;
    if (plan == PLAN_NUMPY) {
        self->plan_dtype = Py_NewRef(arg);
        self->plan = plan;
    } else if (plan == PLAN_EXCHANGE) {
        ImportEntry *e = import_entry((PyTypeObject *)arg);
        if (e == NULL)
            return NULL;
        if ((PyObject *)e != Py_None) {
            self->api = e->api;
            self->guards = e;
            self->guards_owner = Py_NewRef(PyDict_GetItem(import_types, arg));
            self->plan = plan;
        }
    }
    return PyLong_FromLong(self->plan);
}

/* 1 when max_version is the one the version policy last accepted against the
 * floor in force (what _versions.check_max_version caches), else 0. */
static int
accepted_versioned(PyObject *max_version)
{
    PyObject *acc = PyDict_GetItem(versions_dict, str_accepted);
    PyObject *floor = PyDict_GetItem(versions_dict, str_floor);
    return acc != NULL && PyTuple_CheckExact(acc) && PyTuple_GET_SIZE(acc) == 2 &&
           PyTuple_GET_ITEM(acc, 0) == max_version && PyTuple_GET_ITEM(acc, 1) == floor;
}

/* 1 when the version policy accepts DLPACK_VERSION itself as a consumer's
 * max_version under the floor in force: asked of _versions once per floor
 * (a new floor is a new object), not decided here. */
static PyObject *produced_floor;  /* the floor it was accepted under */

static int
produced_accepted(void)
{
    PyObject *floor = PyDict_GetItem(versions_dict, str_floor);
    if (floor == NULL)
        return 0;
    if (floor == produced_floor)
        return 1;
    PyObject *check = PyDict_GetItemString(versions_dict, "check_max_version");
    PyObject *r = check ? PyObject_CallOneArg(check, produced_version) : NULL;
    int ok = r == Py_True;
    Py_XDECREF(r);
    PyErr_Clear();  /* refused: the general path raises it */
    if (ok)
        Py_XSETREF(produced_floor, Py_NewRef(floor));
    return ok;
}

/* The versioned tensor of a PLAN_EXCHANGE export, passed on as the rules
 * allow for a host producer asked for nothing else; NULL (no error) when it
 * is not that case. */
static DLManagedTensorVersioned *
exchange_export_of(PyObject *x, ImportEntry *e)
{
    DLManagedTensorVersioned *m = NULL;
    if (e->api->managed_tensor_from_py_object_no_sync(x, &m) != 0 || m == NULL) {
        PyErr_Clear();
        return NULL;
    }
    DLTensor *t = &m->dl_tensor;
    if (!guards_pass(e, x, t->dtype.code) || m->version.major != 1 || !well_formed(t) || t->device.device_type != cpu_type ||
        !dtype_known(t->dtype) || t->dtype.bits < 8 || (t->ndim && t->strides == NULL) ||
        (m->flags & FLAG_READ_ONLY)) {
        if (m->deleter)
            m->deleter(m);
        return NULL;
    }
    *(uint64_t *)m = version_word;
    return m;
}

static inline DLManagedTensorVersioned *
exchange_export(Exportable *self)
{
    return exchange_export_of(self->x, self->guards);
}

/* NumPy's own capsule of x, stamped when versioned; NULL with no error set
 * when NumPy refuses. */
static PyObject *
numpy_capsule(PyObject *x, int versioned)
{
    PyObject *capsule;
    if (versioned) {
        PyObject *a[2] = {x, ask_versioned};
        capsule = PyObject_VectorcallMethod(str_dlpack, a, 1, kw_max_version);
    } else {
        PyObject *a[1] = {x};
        capsule = PyObject_VectorcallMethod(str_dlpack, a, 1, NULL);
    }
    if (capsule == NULL || (versioned && stamp(capsule, version_word) != 0)) {
        Py_XDECREF(capsule);
        PyErr_Clear();
        return NULL;
    }
    return capsule;
}

static PyObject *
exportable_general(Exportable *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *stack[8];
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (!configured())
        return NULL;
    if (nargs + nkw > 7) {
        PyErr_SetString(PyExc_TypeError, "__dlpack__() takes keyword arguments only");
        return NULL;
    }
    stack[0] = (PyObject *)self;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++)
        stack[i + 1] = args[i];
    return PyObject_Vectorcall(exportable_fallback, stack, (nargs + 1), kwnames);
}

static PyObject *
exportable_dlpack(Exportable *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!configured())
        return NULL;
    if (nargs != 0 || self->plan == PLAN_GENERAL || self->readonly != Py_False ||
        (self->reported != NULL && self->reported != Py_None))
        return exportable_general(self, args, nargsf, kwnames);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (k == str_max_version || PyUnicode_CompareWithASCIIString(k, "max_version") == 0)
            max_version = args[i];
        else if (PyUnicode_CompareWithASCIIString(k, "stream") == 0)
            stream = args[i];
        else if (PyUnicode_CompareWithASCIIString(k, "dl_device") == 0)
            dl_device = args[i];
        else if (PyUnicode_CompareWithASCIIString(k, "copy") == 0)
            copy = args[i];
        else
            return exportable_general(self, args, nargsf, kwnames);
    }
    if (stream != Py_None || dl_device != Py_None || copy != Py_None)
        return exportable_general(self, args, nargsf, kwnames);
    int versioned = max_version != Py_None;
    if (versioned && !accepted_versioned(max_version))
        return exportable_general(self, args, nargsf, kwnames);
    PyObject *request = PyTuple_Pack(4, stream, max_version, dl_device, copy);
    if (request == NULL)
        return NULL;
    if (self->plan == PLAN_NUMPY) {
        PyObject *dtype = PyObject_GetAttr(self->x, str_dtype);
        if (dtype == NULL) {
            Py_DECREF(request);
            return NULL;
        }
        Py_DECREF(dtype);  /* compared by identity only */
        if (dtype != self->plan_dtype) {
            Py_DECREF(request);
            return exportable_general(self, args, nargsf, kwnames);
        }
        PyObject *capsule = numpy_capsule(self->x, versioned);
        if (capsule == NULL) {
            /* NumPy refused (a read-only array as legacy...): the general
             * path says why, in gpu_dlpack's words. */
            Py_DECREF(request);
            return exportable_general(self, args, nargsf, kwnames);
        }
        Py_SETREF(self->request, request);
        return capsule;
    }
    /* PLAN_EXCHANGE */
    if (!versioned) {
        Py_DECREF(request);
        return exportable_general(self, args, nargsf, kwnames);
    }
    DLManagedTensorVersioned *m = exchange_export(self);
    if (m == NULL) {
        Py_DECREF(request);
        return exportable_general(self, args, nargsf, kwnames);
    }
    PyObject *capsule = PyCapsule_New(m, VERSIONED, capsule_destructor);
    if (capsule == NULL) {
        release_tensor(m, 1);
        Py_DECREF(request);
        return NULL;
    }
    Py_SETREF(self->request, request);
    return capsule;
}

static PyObject *
exportable_dlpack_device(Exportable *self, PyObject *unused)
{
    return Py_NewRef(self->device);
}

static int
exportable_traverse(Exportable *self, visitproc visit, void *arg)
{
    Py_VISIT(self->x);
    Py_VISIT(self->readonly);
    Py_VISIT(self->source);
    Py_VISIT(self->device);
    Py_VISIT(self->request);
    Py_VISIT(self->held);
    Py_VISIT(self->reported);
    Py_VISIT(self->plan_dtype);
    Py_VISIT(self->guards_owner);
    return 0;
}

static int
exportable_clear(Exportable *self)
{
    Py_CLEAR(self->x);
    Py_CLEAR(self->readonly);
    Py_CLEAR(self->source);
    Py_CLEAR(self->device);
    Py_CLEAR(self->request);
    Py_CLEAR(self->held);
    Py_CLEAR(self->reported);
    Py_CLEAR(self->plan_dtype);
    Py_CLEAR(self->guards_owner);
    self->api = NULL;
    self->guards = NULL;
    self->plan = PLAN_GENERAL;
    return 0;
}

static void
exportable_dealloc(Exportable *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    exportable_clear(self);
    tp->tp_free((PyObject *)self);  /* a subclass's dealloc drops its heap type */
}

static PyTypeObject *exportable_class;  /* gpu_dlpack.Exportable */
static PyObject *cpu_device, *cpu_dlpack;  /* the CPU as a Device and as (1, 0) */
static PyObject *plain_dtypes;          /* NumPy dtypes of PLAN_NUMPY (a dict) */
static PyObject *plain_list[32];        /* the same, compared by identity */
static int n_plain;

static inline int
is_plain(PyObject *dtype)
{
    for (int i = 0; i < n_plain; i++)
        if (plain_list[i] == dtype)
            return 1;
    return 0;
}

static PyObject *
new_exportable(PyObject *x, PyObject *source, PyObject *device, int plan, PyObject *dtype, PyTypeObject *type)
{
    Exportable *self = (Exportable *)exportable_class->tp_alloc(exportable_class, 0);
    if (self == NULL)
        return NULL;
    self->x = Py_NewRef(x);
    self->readonly = Py_NewRef(Py_False);
    self->source = Py_NewRef(source);
    self->device = Py_NewRef(device);
    self->request = Py_NewRef(Py_None);
    self->held = Py_NewRef(Py_None);
    self->reported = Py_NewRef(Py_None);
    self->plan = plan;
    if (plan == PLAN_NUMPY) {
        self->plan_dtype = Py_NewRef(dtype);
    } else {
        ImportEntry *e = import_entry(type);  /* known: the caller looked it up */
        self->api = e->api;
        self->guards = e;
        self->guards_owner = Py_NewRef(PyDict_GetItem(import_types, (PyObject *)type));
    }
    return (PyObject *)self;
}

/* wrap(x, readonly): the Exportable of the plain cases made here (a NumPy
 * array of a NumPy dtype; a host producer whose C exchange API says where
 * its data is), every other one by the Python wrap. */
static PyObject *
core_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !configured() || exportable_class == NULL || args[1] != Py_False)
        return delegate("wrap", args, nargs);
    PyObject *x = args[0];
    if (ndarray_type != NULL && Py_TYPE(x) == ndarray_type) {
        PyObject *dtype = PyObject_GetAttr(x, str_dtype);
        if (dtype == NULL)
            return NULL;
        PyObject *r = is_plain(dtype) ? new_exportable(x, cpu_device, cpu_dlpack, PLAN_NUMPY, dtype, NULL)
                                    : delegate("wrap", args, nargs);
        Py_DECREF(dtype);
        return r;
    }
    ImportEntry *e = import_entry(Py_TYPE(x));
    if (e == NULL)
        return NULL;
    if ((PyObject *)e != Py_None && e->api->dltensor_from_py_object_no_sync != NULL) {
        DLTensor t;
        if (e->api->dltensor_from_py_object_no_sync(x, &t) != 0) {
            PyErr_Clear();
        } else if (t.device.device_type == cpu_type && t.device.device_id == 0) {
            return new_exportable(x, cpu_device, cpu_dlpack, PLAN_EXCHANGE, NULL, Py_TYPE(x));
        }
    }
    return delegate("wrap", args, nargs);
}

static PyMethodDef exportable_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))exportable_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "A DLPack capsule of the array, under gpu_dlpack's rules."},
    {"__dlpack_device__", (PyCFunction)exportable_dlpack_device, METH_NOARGS,
     "The array's (device_type, device_id)."},
    {"_set_plan", (PyCFunction)exportable_set_plan, METH_VARARGS, NULL},
    {NULL}
};

static PyMemberDef exportable_members[] = {
    {"_x", T_OBJECT, offsetof(Exportable, x), 0, NULL},
    {"_readonly", T_OBJECT, offsetof(Exportable, readonly), 0, NULL},
    {"_source", T_OBJECT, offsetof(Exportable, source), 0, NULL},
    {"_device", T_OBJECT, offsetof(Exportable, device), 0, NULL},
    {"_request", T_OBJECT, offsetof(Exportable, request), 0, NULL},
    {"_held", T_OBJECT, offsetof(Exportable, held), 0, NULL},
    {"_reported", T_OBJECT, offsetof(Exportable, reported), 0, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(Exportable, weakrefs), READONLY, NULL},
    {NULL}
};

static PyTypeObject ExportableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpu_dlpack._core.ExportableBase",
    .tp_basicsize = sizeof(Exportable),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The compiled part of gpu_dlpack.Exportable.",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)exportable_dealloc,
    .tp_traverse = (traverseproc)exportable_traverse,
    .tp_clear = (inquiry)exportable_clear,
    .tp_methods = exportable_methods,
    .tp_members = exportable_members,
    .tp_weaklistoffset = offsetof(Exportable, weakrefs),
};

/* The DLPack C exchange API of Exportable (offered on its type). */

static int
exportable_from_py(void *obj, DLManagedTensorVersioned **out)
{
    PyObject *x = obj;
    *out = NULL;
    if (!configured())
        return -1;
    if (!PyObject_TypeCheck(x, &ExportableType)) {
        PyErr_SetString(PyExc_TypeError, "the DLPack exchange API of gpu_dlpack takes a gpu_dlpack.Exportable");
        return -1;
    }
    Exportable *self = (Exportable *)x;
    /* The request is max_version=DLPACK_VERSION and nothing else: the plain
     * plans run when the version policy has accepted it against the floor in
     * force (else the general path checks it, and caches its verdict). */
    int plain = self->readonly == Py_False && (self->reported == NULL || self->reported == Py_None) &&
                produced_accepted();
    if (plain && self->plan == PLAN_NUMPY) {
        PyObject *dtype = PyObject_GetAttr(self->x, str_dtype);
        if (dtype == NULL)
            return -1;
        Py_DECREF(dtype);
        PyObject *capsule = dtype == self->plan_dtype ? numpy_capsule(self->x, 1) : NULL;
        void *ptr = capsule != NULL ? claim(capsule, 1) : NULL;
        Py_XDECREF(capsule);
        if (ptr != NULL) {
            PyObject *request = PyTuple_Pack(4, Py_None, produced_version, Py_None, Py_None);
            if (request == NULL) {
                release_tensor(ptr, 1);
                return -1;
            }
            Py_SETREF(self->request, request);
            *out = ptr;
            return 0;
        }
    }
    if (plain && self->plan == PLAN_EXCHANGE) {
        DLManagedTensorVersioned *m = exchange_export(self);
        if (m != NULL) {
            PyObject *request = PyTuple_Pack(4, Py_None, produced_version, Py_None, Py_None);
            if (request == NULL) {
                release_tensor(m, 1);
                return -1;
            }
            Py_SETREF(self->request, request);
            *out = m;
            return 0;
        }
    }
    /* Every other case: the capsule __dlpack__(max_version=DLPACK_VERSION)
     * gives, claimed here. */
    PyObject *a[2] = {x, produced_version};
    PyObject *capsule = PyObject_VectorcallMethod(str_dlpack, a, 1, kw_max_version);
    if (capsule == NULL)
        return -1;
    void *ptr = claim(capsule, 1);
    Py_DECREF(capsule);
    if (ptr == NULL) {
        PyErr_SetString(PyExc_BufferError, "gpu_dlpack produced no versioned capsule");
        return -1;
    }
    *out = ptr;
    return 0;
}

static int
exportable_to_py(DLManagedTensorVersioned *m, void **out)
{
    /* An owned tensor becomes what gpu_dlpack.from_dlpack makes of it. */
    PyObject *capsule = PyCapsule_New(m, VERSIONED, capsule_destructor);
    if (capsule == NULL)
        return -1;
    PyObject *r = delegate("from_dlpack", &capsule, 1);
    Py_DECREF(capsule);
    if (r == NULL)
        return -1;
    *out = r;
    return 0;
}

static int
exportable_allocator(DLTensor *proto, DLManagedTensorVersioned **out, void *ctx,
                     void (*set_error)(void *, const char *, const char *))
{
    *out = NULL;
    set_error(ctx, "NotImplementedError", "gpu_dlpack.Exportable allocates no tensors");
    return -1;
}

static int
exportable_stream(int32_t device_type, int32_t device_id, void **out)
{
    /* The stream the layer would use on that device, as Python says. */
    *out = NULL;
    if (device_type == cpu_type)
        return 0;
    PyObject *a[2];
    a[0] = PyLong_FromLong(device_type);
    a[1] = PyLong_FromLong(device_id);
    if (a[0] == NULL || a[1] == NULL) {
        Py_XDECREF(a[0]);
        Py_XDECREF(a[1]);
        return -1;
    }
    PyObject *r = delegate("current_stream", a, 2);
    Py_DECREF(a[0]);
    Py_DECREF(a[1]);
    if (r == NULL)
        return -1;
    void *s = r == Py_None ? NULL : PyLong_AsVoidPtr(r);
    Py_DECREF(r);
    if (s == NULL && PyErr_Occurred())
        return -1;
    *out = s;
    return 0;
}

static DLPackExchangeAPI exportable_api = {
    {{1, 3}, NULL},
    exportable_allocator,
    exportable_from_py,
    exportable_to_py,
    NULL,
    exportable_stream,
};

/* --- export(): the plain cases in C, the rest in Python -------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;  /* the Python function */
    PyObject *dict;      /* __doc__, __wrapped__...: functools.update_wrapper */
} Exporter;

static PyObject *core_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

/* wrap(x, *, readonly=False): core_wrap, whose every other case calls the
 * Python wrap through impl["wrap"]. */
static PyObject *
wrapper_call(Exporter *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs != 1 || py_impl == NULL || nkw > 1 ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "readonly") != 0))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *a[2] = {args[0], nkw ? args[1] : Py_False};
    if (a[1] != Py_False)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    return core_wrap(NULL, a, 2);
}

static PyObject *
exporter_call(Exporter *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || py_impl == NULL || plain_dtypes == NULL)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *x = args[0], *max_version = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[1 + i];
        if (k == str_max_version || PyUnicode_CompareWithASCIIString(k, "max_version") == 0)
            max_version = v;
        else if (v != Py_None)  /* stream, dl_device, copy, or a wrong name */
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
        else if (PyUnicode_CompareWithASCIIString(k, "stream") != 0 &&
                 PyUnicode_CompareWithASCIIString(k, "dl_device") != 0 &&
                 PyUnicode_CompareWithASCIIString(k, "copy") != 0)
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    int versioned = max_version != Py_None;
    if (versioned && !accepted_versioned(max_version))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    if (ndarray_type != NULL && Py_TYPE(x) == ndarray_type) {
        PyObject *dtype = PyObject_GetAttr(x, str_dtype);
        if (dtype == NULL)
            return NULL;
        int plain = is_plain(dtype);
        Py_DECREF(dtype);
        PyObject *capsule = plain ? numpy_capsule(x, versioned) : NULL;
        if (capsule != NULL)
            return capsule;
    } else if (versioned) {
        ImportEntry *e = import_entry(Py_TYPE(x));
        if (e == NULL)
            return NULL;
        if ((PyObject *)e != Py_None && e->api->dltensor_from_py_object_no_sync != NULL) {
            DLTensor t;
            if (e->api->dltensor_from_py_object_no_sync(x, &t) != 0) {
                PyErr_Clear();
            } else if (t.device.device_type == cpu_type) {
                DLManagedTensorVersioned *m = exchange_export_of(x, e);
                if (m != NULL) {
                    PyObject *capsule = PyCapsule_New(m, VERSIONED, capsule_destructor);
                    if (capsule == NULL)
                        release_tensor(m, 1);
                    return capsule;
                }
            }
        }
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
exporter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fallback;
    int is_wrap = 0;
    if (!PyArg_ParseTuple(args, "O|p:Exporter", &fallback, &is_wrap))
        return NULL;
    Exporter *self = (Exporter *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)(is_wrap ? wrapper_call : exporter_call);
    self->fallback = Py_NewRef(fallback);
    return (PyObject *)self;
}

static int
exporter_traverse(Exporter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    Py_VISIT(self->dict);
    return 0;
}

static int
exporter_clear(Exporter *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->dict);
    return 0;
}

static void
exporter_dealloc(Exporter *self)
{
    PyObject_GC_UnTrack(self);
    exporter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyGetSetDef exporter_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}
};

static PyTypeObject ExporterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpu_dlpack._core.Exporter",
    .tp_basicsize = sizeof(Exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "export() with its plain cases in C.",
    .tp_new = exporter_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Exporter, vectorcall),
    .tp_dictoffset = offsetof(Exporter, dict),
    .tp_dealloc = (destructor)exporter_dealloc,
    .tp_traverse = (traverseproc)exporter_traverse,
    .tp_clear = (inquiry)exporter_clear,
    .tp_getset = exporter_getset,
};

/* exchange(x) -> (capsule, stream) or None: x's versioned tensor through its
 * type's C exchange API, exported without synchronizing, and the producer's
 * current work stream on x's device (0 for none), for the caller to hand
 * off. None when the type was not told to the core, a guard holds, or the
 * producer refuses (the caller asks __dlpack__, which says why). */
static PyObject *
core_exchange(PyObject *mod, PyObject *x)
{
    if (!configured())
        return NULL;
    ImportEntry *e = import_entry(Py_TYPE(x));
    if (e == NULL)
        return NULL;
    if ((PyObject *)e == Py_None)
        Py_RETURN_NONE;
    DLManagedTensorVersioned *m = NULL;
    if (e->api->managed_tensor_from_py_object_no_sync(x, &m) != 0 || m == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    void *stream = NULL;
    if (!guards_pass(e, x, m->dl_tensor.dtype.code) || m->version.major != 1 ||
        (m->dl_tensor.device.device_type != cpu_type && e->api->current_work_stream != NULL &&
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
    PyGILState_STATE state = PyGILState_Ensure();
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *keep = m->manager_ctx;  /* read first: m lives in memory keep holds */
    m->manager_ctx = NULL;
    Py_XDECREF(keep);
    PyErr_Restore(et, ev, tb);
    PyGILState_Release(state);
}

/* kept_capsule(ptr, keep) -> a versioned capsule over the struct at ptr,
 * filled but for manager_ctx and deleter, holding keep until the deleter
 * runs. Making the capsule and taking the reference is one step: no
 * interrupt or error can land between them and leak keep. */
static PyObject *
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

/* --- the stream hand-off, through the CUDA runtime already loaded --------- */

/* Python finds these in the runtime library CuPy loaded (no CUDA header or
 * library at build time); the tests hand recording stand-ins instead. */
typedef int (*get_device_t)(int *);
typedef int (*set_device_t)(int);
typedef int (*event_record_t)(void *, void *);
typedef int (*stream_wait_t)(void *, void *, unsigned int);
static get_device_t rt_get_device;
static set_device_t rt_set_device;
static event_record_t rt_event_record;
static stream_wait_t rt_stream_wait;

static PyObject *
core_set_runtime(PyObject *mod, PyObject *args)
{
    unsigned long long g, s, r, w;
    if (!PyArg_ParseTuple(args, "KKKK", &g, &s, &r, &w))
        return NULL;
    if (!(g && s && r && w))
        g = s = r = w = 0;  /* all or none */
    rt_get_device = (get_device_t)(uintptr_t)g;
    rt_set_device = (set_device_t)(uintptr_t)s;
    rt_event_record = (event_record_t)(uintptr_t)r;
    rt_stream_wait = (stream_wait_t)(uintptr_t)w;
    return PyBool_FromLong(g != 0);
}

static int
on_device(int device, int *current)
{
    if (*current == device)
        return 0;
    int rc = rt_set_device(device);
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
static PyObject *
core_handoff(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "handoff(event, producer, consumer, device, consumer_device)");
        return NULL;
    }
    if (rt_event_record == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpu_dlpack._core has no CUDA runtime");
        return NULL;
    }
    void *event = PyLong_AsVoidPtr(args[0]);
    void *producer = PyLong_AsVoidPtr(args[1]);
    void *consumer = PyLong_AsVoidPtr(args[2]);
    int device = PyLong_AsLong(args[3]);
    int consumer_device = PyLong_AsLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    int before = -1, current, rc, restore;
    rc = rt_get_device(&before);
    if (rc != 0)
        return PyLong_FromLong(rc);
    current = before;
    if ((rc = on_device(device, &current)) == 0 && (rc = rt_event_record(event, producer)) == 0 &&
        (rc = on_device(consumer_device, &current)) == 0)
        rc = rt_stream_wait(consumer, event, 0);
    restore = on_device(before, &current);
    return PyLong_FromLong(rc != 0 ? rc : restore);
}

/* --- a copy and what follows it, through the same runtime ------------------- */

typedef int (*memcpy_async_t)(void *, const void *, size_t, int, void *);
typedef int (*stream_sync_t)(void *);
static memcpy_async_t rt_memcpy_async;
static stream_sync_t rt_stream_sync;

#define MEMCPY_DEFAULT 4 /* cudaMemcpyDefault: the direction read from the addresses */

static PyObject *
core_set_copy_runtime(PyObject *mod, PyObject *args)
{
    unsigned long long m, s;
    if (!PyArg_ParseTuple(args, "KK", &m, &s))
        return NULL;
    if (!(m && s))
        m = s = 0; /* both or neither */
    rt_memcpy_async = (memcpy_async_t)(uintptr_t)m;
    rt_stream_sync = (stream_sync_t)(uintptr_t)s;
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
static PyObject *
core_copy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "copy(dst, src, nbytes, stream, device, event, synchronize)");
        return NULL;
    }
    if (rt_memcpy_async == NULL || rt_get_device == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpu_dlpack._core has no CUDA runtime for copies");
        return NULL;
    }
    void *dst = PyLong_AsVoidPtr(args[0]);
    void *src = PyLong_AsVoidPtr(args[1]);
    size_t nbytes = PyLong_AsSize_t(args[2]);
    void *stream = PyLong_AsVoidPtr(args[3]);
    int device = PyLong_AsLong(args[4]);
    void *event = PyLong_AsVoidPtr(args[5]);
    if (PyErr_Occurred())
        return NULL;
    int sync = PyObject_IsTrue(args[6]);
    if (sync < 0)
        return NULL;
    int before = -1, current, rc, restore = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = rt_get_device(&before);
    if (rc == 0) {
        current = before;
        if ((rc = on_device(device, &current)) == 0 && (rc = rt_memcpy_async(dst, src, nbytes, MEMCPY_DEFAULT, stream)) == 0 &&
            (event == NULL || (rc = rt_event_record(event, stream)) == 0) && sync)
            rc = rt_stream_sync(stream);
        restore = on_device(before, &current);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc != 0 ? rc : restore);
}

/* --- configure ------------------------------------------------------------ */

static PyObject *
core_configure(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"impl", "header_type", "device_types", "host_types", "known",
                         "numpy_dtypes", "numpy_api", "versions", "produced", "version_word",
                         "learn_import", "exportable_fallback", "exportable_class", "cpu_device",
                         "cpu_dlpack", "plain_dtypes", NULL};
    PyObject *impl, *htype, *known, *npd, *npapi, *versions, *produced, *learn, *fallback, *ecls,
        *cpu, *cpudl, *plain;
    unsigned long long devs, hosts, word;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!KKOOOOOKOOO!OOO!", kw, &PyDict_Type, &impl,
                                     &PyType_Type, &htype, &devs, &hosts, &known, &npd, &npapi,
                                     &versions, &produced, &word, &learn, &fallback, &PyType_Type, &ecls,
                                     &cpu, &cpudl, &PyDict_Type, &plain))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)ecls, &ExportableType)) {
        PyErr_SetString(PyExc_TypeError, "exportable_class must subclass ExportableBase");
        return NULL;
    }
    Py_XSETREF(exportable_class, (PyTypeObject *)Py_NewRef(ecls));
    Py_XSETREF(cpu_device, Py_NewRef(cpu));
    Py_XSETREF(cpu_dlpack, Py_NewRef(cpudl));
    Py_XSETREF(plain_dtypes, Py_NewRef(plain));
    {
        PyObject *pk, *pv;
        Py_ssize_t ppos = 0;
        n_plain = 0;
        while (PyDict_Next(plain, &ppos, &pk, &pv) && n_plain < 32)
            plain_list[n_plain++] = pk;  /* held by plain_dtypes */
    }
    if (!PyType_IsSubtype((PyTypeObject *)htype, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "header_type must be a tuple subclass");
        return NULL;
    }
    memset(known_dtypes, 0, sizeof known_dtypes);
    known_128 = 0;
    PyObject *it = PyObject_GetIter(known), *item;
    if (it == NULL)
        return NULL;
    while ((item = PyIter_Next(it)) != NULL) {
        int code, bits;
        if (!PyArg_ParseTuple(item, "ii", &code, &bits)) {
            Py_DECREF(item);
            Py_DECREF(it);
            return NULL;
        }
        Py_DECREF(item);
        if (code >= 0 && code < 32) {
            if (bits >= 1 && bits <= 64)
                known_dtypes[code] |= 1ULL << (bits - 1);
            else if (bits == 128)
                known_128 |= 1U << code;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    for (int c = 0; c < 32; c++)
        for (int b = 0; b < 17; b++)
            Py_CLEAR(numpy_descr[c][b]);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    if (!PyDict_Check(npd)) {
        PyErr_SetString(PyExc_TypeError, "numpy_dtypes must be a dict");
        return NULL;
    }
    while (PyDict_Next(npd, &pos, &k, &v)) {
        int code, bits;
        if (!PyArg_ParseTuple(k, "ii", &code, &bits))
            return NULL;
        int bytes = bit_index((unsigned)bits);
        if (code >= 0 && code < 32 && bytes)
            Py_XSETREF(numpy_descr[code][bytes], Py_NewRef(v));
    }
    numpy_api = NULL;
    if (npapi != Py_None) {
        numpy_api = PyCapsule_GetPointer(npapi, PyCapsule_GetName(npapi));
        if (numpy_api == NULL)
            return NULL;
        Py_XSETREF(ndarray_type, (PyTypeObject *)Py_NewRef((PyObject *)numpy_api[2]));
    }
    PyObject *types = PyDict_New();
    if (types == NULL)
        return NULL;
    Py_XSETREF(import_types, types);
    Py_XSETREF(header_type, (PyTypeObject *)Py_NewRef(htype));
    Py_XSETREF(versions_dict, Py_NewRef(versions));
    Py_XSETREF(produced_version, Py_NewRef(produced));
    Py_XSETREF(learn_import, Py_NewRef(learn));
    Py_XSETREF(exportable_fallback, Py_NewRef(fallback));
    device_types = devs;
    host_types = hosts;
    version_word = word;
    /* Last: the core counts as configured once everything above is set. */
    Py_XSETREF(py_impl, Py_NewRef(impl));
    Py_RETURN_NONE;
}

/* forget(): what Python said of each producer type, to be asked again. */
static PyObject *
core_forget(PyObject *mod, PyObject *unused)
{
    if (import_types != NULL)
        PyDict_Clear(import_types);
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"forget", (PyCFunction)core_forget, METH_NOARGS, NULL},
    {"configure", (PyCFunction)(void (*)(void))core_configure, METH_VARARGS | METH_KEYWORDS, NULL},
    {"header", (PyCFunction)(void (*)(void))core_header, METH_FASTCALL, NULL},
    {"checked", (PyCFunction)(void (*)(void))core_checked, METH_FASTCALL, NULL},
    {"claim", (PyCFunction)(void (*)(void))core_claim, METH_FASTCALL, NULL},
    {"snapshot", (PyCFunction)(void (*)(void))core_snapshot, METH_FASTCALL, NULL},
    {"discard", (PyCFunction)(void (*)(void))core_discard, METH_FASTCALL, NULL},
    {"move", (PyCFunction)(void (*)(void))core_move, METH_FASTCALL, NULL},
    {"kept_capsule", (PyCFunction)(void (*)(void))core_kept_capsule, METH_FASTCALL, NULL},
    {"stamp_version", (PyCFunction)(void (*)(void))core_stamp_version, METH_FASTCALL, NULL},
    {"set_flags", (PyCFunction)(void (*)(void))core_set_flags, METH_FASTCALL, NULL},
    {"set_version", (PyCFunction)(void (*)(void))core_set_version, METH_FASTCALL, NULL},
    {"import_host", (PyCFunction)core_import_host, METH_O, NULL},
    {"wrap", (PyCFunction)(void (*)(void))core_wrap, METH_FASTCALL, NULL},
    {"set_runtime", (PyCFunction)core_set_runtime, METH_VARARGS, NULL},
    {"exchange", (PyCFunction)core_exchange, METH_O, NULL},
    {"handoff", (PyCFunction)(void (*)(void))core_handoff, METH_FASTCALL, NULL},
    {"set_copy_runtime", (PyCFunction)core_set_copy_runtime, METH_VARARGS, NULL},
    {"copy", (PyCFunction)(void (*)(void))core_copy, METH_FASTCALL, NULL},
    {NULL}
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "gpu_dlpack._core", "The compiled hot path of gpu_dlpack.", -1, core_methods,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    /* The core keeps its state in C globals, which one interpreter owns:
     * a subinterpreter is refused before anything is made (the package
     * refuses them too, with the same words, before it loads the core). */
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        PyErr_SetString(PyExc_ImportError,
                        "gpu_dlpack does not support subinterpreters (nor does NumPy, which it needs): "
                        "import it in the main interpreter");
        return NULL;
    }
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    if (PyType_Ready(&ExportableType) < 0)
        goto fail;
    PyObject *api = PyCapsule_New(&exportable_api, EXCHANGE_API, NULL);
    if (api == NULL || PyDict_SetItemString(ExportableType.tp_dict, "__dlpack_c_exchange_api__", api) < 0) {
        Py_XDECREF(api);
        goto fail;
    }
    PyType_Modified(&ExportableType);
    if (PyModule_AddObjectRef(m, "EXCHANGE_API", api) < 0) {
        Py_DECREF(api);
        goto fail;
    }
    Py_DECREF(api);
    if (PyModule_AddObjectRef(m, "ExportableBase", (PyObject *)&ExportableType) < 0)
        goto fail;
    if (PyType_Ready(&ExporterType) < 0 || PyModule_AddObjectRef(m, "Exporter", (PyObject *)&ExporterType) < 0)
        goto fail;
    str_accepted = PyUnicode_InternFromString("_accepted");
    str_floor = PyUnicode_InternFromString("_floor");
    str_dlpack = PyUnicode_InternFromString("__dlpack__");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_max_version = PyUnicode_InternFromString("max_version");
    kw_max_version = str_max_version ? PyTuple_Pack(1, str_max_version) : NULL;
    ask_versioned = Py_BuildValue("(ii)", 1, 0);
    if (!str_accepted || !str_floor || !str_dlpack || !str_dtype || !kw_max_version || !ask_versioned)
        goto fail;
    /* The addresses of the core's owning capsule destructors, by kind. */
    PyObject *destructors = Py_BuildValue("(NN)", PyLong_FromVoidPtr((void *)legacy_capsule_destructor),
                                          PyLong_FromVoidPtr((void *)capsule_destructor));
    if (destructors == NULL || PyModule_AddObjectRef(m, "OWNING_DESTRUCTORS", destructors) < 0) {
        Py_XDECREF(destructors);
        goto fail;
    }
    Py_DECREF(destructors);
    if (PyModule_AddIntConstant(m, "PLAN_GENERAL", PLAN_GENERAL) < 0 ||
        PyModule_AddIntConstant(m, "PLAN_NUMPY", PLAN_NUMPY) < 0 ||
        PyModule_AddIntConstant(m, "PLAN_EXCHANGE", PLAN_EXCHANGE) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
