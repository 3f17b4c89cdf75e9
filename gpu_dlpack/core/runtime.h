/* The CUDA runtime calls (runtime.c). */

#ifndef GPU_DLPACK_CORE_RUNTIME_H
#define GPU_DLPACK_CORE_RUNTIME_H

#include "state.h"

PyObject *core_set_runtime(PyObject *mod, PyObject *args);
PyObject *core_handoff(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);
PyObject *core_set_copy_runtime(PyObject *mod, PyObject *args);
PyObject *core_copy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

#endif
