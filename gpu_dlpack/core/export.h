/* export(), wrap() and from_dlpack(): their plain cases in C (export.c). */

#ifndef GPU_DLPACK_CORE_EXPORT_H
#define GPU_DLPACK_CORE_EXPORT_H

#include "exportable.h"

extern PyTypeObject ExporterType;
PyObject *core_wrap(PyObject *mod, PyObject *const *args, Py_ssize_t nargs);

#endif
