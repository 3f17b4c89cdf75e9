# The public functions export(), wrap(), from_dlpack(), inspect_capsule()
# and convert(): Cython functions (binding=True: the signature, docstring,
# binding and pickling of a function) whose plain cases run here and whose
# every other call is the Python function that policy names (front(): the
# function documented in the Python source, whose docstring, annotations and
# names they take).


# The Python function each public function hands its general case to, set
# once by front() (None until then: the call refuses, unconfigured).
cdef object general_export = None
cdef object general_wrap = None
cdef object general_from_dlpack = None
cdef object general_inspect = None
cdef object general_convert = None


# The keyword names of each general call: the call's arguments go in one
# array, by vectorcall (no dict of keywords made per call).
cdef tuple EXPORT_KEYWORDS = ("stream", "max_version", "dl_device", "copy", "readonly", "min_version")
cdef tuple WRAP_KEYWORDS = ("readonly", "min_version")
cdef tuple FROM_DLPACK_KEYWORDS = ("device", "copy", "stream", "require_alignment", "require_contiguous")
cdef tuple CONVERT_KEYWORDS = ("device", "copy", "stream", "on_readonly", "report", "require_alignment",
                               "require_contiguous")


cdef inline object unconfigured():
    configured()
    raise RuntimeError(NOT_CONFIGURED.decode())


# The Exportable of a plain case, or None (the Python wrap makes it): made
# as Exportable.__init__ makes one over data on the CPU, plan and all (the
# plan says whether it is a plain case).
cdef object wrap_plain(PyObject *x):
    cdef PyTypeObject *cls = <PyTypeObject *>policy.exportable_class
    # the type's tp_new (ExportableBase's: every field None, no plan), called
    # as Cython's own __new__ of a class calls it
    cdef ExportableBase self = <ExportableBase>(<TypeSlots *>cls).tp_new(cls, (), NULL)
    made(self, <object>x, False, None, policy.cpu_device, policy.cpu_dlpack, None)
    return None if self.plan == PLAN_GENERAL else self


# The capsule of a plain export, or NOT_PLAIN: the Python function runs.
cdef object export_plain(PyObject *x, PyObject *max_version, bint versioned):
    cdef PyObject *hold
    cdef DLManagedTensorVersioned *m
    if x.ob_type == <PyTypeObject *>cnp.ndarray:
        capsule = numpy_export(x, versioned)
        return NOT_PLAIN if capsule is None else capsule
    cdef ImportEntry *e = import_entry(x.ob_type, &hold)
    owner = take(hold)
    if is_entry(e) and e.api == NULL:  # a producer with a host test (JAX), on the host by it
        return capsule_export(<object>x, <object>max_version, versioned, e.read_only) if host_test(e, x) > 0 else NOT_PLAIN
    if versioned and is_entry(e) and exchange_on_cpu(e, x, False):
        m = exchange_export_of(<object>x, e)
        if m != NULL:
            return owning_capsule(m)
    return NOT_PLAIN


# from_dlpack(a) of an exact NumPy array: the Python function's first shortcut,
# a view, for a C-contiguous array of a plain dtype (the Python function gives
# the same view of the rest). NULL with no error set when it is not that case.
cdef PyObject *numpy_view(PyObject *x) noexcept:
    cdef PyObject *a[2]
    if not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>x) or not is_plain(descr_of(x)):
        return NULL
    a[0] = x
    a[1] = <PyObject *>cnp.ndarray
    return PyObject_VectorcallMethod(<PyObject *>"view", a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)


cdef int names_cpu(PyObject *device) except -1:
    """1 where a device= names the CPU as every caller writes it: a Device
    equal to the CPU's, "cpu", or (1, 0) of exact ints (any other form, 0:
    the Python path, which reads it as Device does). An error of the
    comparison (an interrupt in Device.__eq__) is raised, never dropped."""
    if device == <PyObject *>policy.cpu_device:
        return True
    if <PyObject *>device.ob_type == <PyObject *>policy.device_class:
        return PyObject_RichCompareBool(<object>device, policy.cpu_device, Py_EQ)
    if PyUnicode_CheckExact(<object>device):
        return PyUnicode_CompareWithASCIIString(<object>device, "cpu") == 0
    if not PyTuple_CheckExact(<object>device) or PyTuple_GET_SIZE(<object>device) != 2:
        return False
    cdef PyObject *kind = PyTuple_GET_ITEM(<object>device, 0)
    cdef PyObject *index = PyTuple_GET_ITEM(<object>device, 1)
    return (PyLong_CheckExact(<object>kind) and PyLong_CheckExact(<object>index) and
            <object>kind == 1 and <object>index == 0)


# export(x, /, *, ...): the plain cases (a NumPy array of a NumPy dtype, a
# host producer with a C exchange API or a host test, asked for nothing but
# max_version), every other case the Python function.
@cython.binding(True)
def export(x, /, *, stream=None, max_version=None, dl_device=None, copy=None, readonly=False, min_version=None):
    cdef bint versioned
    if (stream is None and dl_device is None and copy is None and readonly is False and min_version is None and
            policy.made and general_export is not None):
        versioned = max_version is not None
        if not versioned or accepted_versioned(verdict, <PyObject *>max_version):
            capsule = export_plain(<PyObject *>x, <PyObject *>max_version, versioned)
            if capsule is not NOT_PLAIN:
                return capsule
    if general_export is None:
        return unconfigured()
    cdef PyObject *a[7]
    a[:] = [<PyObject *>x, <PyObject *>stream, <PyObject *>max_version, <PyObject *>dl_device, <PyObject *>copy,
             <PyObject *>readonly, <PyObject *>min_version]
    return take(PyObject_Vectorcall(<PyObject *>general_export, a, 1, <PyObject *>EXPORT_KEYWORDS))


# wrap(x, /, *, readonly=False, min_version=None): the Exportable of the
# plain cases made here (wrap_plain), every other one by the Python function.
@cython.binding(True)
def wrap(x, /, *, readonly=False, min_version=None):
    if (readonly is False and min_version is None and policy.made and
            general_wrap is not None):
        made = wrap_plain(<PyObject *>x)
        if made is not None:
            return made
    if general_wrap is None:
        return unconfigured()
    cdef PyObject *a[3]
    a[:] = [<PyObject *>x, <PyObject *>readonly, <PyObject *>min_version]
    return take(PyObject_Vectorcall(<PyObject *>general_wrap, a, 1, <PyObject *>WRAP_KEYWORDS))


# from_dlpack(x, /, *, ...): asked for nothing but x (or device= the CPU, as
# names_cpu reads it, for data on the CPU: the same import), the view of a
# NumPy array, or the core's import of a producer it was told about
# (core_import_host); every other case the Python function.
@cython.binding(True)
def from_dlpack(x, /, *, device=None, copy=None, stream=None, require_alignment=0, require_contiguous=False):
    cdef PyObject *got
    cdef bint to_cpu = device is not None
    if (copy is None and stream is None and require_contiguous is False and type(require_alignment) is int and
            require_alignment == 0 and policy.made and
            general_from_dlpack is not None and
            (device is None or names_cpu(<PyObject *>device))):
        if type(x) is cnp.ndarray:
            got = numpy_view(<PyObject *>x)
            if got != NULL or PyErr_Occurred() != NULL:
                return take(got)
        else:
            imported = core_import_host(x, to_cpu)
            if imported is not None:
                return imported
    if general_from_dlpack is None:
        return unconfigured()
    cdef PyObject *a[6]
    a[:] = [<PyObject *>x, <PyObject *>device, <PyObject *>copy, <PyObject *>stream, <PyObject *>require_alignment,
             <PyObject *>require_contiguous]
    return take(PyObject_Vectorcall(<PyObject *>general_from_dlpack, a, 1, <PyObject *>FROM_DLPACK_KEYWORDS))


# inspect_capsule(capsule): the core's read (which hands to the Python read
# every case it does not read).
@cython.binding(True)
def inspect_capsule(capsule):
    if general_inspect is None:
        return unconfigured()
    if not policy.made:
        return general_inspect(capsule)
    return read_info(capsule)


# convert(x, to, /, *, ...): to a library gpu_dlpack lands on the host with
# nothing to correct (the policy's host_consumers: NumPy), asked for
# nothing else, what convert's Python function makes of it where the core
# makes it (from_dlpack(x)'s view of a NumPy array, from_dlpack(x,
# device=CPU)'s import of another); every other call, the Python function.
@cython.binding(True)
def convert(x, to, /, *, device=None, copy=None, stream=None, on_readonly="copy", report=False,
            require_alignment=0, require_contiguous=False):
    cdef PyObject *got
    cdef int host
    if (device is None and copy is None and stream is None and report is False and require_contiguous is False and
            type(require_alignment) is int and require_alignment == 0 and type(on_readonly) is str and
            on_readonly == "copy" and type(to) is str and policy.made and general_convert is not None):
        host = PySet_Contains(policy.host_consumers, to)
        if host:
            if type(x) is cnp.ndarray:
                got = numpy_view(<PyObject *>x)
                if got != NULL or PyErr_Occurred() != NULL:
                    return take(got)
            else:
                imported = core_import_host(x, True)
                if imported is not None:
                    return imported
    if general_convert is None:
        return unconfigured()
    cdef PyObject *a[9]
    a[:] = [<PyObject *>x, <PyObject *>to, <PyObject *>device, <PyObject *>copy, <PyObject *>stream,
             <PyObject *>on_readonly, <PyObject *>report, <PyObject *>require_alignment,
             <PyObject *>require_contiguous]
    return take(PyObject_Vectorcall(<PyObject *>general_convert, a, 2, <PyObject *>CONVERT_KEYWORDS))


# Each public function's own parameters, as Cython made them (front()).
cdef dict OWN_PARAMETERS = {}

cdef dict FRONTS = {"export": export, "wrap": wrap, "from_dlpack": from_dlpack, "inspect_capsule": inspect_capsule,
                    "convert": convert}


def front(str name, general, /):
    """front($module, name, general, /)
--

The public function `name` (export, wrap, from_dlpack, inspect_capsule,
convert), with `general` as the Python function it calls for every case it
does not run: the function its module documents, whose docstring,
annotations, module and names it takes. Set once per function; returns it."""
    global general_export, general_wrap, general_from_dlpack, general_inspect, general_convert
    f = FRONTS.get(name)
    if f is None:
        raise ValueError(f"front: no public function {name!r} (one of {', '.join(FRONTS)})")
    if not callable(general):
        raise TypeError("front: general must be the Python function")
    # The signature as the source writes it, checked against the function's
    # own parameters (Cython's, read before any signature was set on it);
    # the annotations resolved, as typing.get_type_hints reads them (their
    # names are not this module's). Nothing is set before the checks pass.
    import inspect, typing
    own = OWN_PARAMETERS.get(name)
    if own is None:
        own = OWN_PARAMETERS[name] = [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]
    written = inspect.signature(general)
    if own != [(p.name, p.kind, p.default) for p in written.parameters.values()]:
        raise TypeError(f"front: {name}'s parameters differ from those of {general.__qualname__}{written}")
    try:
        annotations = typing.get_type_hints(general)
    except Exception:  # a name only a type checker imports (NameError): as written
        annotations = dict(general.__annotations__)
    f.__doc__ = general.__doc__
    f.__module__ = general.__module__
    f.__qualname__ = f.__name__
    f.__annotations__ = annotations
    f.__signature__ = written
    if name == "export":
        general_export = general
    elif name == "wrap":
        general_wrap = general
    elif name == "from_dlpack":
        general_from_dlpack = general
    elif name == "inspect_capsule":
        general_inspect = general
    else:
        general_convert = general
    return f


def general(str name, /):
    """general($module, name, /)
--

The Python function the public function `name` calls for every case it
does not run (front()), or None before it is set."""
    if name not in FRONTS:
        raise ValueError(f"general: no public function {name!r} (one of {', '.join(FRONTS)})")
    return {"export": general_export, "wrap": general_wrap, "from_dlpack": general_from_dlpack,
            "inspect_capsule": general_inspect, "convert": general_convert}[name]
