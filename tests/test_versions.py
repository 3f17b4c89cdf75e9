"""Exporter rule 1: versions and the version floor."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import DLPACK_VERSION, export, inspect, wrap

from .interpreter import run_python


def test_dlpack_version_is_the_newest_produced():
    assert DLPACK_VERSION == (1, 2)
    assert all(type(p) is int for p in DLPACK_VERSION)


def test_floor_defaults_to_0_5():
    assert gpu_dlpack.MIN_DLPACK_VERSION == (0, 5)


@pytest.mark.parametrize("value, expected", [("0.8", (0, 8)), ("1.0", (1, 0)), ("0,6", (0, 6))])
def test_floor_is_read_from_the_environment(value, expected):
    # A fresh interpreter importing the same gpu_dlpack (this checkout, or the installed wheel).
    out = run_python(
        "import gpu_dlpack; print(gpu_dlpack.__file__); print(gpu_dlpack.MIN_DLPACK_VERSION)",
        env={"GPU_DLPACK_MIN_VERSION": value},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    where, floor_seen = out.stdout.strip().splitlines()
    assert os.path.dirname(where) == os.path.dirname(gpu_dlpack.__file__)
    assert floor_seen == str(expected)


def test_a_bad_floor_in_the_environment_is_a_value_error_at_first_use_not_at_import():
    code = (
        "import numpy as np, gpu_dlpack\n"
        "print('imported')\n"
        "assert gpu_dlpack.inspect(gpu_dlpack.export(np.arange(3))).name == 'dltensor'  # no floor asked\n"
        "for use in (lambda: gpu_dlpack.MIN_DLPACK_VERSION,\n"
        "            lambda: gpu_dlpack.export(np.arange(3), max_version=(1, 0))):\n"
        "    try:\n"
        "        use()\n"
        "    except ValueError as e:\n"
        "        print(type(e).__name__, e)\n"
        "assert gpu_dlpack.set_min_dlpack_version((0, 5)) == (0, 5)  # the way out\n"
        "print(gpu_dlpack.inspect(gpu_dlpack.export(np.arange(3), max_version=(1, 0))).name)\n"
    )
    out = run_python(code, env={"GPU_DLPACK_MIN_VERSION": "banana"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "imported" and lines[-1] == "dltensor_versioned"
    assert len(lines) == 4
    for line in lines[1:3]:
        assert line.startswith("ValueError GPU_DLPACK_MIN_VERSION must be a DLPack version") and "banana" in line


def test_the_floor_from_the_environment_takes_effect_when_set_after_the_import():
    code = (
        "import os, numpy as np, gpu_dlpack\n"
        "os.environ['GPU_DLPACK_MIN_VERSION'] = '0.4'\n"
        "cap = gpu_dlpack.export(np.arange(3), max_version=(0, 4))\n"
        "print(gpu_dlpack.inspect(cap).name, gpu_dlpack.MIN_DLPACK_VERSION)\n"
    )
    out = run_python(code, env={"GPU_DLPACK_MIN_VERSION": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "dltensor (0, 4)"


def _old_consumer(producer):
    """A consumer of DLPack 0.4: it asks for max_version=(0, 4), and imports
    the legacy capsule it gets (with NumPy, through gpu_dlpack's importer)."""
    return gpu_dlpack.from_dlpack(producer.__dlpack__(max_version=(0, 4)))


def test_one_keyword_serves_an_old_consumer_per_wrap(torch, jax):
    # (JAX's arrays are immutable: an old consumer, which asks for a legacy
    # capsule, gets a copy of one, as the remedy of explain says.)
    copy_of_jax = gpu_dlpack.from_dlpack(jax.numpy.arange(3.0), copy=True)
    for x in (np.arange(3.0), torch.arange(3.0), copy_of_jax):
        with pytest.raises(gpu_dlpack.DLPackVersionError, match=r"min_version=\(0, 4\)"):
            _old_consumer(wrap(x))
        w = wrap(x, min_version=(0, 4))
        assert w.min_version == (0, 4) and "min_version=(0, 4)" in repr(w)
        assert _old_consumer(w).tolist() == [0.0, 1.0, 2.0]
        assert _old_consumer(wrap(x, min_version="0.4")).tolist() == [0.0, 1.0, 2.0]
    assert gpu_dlpack.MIN_DLPACK_VERSION == (0, 5)  # the floor of everything else is unchanged
    with pytest.raises(gpu_dlpack.DLPackVersionError):
        _old_consumer(wrap(np.arange(3.0)))


def test_one_keyword_serves_an_old_consumer_per_call():
    a = np.arange(3.0)
    with pytest.raises(gpu_dlpack.DLPackVersionError):
        export(a, max_version=(0, 4))
    assert inspect(export(a, max_version=(0, 4), min_version=(0, 4))).name == "dltensor"
    assert inspect(export(a, max_version=(0, 4), min_version="0.3")).name == "dltensor"
    assert gpu_dlpack.MIN_DLPACK_VERSION == (0, 5)


def test_a_floor_of_the_call_above_the_floor_in_force_refuses(torch):
    for x in (np.arange(3.0), torch.arange(3.0)):
        assert inspect(export(x, max_version=(1, 0))).versioned  # accepted (and remembered) under (0, 5)
        with pytest.raises(gpu_dlpack.DLPackVersionError, match=r"below \(1, 1\)"):
            export(x, max_version=(1, 0), min_version=(1, 1))
        with pytest.raises(gpu_dlpack.DLPackVersionError, match=r"below \(1, 1\)"):
            wrap(x, min_version=(1, 1)).__dlpack__(max_version=(1, 0))
        assert inspect(wrap(x, min_version=(1, 1)).__dlpack__(max_version=(1, 2))).versioned


class _Nested:
    """A host producer whose __dlpack__ exports another array through the
    layer, as a consumer asking for ``max_version`` would."""

    def __init__(self, inner, max_version):
        self.inner, self.max_version = inner, max_version

    def __dlpack__(self, **kwargs):
        return export(self.inner, max_version=self.max_version)

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("how", ["export", "wrap"])
@pytest.mark.parametrize("same_object", [True, False])
@pytest.mark.parametrize("inner", ["numpy", "torch", "jax"])
def test_the_floor_of_a_call_reaches_the_exchanges_made_inside_it(how, same_object, inner, torch, jax):
    # The compiled export checked max_version against the verdict cached for
    # the floor in force, by value, and so did the Python check's shortcut,
    # by identity: a nested export below the call's floor was served.
    x = {"numpy": np.arange(3.0), "torch": torch.arange(3.0), "jax": jax.numpy.arange(3.0)}[inner]
    asked = (1, 0)
    assert inspect(export(x, max_version=asked)).versioned  # accepted, and cached, under (0, 5)
    nested = _Nested(x, asked if same_object else tuple([1, 0]))
    with pytest.raises(gpu_dlpack.DLPackVersionError, match=r"below \(1, 1\), but max_version=\(1, 0\)"):
        if how == "export":
            export(nested, max_version=(1, 2), min_version=(1, 1))
        else:
            wrap(nested, min_version=(1, 1)).__dlpack__(max_version=(1, 2))
    # The floor of the call is gone with it: the cached verdict serves again.
    assert inspect(export(nested, max_version=(1, 2))).versioned
    assert inspect(export(x, max_version=asked)).versioned


def test_the_floor_of_a_call_reaches_an_exchange_through_the_c_api(torch):
    # torch.from_dlpack(wrap(a)) takes the wrapper's C exchange API on the
    # compiled core, whose check of DLPACK_VERSION was cached for the floor
    # in force: under a call's floor above it, refused as on the Python path.
    a = np.arange(3.0)
    assert torch.from_dlpack(wrap(a)).tolist() == [0.0, 1.0, 2.0]

    class Nested:
        def __dlpack__(self, **kwargs):
            return export(torch.from_dlpack(wrap(a)), max_version=(1, 3))

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(gpu_dlpack.DLPackVersionError, match=r"below \(1, 3\)"):
        export(Nested(), max_version=(1, 3), min_version=(1, 3))


@pytest.mark.parametrize("bad", [(2, 0), (-1, 0), "x", (0,), 5])
def test_a_bad_floor_of_a_call_or_a_wrap_is_a_value_error(bad):
    with pytest.raises(ValueError, match="min_version must be a DLPack version"):
        export(np.arange(3), max_version=(1, 0), min_version=bad)
    with pytest.raises(ValueError, match="min_version must be a DLPack version"):
        wrap(np.arange(3), min_version=bad)


def test_the_floor_set_at_run_time_takes_effect_on_wrappers_made_before(floor):
    w = wrap(np.arange(3.0))
    with pytest.raises(gpu_dlpack.DLPackVersionError):
        w.__dlpack__(max_version=(0, 4))
    gpu_dlpack.set_min_dlpack_version((0, 4))
    assert _old_consumer(w).tolist() == [0.0, 1.0, 2.0]


def test_floor_is_settable_at_run_time(floor):
    a = np.arange(3)
    assert gpu_dlpack.set_min_dlpack_version((0, 8)) == (0, 5)
    assert gpu_dlpack.MIN_DLPACK_VERSION == (0, 8)
    with pytest.raises(BufferError, match=r"below \(0, 8\)"):
        export(a, max_version=(0, 7))
    assert gpu_dlpack.set_min_dlpack_version("0.3") == (0, 8)
    assert inspect(export(a, max_version=(0, 4))).name == "dltensor"
    assert gpu_dlpack.set_min_dlpack_version((0, 5)) == (0, 3)


def test_assigning_the_floor_sets_it_validated_as_the_function_does(floor):
    # Assigning the module attribute is the same as set_min_dlpack_version:
    # the floor of every exchange after it, a bad value refused with the
    # floor left as it was, and no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gpu_dlpack.MIN_DLPACK_VERSION = "0.8"
    assert gpu_dlpack.MIN_DLPACK_VERSION == (0, 8)
    with pytest.raises(BufferError, match=r"below \(0, 8\)"):
        export(np.arange(3), max_version=(0, 7))
    with pytest.raises(ValueError, match="MIN_DLPACK_VERSION"):
        gpu_dlpack.MIN_DLPACK_VERSION = (2, 0)
    assert gpu_dlpack.MIN_DLPACK_VERSION == (0, 8)


def test_a_verdict_the_core_cached_does_not_outlive_a_new_floor(floor):
    # The core's fast paths take a max_version it saw accepted without
    # asking again: a floor above it, set afterwards, must still refuse it.
    a = np.arange(3.0)
    w = wrap(a)
    for _ in range(3):
        assert inspect(export(a, max_version=(1, 0))).name == "dltensor_versioned"
        assert inspect(w.__dlpack__(max_version=(1, 0))).name == "dltensor_versioned"
    gpu_dlpack.set_min_dlpack_version((1, 1))
    with pytest.raises(gpu_dlpack.DLPackVersionError, match=r"below \(1, 1\)"):
        export(a, max_version=(1, 0))
    with pytest.raises(gpu_dlpack.DLPackVersionError, match=r"below \(1, 1\)"):
        w.__dlpack__(max_version=(1, 0))


@pytest.mark.parametrize("bad", [(2, 0), (-1, 0), "x", (0,), 5])
def test_a_bad_floor_at_run_time_is_refused(bad, floor):
    with pytest.raises(ValueError):
        gpu_dlpack.set_min_dlpack_version(bad)
    assert gpu_dlpack.MIN_DLPACK_VERSION == (0, 5)


def test_max_version_none_gives_legacy(torch, jax):
    # (A JAX array's is a copy: its arrays are immutable, rule 5.)
    for x, kw in ((np.arange(3.0), {}), (torch.arange(3.0), {}), (jax.numpy.arange(3.0), {"copy": True})):
        info = inspect(export(x, **kw))
        assert (info.name, info.versioned, info.version) == ("dltensor", False, None)


@pytest.mark.parametrize("max_version", [(0, 5), (0, 8), (0, 99)])
def test_major_0_at_or_above_the_floor_gives_legacy(max_version, torch):
    for x in (np.arange(3.0), torch.arange(3.0)):
        assert inspect(export(x, max_version=max_version)).name == "dltensor"


@pytest.mark.parametrize("max_version", [(1, 0), (1, 1), (1, 5), (2, 0), (7, 3)])
def test_major_1_or_more_gives_versioned_with_the_layers_version(max_version, torch, jax):
    # NumPy produces 1.0 and torch 1.3; JAX produces only legacy capsules.
    for x in (np.arange(3.0), torch.arange(3.0), jax.numpy.arange(3.0)):
        info = inspect(export(x, max_version=max_version))
        assert info.name == "dltensor_versioned"
        assert info.version == DLPACK_VERSION


@pytest.mark.parametrize("max_version", [(0, 4), (0, 0)])
def test_below_the_floor_is_a_buffer_error_naming_floor_request_and_remedies(max_version, jax):
    for x in (np.arange(3.0), jax.numpy.arange(3.0), wrap(np.arange(3.0))):
        with pytest.raises(BufferError) as err:
            if isinstance(x, gpu_dlpack.Exportable):
                x.__dlpack__(max_version=max_version)
            else:
                export(x, max_version=max_version)
        msg = str(err.value)
        assert "(0, 5)" in msg and f"max_version={max_version}".replace(" ", "") in msg.replace(" ", "")
        assert "upgrade" in msg and "without max_version" in msg and "GPU_DLPACK_MIN_VERSION" in msg
        assert f"wrap(x, min_version={max_version})" in msg and "set_min_dlpack_version" in msg
        assert isinstance(err.value, gpu_dlpack.DLPackVersionError)


@pytest.mark.parametrize("bad", [(1,), (1, 0, 0), [1, 0], (1.0, 0), ("1", "0"), "1.0", 1, (True, 0)])
def test_max_version_not_a_2_tuple_of_ints_is_a_type_error_showing_the_form(bad):
    with pytest.raises(TypeError, match=r"max_version=\(1, 0\)"):
        export(np.arange(3), max_version=bad)


def test_bool_needs_dlpack_0_8(floor):
    gpu_dlpack.set_min_dlpack_version((0, 5))
    b = np.array([True, False])
    with pytest.raises(BufferError, match="bool needs DLPack 0.8"):
        export(b, max_version=(0, 7))
    assert inspect(export(b, max_version=(0, 8))).dl_dtype == (6, 8, 1)
    assert inspect(export(b)).dl_dtype == (6, 8, 1)  # an unversioned consumer gets what it asks


def test_float8_needs_a_versioned_capsule(ml_dtypes):
    f8 = np.zeros(4, dtype=ml_dtypes.float8_e4m3fn)
    with pytest.raises(BufferError, match="needs DLPack 1.1"):
        export(f8, max_version=(0, 8))
    # Any 1.x consumer takes a 1.2 capsule (minor versions are compatible) and
    # checks dtype codes itself.
    for max_version in ((1, 0), (1, 1)):
        info = inspect(export(f8, max_version=max_version))
        assert info.dl_dtype == (10, 8, 1) and info.version == DLPACK_VERSION


@pytest.mark.parametrize("command", [["doctor"], ["doctor", "--json"], ["demo"]], ids=" ".join)
def test_a_bad_floor_in_the_environment_stops_the_command_with_the_layers_message(command):
    # As a bad argument does: exit status 2 and one line, the message the
    # library raises at the first exchange, no traceback and no report.
    done = subprocess.run([sys.executable, "-m", "gpu_dlpack", *command], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, GPU_DLPACK_MIN_VERSION="zero"))
    assert done.returncode == 2 and done.stdout == "", done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr == (
        f"gpu-dlpack {command[0]}: error: GPU_DLPACK_MIN_VERSION must be a DLPack version such as '0.8' or "
        "(0, 8), with a major version of 0 or 1; got 'zero'.\n"
    )


def test_explain_reads_no_setting_and_runs_with_a_bad_floor_in_the_environment():
    done = subprocess.run([sys.executable, "-m", "gpu_dlpack", "explain", "NumPy only supports stream=None."],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, GPU_DLPACK_MIN_VERSION="zero"))
    assert done.returncode == 0 and done.stdout.startswith("numpy-stream:"), done.stderr
