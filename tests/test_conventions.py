"""The conventions of the ecosystem: the standard's signatures (positional-only
``x``), a namespace that shows the public API only, signatures and help
visible through the compiled core's fronts, the device objects of the array API standard and of
the peers, and NumPy dtypes where NumPy has one."""

import inspect
import pydoc
import re

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack._compiled import core

from .capsules import make


# -- positional-only x --------------------------------------------------------------

@pytest.mark.parametrize("name", ["from_dlpack", "export", "wrap", "view", "shards"])
def test_x_is_positional_only_as_the_standard_says(name):
    fn = getattr(gpu_dlpack, name)
    with pytest.raises(TypeError):
        fn(x=np.arange(3))
    assert inspect.signature(fn).parameters["x"].kind is inspect.Parameter.POSITIONAL_ONLY
    fn(np.arange(3))


def test_exportable_dlpack_takes_keywords_only():
    w = gpu_dlpack.wrap(np.arange(3))
    with pytest.raises(TypeError):
        w.__dlpack__(None)
    with pytest.raises(TypeError):
        w.__dlpack__(self=w)


# -- the namespace -------------------------------------------------------------------

def test_dir_shows_the_public_api_only():
    names = dir(gpu_dlpack)
    # and inspect, inspect_capsule's short name, kept out of __all__ (a star
    # import would shadow the standard library's inspect)
    assert set(names) == set(gpu_dlpack.__all__) | {"__version__", "inspect"}
    for hidden in ("sys", "types", "annotations", "_Module", "_capsule", "_export", "_core", "TYPE_CHECKING"):
        assert hidden not in names
    for name in names:
        getattr(gpu_dlpack, name)  # every name shown is there


def test_help_shows_the_public_api_with_signatures():
    text = pydoc.render_doc(gpu_dlpack, renderer=pydoc.plaintext)
    functions = text[text.index("\nFUNCTIONS\n"):text.index("\nDATA\n")]
    # pydoc of CPython 3.13+ puts a long signature one parameter a line.
    functions = re.sub(r"\(\n\s+", "(", re.sub(r",\n\s+(?=[\w*/])", ", ", re.sub(r",?\n\s*\)", ")", functions)))
    data = text[text.index("\nDATA\n"):text.index("\nVERSION\n")]
    # export and wrap are functions, with their signatures.
    assert "    export(x: 'Any', /, *, stream:" in functions and "    wrap(x: 'Any', /, *, readonly:" in functions
    for name in ("from_dlpack", "from_pointer", "view", "inspect_capsule", "shards", "set_min_dlpack_version",
                 "args_viewable"):
        assert f"    {name}(" in functions
    assert "MIN_DLPACK_VERSION = (0, 5)" in data and "DLPACK_VERSION = (1, 2)" in data
    entries = set(re.findall(r"^    (\w+)", functions + data, re.M))
    assert entries <= set(gpu_dlpack.__all__), entries - set(gpu_dlpack.__all__)
    assert "Exporter object" not in data  # export and wrap are no data


# -- signatures through the compiled core ------------------------------------------

def test_signatures_are_visible_through_the_core():
    w = gpu_dlpack.wrap(np.arange(3))
    params = inspect.signature(w.__dlpack__).parameters
    assert list(params) == ["stream", "max_version", "dl_device", "copy"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is None for p in params.values())
    assert list(inspect.signature(w.__dlpack_device__).parameters) == []
    assert "min_version" in inspect.signature(gpu_dlpack.export).parameters
    assert inspect.isroutine(gpu_dlpack.export) and inspect.isroutine(gpu_dlpack.wrap)


def test_every_method_of_the_compiled_core_has_a_text_signature():
    methods = [getattr(core, n) for n in dir(core) if inspect.isbuiltin(getattr(core, n))]
    methods += [core.ExportableBase.__dlpack__, core.ExportableBase.__dlpack_device__, core.ExportableBase.__init__]
    assert len(methods) > 10
    for m in methods:
        assert m.__text_signature__, m
        inspect.signature(m)


def _docstrings_in_source():
    """The docstrings written in gpu_dlpack/_export.py, by function name
    (``Exportable.`` before a method's)."""
    import ast

    from gpu_dlpack import _export

    with open(_export.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            found[node.name] = ast.get_docstring(node)
        elif isinstance(node, ast.ClassDef) and node.name == "Exportable":
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    found[f"Exportable.{item.name}"] = ast.get_docstring(item)
    return found


def test_help_reads_the_python_docstrings_word_for_word():
    # export and wrap are C objects over the Python functions: each shows
    # the docstring written in the Python source, word for word, so that
    # help() and the API reference say what the source says. Exportable's
    # __dlpack__ and __dlpack_device__ are methods of its compiled base,
    # documented there as NumPy's docstrings are.
    written = _docstrings_in_source()
    for name, obj in {"export": gpu_dlpack.export, "wrap": gpu_dlpack.wrap}.items():
        assert inspect.getdoc(obj) == written[name], name
        assert "Returns\n-------\n" in inspect.getdoc(obj), name
    assert "Exportable.__dlpack__" not in written and "Exportable.__init__" in written
    for method in (gpu_dlpack.Exportable.__dlpack__, gpu_dlpack.Exportable.__dlpack_device__):
        doc = inspect.getdoc(method)
        assert "Returns\n-------\n" in doc and doc.startswith("A DLPack capsule" if "stream" in doc else "The ``(device_type"), doc
    params = inspect.getdoc(gpu_dlpack.Exportable.__dlpack__).split("Parameters\n----------\n")[1]
    assert re.findall(r"^(\w+) : ", params, re.M) == ["stream", "max_version", "dl_device", "copy"]


def _looks(f):
    """What a reader of ``f`` sees: its repr (without the address), class,
    names, docstring, signature, help() text, what inspect says of it, how
    it binds as a class attribute, and its defaults, code name and
    annotations."""

    class Holder:
        m = f

    bound = Holder().m
    return {
        "repr": re.sub(r" at 0x[0-9a-f]+", "", repr(f)),
        "class": f.__class__.__name__,
        "names": [f.__name__, f.__qualname__, f.__module__],
        "doc": f.__doc__,
        "signature": str(inspect.signature(f)),
        "help": pydoc.render_doc(f, renderer=pydoc.plaintext),
        "inspect": [inspect.isfunction(f), inspect.isroutine(f), inspect.isbuiltin(f), callable(f)],
        "binds": [type(bound).__name__, getattr(bound, "__func__", None) is f],
        "attributes": [repr(f.__defaults__), repr(f.__kwdefaults__), f.__code__.co_name, sorted(f.__annotations__)],
    }


def test_the_public_functions_are_functions_to_every_reader():
    # export, wrap, from_dlpack, inspect_capsule and convert are the core's
    # Cython functions (binding=True); every other public function is
    # Python's. To help(), inspect, pydoc, pickle and a class body each is a
    # function: its name, the docstring and signature its Python source
    # writes, bound as a method, pickled by reference (the core's have no
    # __wrapped__: they are no wrappers of another function).
    import pickle

    compiled = set()
    for name in gpu_dlpack.__all__:
        f = getattr(gpu_dlpack, name)
        if not callable(f) or isinstance(f, type):
            continue
        if type(f).__name__ == "cython_function_or_method":
            compiled.add(name)
            assert not hasattr(f, "__wrapped__"), name
        else:
            assert type(f).__name__ == "function", name
        assert f.__name__ == f.__qualname__ == name, name
        assert inspect.isroutine(f) and f.__doc__, name
        bound = type("Holder", (), {"m": f})().m
        assert type(bound).__name__ == "method" and bound.__func__ is f, name
        assert pickle.loads(pickle.dumps(f)) is f, name
        help_text = pydoc.render_doc(f, renderer=pydoc.plaintext)
        assert inspect.cleandoc(f.__doc__).splitlines()[0] in help_text, name
    assert compiled == {"export", "wrap", "from_dlpack", "inspect_capsule", "convert"}
    # The signature, on one line or (pydoc from CPython 3.13) one parameter a line.
    signature = "".join(_looks(gpu_dlpack.export)["help"].splitlines()[2:12]).replace(" ", "")
    assert signature.startswith("export(x:'Any',/,*,stream:"), signature


def test_a_public_function_of_the_core_takes_exactly_its_documented_parameters():
    # Cython parses the call: what the signature refuses is refused before
    # anything runs, in Python's words; each documented keyword is taken.
    a = np.arange(3.0)
    for f, args in ((gpu_dlpack.export, (a,)), (gpu_dlpack.wrap, (a,)), (gpu_dlpack.from_dlpack, (a,)),
                    (gpu_dlpack.convert, (a, "numpy")), (gpu_dlpack.inspect_capsule, (a.__dlpack__(),))):
        with pytest.raises(TypeError, match="unexpected keyword argument 'nothing'"):
            f(*args, nothing=1)
        for p in inspect.signature(f).parameters.values():
            if p.default is not p.empty:
                f(*args, **{p.name: p.default})  # the documented default, passed by name
    with pytest.raises(TypeError):
        gpu_dlpack.export(x=a)  # positional only
    cap = type("Holder", (), {"export": gpu_dlpack.export}).export(np.arange(3), max_version=(1, 0))
    assert gpu_dlpack.inspect(cap).versioned
    doc = gpu_dlpack.export.__doc__
    with pytest.raises(TypeError, match="parameters differ"):
        core.front("export", lambda x, *, stream=None: None)
    with pytest.raises(ValueError, match="no public function"):
        core.front("nothing", lambda x: None)
    assert gpu_dlpack.export.__doc__ is doc and core.general("export").__doc__ is doc  # refused: nothing changed


# -- device objects ------------------------------------------------------------------

def test_the_device_objects_of_the_peers_are_devices(torch, jax, xp_strict):
    t = torch.arange(3.0)
    for device in (
        xp_strict.Device(), xp_strict.Device("device1"), xp_strict.asarray([1.0]).device,
        torch.device("cpu"), t.device, jax.devices("cpu")[0], jax.numpy.arange(2).device,
    ):
        assert gpu_dlpack.Device(device) == gpu_dlpack.Device("cpu"), device
        out = gpu_dlpack.from_dlpack(t, device=device)
        assert type(out) is np.ndarray and out.ctypes.data == t.data_ptr()


def test_a_cupy_device_is_a_gpu():
    cupy = pytest.importorskip("cupy")
    assert gpu_dlpack.Device(cupy.cuda.Device(1)) == gpu_dlpack.Device("cuda:1")


def test_an_array_is_not_a_device(torch, xp_strict):
    for array in (np.arange(2), torch.arange(2), xp_strict.asarray([1.0])):
        with pytest.raises(TypeError, match="is an array, not a device"):
            gpu_dlpack.Device(array)
    with pytest.raises(TypeError, match="array-api-strict Device"):
        gpu_dlpack.Device(xp_strict.float64)


# -- CapsuleInfo's dtype ---------------------------------------------------------------

def test_capsule_info_has_the_numpy_dtype_and_the_dlpack_triple(torch, ml_dtypes):
    info = gpu_dlpack.inspect(np.zeros(2, np.float32).__dlpack__())
    assert info.dtype == np.dtype(np.float32) and isinstance(info.dtype, np.dtype)
    assert info.dl_dtype == (2, 32, 1)
    info = gpu_dlpack.inspect(torch.zeros(2, dtype=torch.bfloat16).__dlpack__())
    assert info.dtype == ml_dtypes.bfloat16 and info.dl_dtype == (4, 16, 1)


def test_capsule_info_has_no_numpy_dtype_where_numpy_has_none():
    cap, _ = make(dtype=(2, 32, 4))  # a vector type
    info = gpu_dlpack.inspect(cap)
    assert info.dtype is None and info.dl_dtype == (2, 32, 4)
