/* Module setup: what Python tells the core (configure), what it forgets,
 * the module, its methods and its types. */

#include "export.h"
#include "info.h"
#include "runtime.h"

/* The words of _errors.subinterpreter(), which the package raises first. */
#define SUBINTERPRETER_REFUSED                                                                                         \
    "gpu_dlpack does not support subinterpreters (nor does NumPy, which it needs): import it in the main interpreter"

/* --- configure ------------------------------------------------------------ */

static PyObject *
core_configure(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"impl", "header_type", "device_types", "host_types", "known",
                         "numpy_dtypes", "numpy_api", "versions", "produced", "version_word",
                         "learn_import", "exportable_fallback", "exportable_class", "cpu_device",
                         "cpu_dlpack", "plain_dtypes", "numpy_strides_after_shape", "capsule_info", "device_class",
                         "numpy_maxdims", "numpy_layout", NULL};
    PyObject *impl, *htype, *known, *npd, *npapi, *versions, *produced, *learn, *fallback, *ecls,
        *cpu, *cpudl, *plain, *info = NULL, *devcls = NULL;
    int maxdims = 32;  /* NumPy 1.x's; NumPy 2 takes 64 */
    int layout = 0;
    unsigned long long devs, hosts, word;
    int strides_after_shape = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!KKOOOOOKOOO!OOO!|pO!Oip", kw, &PyDict_Type, &impl,
                                     &PyType_Type, &htype, &devs, &hosts, &known, &npd, &npapi,
                                     &versions, &produced, &word, &learn, &fallback, &PyType_Type, &ecls,
                                     &cpu, &cpudl, &PyDict_Type, &plain, &strides_after_shape,
                                     &PyType_Type, &info, &devcls, &maxdims, &layout))
        return NULL;
    /* inspect in C: without them, the Python read (configure's callers may
     * predate them) */
    if (maxdims < 1 || maxdims > MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "numpy_maxdims must be within [1, %d]", MAX_NDIM);
        return NULL;
    }
    state.numpy_maxdims = maxdims;
    state.numpy_layout = layout;
    Py_XSETREF(state.info_type, (PyTypeObject *)Py_XNewRef(info));
    Py_XSETREF(state.device_class, Py_XNewRef(devcls));
    for (int t = 0; t < 64; t++)
        for (int i = 0; i < 16; i++)
            Py_CLEAR(state.devices[t][i]);
    if (!PyType_IsSubtype((PyTypeObject *)ecls, &ExportableType)) {
        PyErr_SetString(PyExc_TypeError, "exportable_class must subclass ExportableBase");
        return NULL;
    }
    Py_XSETREF(state.exportable_class, (PyTypeObject *)Py_NewRef(ecls));
    Py_XSETREF(state.cpu_device, Py_NewRef(cpu));
    Py_XSETREF(state.cpu_dlpack, Py_NewRef(cpudl));
    Py_XSETREF(state.plain_dtypes, Py_NewRef(plain));
    {
        PyObject *pk, *pv;
        Py_ssize_t ppos = 0;
        state.n_plain = 0;
        while (PyDict_Next(plain, &ppos, &pk, &pv) && state.n_plain < 32)
            state.plain_list[state.n_plain++] = pk;  /* held by plain_dtypes */
    }
    if (!PyType_IsSubtype((PyTypeObject *)htype, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "header_type must be a tuple subclass");
        return NULL;
    }
    memset(state.known_dtypes, 0, sizeof state.known_dtypes);
    state.known_128 = 0;
    PyObject *it = PyObject_GetIter(known), *item;
    if (it == NULL)
        return NULL;
    while ((item = PyIter_Next(it)) != NULL) {
        int code, bits;
        if (!PyArg_ParseTuple(item, "ii", &code, &bits)) {
            Py_DECREF(item);
            Py_DECREF(it);
            return NULL;
        }
        Py_DECREF(item);
        if (code >= 0 && code < 32) {
            if (bits >= 1 && bits <= 64)
                state.known_dtypes[code] |= 1ULL << (bits - 1);
            else if (bits == 128)
                state.known_128 |= 1U << code;
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    for (int c = 0; c < 32; c++)
        for (int b = 0; b < 17; b++)
            Py_CLEAR(state.numpy_descr[c][b]);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    if (!PyDict_Check(npd)) {
        PyErr_SetString(PyExc_TypeError, "numpy_dtypes must be a dict");
        return NULL;
    }
    while (PyDict_Next(npd, &pos, &k, &v)) {
        int code, bits;
        if (!PyArg_ParseTuple(k, "ii", &code, &bits))
            return NULL;
        int bytes = bit_index((unsigned)bits);
        if (code >= 0 && code < 32 && bytes)
            Py_XSETREF(state.numpy_descr[code][bytes], Py_NewRef(v));
    }
    state.numpy_api = NULL;
    if (npapi != Py_None) {
        state.numpy_api = PyCapsule_GetPointer(npapi, PyCapsule_GetName(npapi));
        if (state.numpy_api == NULL)
            return NULL;
        Py_XSETREF(state.ndarray_type, (PyTypeObject *)Py_NewRef((PyObject *)state.numpy_api[2]));
    }
    /* The calls under way with a floor of their own (export(x,
     * min_version=...)): while there is one, the cached verdicts of the
     * floor in force are not used. */
    PyObject *under_floor = PyDict_Check(versions) ? PyDict_GetItemWithError(versions, state.str_under_floor) : NULL;
    if (under_floor == NULL || !PyList_CheckExact(under_floor)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "versions must hold _under_floor, a list");
        return NULL;
    }
    PyObject *types = PyDict_New();
    if (types == NULL)
        return NULL;
    Py_XSETREF(state.import_types, types);
    Py_XSETREF(state.header_type, (PyTypeObject *)Py_NewRef(htype));
    Py_XSETREF(state.versions_dict, Py_NewRef(versions));
    Py_XSETREF(state.under_floor, Py_NewRef(under_floor));
    Py_XSETREF(state.produced_version, Py_NewRef(produced));
    Py_XSETREF(state.produced_request, PyTuple_Pack(4, Py_None, produced, Py_None, Py_None));
    if (state.produced_request == NULL)
        return NULL;
    Py_XSETREF(state.learn_import, Py_NewRef(learn));
    Py_XSETREF(state.exportable_fallback, Py_NewRef(fallback));
    state.device_types = devs;
    state.host_types = hosts;
    state.version_word = word;
    state.numpy_strides_after_shape = strides_after_shape;
    /* Last: the core counts as configured once everything above is set. */
    Py_XSETREF(state.py_impl, Py_NewRef(impl));
    Py_RETURN_NONE;
}

/* forget(): what Python said of each producer type, to be asked again. */
static PyObject *
core_forget(PyObject *mod, PyObject *unused)
{
    if (state.import_types != NULL)
        PyDict_Clear(state.import_types);
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"forget", (PyCFunction)core_forget, METH_NOARGS, "forget($module, /)\n--\n\nForget what Python said of each producer type."},
    {"configure", (PyCFunction)(void (*)(void))core_configure, METH_VARARGS | METH_KEYWORDS, "configure($module, /, impl, header_type, device_types, host_types, known, numpy_dtypes, numpy_api, versions, produced, version_word, learn_import, exportable_fallback, exportable_class, cpu_device, cpu_dlpack, plain_dtypes, numpy_strides_after_shape=False, capsule_info=None, device_class=None, numpy_maxdims=32, numpy_layout=False)\n--\n\nWhat Python tells the core, once every module is loaded."},
    {"header", (PyCFunction)(void (*)(void))core_header, METH_FASTCALL, "header($module, ptr, versioned, /)\n--\n\nThe Header of a capsule's tensor."},
    {"checked", (PyCFunction)(void (*)(void))core_checked, METH_FASTCALL, "checked($module, capsule, likely=True, check_dtype=None, /)\n--\n\n(versioned, Header) of a capsule, checked."},
    {"claim", (PyCFunction)(void (*)(void))core_claim, METH_FASTCALL, "claim($module, capsule, versioned, /)\n--\n\nCheck the name and rename the capsule used_* in one step."},
    {"snapshot", (PyCFunction)(void (*)(void))core_snapshot, METH_FASTCALL, "snapshot($module, capsule, /)\n--\n\nThe bytes of a capsule's struct, shape and strides, read in one step."},
    {"discard", (PyCFunction)(void (*)(void))core_discard, METH_FASTCALL, "discard($module, capsule, versioned, /)\n--\n\nClaim a capsule and run its deleter."},
    {"move", (PyCFunction)(void (*)(void))core_move, METH_FASTCALL, "move($module, capsule, versioned, destructor, /)\n--\n\nA new unconsumed capsule holding the tensor, the given one renamed used_*, in one step."},
    {"kept_capsule", (PyCFunction)(void (*)(void))core_kept_capsule, METH_FASTCALL, "kept_capsule($module, ptr, keep, /)\n--\n\nA versioned capsule over a struct, holding keep until its deleter runs."},
    {"stamp_version", (PyCFunction)(void (*)(void))core_stamp_version, METH_FASTCALL, "stamp_version($module, capsule, word, /)\n--\n\nWrite the version word into a versioned capsule."},
    {"set_flags", (PyCFunction)(void (*)(void))core_set_flags, METH_FASTCALL, "set_flags($module, ptr, flags, /)\n--\n\nWrite a versioned tensor's flags."},
    {"set_version", (PyCFunction)(void (*)(void))core_set_version, METH_FASTCALL, "set_version($module, ptr, version, /)\n--\n\nWrite a versioned tensor's version."},
    {"import_host", (PyCFunction)core_import_host, METH_O, "import_host($module, x, /)\n--\n\nA NumPy array of a producer's C exchange API, or None."},
    {"rebuild", (PyCFunction)(void (*)(void))core_rebuild, METH_FASTCALL, "rebuild($module, capsule, versioned, header, want_versioned, read_only, device=None, /)\n--\n\nThe capsule of the other kind over the same tensor (the plain cases of _exchange.python_rebuild)."},
    {"read", (PyCFunction)core_read, METH_O, "read($module, capsule, /)\n--\n\nThe CapsuleInfo of an unconsumed capsule (inspect), read in one step."},
    {"wrap", (PyCFunction)(void (*)(void))core_wrap, METH_FASTCALL, "wrap($module, x, readonly, /)\n--\n\nwrap() of the plain cases, the rest in Python."},
    {"bind_runtime", (PyCFunction)core_bind_runtime, METH_O, "bind_runtime($module, capi, /)\n--\n\nBind the CUDA runtime calls to CuPy's runtime module's __pyx_capi__ (None: unbind); None, or (entry, found, expected) when one differs."},
    {"exchange", (PyCFunction)core_exchange, METH_O, "exchange($module, x, /)\n--\n\nA GPU producer's tensor through its C exchange API."},
    {"handoff", (PyCFunction)(void (*)(void))core_handoff, METH_FASTCALL, "handoff($module, event, producer, consumer, device, consumer_device, /)\n--\n\nThe stream hand-off in one call."},
    {"copy", (PyCFunction)(void (*)(void))core_copy, METH_FASTCALL, "copy($module, dst, src, nbytes, stream, device, event, synchronize, /)\n--\n\nA copy and what follows it, in one call."},
    {NULL}
};

/* Made once per process, in the main interpreter: the names and arguments
 * the calls use, and the exporter types. A second load of the module in the
 * main interpreter (its entry dropped from sys.modules) finds them made. */
static int
setup_once(void)
{
    if (state.set_up)
        return 0;
    if (PyType_Ready(&ExportableType) < 0 || PyType_Ready(&ExporterType) < 0)
        return -1;
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
    PyObject *api = PyCapsule_New(&exportable_api, EXCHANGE_API, NULL);
    if (api == NULL || PyDict_SetItemString(ExportableType.tp_dict, "__dlpack_c_exchange_api__", api) < 0) {
        Py_XDECREF(api);
        return -1;
    }
    Py_DECREF(api);
    PyType_Modified(&ExportableType);
    state.set_up = 1;  /* last: what says it is done */
    return 0;
}

/* The module's body, run for each module object made (PEP 489). */
static int
core_exec(PyObject *m)
{
    /* Refused where it cannot run (PyInit__core refuses first): the core's
     * state is C globals, the main interpreter's. */
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        PyErr_SetString(PyExc_ImportError, SUBINTERPRETER_REFUSED);
        return -1;
    }
    if (setup_once() < 0)
        return -1;
    PyObject *api = PyDict_GetItemString(ExportableType.tp_dict, "__dlpack_c_exchange_api__");
    if (api == NULL || PyModule_AddObjectRef(m, "EXCHANGE_API", api) < 0 ||
        PyModule_AddObjectRef(m, "ExportableBase", (PyObject *)&ExportableType) < 0 ||
        PyModule_AddObjectRef(m, "Exporter", (PyObject *)&ExporterType) < 0)
        return -1;
    /* The addresses of the core's owning capsule destructors, by kind. */
    PyObject *destructors = Py_BuildValue("(NN)", PyLong_FromVoidPtr((void *)legacy_capsule_destructor),
                                          PyLong_FromVoidPtr((void *)capsule_destructor));
    if (destructors == NULL || PyModule_AddObjectRef(m, "OWNING_DESTRUCTORS", destructors) < 0) {
        Py_XDECREF(destructors);
        return -1;
    }
    Py_DECREF(destructors);
    PyObject *entries = core_runtime_entries();
    if (entries == NULL || PyModule_AddObjectRef(m, "RUNTIME_ENTRIES", entries) < 0) {
        Py_XDECREF(entries);
        return -1;
    }
    Py_DECREF(entries);
    if (PyModule_AddIntConstant(m, "PLAN_GENERAL", PLAN_GENERAL) < 0 ||
        PyModule_AddIntConstant(m, "PLAN_NUMPY", PLAN_NUMPY) < 0 ||
        PyModule_AddIntConstant(m, "PLAN_EXCHANGE", PLAN_EXCHANGE) < 0 ||
        PyModule_AddIntConstant(m, "PLAN_CAPSULE", PLAN_CAPSULE) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
#ifdef Py_mod_multiple_interpreters
    /* CPython 3.12+ refuses it in every subinterpreter itself. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

/* Multi-phase initialization (PEP 489): every interpreter that loads the
 * file runs PyInit__core and the exec slot, where a single-phase module
 * loaded by the main interpreter first would be copied into a
 * subinterpreter without either running, on the main interpreter's state
 * (docs/internals/core.md). The state stays the process's C globals, the
 * main interpreter's: no per-module state (m_size 0), since no other
 * interpreter ever gets a module. */
static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "gpu_dlpack._core", "The compiled hot path of gpu_dlpack.", 0, core_methods, core_slots,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    /* A subinterpreter is refused before anything is made (the package
     * refuses them too, with the same words, before it loads the core). */
    if (PyInterpreterState_Get() != PyInterpreterState_Main()) {
        PyErr_SetString(PyExc_ImportError, SUBINTERPRETER_REFUSED);
        return NULL;
    }
    return PyModuleDef_Init(&core_module);
}
