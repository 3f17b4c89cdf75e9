/* The producer side: Exportable and its C exchange API (exportable.c). */

#ifndef GPU_DLPACK_CORE_EXPORTABLE_H
#define GPU_DLPACK_CORE_EXPORTABLE_H

#include "adapt.h"
#include "consumer.h"

enum { PLAN_GENERAL = 0, PLAN_NUMPY = 1, PLAN_EXCHANGE = 2, PLAN_CAPSULE = 3 };

typedef struct {
    PyObject_HEAD
    PyObject *x;
    PyObject *readonly;
    PyObject *floor;        /* wrap(x, min_version=): its own version floor (NULL: none) */
    PyObject *source;
    PyObject *device;
    PyObject *request;
    PyObject *reported;
    PyObject *held;
    PyObject *plan_dtype;   /* PLAN_NUMPY: the dtype the plan was made for */
    PyObject *plan_type;    /* the type of x the plan was made for */
    PyObject *weakrefs;
    const DLPackExchangeAPI *api;  /* PLAN_EXCHANGE */
    ImportEntry *guards;           /* PLAN_EXCHANGE, PLAN_CAPSULE: the producer type's entry */
    PyObject *guards_owner;
    int plan;
} Exportable;

extern PyTypeObject ExportableType;
extern DLPackExchangeAPI exportable_api;

int accepted_versioned(PyObject *max_version);
DLManagedTensorVersioned *exchange_export_of(PyObject *x, ImportEntry *e);
PyObject *numpy_capsule(PyObject *x, int versioned);
PyObject *capsule_export(PyObject *x, PyObject *max_version, int versioned);
PyObject *new_exportable(PyObject *x, PyObject *source, PyObject *device, int plan, PyObject *dtype, ImportEntry *e,
                         PyObject *hold);

static inline int
is_plain(PyObject *dtype)
{
    for (int i = 0; i < state.n_plain; i++)
        if (state.plain_list[i] == dtype)
            return 1;
    return 0;
}

#endif
