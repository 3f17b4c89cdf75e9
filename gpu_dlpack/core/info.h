/* inspect(capsule) in one C call (info.c). */

#ifndef GPU_DLPACK_CORE_INFO_H
#define GPU_DLPACK_CORE_INFO_H

#include "capsule.h"

PyObject *core_read(PyObject *mod, PyObject *capsule);

#endif
