/* Module setup: what Python tells the core (configure), what it forgets,
 * the module, its methods and its types. */

#include "export.h"
#include "info.h"
#include "runtime.h"

/* --- configure ------------------------------------------------------------ */

static PyObject *
core_configure(PyObject *mod, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"impl", "header_type", "device_types", "host_types", "known",
                         "numpy_dtypes", "numpy_api", "versions", "produced", "version_word",
                         "learn_import", "exportable_fallback", "exportable_class", "cpu_device",
                         "cpu_dlpack", "plain_dtypes", "capsule_info", "device_class", NULL};
    PyObject *impl, *htype, *known, *npd, *npapi, *versions, *produced, *learn, *fallback, *ecls,
        *cpu, *cpudl, *plain, *info = NULL, *devcls = NULL;
    unsigned long long devs, hosts, word;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!KKOOOOOKOOO!OOO!|O!O", kw, &PyDict_Type, &impl,
                                     &PyType_Type, &htype, &devs, &hosts, &known, &npd, &npapi,
                                     &versions, &produced, &word, &learn, &fallback, &PyType_Type, &ecls,
                                     &cpu, &cpudl, &PyDict_Type, &plain, &PyType_Type, &info, &devcls))
        return NULL;
    /* inspect in C: without them, the Python read (configure's callers may
     * predate them) */
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
    Py_XSETREF(state.py_impl, Py_NewRef(impl));
    Py_XSETREF(state.header_type, (PyTypeObject *)Py_NewRef(htype));
    Py_XSETREF(state.versions_dict, Py_NewRef(versions));
    Py_XSETREF(state.produced_version, Py_NewRef(produced));
    Py_XSETREF(state.produced_request, PyTuple_Pack(4, Py_None, produced, Py_None, Py_None));
    if (state.produced_request == NULL)
        return NULL;
    Py_XSETREF(state.learn_import, Py_NewRef(learn));
    Py_XSETREF(state.exportable_fallback, Py_NewRef(fallback));
    state.device_types = devs;
    state.host_types = hosts;
    state.version_word = word;
    Py_XSETREF(state.import_types, PyDict_New());
    if (state.import_types == NULL)
        return NULL;
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
    {"forget", (PyCFunction)core_forget, METH_NOARGS, NULL},
    {"configure", (PyCFunction)(void (*)(void))core_configure, METH_VARARGS | METH_KEYWORDS, NULL},
    {"header", (PyCFunction)(void (*)(void))core_header, METH_FASTCALL, NULL},
    {"checked", (PyCFunction)(void (*)(void))core_checked, METH_FASTCALL, NULL},
    {"claim", (PyCFunction)(void (*)(void))core_claim, METH_FASTCALL, NULL},
    {"snapshot", (PyCFunction)(void (*)(void))core_snapshot, METH_FASTCALL, NULL},
    {"discard", (PyCFunction)(void (*)(void))core_discard, METH_FASTCALL, NULL},
    {"stamp_version", (PyCFunction)(void (*)(void))core_stamp_version, METH_FASTCALL, NULL},
    {"set_flags", (PyCFunction)(void (*)(void))core_set_flags, METH_FASTCALL, NULL},
    {"set_version", (PyCFunction)(void (*)(void))core_set_version, METH_FASTCALL, NULL},
    {"import_host", (PyCFunction)core_import_host, METH_O, NULL},
    {"rebuild", (PyCFunction)(void (*)(void))core_rebuild, METH_FASTCALL, NULL},
    {"read", (PyCFunction)core_read, METH_O, NULL},
    {"wrap", (PyCFunction)(void (*)(void))core_wrap, METH_FASTCALL, NULL},
    {"set_runtime", (PyCFunction)core_set_runtime, METH_VARARGS, NULL},
    {"exchange", (PyCFunction)core_exchange, METH_O, NULL},
    {"handoff", (PyCFunction)(void (*)(void))core_handoff, METH_FASTCALL, NULL},
    {"set_copy_runtime", (PyCFunction)core_set_copy_runtime, METH_VARARGS, NULL},
    {"copy", (PyCFunction)(void (*)(void))core_copy, METH_FASTCALL, NULL},
    {NULL}
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "gpu_dlpack._core", "The compiled hot path of gpu_dlpack.", -1, core_methods,
};

PyMODINIT_FUNC
PyInit__core(void)
{
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    if (PyType_Ready(&ExportableType) < 0)
        goto fail;
    PyObject *api = PyCapsule_New(&exportable_api, EXCHANGE_API, NULL);
    if (api == NULL || PyDict_SetItemString(ExportableType.tp_dict, "__dlpack_c_exchange_api__", api) < 0) {
        Py_XDECREF(api);
        goto fail;
    }
    PyType_Modified(&ExportableType);
    if (PyModule_AddObjectRef(m, "EXCHANGE_API", api) < 0) {
        Py_DECREF(api);
        goto fail;
    }
    Py_DECREF(api);
    if (PyModule_AddObjectRef(m, "ExportableBase", (PyObject *)&ExportableType) < 0)
        goto fail;
    if (PyType_Ready(&ExporterType) < 0 || PyModule_AddObjectRef(m, "Exporter", (PyObject *)&ExporterType) < 0)
        goto fail;
    state.str_accepted = PyUnicode_InternFromString("_accepted");
    state.str_floor = PyUnicode_InternFromString("_floor");
    state.str_dlpack = PyUnicode_InternFromString("__dlpack__");
    state.str_dtype = PyUnicode_InternFromString("dtype");
    state.str_max_version = PyUnicode_InternFromString("max_version");
    state.kw_max_version = state.str_max_version ? PyTuple_Pack(1, state.str_max_version) : NULL;
    state.ask_versioned = Py_BuildValue("(ii)", 1, 0);
    if (!state.str_accepted || !state.str_floor || !state.str_dlpack || !state.str_dtype || !state.kw_max_version || !state.ask_versioned)
        goto fail;
    static const char *info_keys[10] = {"name", "versioned", "version", "flags", "device", "dtype", "shape",
                                        "strides", "byte_offset", "data"};
    for (int i = 0; i < 10; i++)
        if ((state.info_keys[i] = PyUnicode_InternFromString(info_keys[i])) == NULL)
            goto fail;
    if ((state.info_template = PyDict_New()) == NULL)
        goto fail;
    for (int i = 0; i < 10; i++)
        if (PyDict_SetItem(state.info_template, state.info_keys[i], Py_None) < 0)
            goto fail;
    state.str_legacy = PyUnicode_InternFromString(LEGACY);
    state.str_versioned = PyUnicode_InternFromString(VERSIONED);
    if (!state.str_legacy || !state.str_versioned)
        goto fail;
    if (PyModule_AddIntConstant(m, "PLAN_GENERAL", PLAN_GENERAL) < 0 ||
        PyModule_AddIntConstant(m, "PLAN_NUMPY", PLAN_NUMPY) < 0 ||
        PyModule_AddIntConstant(m, "PLAN_EXCHANGE", PLAN_EXCHANGE) < 0 ||
        PyModule_AddIntConstant(m, "PLAN_CAPSULE", PLAN_CAPSULE) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
