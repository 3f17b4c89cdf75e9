/* export(), wrap(), from_dlpack() and inspect(): the plain cases in C, the
 * rest in Python */

#include "export.h"
#include "info.h"

/* wrap(x, readonly): the Exportable of the plain cases made here (a NumPy
 * array of a NumPy dtype; a host producer whose C exchange API says where
 * its data is), every other one by the Python wrap. */
PyObject *
core_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !configured() || state.exportable_class == NULL || args[1] != Py_False)
        return delegate("wrap", args, nargs);
    PyObject *x = args[0];
    if (state.ndarray_type != NULL && Py_TYPE(x) == state.ndarray_type) {
        PyObject *dtype = PyObject_GetAttr(x, state.str_dtype);
        if (dtype == NULL)
            return NULL;
        PyObject *r = is_plain(dtype) ? new_exportable(x, state.cpu_device, state.cpu_dlpack, PLAN_NUMPY, dtype, NULL, NULL)
                                    : delegate("wrap", args, nargs);
        Py_DECREF(dtype);
        return r;
    }
    PyObject *hold;
    ImportEntry *e = import_entry(Py_TYPE(x), &hold);
    if (e == NULL)
        return NULL;
    if ((PyObject *)e != Py_None && e->api != NULL && e->api->dltensor_from_py_object_no_sync != NULL) {
        DLTensor t;
        if (e->api->dltensor_from_py_object_no_sync(x, &t) != 0) {
            PyErr_Clear();
        } else if (t.device.device_type == state.cpu_type && t.device.device_id == 0) {
            PyObject *w = new_exportable(x, state.cpu_device, state.cpu_dlpack, PLAN_EXCHANGE, NULL, e, hold);
            Py_DECREF(hold);
            return w;
        }
    } else if ((PyObject *)e != Py_None && e->api == NULL) {
        /* Host memory on one device by its type's host test: the device the
         * Python wrap reads (the CPU, as its __dlpack_device__ says). */
        int host = host_test(e, x);
        if (host != 0) {
            PyObject *w = host < 0 ? NULL
                                   : new_exportable(x, state.cpu_device, state.cpu_dlpack, PLAN_CAPSULE, NULL, e, hold);
            Py_DECREF(hold);
            return w;
        }
    }
    Py_XDECREF(hold);
    return delegate("wrap", args, nargs);
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;  /* the Python function */
    PyObject *dict;      /* __doc__, __wrapped__...: functools.update_wrapper */
} Exporter;

/* wrap(x, *, readonly=False): core_wrap, whose every other case calls the
 * Python wrap through impl["wrap"]. */
static PyObject *
wrapper_call(Exporter *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs != 1 || state.py_impl == NULL || nkw > 1 ||
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
    if (nargs != 1 || state.py_impl == NULL || state.plain_dtypes == NULL)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *x = args[0], *max_version = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i), *v = args[1 + i];
        if (k == state.str_max_version || PyUnicode_CompareWithASCIIString(k, "max_version") == 0)
            max_version = v;
        else if (PyUnicode_CompareWithASCIIString(k, "readonly") == 0) {
            if (v != Py_False)
                return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
        }
        else if (v != Py_None)  /* stream, dl_device, copy, min_version, or a wrong name */
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
        else if (PyUnicode_CompareWithASCIIString(k, "stream") != 0 &&
                 PyUnicode_CompareWithASCIIString(k, "dl_device") != 0 &&
                 PyUnicode_CompareWithASCIIString(k, "copy") != 0 &&
                 PyUnicode_CompareWithASCIIString(k, "min_version") != 0)
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    int versioned = max_version != Py_None;
    if (versioned && !accepted_versioned(max_version))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    if (state.ndarray_type != NULL && Py_TYPE(x) == state.ndarray_type) {
        PyObject *dtype = PyObject_GetAttr(x, state.str_dtype);
        if (dtype == NULL)
            return NULL;
        int plain = is_plain(dtype);
        Py_DECREF(dtype);
        PyObject *capsule = plain ? numpy_capsule(x, versioned) : NULL;
        if (capsule != NULL)
            return capsule;
    } else {
        PyObject *hold;
        ImportEntry *e = import_entry(Py_TYPE(x), &hold);
        if (e == NULL)
            return NULL;
        if ((PyObject *)e != Py_None && e->api == NULL) {
            /* A producer with a host test (JAX), on the host by it. */
            int host = host_test(e, x);
            PyObject *capsule = host > 0 ? capsule_export(x, max_version, versioned) : NULL;
            Py_DECREF(hold);
            if (capsule != NULL || host < 0 || PyErr_Occurred())
                return capsule;
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
        }
        if (versioned && (PyObject *)e != Py_None && e->api->dltensor_from_py_object_no_sync != NULL) {
            DLTensor t;
            if (e->api->dltensor_from_py_object_no_sync(x, &t) != 0) {
                PyErr_Clear();
            } else if (t.device.device_type == state.cpu_type) {
                DLManagedTensorVersioned *m = exchange_export_of(x, e);
                if (m != NULL) {
                    Py_DECREF(hold);
                    PyObject *capsule = PyCapsule_New(m, VERSIONED, capsule_destructor);
                    if (capsule == NULL)
                        release_tensor(m, 1);
                    return capsule;
                }
            }
        }
        Py_DECREF(hold);
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* The head of a NumPy array (PyArrayObject_fields, NumPy's ABI since 1.7,
 * unchanged in 2.x): what the view shortcut reads. */
typedef struct {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions;
    Py_ssize_t *strides;
    PyObject *base;
    PyObject *descr;
    int flags;
} ArrayHead;

#define ARRAY_C_CONTIGUOUS 0x0001

/* from_dlpack(a) of an exact NumPy array: the Python function's first
 * shortcut, a view, for a C-contiguous array of a dtype of the core's plain
 * set (a subset of the Python one's, which takes every other case: the two
 * give the same view). NULL with no error set when it is not that case. */
static PyObject *
numpy_view(PyObject *x)
{
    const ArrayHead *a = (const ArrayHead *)x;
    if (!(a->flags & ARRAY_C_CONTIGUOUS) || !is_plain(a->descr))
        return NULL;
    PyObject *args[2] = {x, (PyObject *)state.ndarray_type};
    return PyObject_VectorcallMethod(state.str_view, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* from_dlpack(x, *, device=None, copy=None, stream=None): asked for nothing
 * but x, and x no NumPy array (the Python function's view shortcut), the
 * core's import of a producer it was told about (core_import_host); every
 * other case, and every one it hands back (None), the Python function. */
static PyObject *
importer_call(Exporter *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 1 || state.py_impl == NULL || state.numpy_api == NULL || state.plain_dtypes == NULL)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (args[1 + i] != Py_None || (PyUnicode_CompareWithASCIIString(k, "device") != 0 &&
                                       PyUnicode_CompareWithASCIIString(k, "copy") != 0 &&
                                       PyUnicode_CompareWithASCIIString(k, "stream") != 0))
            return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    if (Py_TYPE(args[0]) == state.ndarray_type) {
        PyObject *view = numpy_view(args[0]);
        if (view != NULL || PyErr_Occurred())
            return view;
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    PyObject *arr = core_import_host(NULL, args[0]);
    if (arr != Py_None)
        return arr;
    Py_DECREF(arr);
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

/* inspect(capsule): the core's read (which hands to the Python read every
 * case it does not read); any other call, the Python function. */
static PyObject *
reader_call(Exporter *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL || state.py_impl == NULL)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    return core_read(NULL, args[0]);
}

enum { EXPORTER_EXPORT = 0, EXPORTER_WRAP = 1, EXPORTER_IMPORT = 2, EXPORTER_INSPECT = 3 };

static PyObject *
exporter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fallback;
    int kind = EXPORTER_EXPORT;
    if (!PyArg_ParseTuple(args, "O|i:Exporter", &fallback, &kind))
        return NULL;
    if (kind < EXPORTER_EXPORT || kind > EXPORTER_INSPECT) {
        PyErr_Format(PyExc_ValueError, "Exporter: no kind %d (0 export, 1 wrap, 2 from_dlpack, 3 inspect)", kind);
        return NULL;
    }
    Exporter *self = (Exporter *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = (vectorcallfunc)(kind == EXPORTER_WRAP      ? wrapper_call
                                        : kind == EXPORTER_IMPORT  ? importer_call
                                        : kind == EXPORTER_INSPECT ? reader_call
                                                                   : exporter_call);
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

/* An Exporter is the Python function it fronts, to every reader: the
 * same repr, class (isinstance and inspect.isfunction: pydoc and Sphinx
 * read it as that function), binding as a class attribute, pickling by
 * name, and every attribute the front does not hold (__code__,
 * __defaults__...) read from the function. functools.update_wrapper gives
 * it __name__, __qualname__, __module__, __doc__ and __wrapped__, whose
 * signature inspect reads. Only type() tells the two apart. */
static PyObject *
exporter_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
exporter_repr(Exporter *self)
{
    return PyObject_Repr(self->fallback);
}

static PyObject *
exporter_getattro(Exporter *self, PyObject *name)
{
    PyObject *r = PyObject_GenericGetAttr((PyObject *)self, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    PyErr_Clear();
    return PyObject_GetAttr(self->fallback, name);
}

static PyObject *
exporter_class(Exporter *self, void *closure)
{
    return Py_NewRef((PyObject *)Py_TYPE(self->fallback));
}

/* Pickled by reference, as a function is: the name its module gives it. */
static PyObject *
exporter_reduce(Exporter *self, PyObject *unused)
{
    return PyObject_GetAttrString((PyObject *)self, "__qualname__");
}

static PyMethodDef exporter_methods[] = {
    {"__reduce__", (PyCFunction)exporter_reduce, METH_NOARGS, NULL},
    {NULL}
};

static PyGetSetDef exporter_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"__class__", (getter)exporter_class, NULL, NULL, NULL},
    {NULL}
};

PyTypeObject ExporterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "gpu_dlpack._core.Exporter",
    .tp_basicsize = sizeof(Exporter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "export(), wrap(), from_dlpack() or inspect() with their plain cases in C.",
    .tp_new = exporter_new,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Exporter, vectorcall),
    .tp_dictoffset = offsetof(Exporter, dict),
    .tp_dealloc = (destructor)exporter_dealloc,
    .tp_traverse = (traverseproc)exporter_traverse,
    .tp_clear = (inquiry)exporter_clear,
    .tp_repr = (reprfunc)exporter_repr,
    .tp_getattro = (getattrofunc)exporter_getattro,
    .tp_methods = exporter_methods,
    .tp_getset = exporter_getset,
    .tp_descr_get = exporter_get,
};
