"""The compiled core and the pure-Python path give the same results.

The suite as a whole runs on both paths (scripts/test.sh runs it twice, the
second time with GPU_DLPACK_PURE_PYTHON=1); the tests here check what is the
core's own: the DLPack C exchange API on both sides, the switch between the
paths, and a list of exchanges whose results and errors must be identical on
both, compared across two interpreters.
"""

import ctypes
import json
import os
import subprocess
import sys
import threading
import weakref

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _fastpath
from gpu_dlpack._backends import numpy as numpy_backend

from .figures import counter_fixture
from .test_leaks import _freed, soak

figures = counter_fixture("leaks through the C exchange API")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

compiled = pytest.mark.skipif(_fastpath.core is None, reason=f"the compiled core is off: {_fastpath.reason}")


def _run(code, pure):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("GPU_DLPACK_PURE_PYTHON", None)
    if pure:
        env["GPU_DLPACK_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_environment_variable_selects_the_pure_python_path():
    code = "from gpu_dlpack import _fastpath, _capsule; print(_fastpath.active(), _capsule.checked.__module__)"
    assert _run(code, pure=True).split() == ["pure", "Python", "gpu_dlpack._capsule"]


def test_the_core_is_active_where_the_test_run_expects_it():
    # scripts/test.sh sets GPU_DLPACK_EXPECT_CORE=1 for its compiled run, so
    # a core that silently failed to build or load fails the suite there.
    expected = os.environ.get("GPU_DLPACK_EXPECT_CORE")
    if expected is None:
        pytest.skip("GPU_DLPACK_EXPECT_CORE is not set")
    want = "compiled" if expected == "1" else "pure Python"
    assert _fastpath.active() == want, _fastpath.describe()


# One exchange per line, each printed as its result (dtype, shape, values,
# zero-copy, writeable, capsule fields) or its error (type and message).
_CASES = r'''
import copy, json, numpy as np, torch, gpu_dlpack
x = np.arange(6.0).reshape(2, 3)
def gone(w, name):
    delattr(w, name)
    return w
def swapped(w, other):
    w._x = other
    return w
t = torch.arange(6.0).reshape(2, 3)
ro = np.arange(4); ro.flags.writeable = False
def show(v):
    if isinstance(v, np.ndarray):
        return ["array", str(v.dtype), list(v.shape), v.ravel().tolist(), v.flags.writeable]
    if isinstance(v, torch.Tensor):
        return ["tensor", str(v.dtype), list(v.shape), v.ravel().tolist()]
    if type(v).__name__ == "PyCapsule":
        i = gpu_dlpack.inspect(v)
        return ["capsule", i.name, i.version, i.flags, list(i.shape), i.strides, i.dtype, list(i.device.dlpack),
                i.byte_offset, i.data == jptr]
    if isinstance(v, gpu_dlpack.CapsuleInfo):
        made = gpu_dlpack.CapsuleInfo(**vars(v))  # as its constructor makes it
        return ["info", v.name, v.versioned, v.version, v.flags, v.device.dlpack, v.dl_dtype, str(v.dtype), v.shape,
                v.strides,
                v.byte_offset, v.data in (x.ctypes.data, jptr), v == made and hash(v) == hash(made)]
    return repr(v)
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
j = jnp.arange(6.0).reshape(2, 3)
jptr = j.unsafe_buffer_pointer()
mesh = Mesh(np.array(jax.devices()[:2]), ("x",))
j_sharded = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, PartitionSpec("x")))
j_replicated = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, PartitionSpec()))
def deleted():
    d = jnp.ones(3)
    d.delete()
    return d
def tvm(w):
    import tvm_ffi
    return np.from_dlpack(tvm_ffi.from_dlpack(w))
from tests import capsules
def crafted(**kw):
    return capsules.make(np.arange(6.0), **kw)[0]
cases = {
    "from x": lambda: gpu_dlpack.from_dlpack(x),
    "from x view": lambda: (lambda v: (type(v).__name__, v.base is x, v is x, v.ctypes.data == x.ctypes.data))(gpu_dlpack.from_dlpack(x)),
    "from x none kw": lambda: gpu_dlpack.from_dlpack(x, device=None, copy=None, stream=None),
    "from x fortran": lambda: gpu_dlpack.from_dlpack(np.asfortranarray(x)),
    "from x strided": lambda: gpu_dlpack.from_dlpack(x[:, ::2]),
    "from x read-only": lambda: gpu_dlpack.from_dlpack(ro),
    "from x 0-d": lambda: gpu_dlpack.from_dlpack(np.float32(2.5) * np.ones(())),
    "from x q": lambda: gpu_dlpack.from_dlpack(np.arange(3, dtype="q")),
    "from x l": lambda: gpu_dlpack.from_dlpack(np.arange(3, dtype="l")),
    "from x longdouble": lambda: gpu_dlpack.from_dlpack(np.arange(3, dtype=np.longdouble)),
    "from x float16": lambda: gpu_dlpack.from_dlpack(np.arange(3, dtype=np.float16)),
    "from x big-endian": lambda: gpu_dlpack.from_dlpack(np.arange(3, dtype=">f8")),
    "from x structured": lambda: gpu_dlpack.from_dlpack(np.zeros(2, dtype=[("a", "f8")])),
    "from x object": lambda: gpu_dlpack.from_dlpack(np.array([1, None], dtype=object)),
    "from x matrix": lambda: gpu_dlpack.from_dlpack(np.asmatrix(x)),
    "from x empty": lambda: gpu_dlpack.from_dlpack(np.ones((0, 3))),
    "from j": lambda: gpu_dlpack.from_dlpack(j),
    "from j, zero-copy": lambda: gpu_dlpack.from_dlpack(j).ctypes.data == jptr,
    "from j 0-d": lambda: gpu_dlpack.from_dlpack(jnp.array(2.5)),
    "from j bool": lambda: gpu_dlpack.from_dlpack(jnp.array([True, False])),
    "from j int8": lambda: gpu_dlpack.from_dlpack(jnp.arange(3, dtype=jnp.int8)),
    "from j complex": lambda: gpu_dlpack.from_dlpack(jnp.ones(2, jnp.complex64)),
    "from j bfloat16": lambda: gpu_dlpack.from_dlpack(jnp.ones(2, jnp.bfloat16)),
    "from j empty": lambda: gpu_dlpack.from_dlpack(jnp.ones((0, 3))),
    "from j sliced": lambda: gpu_dlpack.from_dlpack(j[:, ::2]),
    "from j copy": lambda: gpu_dlpack.from_dlpack(j, copy=True),
    "from j deleted": lambda: gpu_dlpack.from_dlpack(deleted()),
    "from j sharded": lambda: gpu_dlpack.from_dlpack(j_sharded),
    "from j replicated": lambda: gpu_dlpack.from_dlpack(j_replicated),
    "export j v": lambda: gpu_dlpack.export(j, max_version=(1, 0)),
    "export j v3": lambda: gpu_dlpack.export(j, max_version=(1, 3)),
    "export j v9": lambda: gpu_dlpack.export(j, max_version=(9, 9)),
    "export j legacy": lambda: gpu_dlpack.export(j),
    "export j 0.8": lambda: gpu_dlpack.export(j, max_version=(0, 8)),
    "export j 0.1": lambda: gpu_dlpack.export(j, max_version=(0, 1)),
    "export j copy": lambda: gpu_dlpack.export(j, max_version=(1, 0), copy=True),
    "export j 0-d": lambda: gpu_dlpack.export(jnp.array(2.5), max_version=(1, 0)),
    "export j bfloat16": lambda: gpu_dlpack.export(jnp.ones(2, jnp.bfloat16), max_version=(1, 0)),
    "export j bool": lambda: gpu_dlpack.export(jnp.array([True]), max_version=(1, 0)),
    "export j deleted": lambda: gpu_dlpack.export(deleted(), max_version=(1, 0)),
    "export j sharded": lambda: gpu_dlpack.export(j_sharded, max_version=(1, 0)),
    "export j dl_device": lambda: gpu_dlpack.export(j, max_version=(1, 0), dl_device=(1, 0)),
    "wrap j torch": lambda: torch.from_dlpack(gpu_dlpack.wrap(j)),
    "wrap j numpy": lambda: np.from_dlpack(gpu_dlpack.wrap(j)),
    "wrap j numpy, zero-copy": lambda: np.from_dlpack(gpu_dlpack.wrap(j)).ctypes.data == jptr,
    "wrap j v": lambda: gpu_dlpack.wrap(j).__dlpack__(max_version=(1, 0)),
    "wrap j legacy": lambda: gpu_dlpack.wrap(j).__dlpack__(),
    "wrap j readonly": lambda: gpu_dlpack.wrap(j, readonly=True).__dlpack__(max_version=(1, 0)),
    "wrap j readonly legacy": lambda: gpu_dlpack.wrap(j, readonly=True).__dlpack__(),
    "wrap j min_version": lambda: gpu_dlpack.wrap(j, min_version=(0, 4)).__dlpack__(max_version=(0, 4)),
    "wrap j min_version torch": lambda: torch.from_dlpack(gpu_dlpack.wrap(j, min_version=(0, 4))),
    "export j min_version": lambda: gpu_dlpack.export(j, max_version=(0, 4), min_version=(0, 4)),
    "export j readonly": lambda: gpu_dlpack.export(j, max_version=(1, 0), readonly=True),
    "export j readonly legacy": lambda: gpu_dlpack.export(j, readonly=True),
    "export j readonly False": lambda: gpu_dlpack.export(j, max_version=(1, 0), readonly=False),
    "from export j": lambda: gpu_dlpack.from_dlpack(gpu_dlpack.export(j, max_version=(1, 0))),
    "from wrap j": lambda: gpu_dlpack.from_dlpack(gpu_dlpack.wrap(j)),
    "inspect j bfloat16": lambda: gpu_dlpack.inspect(jnp.ones(2, jnp.bfloat16).__dlpack__()),
    "inspect moved": lambda: gpu_dlpack.inspect(gpu_dlpack._capsule.move(x.__dlpack__(), False)),
    "inspect after move": lambda: (lambda c: (gpu_dlpack._capsule.move(c, False), gpu_dlpack.inspect(c)))(x.__dlpack__()),
    "wrap j device": lambda: gpu_dlpack.wrap(j).__dlpack_device__(),
    "wrap j last_request": lambda: (lambda w: (torch.from_dlpack(w), w.last_request)[1])(gpu_dlpack.wrap(j)),
    # (tvm-ffi reads wrap(j)'s C exchange API where the core offers one, and
    # asks a legacy capsule of JAX's immutable array, refused, where it does
    # not: convert gives it the same on both paths.)
    "convert j tvm": lambda: np.from_dlpack(gpu_dlpack.convert(j, "tvm_ffi")),
    "wrap j deleted": lambda: gpu_dlpack.wrap(deleted()).__dlpack__(max_version=(1, 0)),
    "wrap j sharded": lambda: torch.from_dlpack(gpu_dlpack.wrap(j_sharded)),
    "wrap j replicated": lambda: gpu_dlpack.wrap(j_replicated).__dlpack__(max_version=(1, 0)),
    "wrap j copied": lambda: copy.copy(gpu_dlpack.wrap(j)).__dlpack__(max_version=(1, 0)),
    "inspect x": lambda: gpu_dlpack.inspect(x.__dlpack__(max_version=(1, 0))),
    "inspect legacy": lambda: gpu_dlpack.inspect(x.__dlpack__()),
    "inspect j": lambda: gpu_dlpack.inspect(j.__dlpack__()),
    "inspect t 0-d": lambda: gpu_dlpack.inspect(torch.tensor(1.0).__dlpack__()),
    "inspect consumed": lambda: (lambda c: (np.from_dlpack(gpu_dlpack.wrap(c)), gpu_dlpack.inspect(c)))(x.__dlpack__()),
    "inspect major 2": lambda: gpu_dlpack.inspect(crafted(version=(2, 0))),
    "inspect ndim 65": lambda: gpu_dlpack.inspect(crafted(ndim=65, shape=(1,) * 65, strides=(1,) * 65)),
    "inspect bad device": lambda: gpu_dlpack.inspect(crafted(device=(99, 0))),
    "inspect device id": lambda: gpu_dlpack.inspect(crafted(device=(2, 40))),
    "inspect null shape": lambda: gpu_dlpack.inspect(crafted(null_shape=True)),
    "inspect null strides": lambda: gpu_dlpack.inspect(crafted(null_strides=True)),
    "inspect not a capsule": lambda: gpu_dlpack.inspect(x),
    "inspect wrong name": lambda: gpu_dlpack.inspect(crafted(name="other")),
    "rebuild legacy on cuda": lambda: gpu_dlpack.export(capsules.DeviceProducer(data=0x1000), max_version=(1, 0)),
    "rebuild versioned on cuda": lambda: gpu_dlpack.export(capsules.DeviceProducer(data=0x1000, versioned=True)),
    "rebuild null strides": lambda: gpu_dlpack.export(capsules.Producer(crafted(versioned=False, null_strides=True,
                                                                                 shape=(2, 0, 3), ndim=3,
                                                                                 strides=(1, 1, 1))),
                                                      max_version=(1, 0)),
    "rebuild host legacy": lambda: gpu_dlpack.export(capsules.Producer(crafted(versioned=False, device=(1, 3))),
                                                     max_version=(1, 0)),
    "rebuild host versioned": lambda: gpu_dlpack.export(capsules.Producer(crafted(flags=2))),
    "rebuild host read-only": lambda: gpu_dlpack.export(capsules.Producer(crafted(flags=1))),
    "from t": lambda: gpu_dlpack.from_dlpack(t),
    "from t, zero-copy": lambda: gpu_dlpack.from_dlpack(t).ctypes.data == t.data_ptr(),
    "from t transposed": lambda: gpu_dlpack.from_dlpack(t.T),
    "from t sliced": lambda: gpu_dlpack.from_dlpack(t[:, ::2]),
    "from t 0-d": lambda: gpu_dlpack.from_dlpack(torch.tensor(3.5)),
    "from t empty": lambda: gpu_dlpack.from_dlpack(torch.ones(0, 3)),
    "from t bool": lambda: gpu_dlpack.from_dlpack(torch.tensor([True, False])),
    "from t complex": lambda: gpu_dlpack.from_dlpack(torch.ones(2, dtype=torch.complex64)),
    "from t conj": lambda: gpu_dlpack.from_dlpack(torch.ones(2, dtype=torch.complex64).conj()),
    "from t requires_grad": lambda: gpu_dlpack.from_dlpack(torch.ones(2, requires_grad=True)),
    "from t bfloat16": lambda: gpu_dlpack.from_dlpack(torch.ones(2, dtype=torch.bfloat16)),
    "from t sparse": lambda: gpu_dlpack.from_dlpack(torch.ones(2).to_sparse()),
    "from t copy": lambda: gpu_dlpack.from_dlpack(t, copy=True),
    "export x": lambda: gpu_dlpack.export(x),
    "export x v": lambda: gpu_dlpack.export(x, max_version=(1, 0)),
    "export x v9": lambda: gpu_dlpack.export(x, max_version=(9, 9)),
    "export x 0.1": lambda: gpu_dlpack.export(x, max_version=(0, 1)),
    "export x bad": lambda: gpu_dlpack.export(x, max_version=1),
    "export x stream": lambda: gpu_dlpack.export(x, stream=1),
    "export x positional": lambda: gpu_dlpack.export(x, None),
    "export x unknown kw": lambda: gpu_dlpack.export(x, colour=None),
    "export ro legacy": lambda: gpu_dlpack.export(ro),
    "export ro v": lambda: gpu_dlpack.export(ro, max_version=(1, 0)),
    "export t v": lambda: gpu_dlpack.export(t, max_version=(1, 0)),
    "export t legacy": lambda: gpu_dlpack.export(t),
    "export t T": lambda: gpu_dlpack.export(t.T, max_version=(1, 0)),
    "export t grad": lambda: gpu_dlpack.export(torch.ones(2, requires_grad=True), max_version=(1, 0)),
    "export list": lambda: gpu_dlpack.export([1, 2]),
    "wrap x torch": lambda: torch.from_dlpack(gpu_dlpack.wrap(x)),
    "wrap x dlpack v": lambda: gpu_dlpack.wrap(x).__dlpack__(max_version=(1, 0)),
    "wrap x dlpack legacy": lambda: gpu_dlpack.wrap(x).__dlpack__(),
    "wrap x dlpack positional": lambda: gpu_dlpack.wrap(x).__dlpack__(None),
    "wrap x dlpack bad kw": lambda: gpu_dlpack.wrap(x).__dlpack__(colour=1),
    "wrap x device": lambda: gpu_dlpack.wrap(x).__dlpack_device__(),
    "wrap x readonly": lambda: gpu_dlpack.wrap(x, readonly=True).__dlpack__(max_version=(1, 0)),
    "wrap x readonly legacy": lambda: gpu_dlpack.wrap(x, readonly=True).__dlpack__(),
    "wrap x readonly bad": lambda: gpu_dlpack.wrap(x, readonly=1),
    "wrap ro legacy": lambda: gpu_dlpack.wrap(ro).__dlpack__(),
    "wrap t torch": lambda: torch.from_dlpack(gpu_dlpack.wrap(t)),
    "wrap t numpy": lambda: np.from_dlpack(gpu_dlpack.wrap(t)),
    "wrap t v": lambda: gpu_dlpack.wrap(t).__dlpack__(max_version=(1, 0)),
    "wrap t legacy": lambda: gpu_dlpack.wrap(t).__dlpack__(),
    "wrap t grad": lambda: gpu_dlpack.wrap(torch.ones(2, requires_grad=True)).__dlpack__(max_version=(1, 0)),
    "wrap t last_request": lambda: (lambda w: (torch.from_dlpack(w), w.last_request)[1])(gpu_dlpack.wrap(t)),
    "wrap t repr": lambda: repr(gpu_dlpack.wrap(t)),
    "wrap list": lambda: gpu_dlpack.wrap([1]),
    "capsule import": lambda: gpu_dlpack.from_dlpack(x.__dlpack__(max_version=(1, 0))),
    "wrap x copied": lambda: copy.copy(gpu_dlpack.wrap(x)).__dlpack__(max_version=(1, 0)),
    "wrap t copied": lambda: copy.copy(gpu_dlpack.wrap(t)).__dlpack__(max_version=(1, 0)),
    "wrap x deep-copied": lambda: np.from_dlpack(copy.deepcopy(gpu_dlpack.wrap(x))),
    "wrap new alone device": lambda: gpu_dlpack.Exportable.__new__(gpu_dlpack.Exportable).__dlpack_device__(),
    "wrap new alone dlpack": lambda: gpu_dlpack.Exportable.__new__(gpu_dlpack.Exportable).__dlpack__(),
    "wrap new alone repr": lambda: repr(gpu_dlpack.Exportable.__new__(gpu_dlpack.Exportable)),
    "wrap x no _device": lambda: gone(gpu_dlpack.wrap(x), "_device").__dlpack_device__(),
    "wrap x no _x": lambda: gone(gpu_dlpack.wrap(x), "_x").__dlpack__(max_version=(1, 0)),
    "wrap t no _x": lambda: torch.from_dlpack(gone(gpu_dlpack.wrap(t), "_x")),
    "wrap x no _request": lambda: np.from_dlpack(gone(gpu_dlpack.wrap(x), "_request")),
    "wrap t no _request": lambda: torch.from_dlpack(gone(gpu_dlpack.wrap(t), "_request")),
    "wrap x no _readonly": lambda: gone(gpu_dlpack.wrap(x), "_readonly").__dlpack__(),
    "wrap t no _reported": lambda: torch.from_dlpack(gone(gpu_dlpack.wrap(t), "_reported")),
    "wrap t, x replaced": lambda: torch.from_dlpack(swapped(gpu_dlpack.wrap(t), x)),
    "wrap x, t replaced": lambda: np.from_dlpack(swapped(gpu_dlpack.wrap(x), t)),
    "capsule import twice": lambda: (lambda c: (gpu_dlpack.from_dlpack(c), gpu_dlpack.from_dlpack(c)))(x.__dlpack__()),
    "export x=": lambda: gpu_dlpack.export(x=x),
    "wrap x=": lambda: gpu_dlpack.wrap(x=x),
    "from x=": lambda: gpu_dlpack.from_dlpack(x=x),
    "export x readonly": lambda: gpu_dlpack.export(x, max_version=(1, 0), readonly=True),
    "export x readonly legacy": lambda: gpu_dlpack.export(x, readonly=True),
    "export x readonly False": lambda: gpu_dlpack.export(x, max_version=(1, 0), readonly=False),
    "export x readonly bad": lambda: gpu_dlpack.export(x, readonly=1),
    "export t readonly": lambda: gpu_dlpack.export(t, max_version=(1, 0), readonly=True),
    "export x min_version": lambda: gpu_dlpack.export(x, max_version=(0, 4), min_version=(0, 4)),
    "export x min_version None": lambda: gpu_dlpack.export(x, max_version=(1, 0), min_version=None),
    "export x min_version above": lambda: gpu_dlpack.export(x, max_version=(1, 0), min_version=(1, 1)),
    "export t min_version above": lambda: gpu_dlpack.export(t, max_version=(1, 0), min_version=(1, 1)),
    "wrap x min_version": lambda: gpu_dlpack.wrap(x, min_version=(0, 4)).__dlpack__(max_version=(0, 4)),
    "wrap t min_version above": lambda: gpu_dlpack.wrap(t, min_version=(1, 1)).__dlpack__(max_version=(1, 0)),
    "wrap t min_version torch": lambda: torch.from_dlpack(gpu_dlpack.wrap(t, min_version=(1, 1))),
    "view x": lambda: (lambda v: (v.shape, v.strides, str(v.dtype), v.readonly, v.ptr == x.ctypes.data))(gpu_dlpack.view(x)),
    "view t": lambda: (lambda v: (v.shape, v.strides, str(v.dtype), v.ptr == t.data_ptr()))(gpu_dlpack.view(t.T)),
    "from_pointer": lambda: np.from_dlpack(gpu_dlpack.from_pointer(x.ctypes.data, (3, 2), np.float64, strides=(1, 3), owner=x)),
}
out = {}
for name, case in cases.items():
    try:
        out[name] = show(case())
    except Exception as exc:
        out[name] = ["error", type(exc).__name__, str(exc)]
print(json.dumps(out, sort_keys=True, default=repr))
'''


@compiled
def test_every_listed_exchange_gives_the_same_result_or_error_on_both_paths():
    pytest.importorskip("torch")  # the cases exchange torch tensors and JAX arrays
    pytest.importorskip("jax")
    fast = json.loads(_run(_CASES, pure=False))
    pure = json.loads(_run(_CASES, pure=True))
    different = {k: (fast[k], pure[k]) for k in pure if fast[k] != pure[k]}
    assert not different
    # The list reaches the refusals too, not only the exchanges.
    assert pure["from t requires_grad"][0] == "error" and pure["from t conj"][0] != "error"  # resolved
    assert pure["export t grad"][0] == "error" and pure["wrap x dlpack positional"][0] == "error"


# Every field of the record inspect gives, as each path builds it, with what
# reads it (attribute, vars, equality, hash, repr, replace): NumPy alone, so
# that it runs on every interpreter of the matrix (JAX's capsule where JAX is).
_INFO_CASES = r'''
import dataclasses, json, numpy as np, gpu_dlpack
from tests import capsules
x = np.arange(6.0).reshape(2, 3)
ro = np.arange(4, dtype=np.int16); ro.flags.writeable = False
made = {
    "legacy": lambda: x.__dlpack__(),
    "versioned": lambda: gpu_dlpack.export(x, max_version=(1, 0)),
    "read-only": lambda: gpu_dlpack.export(ro, max_version=(1, 0)),
    "fortran": lambda: gpu_dlpack.export(np.asfortranarray(x), max_version=(1, 0)),
    "strided": lambda: gpu_dlpack.export(x[:, ::2], max_version=(1, 0)),
    "0-d": lambda: gpu_dlpack.export(np.ones(()), max_version=(1, 0)),
    "empty": lambda: gpu_dlpack.export(np.ones((0, 3), np.uint8), max_version=(1, 0)),
    "bool": lambda: gpu_dlpack.export(np.array([True]), max_version=(1, 0)),
    "complex": lambda: gpu_dlpack.export(np.ones(2, np.complex64), max_version=(1, 0)),
    "null strides": lambda: capsules.make(x, null_strides=True)[0],
    "offset": lambda: capsules.make(x, byte_offset=8)[0],
    "cuda": lambda: capsules.make(x, device=(2, 1))[0],
    "flags": lambda: capsules.make(x, flags=6)[0],
    "bfloat16": lambda: capsules.make(x, dtype=(4, 16, 1))[0],
}
try:
    import jax.numpy as jnp
    made["jax"] = lambda: jnp.arange(3.0).__dlpack__()
except ImportError:
    pass
out = {}
for name, make in made.items():
    cap = make()
    info = gpu_dlpack.inspect(cap)
    fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
    rebuilt = gpu_dlpack.CapsuleInfo(**fields)
    out[name] = {
        "fields": {k: repr(v) for k, v in fields.items()},
        "vars": sorted(vars(info)),
        "dtype": repr(info.dtype),
        "repr": repr(info).replace(hex(fields["data"]), "DATA").replace(str(fields["data"]), "DATA"),
        "equal, same hash": [info == rebuilt, hash(info) == hash(rebuilt)],
        "replaced": repr(dataclasses.replace(info, flags=0).flags),
    }
    try:
        info.shape = ()
        out[name]["frozen"] = "writeable"
    except dataclasses.FrozenInstanceError:
        out[name]["frozen"] = "frozen"
    out[name]["fields"]["data"] = "DATA"  # a fresh capsule each run
print(json.dumps(out, sort_keys=True))
'''


@compiled
def test_the_cores_capsule_info_is_the_pure_paths_field_by_field():
    # The core fills the record's dict itself. On CPython 3.13, where a plain
    # class keeps attributes in inline values, a dict set the 3.12 way had
    # none of the fields: every attribute read failed on the core alone.
    fast = json.loads(_run(_INFO_CASES, pure=False))
    pure = json.loads(_run(_INFO_CASES, pure=True))
    assert fast == pure
    assert pure["versioned"]["vars"] == sorted(f.name for f in gpu_dlpack.CapsuleInfo.__dataclass_fields__.values())
    assert pure["versioned"]["equal, same hash"] == [True, True] and pure["versioned"]["frozen"] == "frozen"


# -- the consumer side: a producer's C exchange API -----------------------------

@compiled
def test_from_dlpack_of_a_torch_tensor_reads_its_c_exchange_api(torch):
    t = torch.arange(6.0).reshape(2, 3)
    a = gpu_dlpack.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr() and a.flags.writeable
    assert a.tolist() == t.tolist() and a.strides == (12, 4) and a.dtype == np.float32
    # The array's base frees torch's tensor: the exchange, not __dlpack__.
    assert type(a.base).__name__ == "PyCapsule" and "gpu_dlpack.exchanged" in repr(a.base)


@compiled
def test_the_import_through_the_exchange_api_frees_the_tensor_once(torch):
    t = torch.arange(4.0)
    before = sys.getrefcount(t)
    a = gpu_dlpack.from_dlpack(t)
    b = a[1:]  # a view keeps the tensor too
    del a
    assert sys.getrefcount(t) > before  # torch's tensor lives while the array does
    del b
    assert sys.getrefcount(t) == before  # its deleter ran, once
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]


# -- the producer side: wrap(x) offers the C exchange API ------------------------

def _api(obj):
    cap = type(obj).__dlpack_c_exchange_api__
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(cap, b"dlpack_exchange_api")


@compiled
def test_wrap_offers_the_dlpack_c_exchange_api_on_its_type():
    w = gpu_dlpack.wrap(np.arange(3.0))
    cap = type(w).__dlpack_c_exchange_api__
    assert type(cap).__name__ == "PyCapsule" and "dlpack_exchange_api" in repr(cap)
    words = (ctypes.c_uint32 * 2).from_address(_api(w))
    assert tuple(words) == (1, 3)
    table = (ctypes.c_void_p * 7).from_address(_api(w))
    assert table[1] is None  # no older table chained
    assert all(table[i] for i in (2, 3, 4, 6)) and table[5] is None  # dltensor_from_py_object: optional


@compiled
def test_the_exchange_api_of_wrap_gives_an_owned_versioned_tensor():
    x = np.arange(5.0)
    w = gpu_dlpack.wrap(x)
    from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(ctypes.c_void_p))(
        (ctypes.c_void_p * 7).from_address(_api(w))[3]
    )
    out = ctypes.c_void_p()
    assert from_py(w, ctypes.byref(out)) == 0
    major, minor = (ctypes.c_uint32 * 2).from_address(out.value)
    assert (major, minor) == gpu_dlpack.DLPACK_VERSION
    data = ctypes.c_void_p.from_address(out.value + 32).value
    assert data == x.ctypes.data
    assert w.last_request == {"stream": None, "max_version": gpu_dlpack.DLPACK_VERSION, "dl_device": None, "copy": None}
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_address(out.value + 16).value)
    deleter(out.value)


@compiled
def test_the_exchange_api_of_wrap_names_no_stream_for_the_cpu_and_allocates_nothing():
    w = gpu_dlpack.wrap(np.arange(2.0))
    table = (ctypes.c_void_p * 7).from_address(_api(w))
    stream = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))(table[6])
    out = ctypes.c_void_p(123)
    assert stream(1, 0, ctypes.byref(out)) == 0 and out.value is None
    errors = []
    set_error = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)(
        lambda ctx, kind, msg: errors.append((kind, msg))
    )
    alloc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                             type(set_error))(table[2])
    made = ctypes.c_void_p(1)
    assert alloc(None, ctypes.byref(made), None, set_error) == -1 and made.value is None
    assert errors and errors[0][0] == b"NotImplementedError"


@compiled
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_tvm_ffi_imports_a_wrapped_array_through_the_exchange_api(kind, torch):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    src = np.arange(6.0) if kind == "numpy" else torch.arange(6.0)
    w = gpu_dlpack.wrap(src)
    out = tvm_ffi.from_dlpack(w)
    back = np.from_dlpack(out)
    ptr = src.ctypes.data if kind == "numpy" else src.data_ptr()
    assert back.ctypes.data == ptr and back.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert w.last_request["max_version"] == gpu_dlpack.DLPACK_VERSION


@compiled
def test_torch_consumes_a_wrapped_tensor_zero_copy_with_the_version_stamped(torch):
    t = torch.arange(6.0)
    w = gpu_dlpack.wrap(t)
    info = gpu_dlpack.inspect(w.__dlpack__(max_version=(1, 0)))
    assert info.version == gpu_dlpack.DLPACK_VERSION and info.data == t.data_ptr() and info.flags == 0
    assert torch.from_dlpack(w).data_ptr() == t.data_ptr()


# -- claims ------------------------------------------------------------------------

@pytest.mark.parametrize("versioned", [False, True])
def test_a_capsule_raced_for_by_threads_is_taken_exactly_once(versioned):
    from gpu_dlpack import _capsule

    x = np.arange(3.0)
    for _ in range(50):
        cap = x.__dlpack__(max_version=(1, 0) if versioned else None)
        won, lost = [], []
        barrier = threading.Barrier(4)

        def race():
            barrier.wait()
            try:
                won.append(_capsule.take(cap, versioned))
            except Exception as exc:  # the loser's error
                lost.append(exc)

        threads = [threading.Thread(target=race) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(won) == 1 and len(lost) == 3
        won[0].release()


# -- the stream hand-off in C, against a recording stand-in for the runtime --------

class _RecordingRuntime:
    """The functions of CuPy's runtime module the core's hand-off calls
    (getDevice, setDevice, eventRecord, streamWaitEvent), each call recorded
    with the device current at the time. The core reaches them through C
    entries of their Cython signatures (tests/simcuda's forwarding capsules),
    as it reaches CuPy's; a failure raises, as CuPy's functions do."""

    def __init__(self, device=0, fail=None):
        self.device, self.fail, self.calls = device, fail, []

    def getDevice(self):
        return self.device

    def setDevice(self, device):
        self.calls.append(("set", device))
        self.device = device

    def eventRecord(self, event, stream):
        self.calls.append(("record", event, stream, self.device))
        if self.fail:
            raise RuntimeError(f"CUDA error {self.fail} (stand-in)")

    def streamWaitEvent(self, stream, event, flags=0):
        self.calls.append(("wait", stream, event, flags, self.device))


def _bind_stand_in(target):
    """The core bound to ``target``'s methods through C entries; undone by
    ``_unbind``, after which the layer binds to CuPy's runtime again."""
    from . import simcuda

    assert _fastpath.core.bind_runtime(simcuda.load().forwarding_capi(target)) is None


def _unbind():
    from gpu_dlpack import _handoff

    from . import simcuda

    _fastpath.core.bind_runtime(None)
    simcuda.load().forwarding_capi(None)
    _handoff._bindings.clear()


@pytest.fixture
def recording_runtime():
    rt = _RecordingRuntime()
    _bind_stand_in(rt)
    yield rt
    _unbind()


@compiled
def test_the_core_hand_off_records_on_the_producer_device_and_waits_on_the_consumer_device(recording_runtime):
    rt = recording_runtime
    assert _fastpath.core.handoff(0x10, 0x20, 0x30, 1, 2) is None
    assert [c for c in rt.calls if c[0] != "set"] == [("record", 0x10, 0x20, 1), ("wait", 0x30, 0x10, 0, 2)]
    assert rt.device == 0  # the current device restored
    rt.calls.clear()
    assert _fastpath.core.handoff(0x10, 0x20, 0x30, 0, 0) is None
    assert rt.calls == [("record", 0x10, 0x20, 0), ("wait", 0x30, 0x10, 0, 0)]  # no device switch


@compiled
def test_a_failed_record_queues_no_wait_and_restores_the_device(recording_runtime):
    rt = recording_runtime
    rt.fail = 400  # cudaErrorInvalidResourceHandle
    with pytest.raises(RuntimeError, match="400"):
        _fastpath.core.handoff(0x10, 0x20, 0x30, 1, 1)
    assert [c[0] for c in rt.calls] == ["set", "record", "set"] and rt.device == 0


@compiled
def test_handoff_goes_through_the_core_with_the_pooled_event(recording_runtime, monkeypatch):
    from gpu_dlpack import _handoff

    class Runtime:  # CuPy's runtime module, for what handoff still asks of it
        is_hip = False

    runtime = Runtime()
    monkeypatch.setattr(_handoff, "_runtime", lambda: runtime)
    monkeypatch.setattr(_handoff, "_bindings", [(runtime, True, None)])
    monkeypatch.setitem(_handoff._pools, 3, [0x77])
    assert _handoff.handoff(0x20, 0x30, 3) is True
    assert [c for c in recording_runtime.calls if c[0] != "set"] == [("record", 0x77, 0x20, 3), ("wait", 0x30, 0x77, 0, 3)]
    assert _handoff._pools[3] == [0x77]  # back in the pool
    recording_runtime.calls.clear()
    assert _handoff.handoff(0x20, -1, 3) is False and not recording_runtime.calls  # -1: no synchronization
    recording_runtime.fail = 700
    with pytest.raises(RuntimeError, match="700"):
        _handoff.handoff(0x20, 0x30, 3)
    assert _handoff._pools[3] == [0x77]


# -- the runtime the core binds to: CuPy's own, through its C entries --------------

def _capsule_name(capsule):
    get = ctypes.pythonapi.PyCapsule_GetName
    get.restype, get.argtypes = ctypes.c_char_p, [ctypes.py_object]
    return get(capsule).decode()


@compiled
def test_the_core_binds_to_the_c_entries_of_cupys_runtime_module():
    # CuPy links the CUDA runtime statically: its runtime module's C entries
    # (__pyx_capi__, what CuPy's own modules call) are the only way to the
    # runtime instance that made CuPy's streams and events. They need no GPU.
    pytest.importorskip("cupy")
    from cupy_backends.cuda.api import runtime

    from gpu_dlpack import _handoff

    for name, signature in _fastpath.core.RUNTIME_ENTRIES:
        assert _capsule_name(runtime.__pyx_capi__[name]) == signature, name
    _handoff._bindings.clear()
    try:
        assert _handoff.binding().startswith(
            "CuPy's own runtime, through cupy_backends.cuda.api.runtime.__pyx_capi__ (getDevice, setDevice, "
            "eventRecord, streamWaitEvent, memcpyAsync, streamSynchronize)")
        assert _handoff.core_copy(_handoff._runtime()) is _fastpath.core.copy
    finally:
        _handoff._bindings.clear()


@compiled
def test_the_core_refuses_an_entry_whose_c_signature_differs_and_names_it(monkeypatch):
    pytest.importorskip("cupy")
    import types

    from cupy_backends.cuda.api import runtime

    from gpu_dlpack import _handoff

    capi = dict(runtime.__pyx_capi__)
    good = capi["eventRecord"]
    capi["eventRecord"] = capi["eventQuery"]  # PyObject *(intptr_t, int __pyx_skip_dispatch)
    assert _fastpath.core.bind_runtime(capi) == (
        "eventRecord", "PyObject *(intptr_t, int __pyx_skip_dispatch)",
        "PyObject *(intptr_t, intptr_t, int __pyx_skip_dispatch)")
    del capi["eventRecord"]
    assert _fastpath.core.bind_runtime(capi)[:2] == ("eventRecord", None)
    assert good is runtime.__pyx_capi__["eventRecord"]
    # The layer keeps CuPy's Python calls then, and says why.
    fake = types.ModuleType(_handoff.CUPY_RUNTIME)
    fake.__pyx_capi__, fake.getDevice = capi, runtime.getDevice
    monkeypatch.setitem(sys.modules, _handoff.CUPY_RUNTIME, fake)
    monkeypatch.setattr(_handoff, "_bindings", [])
    face = types.ModuleType("cupy.cuda.runtime")
    face.getDevice = runtime.getDevice
    assert _handoff.core_copy(face) is None and _handoff._core_handoff(face) is None
    assert _handoff.binding() == (
        "none: the compiled core does not bind to CuPy's runtime: the entry 'eventRecord' of "
        "cupy_backends.cuda.api.runtime.__pyx_capi__ is missing, not the 'PyObject *(intptr_t, intptr_t, "
        "int __pyx_skip_dispatch)' the core calls. The stream hand-off and copies run through CuPy's Python "
        "calls instead (the same functions, with the same results); a gpu_dlpack release made for this CuPy "
        "binds again.")


# -- leaks of the C exchange API, on both sides ----------------------------------

def test_exchanges_through_the_c_api_leak_nothing(figures, torch):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    a = np.arange(64.0)
    ref = weakref.ref(a)
    t = torch.from_numpy(a)  # torch's tensors hold t's storage, which holds a
    del a
    x = np.arange(64.0)
    refs = sys.getrefcount(x)

    def step(i):
        kind = i % 4
        if kind == 0:
            b = torch.from_dlpack(gpu_dlpack.wrap(t))
        elif kind == 1:
            b = np.from_dlpack(tvm_ffi.from_dlpack(gpu_dlpack.wrap(t)))
        elif kind == 2:
            b = np.from_dlpack(tvm_ffi.from_dlpack(gpu_dlpack.wrap(x)))
        else:
            b = gpu_dlpack.from_dlpack(t)
        if b[i % 64] != i % 64:
            raise AssertionError("values changed")

    soak(figures, "wrap -> torch, wrap -> tvm-ffi, torch -> gpu_dlpack", step)
    assert sys.getrefcount(x) == refs
    del t
    assert _freed(ref), "a tensor of the exchange outlived its cycle"


# -- torch -> CuPy: torch's C exchange API and its current work stream -------------

@compiled
def test_the_exchange_of_a_torch_tensor_gives_its_capsule_unsynchronized(torch):
    t = torch.arange(6.0)
    capsule, stream = _fastpath.core.exchange(t)
    info = gpu_dlpack.inspect(capsule)
    assert info.versioned and info.data == t.data_ptr() and info.shape == (6,)
    assert stream == 0  # no stream on the CPU
    assert gpu_dlpack.from_dlpack(capsule).tolist() == t.tolist()
    # What torch's __dlpack__ refuses, the exchange leaves to it.
    assert _fastpath.core.exchange(torch.ones(2, requires_grad=True)) is None
    assert _fastpath.core.exchange(np.arange(3)) is None


@pytest.mark.gpu
def test_torch_to_cupy_through_the_exchange_waits_for_torch_current_stream(tc, cp):
    import torch as torch_module

    s = torch_module.cuda.Stream()
    with torch_module.cuda.stream(s):
        t = torch_module.arange(1 << 20, device="cuda", dtype=torch_module.float32) * 2
    consumer = cp.cuda.Stream(non_blocking=True)
    with torch_module.cuda.stream(s):
        g = gpu_dlpack.from_dlpack(t, stream=consumer)
    assert g.data.ptr == t.data_ptr()
    consumer.synchronize()
    assert float(g[-1]) == float((1 << 20) - 1) * 2


# -- what the core reads, it reads before Python code runs ----------------------

def test_checked_reads_the_header_before_its_dtype_check_runs():
    # The dtype check is Python: another consumer of the capsule (here the
    # check itself) may free the tensor while it runs. The header returned
    # is the one read before, on both paths (the pure one reads it first).
    from gpu_dlpack import _capsule

    from . import capsules

    a = np.arange(6.0)
    cap, rec = capsules.make(a)

    def check(code, bits, lanes):
        gpu_dlpack.from_dlpack(cap)  # consumed and freed: the struct is poisoned
        assert rec.calls == 1

    versioned, head = _capsule.checked(cap, True, check)
    assert (head.ndim, head.device_type, head.code, head.bits) == (1, 1, 2, 64)


@compiled
def test_a_producer_table_forgotten_while_its_guards_run_stays_alive_for_that_import(torch):
    # The guards (torch's requires_grad, is_conj) are Python where a torch
    # function mode is active: one may make the core forget what it learnt
    # of torch.Tensor meanwhile. The import that is reading the entry keeps
    # it alive (the sanitizer run sees a read of a freed entry otherwise).
    import gc

    from torch.overrides import TorchFunctionMode

    forgot = []

    class Forget(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            _fastpath.core.forget()
            gc.collect()
            forgot.append(func)
            return func(*args, **(kwargs or {}))

    t = torch.ones(4, dtype=torch.complex64)
    for call in (lambda: gpu_dlpack.from_dlpack(t), lambda: _fastpath.core.exchange(t),
                 lambda: torch.from_dlpack(gpu_dlpack.wrap(t)), lambda: gpu_dlpack.export(t, max_version=(1, 0))):
        with Forget():
            out = call()
        assert out is not None
    assert forgot  # the guards did run Python


@compiled
def test_handoff_converts_no_argument_after_one_that_failed(recording_runtime):
    # A conversion may run Python (__index__): never with an error pending.
    called = []

    class Index:
        def __index__(self):
            called.append(True)
            return 0

    with pytest.raises(TypeError):
        _fastpath.core.handoff("not a pointer", 0, 0, Index(), 0)
    assert not called and not recording_runtime.calls


class _FailingRuntime:
    """CuPy's runtime functions the core calls, on GPU 0 at first; the call
    named ``fail`` raises (``setDevice`` the ``nth`` time), as CuPy's do."""

    def __init__(self, fail=None, nth=1):
        self.device, self.fail, self.nth, self.calls = 0, fail, nth, []

    def _call(self, name, *args):
        self.calls.append((name, *args))
        if name == self.fail:
            self.nth -= 1
            if self.nth == 0:
                raise RuntimeError(f"{name} failed (stand-in)")

    def getDevice(self):
        self._call("getDevice")
        return self.device

    def setDevice(self, device):
        self._call("setDevice", device)
        self.device = device

    def eventRecord(self, event, stream):
        self._call("eventRecord", event, stream)

    def streamWaitEvent(self, stream, event, flags=0):
        self._call("streamWaitEvent", stream, event)

    def memcpyAsync(self, dst, src, n, kind, stream):
        self._call("memcpyAsync", stream)

    def streamSynchronize(self, stream):
        self._call("streamSynchronize", stream)


HANDOFF = (0x10, 0x20, 0x30, 1, 2)  # event, producer, consumer, device, consumer_device
COPY = (0x1000, 0x2000, 8, 0x30, 1, 0x40, True)  # dst, src, nbytes, stream, device, event, synchronize


@compiled
@pytest.mark.parametrize("call, args, fail, nth, made, device", [
    ("handoff", HANDOFF, "getDevice", 1, ["getDevice"], 0),
    ("handoff", HANDOFF, "setDevice", 1, ["getDevice", "setDevice"], 0),
    ("handoff", HANDOFF, "eventRecord", 1, ["getDevice", "setDevice", "eventRecord", "setDevice"], 0),
    ("handoff", HANDOFF, "setDevice", 2, ["getDevice", "setDevice", "eventRecord", "setDevice", "setDevice"], 0),
    ("handoff", HANDOFF, "streamWaitEvent", 1,
     ["getDevice", "setDevice", "eventRecord", "setDevice", "streamWaitEvent", "setDevice"], 0),
    ("handoff", HANDOFF, "setDevice", 3,  # the restore itself: raised, the device left as it is
     ["getDevice", "setDevice", "eventRecord", "setDevice", "streamWaitEvent", "setDevice"], 2),
    ("copy", COPY, "getDevice", 1, ["getDevice"], 0),
    ("copy", COPY, "memcpyAsync", 1, ["getDevice", "setDevice", "memcpyAsync", "setDevice"], 0),
    ("copy", COPY, "eventRecord", 1, ["getDevice", "setDevice", "memcpyAsync", "eventRecord", "setDevice"], 0),
    ("copy", COPY, "streamSynchronize", 1,
     ["getDevice", "setDevice", "memcpyAsync", "eventRecord", "streamSynchronize", "setDevice"], 0),
    ("copy", COPY, "setDevice", 2,  # the restore itself
     ["getDevice", "setDevice", "memcpyAsync", "eventRecord", "streamSynchronize", "setDevice"], 1),
])
def test_a_failed_runtime_call_raises_its_error_makes_no_later_call_and_restores_the_device(
        call, args, fail, nth, made, device):
    rt = _FailingRuntime(fail, nth)
    _bind_stand_in(rt)
    try:
        with pytest.raises(RuntimeError, match=f"{fail} failed"):
            getattr(_fastpath.core, call)(*args)
    finally:
        _unbind()
    assert [c[0] for c in rt.calls] == made
    assert rt.device == device


@compiled
@pytest.mark.parametrize("call, good", [("handoff", HANDOFF), ("copy", COPY)])
def test_each_argument_is_converted_before_the_next_and_none_after_one_that_failed(call, good):
    rt = _FailingRuntime()
    _bind_stand_in(rt)
    try:
        for i in range(len(good)):
            args = list(good)
            args[i] = "not a number"
            if call == "copy" and i == 6:
                class Falsy:  # synchronize=: its truth fails
                    def __bool__(self):
                        raise ValueError("no truth")

                args[i] = Falsy()
            with pytest.raises((TypeError, ValueError)):
                getattr(_fastpath.core, call)(*args)
        with pytest.raises(TypeError):
            getattr(_fastpath.core, call)(*good[:-1])
        assert rt.calls == []  # nothing called the runtime
        if call == "copy":  # no event and no wait asked: the copy alone
            _fastpath.core.copy(*good[:5], 0, False)
            assert [c[0] for c in rt.calls] == ["getDevice", "setDevice", "memcpyAsync", "setDevice"]
    finally:
        _unbind()


@compiled
def test_the_core_binds_only_a_dict_of_capsules_and_unbinds_with_none():
    with pytest.raises(TypeError, match="__pyx_capi__ dict"):
        _fastpath.core.bind_runtime([])
    assert _fastpath.core.bind_runtime({"getDevice": 1})[:2] == ("getDevice", None)  # no capsule
    _unbind()
    with pytest.raises(RuntimeError, match="no CUDA runtime for the stream hand-off"):
        _fastpath.core.handoff(*HANDOFF)


_RUNTIME_SWAPPED = r'''
import ctypes
from gpu_dlpack import _fastpath
from tests import simcuda
core = _fastpath.core
calls = []
class Runtime:
    def getDevice(self):
        return 0
    def setDevice(self, device):
        pass
    def eventRecord(self, event, stream):
        calls.append("record")
    def streamWaitEvent(self, stream, event, flags):
        pass
    def memcpyAsync(self, dst, src, n, kind, stream):
        calls.append("memcpy")
        core.bind_runtime(None)  # another thread (here: the call itself) takes the runtime away
    def streamSynchronize(self, stream):
        calls.append("sync")
assert core.bind_runtime(simcuda.load().forwarding_capi(Runtime())) is None
print(core.copy(0x1000, 0x2000, 8, 0x30, 0, 0x40, True), calls)
# A consumer may pass no set_error to the allocator of wrap()'s C exchange API.
import numpy as np, gpu_dlpack
w = gpu_dlpack.wrap(np.arange(2.0))
get_ptr = ctypes.pythonapi.PyCapsule_GetPointer
get_ptr.restype, get_ptr.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
table = (ctypes.c_void_p * 7).from_address(get_ptr(type(w).__dlpack_c_exchange_api__, b"dlpack_exchange_api"))
alloc = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                          ctypes.c_void_p)(table[2])
made = ctypes.c_void_p(1)
print(alloc(None, ctypes.byref(made), None, None), made.value)
'''


@compiled
def test_a_copy_keeps_the_runtime_it_started_with_and_the_allocator_takes_no_set_error():
    from .interpreter import run_python

    done = run_python(_RUNTIME_SWAPPED)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["None ['memcpy', 'record', 'sync']", "-1 None"]


# -- JAX in C: its capsules asked for, imported, passed on and adapted by the core ----

def _layer_calls(fn):
    """``(fn(), names)``: the Python functions of gpu_dlpack that ``fn()``
    runs, in order (the compiled core's calls are not Python calls)."""
    root = os.path.join(ROOT, "gpu_dlpack") + os.sep
    names = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, names


def _void(address):
    return ctypes.c_void_p.from_address(address).value or 0


@compiled
def test_the_plain_jax_exchanges_run_in_the_core(jax, torch):
    from .helpers import pointer

    j = jax.numpy.arange(6.0)
    exchanges = {
        "from_dlpack": lambda: gpu_dlpack.from_dlpack(j),
        "export": lambda: gpu_dlpack.export(j, max_version=(1, 0)),
        "torch consumes wrap": lambda: torch.from_dlpack(gpu_dlpack.wrap(j)),
        "inspect": lambda: gpu_dlpack.inspect(j.__dlpack__()),
    }
    for fn in exchanges.values():
        fn()  # the first call tells the core what JAX's type is (Python)
    ran = {name: _layer_calls(fn) for name, fn in exchanges.items()}
    # No Python function of the layer runs: all of it is C.
    assert {name: calls for name, (_, calls) in ran.items()} == {
        "from_dlpack": [], "export": [], "torch consumes wrap": [], "inspect": [],
    }
    # A legacy capsule of JAX's immutable array is refused (rule 5): Python
    # words the refusal.
    for legacy in (lambda: gpu_dlpack.export(j), lambda: gpu_dlpack.wrap(j).__dlpack__()):
        with pytest.raises(gpu_dlpack.ReadOnlyError):
            legacy()
    arr = ran["from_dlpack"][0]
    assert arr.ctypes.data == pointer(j) and not arr.flags.writeable
    from gpu_dlpack import _peers

    # It frees JAX's tensor: a legacy one before 0.12, a versioned one from 0.12.
    legacy = _peers.release(jax.__version__) < (0, 12)
    assert ('"gpu_dlpack.exchanged_legacy"' if legacy else '"gpu_dlpack.exchanged"') in repr(arr.base)
    assert ran["torch consumes wrap"][0].data_ptr() == pointer(j)


@compiled
def test_an_adapted_jax_capsule_holds_the_legacy_struct_in_its_manager_ctx(jax):
    from gpu_dlpack import _capsule, _peers

    if _peers.release(jax.__version__) >= (0, 12):
        pytest.skip(f"JAX {jax.__version__} gives a versioned capsule itself: nothing is adapted")
    if numpy_backend.STRIDES_AFTER_SHAPE or not numpy_backend.VERSIONED_NUMPY:
        pytest.skip(f"NumPy {np.__version__}: the adaptation rebuilds through NumPy (docs/internals/core.md)")
    j = jax.numpy.arange(6.0)
    cap = gpu_dlpack.export(j, max_version=(1, 0))
    info = gpu_dlpack.inspect(cap)
    assert info.versioned and info.readonly and info.version == gpu_dlpack.DLPACK_VERSION
    ctx = _void(_capsule.pointer(cap, True) + 8)
    # DLManagedTensor starts with its DLTensor, which starts with the data
    # pointer: JAX's struct, not an object of NumPy's (the Python rebuild's).
    assert ctx and _void(ctx) == j.unsafe_buffer_pointer() == info.data


def _legacy_on(device, **kw):
    from . import capsules

    return capsules.make(np.arange(6.0), versioned=False, device=device, **kw)


def _core_adapts():
    """Whether the core adapts capsules itself: from NumPy 2.4, which lays
    out its exports as the core does (strides always); before, the rebuild
    through NumPy does, on both paths."""
    return _fastpath.core is not None and numpy_backend.VERSIONED_NUMPY and not numpy_backend.STRIDES_AFTER_SHAPE


@pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.1.0",
                    reason="before NumPy 2.1 (its exports laid out otherwise) the adaptation is the Python rebuild's")
@pytest.mark.parametrize("device", [(1, 0), (1, 3), (2, 0), (4, 0)])
def test_the_legacy_to_versioned_adaptation_frees_the_legacy_tensor_once_on_every_path(device):
    # Consumed, refused by the consumer, never consumed: the legacy deleter
    # runs once, on both paths, for a producer on any device. With the core,
    # the new struct's manager_ctx is the legacy struct itself.
    from gpu_dlpack import _capsule

    from .capsules import Producer, consume_and_free

    ends = {
        "consumed": consume_and_free,
        "refused": lambda c: pytest.raises(BufferError, gpu_dlpack.from_dlpack, c, device="cuda:7"),
        "never consumed": lambda c: None,
    }
    for end in ends.values():
        cap, rec = _legacy_on(device)
        adapted = gpu_dlpack.export(Producer(cap, device=device), max_version=(1, 0))
        info = gpu_dlpack.inspect(adapted)
        assert info.versioned and info.readonly and info.data == rec.struct.dl_tensor.data
        assert info.device.dlpack == (device if device[0] != 1 else (1, 0))  # the host as NumPy labels it
        if _core_adapts():
            assert _void(_capsule.pointer(adapted, True) + 8) == rec.address
        assert rec.calls == 0
        end(adapted)
        del adapted, cap
        import gc

        gc.collect()
        assert rec.calls == 1


@pytest.mark.skipif(np.lib.NumpyVersion(np.__version__) < "2.1.0",
                    reason="before NumPy 2.1 (its exports laid out otherwise) the adaptation is the Python rebuild's")
@pytest.mark.parametrize("device", [(1, 0), (2, 0)])
def test_the_versioned_to_legacy_adaptation_frees_the_versioned_tensor_once(device):
    from gpu_dlpack import _capsule

    from . import capsules

    for consume in (True, False):
        cap, rec = capsules.make(np.arange(6.0), versioned=True, device=device)
        legacy = gpu_dlpack.export(capsules.Producer(cap, device=device))
        info = gpu_dlpack.inspect(legacy)
        # NumPy 2.1 to 2.3 leave a contiguous array's strides out of a legacy
        # capsule, as DLPack allows; the rebuild through NumPy is then the one.
        strides = None if numpy_backend.STRIDES_AFTER_SHAPE else (1,)
        assert info.name == "dltensor" and info.data == rec.struct.dl_tensor.data and info.strides == strides
        if _core_adapts():
            assert _void(_capsule.pointer(legacy, False) + 48) == rec.address  # DLManagedTensor.manager_ctx
        if consume:
            capsules.consume_and_free(legacy)
        del legacy, cap
        import gc

        gc.collect()
        assert rec.calls == 1


def test_a_capsule_the_adaptation_refuses_is_freed_at_once_with_the_python_error():
    # Not a plain case for the core (a dtype NumPy holds through a carrier
    # only, an unknown one): the Python rebuild decides, on both paths.
    from .capsules import DeviceProducer

    p = DeviceProducer(np.arange(6, dtype=np.uint16), device=(2, 0), data=0x1000, dtype=(4, 8, 1))
    with pytest.raises(BufferError, match="DLPack"):
        gpu_dlpack.export(p, max_version=(1, 0))
    assert [r.calls for r in p.records] == [1]


@compiled
def test_an_equal_max_version_of_another_caller_takes_the_plain_path():
    # The version policy caches the tuple it last accepted; every caller
    # passes its own (1, 0) (NumPy, torch and tvm-ffi each have theirs), and
    # an equal pair of ints gets the same verdict without asking it again.
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        pytest.skip("NumPy before 2.1 makes no versioned capsule: its versioned export is always the Python one's")
    x = np.arange(3.0)
    gpu_dlpack.export(x, max_version=(1, 0))
    other = tuple([1, 0])  # equal, not the same object
    cap, calls = _layer_calls(lambda: gpu_dlpack.export(x, max_version=other))
    assert calls == [] and gpu_dlpack.inspect(cap).version == gpu_dlpack.DLPACK_VERSION
    # A pair that is not of ints, though equal ((True, 0) == (1, 0)), is the
    # policy's to judge: it refuses it.
    with pytest.raises(TypeError, match="two ints"):
        gpu_dlpack.export(x, max_version=(True, 0))


@pytest.mark.parametrize("versioned", [False, True])
def test_the_adaptation_adds_a_byte_offset_to_the_data_as_an_address(versioned):
    # An offset of 2**63 reaches past any object C knows of: the sum is an
    # address, not pointer arithmetic (UBSan aborted the core's rebuild on
    # it). The data is never read: the first page, which no process maps.
    from .capsules import Producer, make

    cap, rec = make(np.arange(6.0), versioned=versioned, device=(2, 0), data=0x1000, byte_offset=2**63)
    out = gpu_dlpack.export(Producer(cap, device=(2, 0)), max_version=None if versioned else (1, 0))
    info = gpu_dlpack.inspect(out)
    assert info.versioned is not versioned and info.data == 0x1000 + 2**63 and info.byte_offset == 0
    del out
    import gc

    gc.collect()
    assert rec.calls == 1
