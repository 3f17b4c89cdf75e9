/* The capsule of the other kind over the same memory (adapt.pxi): legacy ->
 * versioned, and versioned -> legacy where nothing read-only is lost. */

#ifndef GPU_DLPACK_CORE_ADAPT_H
#define GPU_DLPACK_CORE_ADAPT_H

#include "capsule.h"

int adaptable(void *ptr, int versioned);
DLManagedTensorVersioned *versioned_over(DLManagedTensor *legacy, uint64_t flags, DLDevice device);
DLManagedTensor *legacy_over(DLManagedTensorVersioned *v, DLDevice device);
PyObject *adapted_capsule(PyObject *capsule, int versioned, DLDevice device);

#endif
