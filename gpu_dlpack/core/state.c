/* The core's state, and the hand-back to Python: every case the core does
 * not run goes, unchanged, to the Python implementation it was given. */

#include "state.h"

CoreState state = {.cpu_type = 1};

int
configured(void)
{
    if (state.py_impl == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "gpu_dlpack._core is not configured");
        return 0;
    }
    return 1;
}

PyObject *
delegate(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *fn = PyDict_GetItemString(state.py_impl, name);
    if (fn == NULL) {
        PyErr_Format(PyExc_RuntimeError, "gpu_dlpack._core has no Python %s", name);
        return NULL;
    }
    return PyObject_Vectorcall(fn, args, nargs, NULL);
}
