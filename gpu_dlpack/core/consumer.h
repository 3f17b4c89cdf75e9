/* The DLPack C exchange API, consumer side (consumer.c). */

#ifndef GPU_DLPACK_CORE_CONSUMER_H
#define GPU_DLPACK_CORE_CONSUMER_H

#include "capsule.h"

/* What Python said of a producer type (import_entry): its exchange API,
 * and the guards that must be false for the plain exchange. */
typedef struct {
    const DLPackExchangeAPI *api;
    PyObject *attrs;    /* attributes that must be false for the plain export */
    PyObject *methods;  /* methods whose result must be false ... */
    uint32_t method_codes; /* ... for these dtype codes (bit per code) */
} ImportEntry;

ImportEntry *import_entry(PyTypeObject *type);
int guards_pass(ImportEntry *e, PyObject *x, int code);
PyObject *core_import_host(PyObject *mod, PyObject *x);
PyObject *core_exchange(PyObject *mod, PyObject *x);

#endif
