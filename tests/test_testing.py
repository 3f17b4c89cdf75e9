"""``gpu_dlpack.testing``: the conformance checks a library runs against
itself.

Every rule is proven able to fail: a stand-in producer that breaks exactly
that rule (and keeps every other) fails exactly that rule's check, and the
one that breaks none passes them all. Then the real producers here: NumPy
and gpu_dlpack's own ``wrap`` pass every rule; torch and JAX fail the rules
their rows in ``_peers`` say they break, as measured here.
"""

import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _capsule, _peers, testing
from gpu_dlpack.testing import _children, _consumer

from . import conformance_peers


class Standin:
    """gpu_dlpack's exports of a NumPy array (which keep every rule, on
    every NumPy), with the one fault ``broken`` names."""

    def __init__(self, a, base, broken):
        self.a, self.base, self.broken = a, base, broken

    def __dlpack_device__(self):
        return (1, None) if self.broken == "dlpack-device" else (1, 0)

    def __dlpack__(self, **kw):
        a, broken = self.a, self.broken
        mv, readonly = kw.get("max_version"), not a.flags.writeable
        if broken == "stream-none-host" and "stream" in kw:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'stream'")
        if broken == "no-keywords-legacy" and mv is None:
            return gpu_dlpack.export(a, max_version=(1, 0))
        if broken == "old-max-version-legacy" and mv is not None and mv[0] == 0:
            raise BufferError(f"this producer does not support any version below (1, 0) but {mv} was requested")
        if broken == "future-max-version" and mv is not None and mv[0] >= 2:
            raise BufferError(f"max_version {mv} is not supported")
        if broken == "versioned-when-asked" and mv is not None:
            kw.pop("max_version")
            if readonly:
                raise BufferError("read-only data cannot be exported as a legacy capsule")
        if broken == "read-only-legacy-refused" and readonly and mv is None:
            return gpu_dlpack.export(self.base)  # the same memory, as a writeable legacy capsule
        if broken == "copy-true-new-memory" and kw.get("copy") is True:
            kw["copy"] = None
            capsule = gpu_dlpack.export(a, **kw)
            _capsule.set_flags(capsule, _capsule.read(capsule).flags | _capsule.IS_COPIED)
            return capsule
        if broken == "copy-false-in-place" and kw.get("copy") is False:
            kw["copy"] = True
        if broken == "dl-device-own" and kw.get("dl_device") == (1, 0):
            kw.update(dl_device=None, copy=True)
        if broken == "dl-device-unreachable" and kw.get("dl_device") not in (None, (1, 0)):
            kw["dl_device"] = None
        capsule = gpu_dlpack.export(a, **kw)
        info = _capsule.read(capsule)
        if broken == "copy-true-flagged" and kw.get("copy") is True:
            _capsule.set_flags(capsule, info.flags & ~_capsule.IS_COPIED)
        if broken == "read-only-flagged" and readonly and info.versioned:
            _capsule.set_flags(capsule, info.flags & ~_capsule.READ_ONLY)
        if broken == "holds-the-array" and a.dtype == np.int64:
            _capsule.set_dtype(capsule, 1, 64)  # the sign bit dropped: int64 as uint64
        return capsule


def standin_make(broken=None):
    def make(shape, dtype, *, readonly=False):
        base = testing.values(shape, dtype)
        a = base.view()
        a.flags.writeable = not readonly
        return Standin(a, base, broken)
    return make


def numpy_make(shape, dtype, *, readonly=False):
    a = testing.values(shape, dtype)
    a.flags.writeable = not readonly
    return a


def test_a_producer_that_keeps_every_rule_passes_every_check():
    report = testing.check_producer(standin_make(), name="a stand-in")
    assert [row.outcome for row in report.rows] == ["passed"] * len(testing.RULES), str(report)
    testing.assert_conforms(report)


@pytest.mark.parametrize("rule", list(testing.RULES))
def test_a_producer_that_breaks_one_rule_fails_exactly_that_rule(rule):
    report = testing.check_producer(standin_make(rule), name=f"a stand-in breaking {rule}")
    assert report.failed == (rule,), str(report)
    assert report[rule].evidence.startswith(("asked", "x.__dlpack_device__()", "int64")), report[rule].evidence
    with pytest.raises(AssertionError) as info:
        testing.assert_conforms(report)
    said = str(info.value)
    assert f"breaks 1 DLPack rule:\n- {testing.RULES[rule].number} {rule}: " in said
    assert testing.RULES[rule].text in said and testing.RULES[rule].link in said
    testing.assert_conforms(report, allow={rule: "decided otherwise"})


def test_every_rule_is_numbered_once_with_a_link():
    numbers = [r.number for r in testing.RULES.values()]
    assert len(set(numbers)) == len(numbers) and numbers == sorted(numbers, key=lambda n: tuple(map(int, n.split("."))))
    assert all(r.link.startswith("https://") for r in testing.RULES.values())


def test_the_rules_page_lists_the_rules_as_the_module_numbers_them():
    import pathlib
    import re

    page = pathlib.Path(__file__).parents[1] / "docs" / "internals" / "rules.md"
    if not page.exists():
        pytest.skip("the docs are not beside these tests")
    listed = re.findall(r"^\| (\d+\.\d+) \| `([a-z0-9-]+)` \|", page.read_text(), re.M)
    assert listed == [(r.number, r.id) for r in (*testing.RULES.values(), *testing.CONSUMER_RULES.values())]


def test_allow_names_only_rules():
    report = testing.check_producer(standin_make())
    with pytest.raises(ValueError, match=r"allow= names no rule: 'copy-is-flagged' \(the rules: no-keywords-legacy, "):
        testing.assert_conforms(report, allow={"copy-is-flagged": "a typo"})


def test_numpy_and_gpu_dlpacks_own_producers_pass_every_rule():
    report = testing.check_producer(numpy_make)
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        # Before 2.1 NumPy's __dlpack__ takes stream= only (max_version,
        # dl_device and copy are the array API's of 2023.12).
        assert report["versioned-when-asked"].evidence.endswith("unexpected keyword argument 'max_version'")
        assert "no-keywords-legacy" not in report.failed and "holds-the-array" not in report.failed
    elif np.lib.NumpyVersion(np.__version__) < "2.4.0":
        # NumPy 2.2 refuses a device it cannot handle with ValueError.
        assert report.failed == ("dl-device-unreachable",), str(report)
        assert "it raised ValueError: unsupported device requested" in report["dl-device-unreachable"].evidence
    else:
        testing.assert_conforms(report)

    def wrapped(shape, dtype, *, readonly=False):
        return gpu_dlpack.wrap(testing.values(shape, dtype), readonly=readonly)

    report = testing.check_producer(wrapped)
    assert report.subject == "Exportable" and report.failed == (), str(report)


def test_torch_forgets_to_flag_its_copies(torch):
    # Measured with torch 2.13, 2.14 and 2.15: copy=True copies, and the
    # capsule does not say IS_COPIED (rules page, rule 2: the layer sets it).
    def make(shape, dtype, *, readonly=False):
        if readonly:
            raise NotImplementedError("torch has no read-only tensors")
        return torch.from_numpy(testing.values(shape, dtype))

    report = testing.check_producer(make)
    assert report.failed == ("copy-true-flagged",), str(report)
    assert report["read-only-flagged"].outcome == "not applicable"
    assert "torch has no read-only tensors" in report["read-only-flagged"].evidence


def test_jax_breaks_what_its_row_says(jax):
    # JAX's arrays are immutable, and its legacy capsules of them are
    # writeable to their consumer (its row: immutable-unflagged); before
    # 0.12 it exports legacy capsules only (legacy-only-export). Without
    # x64 it has no 64-bit dtypes: its make refuses them.
    jnp = jax.numpy

    def make(shape, dtype, *, readonly=False):
        if np.dtype(dtype).itemsize * (2 if np.dtype(dtype).kind != "c" else 1) > 8 and not jax.config.jax_enable_x64:
            raise TypeError(f"{dtype} needs x64")
        return jnp.asarray(testing.values(shape, dtype))

    report = testing.check_producer(make)
    faults = _peers.export_faults_of(_peers.by_name("jax"), jax.__version__)
    expected = {"read-only-legacy-refused"} if "immutable-unflagged" in faults else set()
    if "legacy-only-export" in faults:
        expected.add("versioned-when-asked")  # (JAX 0.12's versioned capsules say READ_ONLY)
    assert set(report.failed) == expected, str(report)
    assert report["holds-the-array"].outcome == "passed"


def _pytest(tmp_path, source, *args):
    (tmp_path / "test_dlpack.py").write_text(source)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rsx", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    return done.returncode, done.stdout + done.stderr


def test_the_plugin_makes_a_test_per_rule_as_the_guide_shows(tmp_path, torch):
    import pathlib
    import re

    page = pathlib.Path(__file__).parents[1] / "docs" / "guide" / "conformance.md"
    if not page.exists():
        pytest.skip("the docs are not beside these tests")
    source = re.search(r"```python\n(# test_dlpack\.py\n.*?)```", page.read_text(), re.S).group(1)
    status, out = _pytest(tmp_path, source)
    assert status == 0, out
    assert re.search(r"\b11 passed, 2 skipped, 1 xfailed\b", out), out
    assert "XFAIL test_dlpack.py::test_dlpack::copy-true-flagged - allowed: torch's copies are its own" in out
    assert "not applicable: the library holds no read-only arrays" in out
    # Without allow=, the rule fails, naming what was asked and the standard's words.
    status, out = _pytest(tmp_path, source.replace('allow={"copy-true-flagged": "torch\'s copies are its own"}', ""))
    assert status == 1 and re.search(r"\b1 failed, 11 passed, 2 skipped\b", out), out
    assert "breaks 1 DLPack rule:\n- 2.2 copy-true-flagged: asked x.__dlpack__(max_version=(1, 0), copy=True)" in out


def test_the_plugin_leaves_everything_else_alone(tmp_path):
    # A test module without a ProducerTests: its tests as they are, and
    # nothing of gpu_dlpack (nor NumPy) imported by the plugin, which is
    # loaded.
    status, out = _pytest(tmp_path, "import sys\n\ndef test_alone(request):\n"
                          "    assert request.config.pluginmanager.has_plugin('gpu_dlpack')\n"
                          "    assert not {'gpu_dlpack', 'numpy'} & set(sys.modules)\n")
    assert status == 0 and "1 passed" in out, out


def test_producer_tests_refuse_an_allow_that_names_no_rule():
    with pytest.raises(ValueError, match="allow= names no rule: 'copy-flagged'"):
        testing.ProducerTests(numpy_make, allow={"copy-flagged": "a typo"})


def _docs_table() -> dict:
    """(library, version) -> the rule ids the guide's table says it breaks."""
    import pathlib
    import re

    page = pathlib.Path(__file__).parents[1] / "docs" / "guide" / "conformance.md"
    if not page.exists():
        pytest.skip("the docs are not beside these tests")
    text = page.read_text()
    table = text[text.index("## The peers, checked"):text.index("## The importers, checked")]
    rows = {}
    for library, versions, rules in re.findall(r"^\| ([\w.]+) \| ([\w., ]+) \| (.+) \|$", table, re.M):
        for v in versions.split(","):
            rows[(library, v.strip())] = set(re.findall(r"`([a-z0-9-]+)`", rules))
    return rows


def _measured(library):
    """(version, the rules it breaks) of an installed peer; skipped where it is not."""
    if library in conformance_peers.APART:
        done = subprocess.run([sys.executable, "-m", "tests.conformance_peers", library], capture_output=True,
                              text=True, timeout=600, cwd=pathlib_root(), env=_quiet_env())
        assert done.returncode == 0, done.stderr[-3000:]
        found = __import__("json").loads(done.stdout.strip().splitlines()[-1])
        if library not in found:
            pytest.skip(f"{library} is not installed")
        version, failed = found[library]
        return version, set(failed)
    try:
        make = conformance_peers.make_of(library)
    except ImportError:
        pytest.skip(f"{library} is not installed")
    return conformance_peers.version(library), set(testing.check_producer(make).failed)


def pathlib_root():
    import pathlib

    return str(pathlib.Path(__file__).parents[1])


def _quiet_env():
    import os

    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", JAX_PLATFORMS="cpu")


@pytest.mark.parametrize("library", list(conformance_peers.PEERS))
def test_each_peer_breaks_what_the_guide_and_the_fault_table_say(library):
    version, failed = _measured(library)
    # The fault table agrees: each producer fault it lists for this version
    # breaks its rule here, and each rule broken that a fault of the table
    # names is listed for this version.
    peer = _peers.by_name(library)
    table = _peers.export_faults_of(peer, version.partition(" ")[0]) if peer is not None else frozenset()
    for rule in testing.RULES.values():
        listed = table & set(rule.faults)
        assert bool(listed) == (rule.id in failed) or not rule.faults, (library, version, rule.id, sorted(table))
    rows = _docs_table()
    if (library, version) not in rows:
        pytest.skip(f"the guide's table has no row for {library} {version}: it breaks {sorted(failed)}")
    assert failed == rows[(library, version)], (library, version)


class _Held(gpu_dlpack.Producer):
    """A class of the producer kit, over a NumPy array."""

    def __init__(self, a):
        self.a = a

    def dlpack_memory(self):
        return self.a


def test_gpu_dlpacks_own_rows_of_the_guide():
    def wrapped(shape, dtype, *, readonly=False):
        return gpu_dlpack.wrap(testing.values(shape, dtype), readonly=readonly)

    def kit(shape, dtype, *, readonly=False):
        a = testing.values(shape, dtype)
        a.flags.writeable = not readonly
        return _Held(a)

    table = _docs_table()
    assert table[("gpu_dlpack.wrap", gpu_dlpack.__version__)] == set(testing.check_producer(wrapped).failed)
    assert table[("gpu_dlpack.Producer", gpu_dlpack.__version__)] == set(testing.check_producer(kit).failed)


# -- the importer's checks -------------------------------------------------------


class _LegacyAsker:
    """A producer seen by a consumer that asks for legacy capsules only."""

    def __init__(self, x):
        self.x = x

    def __dlpack__(self, **kw):
        return self.x.__dlpack__(**({"stream": kw["stream"]} if "stream" in kw else {}))

    def __dlpack_device__(self):
        return self.x.__dlpack_device__()


_kept = []  # what the leaking stand-ins hold for ever
_USED = ctypes.create_string_buffer(b"used_dltensor_versioned")  # a capsule's name: lives as long as the tests
_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(("PyCapsule_SetName", ctypes.pythonapi))


def standin_import(broken=None):
    """gpu_dlpack's importer (which keeps every rule), with the one fault
    ``broken`` names."""

    def from_dlpack(x, **kw):
        if broken == "asks-versioned":
            x = _LegacyAsker(x)
        if broken == "old-producer-asked-again":
            x = x.__dlpack__(stream=None, max_version=(1, 0))  # never asked again without it
        if broken == "copy-true-copies" and kw.get("copy") is True:
            kw["copy"] = None
        if broken == "unreachable-device-refused" and x.__dlpack_device__()[0] != 1:
            capsule = x.__dlpack__(max_version=(1, 0))
            _capsule.set_device(capsule, 1, 0)  # read as host memory
            x = capsule
        wrong = getattr(x, "wrong", None) or {}
        if (broken == "unknown-major-refused" and "version" in wrong) or (broken == "malformed-refused" and
                                                                          "lanes" in wrong):
            capsule = x.__dlpack__(max_version=(1, 0))  # read as if it were what this importer knows
            if "version" in wrong:
                _capsule.set_version(capsule, (1, 0))
            else:
                _capsule.set_dtype(capsule, 2, 32)
            x = capsule
        if broken == "refused-freed-once" and getattr(x, "dtype", None) == (99, 32):
            capsule = x.__dlpack__(max_version=(1, 0))
            _set_name(capsule, ctypes.addressof(_USED))  # claimed, and never freed
            raise BufferError("dtype code 99")
        got = gpu_dlpack.from_dlpack(x, **kw)
        if broken == "freed-once":
            _kept.append(got)
        aligned = got.ctypes.data % 64 == 0
        if (broken == "in-place" and aligned) or (broken == "unaligned-in-place" and not aligned):
            got = got.copy()
        if broken == "read-only-honoured" and not got.flags.writeable:
            raw = (ctypes.c_char * max(got.nbytes, 1)).from_address(got.ctypes.data)
            got = np.frombuffer(raw, got.dtype, got.size).reshape(got.shape)
        if broken == "imports-the-array" and got.dtype == np.int64:
            got = got.astype(np.int32)
        long_axes = [s for s, n in zip(got.strides, got.shape) if n > 1]
        if broken == "negative-strides" and any(s < 0 for s in long_axes):
            got = got[::-1]  # the values in the wrong places
        if broken == "stepped-strides" and got.ndim == 1 and got.strides[0] > got.itemsize:
            raise BufferError("only compact layouts")
        if broken == "fortran-order" and got.ndim == 2 and not got.flags.c_contiguous and got.flags.f_contiguous:
            got = np.ascontiguousarray(got).reshape(got.shape[::-1]).T.reshape(got.shape)
        if broken == "unreached-negative-stride" and any(s < 0 for s, n in zip(got.strides, got.shape) if n == 1):
            raise ValueError("negative strides")
        return got
    return from_dlpack


def test_an_importer_that_bounds_no_extent_fails_on_the_hostile_capsules():
    # It refuses what is plainly malformed (gpu_dlpack's importer does), and
    # takes a capsule whose extent or stride reaches past the address
    # space: 9.16 fails on those two, and only on them.
    def from_dlpack(x, **kw):
        wrong = getattr(x, "wrong", None) or {}
        if "strides" in wrong or max(wrong.get("shape", (0,))) > 1 << 40:
            return x.__dlpack__(max_version=(1, 0))  # taken, never read
        return gpu_dlpack.from_dlpack(x, **kw)

    row = testing.check_consumer(from_dlpack, isolate=False)["malformed-refused"]
    assert row.outcome == testing._report.FAILED
    assert row.evidence == ("from_dlpack(x) of a capsule of shape (2**62, 3): more bytes than an address space holds "
                            "imported it; from_dlpack(x) of a capsule of a stride of 2**61 elements: past the end of "
                            "the address space imported it")


def test_an_importer_that_keeps_every_rule_passes_every_check():
    report = testing.check_consumer(standin_import(), name="a stand-in")
    assert [row.outcome for row in report.rows] == ["passed"] * len(testing.CONSUMER_RULES), str(report)
    testing.assert_conforms(report)


@pytest.mark.parametrize("rule", list(testing.CONSUMER_RULES))
def test_an_importer_that_breaks_one_rule_fails_exactly_that_rule(rule):
    report = testing.check_consumer(standin_import(rule), name=f"a stand-in breaking {rule}")
    assert report.failed == (rule,), str(report)
    assert report[rule].evidence.startswith(("from_dlpack(", "int64")), report[rule].evidence
    with pytest.raises(AssertionError) as info:
        testing.assert_conforms(report)
    said = str(info.value)
    assert f"breaks 1 DLPack rule:\n- {testing.CONSUMER_RULES[rule].number} {rule}: " in said
    assert testing.CONSUMER_RULES[rule].text in said
    testing.assert_conforms(report, allow={rule: "decided otherwise"})


def test_the_consumer_rules_are_numbered_under_rule_9_and_listed_on_the_rules_page():
    import pathlib
    import re

    numbers = [tuple(map(int, r.number.split("."))) for r in testing.CONSUMER_RULES.values()]
    assert numbers == [(9, i) for i in range(1, len(numbers) + 1)]
    assert not set(testing.CONSUMER_RULES) & set(testing.RULES)
    page = pathlib.Path(__file__).parents[1] / "docs" / "internals" / "rules.md"
    if not page.exists():
        pytest.skip("the docs are not beside these tests")
    listed = re.findall(r"^\| (9\.\d+) \| `([a-z0-9-]+)` \|", page.read_text(), re.M)
    assert listed == [(r.number, r.id) for r in testing.CONSUMER_RULES.values()]


def test_an_importer_that_crashes_fails_the_rule_it_crashed_on_in_a_child_process():
    # tests.conformance_peers.aborts_on_steps kills its process on a step
    # (as torch 2.13 does on a negative stride): that rule fails, saying
    # how, and a new child checks the rules after it.
    report = testing.check_consumer("tests.conformance_peers:aborts_on_steps")
    assert report.failed == ("stepped-strides",), str(report)
    assert report["stepped-strides"].evidence == "from_dlpack aborts the process (SIGABRT) in this check"
    assert report.subject == "tests.conformance_peers:aborts_on_steps"


def test_an_importer_not_installed_is_said_so_before_any_child_starts():
    with pytest.raises(ModuleNotFoundError, match=r"no module named 'no_such_library' here: 'no_such_library:f'"):
        testing.check_consumer("no_such_library:f")
    with pytest.raises(ModuleNotFoundError, match="no_such_library"):
        testing.check_consumer("no_such_library.sub:f")


def test_the_children_import_from_where_the_parent_tells_its_interpreters_to(tmp_path, monkeypatch):
    # A module only the environment's PYTHONPATH names (as the test
    # command names the folder whose sitecustomize hides peers): the
    # children import it from there too.
    (tmp_path / "elsewhere_import.py").write_text("import gpu_dlpack\nfrom_dlpack = gpu_dlpack.from_dlpack\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(tmp_path)])
    rows = _children.apart("elsewhere_import:from_dlpack", ["imports-the-array"], ("float32",))
    assert rows == {"imports-the-array": (testing._report.PASSED, "")}, rows


def test_isolation_needs_a_name_a_child_process_can_import():
    with pytest.raises(ValueError, match=r"cannot be imported by name in a child process; pass a module's function"):
        testing.check_consumer(lambda x, **kw: x, isolate=True)
    assert _children.target_of(np.from_dlpack) == "numpy:from_dlpack"
    assert _children.target_of(gpu_dlpack.from_dlpack) == "gpu_dlpack._import:from_dlpack"
    assert _children.target_of(standin_import()) is None


def _consumer_docs_table() -> dict:
    text = _docs_text()
    table = text[text.index("## The importers, checked"):]
    rows = {}
    for library, versions, rules in re.findall(r"^\| ([\w.]+) \| ([\w., ]+) \| (.+) \|$", table, re.M):
        for v in versions.split(","):
            rows[(library, v.strip())] = set(re.findall(r"`([a-z0-9-]+)`", rules))
    return rows


def _docs_text() -> str:
    import pathlib

    page = pathlib.Path(__file__).parents[1] / "docs" / "guide" / "conformance.md"
    if not page.exists():
        pytest.skip("the docs are not beside these tests")
    return page.read_text()


@pytest.mark.parametrize("library", list(conformance_peers.CONSUMERS))
def test_each_importer_breaks_what_the_guide_and_the_fault_table_say(library, monkeypatch):
    # JAX as it comes (the test command turns x64 on, for the rest of the
    # suite): its row's narrows-64-bit holds.
    monkeypatch.setenv("JAX_ENABLE_X64", "0")
    try:
        version = conformance_peers.version(library)
    except Exception:
        pytest.skip(f"{library} is not installed")
    try:
        report = testing.check_consumer(conformance_peers.CONSUMERS[library])
    except ModuleNotFoundError as exc:  # installed, and hidden from this run
        pytest.skip(str(exc))
    missing = [row.evidence for row in report.rows if "No module named" in row.evidence]
    if missing:  # its importer imports a module hidden from this run (TensorFlow's ml_dtypes)
        pytest.skip(missing[0])
    failed = set(report.failed)
    peer = _peers.by_name(library)
    table = set(_peers.active_faults(peer, version.partition(" ")[0])) if peer is not None else set()
    for rule in testing.CONSUMER_RULES.values():
        listed = table & set(rule.faults)
        assert bool(listed) == (rule.id in failed) or not rule.faults, (library, version, rule.id, sorted(table))
    rows = _consumer_docs_table()
    if (library, version) not in rows:
        pytest.skip(f"the guide's table has no row for {library} {version}: it breaks {sorted(failed)}")
    assert failed == rows[(library, version)], (library, version)


def test_the_holds_rule_catches_jax_0_12_reading_padded_float4_as_packed(monkeypatch):
    # JAX 0.12 reads float4 data aligned to 64 bytes as two values a byte:
    # the rule imports aligned data, so it fails on every run, not only
    # where the allocator happens to place the array so.
    monkeypatch.setenv("JAX_ENABLE_X64", "0")
    pytest.importorskip("ml_dtypes")
    pytest.importorskip("jax")
    version = conformance_peers.version("jax")
    if tuple(int(p) for p in version.split(".")[:2]) < (0, 12):
        pytest.skip(f"JAX {version} refuses 4-bit data (0.12 is the first that imports it)")
    report = testing.check_consumer("jax.dlpack:from_dlpack", dtypes=("float4_e2m1fn", "float32"))
    row = report["imports-the-array"]
    assert row.outcome == "failed" and row.evidence.startswith(
        "float4_e2m1fn (5,): it holds [0.0, 0.0, 1.0, 0.0, 2.0], not [0.0, 1.0, 2.0, 3.0, 4.0]"), row
    assert "float32" not in row.evidence


def test_gpu_dlpacks_own_importer_row_of_the_guide():
    report = testing.check_consumer(gpu_dlpack.from_dlpack)
    assert _consumer_docs_table()[("gpu_dlpack.from_dlpack", gpu_dlpack.__version__)] == set(report.failed) == set()


def test_the_plugin_makes_a_test_per_consumer_rule(tmp_path):
    # An importer of the test module itself, which copies every import:
    # checked in a child process, which imports it by name.
    status, out = _pytest(tmp_path, "import numpy as np\nimport gpu_dlpack\nfrom gpu_dlpack import testing\n\n\n"
                          "def copies(x, **kw):\n    return np.array(gpu_dlpack.from_dlpack(x, **kw))\n\n\n"
                          "test_import = testing.ConsumerTests(copies, allow={'in-place': 'we copy'})\n")
    assert status == 1 and re.search(r"\b1 failed, 14 passed, 1 xfailed\b", out), out
    assert "XFAIL test_dlpack.py::test_import::in-place - allowed: we copy" in out
    assert "breaks 1 DLPack rule:\n- 9.4 unaligned-in-place: from_dlpack(wrap(a)) of host data 4 bytes past" in out


@pytest.mark.parametrize("versioned", [True, False])
def test_counted_capsules_count_every_deleter_call(versioned):
    # The capsules the importer's checks make: freed once by a consumer,
    # once by their own destructor when left unconsumed, and a deleter
    # called again is counted, not acted on (scripts/sanitize.sh runs this).
    import gc

    asked = {"max_version": (1, 0)} if versioned else {}
    a = _consumer._host_data()
    p = _consumer._Counted(a)
    got = gpu_dlpack.from_dlpack(p.__dlpack__(**asked))
    assert got.tolist() == a.tolist() and p.calls() == [0]
    del got
    gc.collect()
    assert p.calls() == [1]
    capsule = p.__dlpack__(**asked)
    assert _capsule.read(capsule).name == ("dltensor_versioned" if versioned else "dltensor")
    del capsule
    assert p.calls() == [1, 1]
    capsule = p.__dlpack__(**asked)
    mem, at = p.made[-1]
    deleter_at = 16 if versioned else 56  # dlpack.h's layouts: the deleter after manager_ctx
    deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.c_void_p.from_buffer(mem, deleter_at).value)
    _capsule.discard(capsule)  # claimed, its deleter run once
    deleter(ctypes.addressof(mem))  # and again, as a faulty consumer would
    assert p.calls() == [1, 1, 2]
    del capsule
    assert p.calls() == [1, 1, 2]


@pytest.mark.gpu
def test_cupys_arrays_on_a_gpu_break_what_the_guide_says(cp):
    # CuPy's producer, its arrays on the GPU (the simulated CUDA in the test
    # command, scripts/gpu-sim.sh): every capsule read back through a copy
    # to the host.
    def make(shape, dtype, *, readonly=False):
        if readonly:
            raise NotImplementedError("CuPy has no read-only arrays")
        return cp.asarray(testing.values(shape, dtype))

    report = testing.check_producer(make)
    assert report["holds-the-array"].outcome == "passed", str(report)
    assert _docs_table().get(("cupy", f"{cp.__version__} on a GPU")) == set(report.failed), str(report)
