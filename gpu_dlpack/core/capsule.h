/* The capsule primitives (capsule.pxi), and the small ones every file inlines. */

#ifndef GPU_DLPACK_CORE_CAPSULE_H
#define GPU_DLPACK_CORE_CAPSULE_H

#include "state.h"

static const char LEGACY[] = "dltensor";
static const char VERSIONED[] = "dltensor_versioned";
static const char USED_LEGACY[] = "used_dltensor";
static const char USED_VERSIONED[] = "used_dltensor_versioned";
static const char EXCHANGED[] = "gpu_dlpack.exchanged";  /* the base of an imported array */
static const char EXCHANGED_LEGACY[] = "gpu_dlpack.exchanged_legacy";  /* ... of a legacy tensor */
static const char EXCHANGE_API[] = "dlpack_exchange_api";

#define MAX_NDIM 64

static inline int
bit_index(unsigned bits)
{
    /* 8..128 bits in whole bytes -> bytes; 0 for anything else */
    return (bits % 8 == 0 && bits >= 8 && bits <= 128) ? (int)(bits / 8) : 0;
}

static inline int
dtype_known(DLDataType dt)
{
    if (dt.lanes != 1 || dt.code >= 32 || dt.bits == 0)
        return 0;
    if (dt.bits <= 64)
        return (state.known_dtypes[dt.code] >> (dt.bits - 1)) & 1;
    return dt.bits == 128 && ((state.known_128 >> dt.code) & 1);
}

/* 1 versioned, 0 legacy, -1 anything else (no error set). */
static inline int
kind_of(PyObject *capsule)
{
    if (!PyCapsule_CheckExact(capsule))
        return -1;
    const char *name = PyCapsule_GetName(capsule);
    if (name == NULL) {
        PyErr_Clear();
        return -1;
    }
    if (strcmp(name, VERSIONED) == 0)
        return 1;
    if (strcmp(name, LEGACY) == 0)
        return 0;
    return -1;
}

static inline DLTensor *
tensor_of(void *ptr, int versioned)
{
    return versioned ? &((DLManagedTensorVersioned *)ptr)->dl_tensor : &((DLManagedTensor *)ptr)->dl_tensor;
}

int layout_ok(DLTensor *t);

/* 1 when the tensor is well-formed (what _capsule.header checks), else 0. */
static inline int
well_formed(DLTensor *t)
{
    if (t->ndim < 0 || t->ndim > MAX_NDIM)
        return 0;
    if (t->ndim && t->shape == NULL)
        return 0;
    if (t->device.device_type < 0 || t->device.device_type >= 64 ||
        !((state.device_types >> t->device.device_type) & 1) || t->device.device_id < 0)
        return 0;
    return layout_ok(t);
}

PyObject *new_header(void *ptr, int versioned);
void *claim(PyObject *capsule, int versioned);

static inline void
run_deleter(void *ptr, int versioned)
{
    if (versioned) {
        DLManagedTensorVersioned *m = ptr;
        if (m->deleter)
            m->deleter(m);
    } else {
        DLManagedTensor *m = ptr;
        if (m->deleter)
            m->deleter(m);
    }
}

/* run_deleter on an error path, or wherever an exception may be pending (a
 * capsule destructor): the pending exception is set aside while the
 * deleter runs (it may run Python code) and restored after it. */
static inline void
release_tensor(void *ptr, int versioned)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    run_deleter(ptr, versioned);
    PyErr_Restore(et, ev, tb);
}

/* Py_DECREF where an exception may be pending: a destructor it runs (a
 * producer's, on a capsule renamed used_*) may clear or replace it. */
static inline void
drop_keeping_error(PyObject *o)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    Py_DECREF(o);
    PyErr_Restore(et, ev, tb);
}

void capsule_destructor(PyObject *capsule);
void legacy_capsule_destructor(PyObject *capsule);

int stamp(PyObject *capsule, uint64_t word);

#endif
