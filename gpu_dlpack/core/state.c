/* The core's state, and the hand-back to Python: every case the core does
 * not run goes, unchanged, to the Python implementation it was given. */

#include "state.h"

CoreState state = {.cpu_type = 1};

/* 1 once Python has told the core what it decided (configure), else 0 with
 * a RuntimeError set: every entry point refuses before then, since what it
 * would read (the Python implementation, the tables) is not there yet. */
int
configured(void)
{
    if (state.py_impl == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "gpu_dlpack._core is not configured: import gpu_dlpack, which configures it, "
                        "instead of calling the core directly");
        return 0;
    }
    return 1;
}

/* The Python implementation `name` called with the arguments. An error
 * looking it up (no memory for the key) is raised as it is. */
PyObject *
delegate(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured())
        return NULL;
    PyObject *key = PyUnicode_FromString(name);
    if (key == NULL)
        return NULL;
    PyObject *fn = PyDict_GetItemWithError(state.py_impl, key);
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
