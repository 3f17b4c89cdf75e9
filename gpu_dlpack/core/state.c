/* The core's state, and the hand-back to Python: every case the core does
 * not run goes, unchanged, to the Python implementation it was given. */

#include "state.h"

/* --- what Python tells the core (configure) ------------------------------- */

PyObject *py_impl;            /* dict: name -> the Python implementation */
PyTypeObject *header_type;    /* _capsule.Header (a tuple subclass) */
uint64_t device_types;        /* bit t: t is a DLPack device type */
uint64_t host_types;          /* bit t: host-readable memory */
uint64_t known_dtypes[32];    /* [code]: bit b-1 set when (code, b bits) is exchanged */
uint32_t known_128;           /* bit code: (code, 128 bits) is exchanged */
PyObject *numpy_descr[32][17];/* [code][bytes]: the NumPy dtype, or NULL */
PyTypeObject *ndarray_type;
void **numpy_api;
PyObject *versions_dict;      /* _versions.__dict__ (its verdict cache) */
PyObject *str_accepted, *str_floor, *str_dlpack, *str_dtype, *str_max_version;
PyObject *kw_max_version;     /* ("max_version",) */
PyObject *ask_versioned;      /* (1, 0): what NumPy is asked */
PyObject *produced_version;   /* DLPACK_VERSION, as Python has it */
uint64_t version_word;        /* DLPACK_VERSION as written in a capsule */
int32_t cpu_type = 1;
PyObject *import_types;       /* dict: type -> ImportEntry capsule or None */
PyObject *learn_import;       /* Python: type -> (api capsule, attrs, methods) or None */
PyObject *exportable_fallback;/* Python: the general Exportable.__dlpack__ */

PyTypeObject *exportable_class;  /* gpu_dlpack.Exportable */
PyObject *cpu_device, *cpu_dlpack;  /* the CPU as a Device and as (1, 0) */
PyObject *plain_dtypes;          /* NumPy dtypes of PLAN_NUMPY (a dict) */
PyObject *plain_list[32];        /* the same, compared by identity */
int n_plain;

int
configured(void)
{
    if (py_impl == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpu_dlpack._core is not configured");
        return 0;
    }
    return 1;
}

PyObject *
delegate(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *fn = PyDict_GetItemString(py_impl, name);
    if (fn == NULL) {
        PyErr_Format(PyExc_RuntimeError, "gpu_dlpack._core has no Python %s", name);
        return NULL;
    }
    return PyObject_Vectorcall(fn, args, nargs, NULL);
}
