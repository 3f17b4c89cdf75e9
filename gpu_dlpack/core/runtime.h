/* The CUDA runtime calls (runtime.c), through CuPy's runtime module. */

#ifndef GPU_DLPACK_CORE_RUNTIME_H
#define GPU_DLPACK_CORE_RUNTIME_H

#include "state.h"

PyObject *core_runtime_entries(void);
PyObject *core_bind_runtime(PyObject *mod, PyObject *capi);
PyObject *core_handoff(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *core_copy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

#endif
