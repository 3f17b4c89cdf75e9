/* The module's init function and its create slot: the one piece of the core
 * still hand-written in C, since it must run before Cython's own init.
 *
 * Cython's init (renamed gpu_dlpack_cython_init by setup.py) remembers the
 * first interpreter that creates the module and refuses every other in words
 * of its own, so a subinterpreter that loaded the file first would lock the
 * main interpreter out. A subinterpreter is refused here first, in the words
 * the package uses (_errors.subinterpreter): in the init function, and in the
 * create slot, which CPython 3.13 calls without the init function for a file
 * another interpreter loaded. */

#include <Python.h>

#define SUBINTERPRETER_REFUSED                                                                                         \
    "gpu_dlpack does not support subinterpreters (nor does NumPy, which it needs): import it in the main interpreter"

PyMODINIT_FUNC gpu_dlpack_cython_init(void);

typedef PyObject *(*create_t)(PyObject *, PyModuleDef *);
static create_t cython_create;

static int
refused(void)
{
    if (PyInterpreterState_Get() == PyInterpreterState_Main())
        return 0;
    PyErr_SetString(PyExc_ImportError, SUBINTERPRETER_REFUSED);
    return 1;
}

static PyObject *
create(PyObject *spec, PyModuleDef *def)
{
    return refused() ? NULL : cython_create(spec, def);
}

#undef PyInit__core
PyMODINIT_FUNC
PyInit__core(void)
{
    if (refused())
        return NULL;
    PyModuleDef *def = (PyModuleDef *)gpu_dlpack_cython_init();
    for (PyModuleDef_Slot *slot = def->m_slots; slot != NULL && slot->slot != 0; slot++)
        if (slot->slot == Py_mod_create && slot->value != (void *)create) {
            cython_create = (create_t)slot->value;
            slot->value = (void *)create;
        }
    return (PyObject *)def;
}
