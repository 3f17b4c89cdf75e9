"""Errors a caller can catch by cause (below the floor, copy needed,
read-only, device unreachable, stream refused), each still the type the
standard names, and raised by every message of that cause; every error the
layer raises is a GpuDlpackError, and none a peer raised."""

import pickle

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _errors


def test_each_cause_has_a_class_that_is_still_the_standards_type():
    for cls in (gpu_dlpack.DLPackVersionError, gpu_dlpack.CopyRequiredError, gpu_dlpack.ReadOnlyError,
                gpu_dlpack.DeviceUnreachableError):
        assert issubclass(cls, BufferError)
    assert issubclass(gpu_dlpack.InvalidStreamError, ValueError)
    assert issubclass(gpu_dlpack.StreamTypeError, TypeError)
    for cls in (gpu_dlpack.InvalidStreamError, gpu_dlpack.StreamTypeError):
        assert issubclass(cls, gpu_dlpack.StreamError)
    # each stream error is of one standard type only, as before
    assert not issubclass(gpu_dlpack.InvalidStreamError, TypeError)
    assert not issubclass(gpu_dlpack.StreamTypeError, ValueError)


BY_CAUSE = {
    "below_floor": gpu_dlpack.DLPackVersionError,
    "needs_version": gpu_dlpack.DLPackVersionError,
    "copy_forbidden": gpu_dlpack.CopyRequiredError,
    "spread_needs_copy": gpu_dlpack.CopyRequiredError,
    "readonly_to_writeable": gpu_dlpack.CopyRequiredError,
    "readonly_legacy": gpu_dlpack.ReadOnlyError,
    "unreachable": gpu_dlpack.DeviceUnreachableError,
    "no_backend": gpu_dlpack.DeviceUnreachableError,
    "host_device_id": gpu_dlpack.DeviceUnreachableError,
    "bad_dl_device": gpu_dlpack.DeviceUnreachableError,
    "bad_stream_value": gpu_dlpack.InvalidStreamError,
    "bad_stream_type": gpu_dlpack.StreamTypeError,
    "bad_stream_object": gpu_dlpack.StreamTypeError,
    "bad_cuda_stream_protocol": gpu_dlpack.StreamTypeError,
}


@pytest.mark.parametrize("builder", sorted(BY_CAUSE))
def test_every_message_of_a_cause_is_raised_as_its_class(builder):
    from .test_explain import BUILDER_ARGS

    exc = getattr(_errors, builder)(*BUILDER_ARGS[builder])
    assert type(exc) is BY_CAUSE[builder]


def test_the_exchanges_raise_the_class_of_their_cause(torch, jax):
    a = np.arange(3.0)
    r = np.arange(3.0)
    r.flags.writeable = False
    cases = [
        (lambda: gpu_dlpack.export(a, max_version=(0, 4)), gpu_dlpack.DLPackVersionError),
        (lambda: gpu_dlpack.export(np.ones(2, bool), max_version=(0, 6)), gpu_dlpack.DLPackVersionError),
        (lambda: gpu_dlpack.export(r), gpu_dlpack.ReadOnlyError),
        (lambda: gpu_dlpack.wrap(a, readonly=True).__dlpack__(), gpu_dlpack.ReadOnlyError),
        (lambda: gpu_dlpack.export(a, dl_device=(7, 0)), gpu_dlpack.DeviceUnreachableError),  # Vulkan
        (lambda: gpu_dlpack.export(a, dl_device=(1, 3)), gpu_dlpack.DeviceUnreachableError),
        (lambda: gpu_dlpack.export(a, dl_device=(99, 0)), gpu_dlpack.DeviceUnreachableError),
        (lambda: gpu_dlpack.export(a, dl_device=(0, 0)), gpu_dlpack.DeviceUnreachableError),
        (lambda: gpu_dlpack.from_dlpack(a, device="vulkan"), gpu_dlpack.DeviceUnreachableError),
        (lambda: gpu_dlpack.export(a, stream=3), gpu_dlpack.InvalidStreamError),
        (lambda: gpu_dlpack.from_dlpack(torch.arange(3), stream=3), gpu_dlpack.InvalidStreamError),
        (lambda: gpu_dlpack.export(a, stream=1.5), gpu_dlpack.StreamTypeError),
        (lambda: gpu_dlpack.use_stream("default").__enter__(), gpu_dlpack.StreamTypeError),
        (lambda: gpu_dlpack.use_stream(-5).__enter__(), gpu_dlpack.InvalidStreamError),
        (lambda: gpu_dlpack.from_dlpack(_sharded(jax), copy=False), gpu_dlpack.CopyRequiredError),
    ]
    for call, cls in cases:
        with pytest.raises(cls):
            call()


def _sharded(jax):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices("cpu")), ("x",))
    return jax.device_put(jax.numpy.arange(8.0), NamedSharding(mesh, PartitionSpec("x")))


def test_every_error_class_is_public():
    for name in ("DLPackVersionError", "CopyRequiredError", "ReadOnlyError", "DeviceUnreachableError",
                 "StreamError", "InvalidStreamError", "StreamTypeError"):
        assert getattr(gpu_dlpack, name) is getattr(_errors, name) and name in gpu_dlpack.__all__


def test_a_gpu_no_backend_serves_is_unreachable():
    if gpu_dlpack._backends.cupy_backend.device_count() > 0:
        pytest.skip("a GPU is usable here: the copy is made")
    with pytest.raises(gpu_dlpack.DeviceUnreachableError):
        gpu_dlpack.export(np.arange(3.0), dl_device=(2, 0))
    with pytest.raises(gpu_dlpack.DeviceUnreachableError):
        gpu_dlpack.from_dlpack(np.arange(3.0), device="cuda:0")


# -- one base class of the layer's own errors ---------------------------------

# RuntimeError: a message the doctor shows (the core not bound to CuPy's runtime), never raised.
_STANDARD = (BufferError, TypeError, ValueError, ImportError, NotImplementedError, RuntimeError)


def test_every_message_of_the_layer_is_a_gpu_dlpack_error_of_the_standards_type():
    from .test_explain import BUILDER_ARGS

    for builder, args in BUILDER_ARGS.items():
        exc = getattr(_errors, builder)(*args)
        if isinstance(exc, Warning):
            continue  # a warning (DeprecationWarning), not an error
        assert isinstance(exc, gpu_dlpack.GpuDlpackError), builder
        assert isinstance(exc, _STANDARD), builder
        # A message without a cause of its own keeps the standard's name
        # (tracebacks, explain and doctor read it): gpu_dlpack._errors.TypeError.
        assert type(exc).__name__ in {c.__name__ for c in _STANDARD + (ModuleNotFoundError,)} or (
            getattr(gpu_dlpack, type(exc).__name__) is type(exc)), builder
        again = pickle.loads(pickle.dumps(exc))  # to a worker process and back
        assert type(again) is type(exc) and str(again) == str(exc), builder


def test_the_layers_refusals_are_caught_by_the_base_and_by_the_standards_type(torch):
    cases = [
        (lambda: gpu_dlpack.export(np.arange(3), copy="yes"), TypeError),
        (lambda: gpu_dlpack.export(np.arange(3), max_version=(0, 4)), BufferError),
        (lambda: gpu_dlpack.set_min_dlpack_version("zero"), ValueError),
        (lambda: gpu_dlpack.from_dlpack(np.arange(3), require_alignment=-1), ValueError),
        (lambda: gpu_dlpack.convert(np.arange(3), "torhc"), ImportError),
        (lambda: gpu_dlpack.explain(3), TypeError),
    ]
    for call, standard in cases:
        with pytest.raises(gpu_dlpack.GpuDlpackError) as info:
            call()
        assert isinstance(info.value, standard)
    # What a peer raises and the layer passes on is the peer's own.
    with pytest.raises(ValueError) as info:
        gpu_dlpack.from_dlpack(torch.empty(3, device="meta"))
    assert not isinstance(info.value, gpu_dlpack.GpuDlpackError)


@pytest.mark.parametrize("entry", ["from_dlpack", "wrap", "export", "view", "shards", "convert", "Device.of"])
def test_an_array_class_instead_of_an_array_gets_the_layers_error(entry, torch):
    call = {
        "from_dlpack": gpu_dlpack.from_dlpack, "wrap": gpu_dlpack.wrap, "export": gpu_dlpack.export,
        "view": gpu_dlpack.view, "shards": gpu_dlpack.shards, "convert": lambda x: gpu_dlpack.convert(x, "torch"),
        "Device.of": gpu_dlpack.Device.of,
    }[entry]
    for cls, name in ((np.ndarray, "numpy.ndarray"), (torch.Tensor, "torch.Tensor")):
        with pytest.raises(gpu_dlpack.NotDLPackError, match=f"^{name} is a class, not an array: ") as info:
            call(cls)
        assert isinstance(info.value, TypeError)


@pytest.mark.parametrize("to, meant", [
    ("Torch", "Did you mean 'torch'?"), ("torhc", "Did you mean 'torch'?"), ("NumPy", "Did you mean 'numpy'?"),
    ("", "Did you mean one of 'numpy', 'torch', 'cupy', 'jax', 'numba', 'paddle', 'tensorflow', 'mlx', 'tvm_ffi', "
     "'array_api_strict'?"),
    ("gpu_dlpack_test_nothing_like_it", None),
])
def test_a_library_name_convert_cannot_import_gets_what_was_meant(to, meant):
    with pytest.raises(gpu_dlpack.GpuDlpackError) as info:
        gpu_dlpack.convert(np.arange(3), to)
    assert isinstance(info.value, ModuleNotFoundError) and info.value.name == to
    message = str(info.value)
    assert message.startswith(f"convert(x, {to!r}): no module named {to!r} can be imported here")
    assert (meant in message) if meant else ("Did you mean" not in message), message
    assert gpu_dlpack.explain(info.value)[0].id == "gpu_dlpack-convert-not-importable"


def test_a_read_only_legacy_refusal_names_convert_for_a_consumer_that_asks_for_legacy_capsules_itself(jax):
    # JAX before 0.12 asks for legacy capsules itself: its caller can neither
    # ask for a versioned capsule nor pass copy=True, so the refusal names
    # what the caller can do, convert(x, "jax"), and that works.
    from gpu_dlpack import _errors, _peers

    assert "convert" not in str(_errors.readonly_legacy())
    assert "(jax and tvm_ffi ask for legacy capsules themselves), convert instead: gpu_dlpack.convert(x, 'jax') " \
        "or gpu_dlpack.convert(x, 'tvm_ffi') gives" in str(_errors.readonly_legacy(("jax", "tvm_ffi")))
    legacy = "legacy-only" in _peers.active_faults(_peers.by_name("jax"), jax.__version__)
    assert ("jax" in _peers.legacy_askers()) == legacy
    readonly = np.arange(3.0)
    readonly.flags.writeable = False
    for x in (jax.numpy.arange(3.0), readonly):
        if not legacy:  # JAX 0.12 and later ask for a versioned capsule: no refusal
            assert jax.dlpack.from_dlpack(gpu_dlpack.wrap(x)).tolist() == [0.0, 1.0, 2.0]
            continue
        with pytest.raises(gpu_dlpack.ReadOnlyError, match=r"\bjax\b.* legacy capsules (itself|themselves)\), "
                           r"convert instead: .*gpu_dlpack\.convert\(x, 'jax'\)"):
            jax.dlpack.from_dlpack(gpu_dlpack.wrap(x))
        assert gpu_dlpack.convert(x, "jax").tolist() == [0.0, 1.0, 2.0]
