"""Arrays on an accelerator DLPack cannot reach: a producer whose
``__dlpack_device__`` refuses (JAX's arrays on a TPU), stood in for by
``tests.capsules.AcceleratorProducer``, which behaves as JAX 0.10.2 on a TPU
v5e was measured to (docs/internals/testing.md, "The TPU check";
``scripts/tpu-check.sh`` runs the same on the real chip). Asked for the host,
the layer asks the producer for a copy there (``dl_device=(1, 0)``); asked
for nothing, it refuses with that remedy."""

import gc

import numpy as np
import pytest

import gpu_dlpack

from .capsules import AcceleratorProducer

VALUES = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


@pytest.mark.parametrize("how", [dict(device="cpu"), dict(copy=True), dict(device="cpu", copy=True),
                                 dict(device=(1, 0))])
def test_asked_for_the_host_the_producer_is_asked_for_a_copy_there(how):
    p = AcceleratorProducer()
    a = gpu_dlpack.from_dlpack(p, **how)
    assert a.tolist() == VALUES and len(p.copies) == 1
    assert p.requests[-1]["dl_device"] == (1, 0) and p.requests[-1]["copy"] is True
    # The producer's copy comes in a legacy capsule, which cannot say its
    # data may be written: read-only, unless a copy was asked for, which is
    # the layer's own, writeable.
    if how.get("copy"):
        assert a.flags.writeable and a.ctypes.data != p.copies[-1].ctypes.data
    else:
        assert not a.flags.writeable and a.ctypes.data == p.copies[-1].ctypes.data


@pytest.mark.parametrize("entry", ["from_dlpack", "wrap", "export", "view"])
def test_asked_for_nothing_the_layer_refuses_with_the_host_remedy_and_the_producers_error_as_cause(entry):
    # The same refusal on every entry, the producer's own error its cause:
    # the caller is told how to get the data (its producer copies it to the host).
    p = AcceleratorProducer()
    with pytest.raises(gpu_dlpack.GpuDlpackError) as err:
        getattr(gpu_dlpack, entry)(p)
    assert isinstance(err.value, BufferError) and not p.requests  # nothing was asked of the producer
    message = str(err.value)
    assert message.startswith("tests.capsules.AcceleratorProducer.__dlpack_device__ names no device")
    assert "device='cpu'" in message and "convert(x, 'numpy')" in message
    cause = err.value.__cause__
    assert type(cause) is BufferError and str(cause) == (
        "__dlpack__ device only supported for CPU and GPU, got platform: tpu")
    # Explained as a traceback reads: the cause first, then the layer's refusal.
    found = {m.id: m for m in gpu_dlpack.explain(err.value)}
    assert set(found) == {"jax-platform-unsupported", "gpu_dlpack-device-unnamed"}
    assert "device='cpu'" in found["gpu_dlpack-device-unnamed"].remedies[0]


def test_copy_false_to_the_host_is_refused_before_the_producer_is_asked():
    p = AcceleratorProducer()
    with pytest.raises(gpu_dlpack.CopyRequiredError, match="needs a copy"):
        gpu_dlpack.from_dlpack(p, device="cpu", copy=False)
    assert not p.requests


@pytest.mark.parametrize("to", ["numpy", "torch", "array_api_strict"])
def test_convert_brings_it_to_any_host_library_through_the_producers_host_copy(to, torch, xp_strict):
    p = AcceleratorProducer()
    done = gpu_dlpack.convert(p, to, report=True)
    assert [[float(v) for v in row] for row in np.asarray(done.array).tolist()] == VALUES
    assert p.requests and all(r["dl_device"] == (1, 0) for r in p.requests)
    if to != "numpy":
        assert done.copied and done.reasons[0].startswith("copied to the host by its producer")
        # A writeable copy of the layer's, never a writeable view of the
        # producer's read-only copy.
        copy = p.copies[-1]
        assert all(np.asarray(done.array).ctypes.data != c.ctypes.data for c in [copy])
    del done
    gc.collect()


def test_convert_with_copy_false_is_refused(torch):
    with pytest.raises(gpu_dlpack.CopyRequiredError):
        gpu_dlpack.convert(AcceleratorProducer(), "torch", copy=False)


def test_a_refusal_of_another_kind_is_not_taken_for_an_unnamed_device(torch):
    class Broken:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            raise BufferError("the producer's own refusal")

    with pytest.raises(BufferError, match="the producer's own refusal"):
        gpu_dlpack.from_dlpack(Broken())
    with pytest.raises(BufferError, match="the producer's own refusal"):
        gpu_dlpack.convert(Broken(), "torch")


# -- the other way: an array onto the TPU ------------------------------------------


class TpuDevice:
    """Shaped as a jaxlib Device on a TPU v5e, as the JAX row reads one
    (platform, id, local_hardware_id): measured, jax.devices()[0] there."""

    platform = "tpu"
    id = 0
    local_hardware_id = 0
    device_kind = "TPU v5 lite"


def test_a_jax_tpu_device_is_dlpacks_tpu():
    assert gpu_dlpack.Device(TpuDevice()) == gpu_dlpack.Device("tpu:0") == gpu_dlpack.Device((19, 0))


@pytest.fixture
def jax_placing(jax, monkeypatch):
    """jax.dlpack.from_dlpack recording what it is handed; the TPU device it
    is asked for is JAX's to reach (on the host, there is none), so the import
    is left on the CPU, where JAX first puts it before a move."""
    import jax.dlpack

    real, seen = jax.dlpack.from_dlpack, []

    def from_dlpack(x, device=None, copy=None):
        seen.append(dict(device=device, where=x.__dlpack_device__(), copy=copy))
        return real(x, copy=copy) if device is not None else real(x)

    monkeypatch.setattr(jax.dlpack, "from_dlpack", from_dlpack)
    # convert reads a consumer once: the one it keeps calls the recorder.
    from gpu_dlpack import _convert

    monkeypatch.setitem(_convert._consumers, "jax", _convert.consumer_of("jax")._replace(call=from_dlpack))
    return seen


def test_convert_to_jax_on_a_tpu_hands_the_host_data_over_and_jax_places_it(jax_placing):
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    tpu = TpuDevice()
    j = gpu_dlpack.convert(a, "jax", device=tpu)
    assert np.asarray(j).tolist() == VALUES
    assert [(s["device"], s["where"]) for s in jax_placing] == [(tpu, (1, 0))]


def test_convert_to_a_tpu_named_otherwise_says_to_pass_the_librarys_device(jax_placing):
    a = np.arange(6.0, dtype=np.float32)
    for name in ("tpu:0", (19, 0)):
        with pytest.raises(gpu_dlpack.DeviceUnreachableError, match=r"^gpu_dlpack cannot place an array on tpu:0, "
                           r"but jax can: pass jax's own device object as device="):
            gpu_dlpack.convert(a, "jax", device=name)
    # A library that places nothing itself: no backend here reaches a TPU.
    with pytest.raises(gpu_dlpack.DeviceUnreachableError, match=r"^no backend can hold an array on tpu:0: "
                       r"gpu_dlpack moves the memory of the CPU and of CUDA and ROCm GPUs only"):
        gpu_dlpack.convert(a, "numpy", device=TpuDevice())
    assert not jax_placing


def test_the_doctor_lists_an_accelerator_and_the_exchanges_that_reach_it(jax, jax_placing):
    # JAX as it is on a TPU machine: its devices a TPU, an array put there
    # behaving as one on the chip (the stand-in producer).
    from gpu_dlpack.doctor import _platform

    class JaxOnATpu:
        def devices(self):
            return [jax.devices("cpu")[0], TpuDevice()]

        def device_put(self, a, device):
            return AcceleratorProducer(a)

        def device_get(self, x):
            return jax.device_get(x)

    (acc,) = _platform._accelerators(JaxOnATpu())
    assert (acc["library"], acc["dlpack"]) == ("jax", [19, 0])
    assert [(e["call"], e["ok"]) for e in acc["exchanges"]] == [
        ("from_dlpack(x, device='cpu')", True), ("convert(x, 'numpy')", True),
        ("convert(a, 'jax', device=device)", True)]
    assert all(e["detail"].startswith("values equal") for e in acc["exchanges"])
    # On this machine: JAX's devices are its CPU's, and no accelerator is listed.
    assert _platform._accelerators(jax) == []
    from gpu_dlpack.doctor import _render

    text = "\n".join(_render._accelerator_lines([acc]))
    assert text.startswith("  Accelerator ") and "(DLPack (19, 0)), which DLPack does not reach:" in text
    assert "ok   convert(a, 'jax', device=device): values equal, on " in text
