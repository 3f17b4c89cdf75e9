/* What of module setup is still C: the names the core's calls use, made
 * once; the addresses of the owning destructors; and the module's init
 * function, which must run before Cython's (below). */

#include "module.h"

/* Made once per process, in the main interpreter: the names and arguments
 * the calls use. A second load of the module in the main interpreter (its
 * entry dropped from sys.modules) finds them made. */
int
setup_once(void)
{
    if (state.set_up)
        return 0;
    state.str_accepted = PyUnicode_InternFromString("_accepted");
    state.str_floor = PyUnicode_InternFromString("_floor");
    state.str_under_floor = PyUnicode_InternFromString("_under_floor");
    state.str_dlpack = PyUnicode_InternFromString("__dlpack__");
    state.str_dtype = PyUnicode_InternFromString("dtype");
    state.str_view = PyUnicode_InternFromString("view");
    state.str_max_version = PyUnicode_InternFromString("max_version");
    state.kw_max_version = state.str_max_version ? PyTuple_Pack(1, state.str_max_version) : NULL;
    state.ask_versioned = Py_BuildValue("(ii)", 1, 0);
    state.str_legacy = PyUnicode_InternFromString(LEGACY);
    state.str_versioned = PyUnicode_InternFromString(VERSIONED);
    if (!state.str_accepted || !state.str_floor || !state.str_under_floor || !state.str_dlpack || !state.str_dtype ||
        !state.str_view || !state.kw_max_version || !state.ask_versioned || !state.str_legacy || !state.str_versioned)
        return -1;
    static const char *info_keys[10] = {"name", "versioned", "version", "flags", "device", "dl_dtype", "shape",
                                        "strides", "byte_offset", "data"};
    for (int i = 0; i < 10; i++)
        if ((state.info_keys[i] = PyUnicode_InternFromString(info_keys[i])) == NULL)
            return -1;
    state.set_up = 1;  /* last: what says it is done */
    return 0;
}

/* The addresses of the core's owning capsule destructors, by kind. */
PyObject *
core_owning_destructors(void)
{
    return Py_BuildValue("(NN)", PyLong_FromVoidPtr((void *)legacy_capsule_destructor),
                         PyLong_FromVoidPtr((void *)capsule_destructor));
}

/* The module's init function and its create slot. Cython's own (its init
 * renamed gpu_dlpack_cython_init by setup.py) remembers the first interpreter
 * that creates the module and refuses every other in words of its own, so a
 * subinterpreter that loaded the file first would lock the main interpreter
 * out. A subinterpreter is refused here first, in the words the package uses:
 * in the init function, and in the create slot, which CPython 3.13 calls
 * without the init function for a file another interpreter loaded. */
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
