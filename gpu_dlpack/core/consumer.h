/* The DLPack C exchange API, consumer side (consumer.c). */

#ifndef GPU_DLPACK_CORE_CONSUMER_H
#define GPU_DLPACK_CORE_CONSUMER_H

#include "capsule.h"

/* What Python said of a producer type (import_entry): its exchange API,
 * and the guards that must be false for the plain exchange. */
typedef struct {
    const DLPackExchangeAPI *api;
    PyObject *api_owner;  /* the capsule of the table: it lives as long as the entry */
    PyObject *attrs;    /* attributes that must be false for the plain export */
    PyObject *methods;  /* methods whose result must be false ... */
    uint32_t method_codes; /* ... for these dtype codes (bit per code) */
} ImportEntry;

/* The entry of a producer type (Py_None: not imported this way), and in
 * *hold a new reference to what keeps it alive (the caller releases it):
 * the guards it runs are Python, which may clear the table meanwhile
 * (core.forget()). NULL with an error set on failure. */
ImportEntry *import_entry(PyTypeObject *type, PyObject **hold);
int guards_pass(ImportEntry *e, PyObject *x, int code);
PyObject *core_import_host(PyObject *mod, PyObject *x);
PyObject *core_exchange(PyObject *mod, PyObject *x);

#endif
