/* inspect(capsule) in one call (info.pxi). */

#ifndef GPU_DLPACK_CORE_INFO_H
#define GPU_DLPACK_CORE_INFO_H

#include "capsule.h"

PyObject *core_read(PyObject *mod, PyObject *capsule);

#endif
