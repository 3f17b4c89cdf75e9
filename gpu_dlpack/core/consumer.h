/* The DLPack C exchange API, consumer side (consumer.pxi). */

#ifndef GPU_DLPACK_CORE_CONSUMER_H
#define GPU_DLPACK_CORE_CONSUMER_H

#include "capsule.h"

/* The most guard methods a producer type has (Python gives fewer). */
#define GUARD_METHODS 8

/* What Python said of a producer type (import_entry): its exchange API
 * and the guards that must be false for the plain exchange, and its host
 * test, where the core may ask its __dlpack__ itself (JAX). */
typedef struct {
    const DLPackExchangeAPI *api;  /* NULL: not read */
    PyObject *api_owner;  /* the capsule of the table: it lives as long as the entry */
    PyObject *attrs;    /* attributes that must be false for the plain export */
    PyObject *methods;  /* methods whose result must be false ... */
    uint32_t method_codes[GUARD_METHODS]; /* ... each for these dtype codes (bit per code) */
    PyObject *host_method;  /* the host test (_peers.HostTest), or NULL: len() of ... */
    PyObject *host_pieces;  /* ... this attribute is 1 (one device), and ... */
    PyObject *host_answer;  /* ... method() answers this for host memory */
} ImportEntry;

/* After a failed call into Python: 0 with the error cleared when it is an
 * Exception (the general path runs and reports it), -1 with it left set
 * when it is not (KeyboardInterrupt, SystemExit: the caller returns it). */
static inline int
cleared(void)
{
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return 0;
    }
    return -1;
}

/* The entry of a producer type (Py_None: not imported this way), and in
 * *hold a new reference to what keeps it alive (the caller releases it):
 * the guards it runs are Python, which may clear the table meanwhile
 * (core.forget()). NULL with an error set on failure. */
ImportEntry *import_entry(PyTypeObject *type, PyObject **hold);
int guards_pass(ImportEntry *e, PyObject *x, int code);
int host_test(ImportEntry *e, PyObject *x);
PyObject *ask_capsule(PyObject *x, int versioned);
/* After a producer's __dlpack__ raised: its exception taken (a new
 * reference, with its traceback) when it is an Exception, for the Python
 * function that goes on from it as the Python path does; NULL with it left
 * set when it is not (an interrupt: the caller raises it as it is). */
PyObject *taken_error(void);
PyObject *core_import_host(PyObject *mod, PyObject *x);
PyObject *core_exchange(PyObject *mod, PyObject *x);

#endif
