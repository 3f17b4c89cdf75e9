/* What the module's body (_core.pyx) takes of the C files (module.c). */

#ifndef GPU_DLPACK_CORE_MODULE_H
#define GPU_DLPACK_CORE_MODULE_H

#include "capsule.h"

int setup_once(void);
PyObject *core_owning_destructors(void);

#endif
