/* The producer side: Exportable, what wrap() returns, whose __dlpack__ runs
 * in C the plan Python made at wrap time, and the DLPack C exchange API its
 * type offers. */

#include "exportable.h"

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
    Py_CLEAR(self->plan_type);
    Py_CLEAR(self->guards_owner);
    self->api = NULL;
    self->guards = NULL;
    if (plan == PLAN_NUMPY) {
        if (state.ndarray_type == NULL)
            return PyLong_FromLong(self->plan);
        self->plan_dtype = Py_NewRef(arg);
        self->plan_type = Py_NewRef((PyObject *)state.ndarray_type);
        self->plan = plan;
    } else if ((plan == PLAN_EXCHANGE || plan == PLAN_CAPSULE) && PyType_Check(arg)) {
        PyObject *hold;
        ImportEntry *e = import_entry((PyTypeObject *)arg, &hold);
        if (e == NULL)
            return NULL;
        /* A plan the type's entry allows: its exchange API, or its host test */
        if ((PyObject *)e != Py_None && (plan == PLAN_EXCHANGE ? e->api != NULL : e->host_method != NULL)) {
            self->api = e->api;
            self->guards = e;
            self->guards_owner = Py_NewRef(hold);
            self->plan_type = Py_NewRef(arg);
            self->plan = plan;
        }
        Py_DECREF(hold);
    }
    return PyLong_FromLong(self->plan);
}

/* 1 when o is a tuple of two ints, all of their exact types (no subclass:
 * a bool equals an int), else 0. */
static inline int
int_pair(PyObject *o)
{
    return PyTuple_CheckExact(o) && PyTuple_GET_SIZE(o) == 2 && PyLong_CheckExact(PyTuple_GET_ITEM(o, 0)) &&
           PyLong_CheckExact(PyTuple_GET_ITEM(o, 1));
}

/* 1 when no call under way, on any thread, has put a floor of its own on
 * the exchanges made inside it (export(x, min_version=...), a wrapper's
 * floor: _versions.under_floor, which lists them), else 0: the verdicts
 * cached below are those of the floor in force, and the general path then
 * checks against the floor of the call. */
static inline int
no_call_floor(void)
{
    return PyList_GET_SIZE(state.under_floor) == 0;
}

/* 1 when max_version is the one the version policy last accepted against the
 * floor in force (what _versions.check_max_version caches), or a pair of
 * exact ints equal to it (the verdict depends on the values only: callers
 * each pass their own (1, 0)), else 0. */
int
accepted_versioned(PyObject *max_version)
{
    if (!no_call_floor())
        return 0;
    PyObject *acc = PyDict_GetItem(state.versions_dict, state.str_accepted);
    PyObject *floor = PyDict_GetItem(state.versions_dict, state.str_floor);
    if (acc == NULL || !PyTuple_CheckExact(acc) || PyTuple_GET_SIZE(acc) != 2 || PyTuple_GET_ITEM(acc, 1) != floor)
        return 0;
    PyObject *known = PyTuple_GET_ITEM(acc, 0);
    if (known == max_version)
        return 1;
    if (!int_pair(max_version) || !int_pair(known))
        return 0;
    for (int i = 0; i < 2; i++) {
        int overflow = 0;
        long a = PyLong_AsLongAndOverflow(PyTuple_GET_ITEM(max_version, i), &overflow);
        if (overflow)
            return 0;
        long b = PyLong_AsLongAndOverflow(PyTuple_GET_ITEM(known, i), &overflow);
        if (overflow || a != b)
            return 0;
    }
    return 1;
}

/* 1 when the version policy accepts DLPACK_VERSION itself as a consumer's
 * max_version under the floor in force: asked of _versions once per floor
 * (a new floor is a new object), not decided here. */
static int
produced_accepted(void)
{
    if (!no_call_floor())
        return 0;
    PyObject *floor = PyDict_GetItem(state.versions_dict, state.str_floor);
    if (floor == NULL)
        return 0;
    if (floor == state.produced_floor)
        return 1;
    /* Held for the call: the module's dict may drop it meanwhile. */
    PyObject *check = Py_XNewRef(PyDict_GetItemString(state.versions_dict, "check_max_version"));
    PyObject *r = check ? PyObject_CallOneArg(check, state.produced_version) : NULL;
    Py_XDECREF(check);
    int ok = r == Py_True;
    Py_XDECREF(r);
    PyErr_Clear();  /* refused: the general path raises it */
    /* The floor the check read: it may have been read from the environment
     * just now (None before its first use). */
    floor = PyDict_GetItem(state.versions_dict, state.str_floor);
    if (ok && floor != NULL && floor != Py_None)
        Py_XSETREF(state.produced_floor, Py_NewRef(floor));
    return ok;
}

/* The versioned tensor of a PLAN_EXCHANGE export, passed on as the rules
 * allow for a host producer asked for nothing else; NULL (no error) when it
 * is not that case. */
DLManagedTensorVersioned *
exchange_export_of(PyObject *x, ImportEntry *e)
{
    DLManagedTensorVersioned *m = NULL;
    if (e->api->managed_tensor_from_py_object_no_sync(x, &m) != 0 || m == NULL) {
        PyErr_Clear();
        return NULL;
    }
    DLTensor *t = &m->dl_tensor;
    if (!guards_pass(e, x, t->dtype.code) || m->version.major != 1 || !well_formed(t) || t->device.device_type != state.cpu_type ||
        !dtype_known(t->dtype) || t->dtype.bits < 8 || (t->ndim && t->strides == NULL) ||
        (m->flags & FLAG_READ_ONLY)) {
        if (m->deleter)
            m->deleter(m);
        return NULL;
    }
    *(uint64_t *)m = state.version_word;
    return m;
}

/* The capsule of export(x, max_version=...) (no other argument) for a host
 * producer with a host test (JAX), on the host by that test: its answer to
 * the request the Python path makes, passed on as it came where it already
 * obeys the rules, adapted where it is of the other kind, and handed with
 * every other answer to _exchange.host_answer; an error the producer raised
 * to _exchange.host_refused, which goes on from it as the Python path does
 * (the producer is not asked the same again, and the error is not dropped).
 * NULL with an error set on failure. */
PyObject *
capsule_export(PyObject *x, PyObject *max_version, int versioned)
{
    /* The verdict on max_version, read again before and after the producer
     * runs, as the Python path checks it before the request and again with
     * the answer: the host test and the producer run Python, which may set
     * another floor meanwhile. */
    if (versioned && !accepted_versioned(max_version)) {
        PyObject *a[2] = {x, max_version};
        return delegate("host_export", a, 2);
    }
    PyObject *answer = ask_capsule(x, versioned);
    if (answer == NULL) {
        PyObject *error = taken_error();
        if (error == NULL)
            return NULL;  /* not an Exception (an interrupt): raised as it is, as in Python */
        PyObject *a[3] = {x, error, max_version};
        PyObject *out = delegate("host_refused", a, 3);
        Py_DECREF(error);
        return out;
    }
    int kind = (versioned && !accepted_versioned(max_version)) ? -1 : kind_of(answer);
    void *ptr = kind < 0 ? NULL : PyCapsule_GetPointer(answer, kind ? VERSIONED : LEGACY);
    if (ptr == NULL)
        PyErr_Clear();
    DLTensor *t = ptr == NULL ? NULL : tensor_of(ptr, kind);
    /* The checks of every capsule passed on: well-formed, a dtype exchanged
     * whole bytes wide, on the device the host test said (the CPU, any id). */
    int plain = t != NULL && (!kind || ((DLManagedTensorVersioned *)ptr)->version.major == 1) && well_formed(t) &&
                t->device.device_type == state.cpu_type && dtype_known(t->dtype) && t->dtype.bits >= 8;
    /* Legacy for legacy is Python's: whether the data may be handed over
     * writeable is the producer's row (JAX's arrays are immutable: rule 5). */
    if (plain && kind && versioned && (t->strides != NULL || t->ndim == 0) &&
        !(((DLManagedTensorVersioned *)ptr)->flags & ~FLAG_READ_ONLY)) {
        *(uint64_t *)ptr = state.version_word;  /* versioned for versioned: stamped */
        return answer;
    }
    if (plain && !kind && versioned && adaptable(ptr, 0)) {
        /* The data of a legacy capsule counts as read-only (rule 6), on the
         * CPU as NumPy labels it. */
        DLDevice cpu = {state.cpu_type, 0};
        PyObject *out = adapted_capsule(answer, 0, cpu);
        if (out != NULL || PyErr_Occurred()) {
            drop_keeping_error(answer);
            return out;
        }
    }
    PyObject *a[8] = {x, state.cpu_device, answer, Py_False, Py_None, max_version, Py_None, Py_None};
    PyObject *out = delegate("host_answer", a, 8);
    drop_keeping_error(answer);
    return out;
}

/* 1 when the plain plan may run now: its members are as the plan was made
 * (set, x of the type its plan was made for, not read-only, no floor of its
 * own, no device reported apart), else 0. Python may delete or replace them
 * (the general path then reads them as Python does, and raises what it
 * raises), also while this call runs: wherever Python code can run, an
 * allocation (the cyclic GC runs finalizers) or a call out, what is checked
 * here is checked again after it, or held (Plan). */
static inline int
plan_holds(Exportable *self)
{
    return self->plan != PLAN_GENERAL && self->x != NULL && self->readonly == Py_False &&
           self->reported == Py_None && self->floor == Py_None && self->plan_type != NULL &&
           (PyObject *)Py_TYPE(self->x) == self->plan_type &&
           (self->plan != PLAN_NUMPY || self->plan_dtype != NULL) &&
           (self->plan == PLAN_NUMPY || (self->guards != NULL && self->guards_owner != NULL));
}

/* What a plain plan reads, held for the whole call: strong references to
 * the array, the dtype the plan was made for and what keeps the producer
 * type's entry alive (Python code run meanwhile may drop the members). */
typedef struct {
    int plan;
    PyObject *x;
    PyObject *dtype;        /* PLAN_NUMPY */
    ImportEntry *guards;    /* PLAN_EXCHANGE, PLAN_CAPSULE ... */
    PyObject *guards_owner; /* ... and what keeps it alive */
} Plan;

/* The plan held, once plan_holds() said it may run (no Python runs here). */
static inline Plan
hold_plan(Exportable *self)
{
    Plan p = {self->plan, Py_NewRef(self->x), Py_XNewRef(self->plan_dtype), self->guards,
              Py_XNewRef(self->guards_owner)};
    return p;
}

static inline void
release_plan(Plan *p)
{
    Py_CLEAR(p->x);
    Py_CLEAR(p->dtype);
    Py_CLEAR(p->guards_owner);
}

/* NumPy's capsule of a held PLAN_NUMPY, when x still has the dtype the plan
 * was made for (compared by identity); NULL with no error set when it has
 * another or NumPy refuses (the general path says why). */
static PyObject *
plan_numpy_capsule(Plan *p, int versioned)
{
    PyObject *dtype = PyObject_GetAttr(p->x, state.str_dtype);
    if (dtype == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(dtype);  /* compared by identity only: p->dtype holds one */
    return dtype == p->dtype ? numpy_capsule(p->x, versioned) : NULL;
}

/* NumPy's versioned capsule stamped DLPACK_VERSION, in one read of its
 * pointer. Since DLPack 1.2 a versioned tensor with dimensions carries
 * strides: NumPy 2.1 to 2.3 write a C-contiguous array's right after the
 * shape, in the same allocation, then leave them out (NULL), and they are
 * pointed at there where Python confirmed that (numpy_strides_after_shape).
 * -1 (no error set) when the capsule is not one to stamp, or its strides are
 * left out and not known to be there: the general path builds the capsule,
 * as _backends/numpy.py says. */
static int
stamp_numpy(PyObject *capsule)
{
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, VERSIONED);
    if (m == NULL || ((uintptr_t)m & 7)) {
        PyErr_Clear();
        return -1;
    }
    DLTensor *t = &m->dl_tensor;
    if (t->ndim > 0 && t->strides == NULL) {
        if (!state.numpy_strides_after_shape || t->shape == NULL)
            return -1;
        t->strides = t->shape + t->ndim;
    }
    *(uint64_t *)m = state.version_word;
    return 0;
}

/* NumPy's own capsule of x, stamped (and given its strides) when versioned;
 * NULL with no error set when NumPy refuses, or its capsule would not do. */
PyObject *
numpy_capsule(PyObject *x, int versioned)
{
    PyObject *capsule;
    if (versioned) {
        PyObject *a[2] = {x, state.ask_versioned};
        capsule = PyObject_VectorcallMethod(state.str_dlpack, a, 1, state.kw_max_version);
    } else {
        PyObject *a[1] = {x};
        capsule = PyObject_VectorcallMethod(state.str_dlpack, a, 1, NULL);
    }
    if (capsule == NULL || (versioned && stamp_numpy(capsule) != 0)) {
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
    return PyObject_Vectorcall(state.exportable_fallback, stack, (nargs + 1), kwnames);
}

static PyObject *
exportable_dlpack(Exportable *self, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!configured())
        return NULL;
    if (nargs != 0 || !plan_holds(self))
        return exportable_general(self, args, nargsf, kwnames);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (k == state.str_max_version || PyUnicode_CompareWithASCIIString(k, "max_version") == 0)
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
    /* The request first, as the Python method sets it first: the allocation
     * may run the cyclic GC, whose finalizers may delete or replace the
     * members checked above, so they are checked again after it, and held. */
    PyObject *request = PyTuple_Pack(4, stream, max_version, dl_device, copy);
    if (request == NULL)
        return NULL;
    if (!plan_holds(self) || (versioned && !accepted_versioned(max_version))) {
        Py_DECREF(request);
        return exportable_general(self, args, nargsf, kwnames);
    }
    Plan p = hold_plan(self);
    PyObject *capsule = NULL;
    if (p.plan == PLAN_NUMPY) {
        capsule = plan_numpy_capsule(&p, versioned);
        if (capsule != NULL)
            Py_XSETREF(self->request, request);
        else
            /* NumPy refused (a read-only array as legacy...), or the dtype
             * changed: the general path says why, in gpu_dlpack's words. */
            Py_DECREF(request);
    } else if (p.plan == PLAN_CAPSULE) {
        Py_XSETREF(self->request, request);  /* also when the export raises, as in Python */
        capsule = capsule_export(p.x, max_version, versioned);
        if (capsule == NULL && PyErr_Occurred()) {
            release_plan(&p);
            return NULL;
        }
    } else if (versioned) {  /* PLAN_EXCHANGE, asked for a versioned capsule */
        DLManagedTensorVersioned *m = exchange_export_of(p.x, p.guards);
        if (m != NULL) {
            capsule = PyCapsule_New(m, VERSIONED, capsule_destructor);
            if (capsule == NULL) {
                release_tensor(m, 1);
                Py_DECREF(request);
                release_plan(&p);
                return NULL;
            }
            Py_XSETREF(self->request, request);
        } else {
            Py_DECREF(request);
        }
    } else {
        Py_DECREF(request);
    }
    release_plan(&p);
    if (capsule != NULL)
        return capsule;
    return exportable_general(self, args, nargsf, kwnames);
}

static PyObject *
exportable_dlpack_device(Exportable *self, PyObject *unused)
{
    if (self->device == NULL)  /* deleted, or never set: what Python raises */
        return PyObject_GetAttrString((PyObject *)self, "_device");
    return Py_NewRef(self->device);
}

static int
exportable_traverse(Exportable *self, visitproc visit, void *arg)
{
    Py_VISIT(self->x);
    Py_VISIT(self->readonly);
    Py_VISIT(self->floor);
    Py_VISIT(self->source);
    Py_VISIT(self->device);
    Py_VISIT(self->request);
    Py_VISIT(self->held);
    Py_VISIT(self->reported);
    Py_VISIT(self->plan_dtype);
    Py_VISIT(self->plan_type);
    Py_VISIT(self->guards_owner);
    return 0;
}

static int
exportable_clear(Exportable *self)
{
    Py_CLEAR(self->x);
    Py_CLEAR(self->readonly);
    Py_CLEAR(self->floor);
    Py_CLEAR(self->source);
    Py_CLEAR(self->device);
    Py_CLEAR(self->request);
    Py_CLEAR(self->held);
    Py_CLEAR(self->reported);
    Py_CLEAR(self->plan_dtype);
    Py_CLEAR(self->plan_type);
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

PyObject *
new_exportable(PyObject *x, PyObject *source, PyObject *device, int plan, PyObject *dtype, ImportEntry *e,
               PyObject *hold)
{
    Exportable *self = (Exportable *)state.exportable_class->tp_alloc(state.exportable_class, 0);
    if (self == NULL)
        return NULL;
    self->x = Py_NewRef(x);
    self->readonly = Py_NewRef(Py_False);
    self->floor = Py_NewRef(Py_None);
    self->source = Py_NewRef(source);
    self->device = Py_NewRef(device);
    self->request = Py_NewRef(Py_None);
    self->held = Py_NewRef(Py_None);
    self->reported = Py_NewRef(Py_None);
    self->plan = plan;
    self->plan_type = Py_NewRef((PyObject *)Py_TYPE(x));
    if (plan == PLAN_NUMPY) {
        self->plan_dtype = Py_NewRef(dtype);
    } else {
        /* the entry the caller looked up, and what keeps it alive */
        self->api = e->api;
        self->guards = e;
        self->guards_owner = Py_NewRef(hold);
    }
    return (PyObject *)self;
}

/* The docstrings are those of the Python methods these replace
   (gpu_dlpack/_export.py), word for word: help() and the API reference read
   the same on both paths (tests/test_conventions.py compares them). */
static PyMethodDef exportable_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))exportable_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule of the wrapped array, under the rules (the standard's\n"
     "``__dlpack__``).\n"
     "\n"
     "Parameters\n"
     "----------\n"
     "stream : int or stream object, optional\n"
     "    The stream the consumer uses the data on (``None`` or ``-1`` for host\n"
     "    memory).\n"
     "max_version : tuple of int, optional\n"
     "    The newest DLPack version the consumer reads; ``None`` asks for a\n"
     "    legacy capsule.\n"
     "dl_device : tuple of int, optional\n"
     "    The ``(device_type, device_id)`` to export to (``None``: in place).\n"
     "copy : bool, optional\n"
     "    ``True`` always copies, ``False`` never, ``None`` when it must.\n"
     "\n"
     "Returns\n"
     "-------\n"
     "PyCapsule\n"
     "    A ``dltensor`` or ``dltensor_versioned`` capsule.\n"
     "\n"
     "Raises\n"
     "------\n"
     "BufferError, TypeError, ValueError\n"
     "    What the rules refuse, as `export` raises it."},
    {"__dlpack_device__", (PyCFunction)exportable_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n"
     "The ``(device_type, device_id)`` of the wrapped array.\n"
     "\n"
     "Returns\n"
     "-------\n"
     "tuple of int\n"
     "    The DLPack device pair, as read when the wrapper was made."},
    {"_set_plan", (PyCFunction)exportable_set_plan, METH_VARARGS,
     "_set_plan($self, plan, arg=None, /)\n--\n\nThe plan __dlpack__ runs in C (set by Python at wrap time)."},
    {NULL}
};

static PyMemberDef exportable_members[] = {
    {"_x", T_OBJECT_EX, offsetof(Exportable, x), 0, NULL},
    {"_readonly", T_OBJECT_EX, offsetof(Exportable, readonly), 0, NULL},
    {"_floor", T_OBJECT_EX, offsetof(Exportable, floor), 0, NULL},
    {"_source", T_OBJECT_EX, offsetof(Exportable, source), 0, NULL},
    {"_device", T_OBJECT_EX, offsetof(Exportable, device), 0, NULL},
    {"_request", T_OBJECT_EX, offsetof(Exportable, request), 0, NULL},
    {"_held", T_OBJECT_EX, offsetof(Exportable, held), 0, NULL},
    {"_reported", T_OBJECT_EX, offsetof(Exportable, reported), 0, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(Exportable, weakrefs), READONLY, NULL},
    {NULL}
};

PyTypeObject ExportableType = {
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
     * force (else the general path checks it, and caches its verdict). That
     * check may run Python: the plan is checked after it, then held. */
    if (produced_accepted() && plan_holds(self) && self->plan != PLAN_CAPSULE) {
        Plan p = hold_plan(self);
        DLManagedTensorVersioned *m = NULL;
        if (p.plan == PLAN_NUMPY) {
            PyObject *capsule = plan_numpy_capsule(&p, 1);
            m = capsule != NULL ? claim(capsule, 1) : NULL;
            Py_XDECREF(capsule);  /* renamed used_*: frees nothing */
        } else {
            m = exchange_export_of(p.x, p.guards);
        }
        release_plan(&p);
        if (m != NULL) {
            /* the request of the exchange: one tuple, made at configure */
            Py_XSETREF(self->request, Py_NewRef(state.produced_request));
            *out = m;
            return 0;
        }
    }
    /* Every other case: the capsule __dlpack__(max_version=DLPACK_VERSION)
     * gives, claimed here. */
    PyObject *a[2] = {x, state.produced_version};
    PyObject *capsule = PyObject_VectorcallMethod(state.str_dlpack, a, 1, state.kw_max_version);
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
    if (set_error != NULL)  /* a consumer may pass none */
        set_error(ctx, "NotImplementedError", "gpu_dlpack.Exportable allocates no tensors");
    return -1;
}

static int
exportable_stream(int32_t device_type, int32_t device_id, void **out)
{
    /* The stream the layer would use on that device, as Python says. */
    *out = NULL;
    if (device_type == state.cpu_type)
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

DLPackExchangeAPI exportable_api = {
    {{1, 3}, NULL},
    exportable_allocator,
    exportable_from_py,
    exportable_to_py,
    NULL,
    exportable_stream,
};
