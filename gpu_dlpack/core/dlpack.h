/* gpu_dlpack._core: the compiled hot path; this header, the DLPack ABI.
 *
 * Mechanism only, like _capsule.py: it reads and writes DLPack structs,
 * claims capsules, and runs exchanges whose plan Python decided. Whenever a
 * case is not the plain one it was told about (a name it does not expect, a
 * malformed header, a dtype or device outside its tables, a producer error),
 * it hands the whole call back to the Python implementation, which decides
 * and words the error: both paths give the same results by construction.
 *
 * Built with the Python headers only: the DLPack structs are declared here
 * (dlpack.h 1.3, LP64), NumPy is reached through its C-API table
 * (numpy._core._multiarray_umath._ARRAY_API, whose indices are ABI), and no
 * CUDA header is needed.
 *
 * One extension module (setup.py), one C file per concept, each with the
 * header that says what it offers the files above it, top to bottom:
 *   module.c      module setup: configure (what Python tells the core),
 *                 forget, the module and its methods;
 *   export.pxi    export(), wrap(), from_dlpack() and inspect(): their
 *                 plain cases (Cython);
 *   exportable.pxi the producer side: ExportableBase, and the DLPack C
 *                 exchange API its type offers (Cython);
 *   consumer.pxi  the C exchange API, consumer side: a producer's tensor as
 *                 a NumPy array (import_host), or for the hand-off (exchange);
 *   capsule.c     the capsule primitives: names, header, checks, claim,
 *                 snapshot, version and flags;
 *   runtime.pxi   the CUDA runtime calls: the stream hand-off and a copy;
 *   state.c       the core's state, and the hand-back to Python of every
 *                 case the core does not run.
 */

#ifndef GPU_DLPACK_CORE_DLPACK_H
#define GPU_DLPACK_CORE_DLPACK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

/* --- DLPack 1.3 ----------------------------------------------------------- */

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} DLTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define FLAG_READ_ONLY 1ULL

typedef struct DLPackExchangeAPIHeader {
    DLPackVersion version;
    struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;
typedef struct {
    DLPackExchangeAPIHeader header;
    int (*managed_tensor_allocator)(DLTensor *, DLManagedTensorVersioned **, void *,
                                    void (*)(void *, const char *, const char *));
    int (*managed_tensor_from_py_object_no_sync)(void *, DLManagedTensorVersioned **);
    int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned *, void **);
    int (*dltensor_from_py_object_no_sync)(void *, DLTensor *);
    int (*current_work_stream)(int32_t, int32_t, void **);
} DLPackExchangeAPI;

#endif
