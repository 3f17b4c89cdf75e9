"""``gpu-dlpack doctor``: the report's structure, its JSON schema, the exit
status, and that a missing or broken library gets its row.

The report is measured live against the real peers (numpy, torch, jax,
array_api_strict, cupy without a GPU). Broken libraries are small modules
written to a temporary directory: a library that fails to import, one whose
arrays fail to export, one whose from_dlpack fails.
"""

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpu_dlpack
from gpu_dlpack import _cli, _explain, _peers, doctor

from .helpers import without_peers

SEVERITIES = {"failure", "refused", "hazard", "fixed", "note"}
OUTCOMES = {"zero-copy", "copied", "refused", "error", "wrong-values"}


@pytest.fixture(scope="module")
def report():
    return doctor.run()


def row(report, name):
    (r,) = [r for r in report["libraries"] if r["name"] == name]
    return r


def host(report):
    (m,) = [m for m in report["matrices"] if m["device"] == "cpu"]
    return m


def _release(version):
    from gpu_dlpack import _peers

    return _peers.release(version)


def cell(report, producer, consumer):
    (c,) = [c for c in host(report)["cells"] if (c["producer"], c["consumer"]) == (producer, consumer)]
    return c


# -- schema ------------------------------------------------------------------


def _is(value, *types):
    return any(value is None if t is None else isinstance(value, t) for t in types)


def check_schema(doc):
    """The schema documented in gpu_dlpack.doctor, checked field by field."""
    assert doc["schema"] == "gpu_dlpack.doctor/1"
    g = doc["gpu_dlpack"]
    assert _is(g["version"], str) and len(g["dlpack_version"]) == 2 and len(g["min_dlpack_version"]) == 2
    from gpu_dlpack._compiled import core

    assert g["core"] == core.__file__ and os.path.isfile(g["core"])
    # The CUDA runtime the core's calls go to: CuPy's own, through its C entries.
    if importlib.util.find_spec("cupy") is not None:
        assert g["runtime"].startswith("CuPy's own runtime, through cupy_backends.cuda.api.runtime.__pyx_capi__")
    p = doc["platform"]
    for key in ("python", "implementation", "executable", "os", "machine"):
        assert _is(p[key], str), key
    gpu = p["gpu"]
    assert _is(gpu["usable"], bool)
    assert gpu["backend"] in ("cuda", "rocm", None)
    assert _is(gpu["reason"], str, None) and _is(gpu["nvidia_driver"], str, None)
    assert (gpu["reason"] is None) == gpu["usable"]
    if gpu["cupy"] is not None:
        c = gpu["cupy"]
        assert all(_is(d, str) for d in c["distributions"])
        for key in ("version", "runtime_version", "driver_version", "capture", "error"):
            assert _is(c[key], str, None), key
        assert _is(c["device_count"], int, None)
        if c["version"] is not None:  # CuPy imported: whether it exposes capture is said
            assert c["capture"].startswith(("yes: ", "no: ")), c["capture"]
    for d in gpu["devices"]:
        assert _is(d["index"], int) and _is(d["name"], str) and _is(d["memory_bytes"], int)
        assert _is(d["compute_capability"], str)
    if gpu["torch"] is not None:
        assert _is(gpu["torch"]["cuda_available"], bool) and _is(gpu["torch"]["device_count"], int)
    if gpu["jax"] is not None:
        assert _is(gpu["jax"]["backend"], str) and all(_is(d, str) for d in gpu["jax"]["devices"])
    for acc in p["accelerators"]:
        assert _is(acc["library"], str) and _is(acc["device"], str)
        assert acc["dlpack"] is None or (len(acc["dlpack"]) == 2 and all(_is(v, int) for v in acc["dlpack"]))
        for e in acc["exchanges"]:
            assert _is(e["call"], str) and _is(e["ok"], bool) and _is(e["detail"], str)
    for r in doc["libraries"]:
        check_library(r)
    for m in doc["matrices"]:
        assert m["device"] in ("cpu", "cuda", "rocm", "gpu")
        assert len(m["cells"]) == len(m["producers"]) * len(m["consumers"])
        for skip in m["skipped"]:
            assert _is(skip["producer"], str) and _is(skip["reason"], str)
            assert skip["producer"] not in m["producers"]
        for c in m["cells"]:
            assert c["producer"] in m["producers"] and c["consumer"] in m["consumers"]
            for side in ("direct", "via"):
                check_result(c[side])
    for f in doc["findings"]:
        assert f["severity"] in SEVERITIES
        assert f["subject"] and f["problem"] and f["remedy"]
    s = doc["summary"]
    assert set(s) == {"exchanges", "through_gpu_dlpack_ok", "through_gpu_dlpack_failed", "refused", "hazards",
                      "uncorrected"}
    assert s["exchanges"] == sum(len(m["cells"]) for m in doc["matrices"])
    assert s["uncorrected"] == sum(f.get("strict", False) for f in doc["findings"])
    for f in doc["findings"]:
        if "hazard" in f:
            assert f["strict"] is bool(_explain.hazards()[f["hazard"]].get("strict"))
    assert _is(doc["strict"], bool)
    assert doc["exit_status"] == (1 if s["through_gpu_dlpack_failed"] or (doc["strict"] and s["uncorrected"]) else 0)


def check_library(r):
    assert _is(r["name"], str) and _is(r["module"], str) and _is(r["installed"], bool)
    assert _is(r["version"], str, None) and _is(r["error"], str, None)
    if r["producer"] is not None and r["producer"]["probed"]:
        answer = r["producer"]["device_answer"]
        assert answer is None or (len(answer) == 2 and _is(answer[0], int) and _is(answer[1], int, None))
    # None: not installed, or no row of gpu_dlpack's table; [] a row with no fault for this version.
    assert r["table"] is None or isinstance(r["table"], list)
    u = r["unopened"]
    assert u is None or (_is(u["platform"], str) and _is(u["busy"], bool) and _is(u["reason"], str)
                         and _is(u["error"], str) and _is(u["explain"], str, None) and u["probed_on"] == "cpu")
    assert r["table"] is not None or not r["installed"] or _peers.by_name(r["module"]) is None
    for t in r["table"] or ():
        assert t["role"] in ("consumer", "producer") and _is(t["fault"], str) and _is(t["why"], str)
        assert t["state"] in ("holds", "no longer holds", "not measured")
    if not r["installed"]:
        assert r["error"] == "not installed" and r["producer"] is None and r["consumer"] is None
        return
    prod, cons = r["producer"], r["consumer"]
    if prod is not None and prod["probed"]:
        assert set(prod["capsules"]) == {"none", "1.0"}
        for cap in prod["capsules"].values():
            assert "error" in cap or (cap["name"] in ("dltensor", "dltensor_versioned") and _is(cap["version"], list, None))
        assert set(prod["keywords"]) == {"stream", "max_version", "dl_device", "copy"}
        assert all(_is(v, bool) for v in prod["keywords"].values())
        assert _is(prod["floor"], list, None)
        if prod["read_only"] is not None:
            assert _is(prod["read_only"]["flag"], bool, None)
            assert prod["read_only"]["legacy"] in ("refused", "exported", "versioned", None)
        assert _is(prod["copy"]["copies"], bool, None) and _is(prod["copy"]["flag"], bool, None)
    elif prod is not None:
        assert _is(prod["reason"], str)
    if cons is not None and cons["probed"]:
        assert _is(cons["call"], str) and _is(cons["sends"], dict, None) and _is(cons["error"], str, None)
        assert _is(cons["zero_copy"], bool, None) and _is(cons["unaligned"], bool, str)
        assert _is(cons["copy"]["forwarded"], bool, None) and _is(cons["copy"]["copied"], bool, None)
        assert _is(cons["read_only"]["honoured"], bool, None) and _is(cons["read_only"]["detail"], str)
        assert set(cons["raw_capsules"]) == {"legacy", "versioned"}
        assert all(v is True or _is(v, str) for v in cons["raw_capsules"].values())
        assert cons["takes"] in ("producers", "capsules")
        if "faults" in cons:
            from gpu_dlpack._peers import FAULTS

            f = cons["faults"]
            assert set(f) == {"measured", "table", "unknown", "gone"}
            assert all(x in FAULTS for v in f.values() for x in v)
            assert set(f["unknown"]) <= set(f["measured"]) and set(f["gone"]) <= set(f["table"])
            assert set(cons["strides"]) == {"negative", "stepped", "transposed"}
            assert all(_is(o, str) for o in cons["strides"].values())
    elif cons is not None:
        assert _is(cons["reason"], str)


def check_result(r):
    assert r["outcome"] in OUTCOMES and _is(r["call"], str)
    assert r["ok"] == (r["outcome"] in ("zero-copy", "copied"))
    assert (r["error"] is not None) == (r["outcome"] in ("error", "refused"))
    assert _is(r["explain"], str, None) and _is(r["request"], dict, None)
    assert all(h in _explain.hazards() for h in r["hazards"])


def test_report_follows_the_documented_schema(report):
    check_schema(report)


def test_json_output_is_the_report(report):
    assert json.loads(doctor.to_json(report)) == json.loads(json.dumps(report))


def test_every_library_asked_for_has_a_row(report):
    names = [r["name"] for r in report["libraries"]]
    assert names[:6] == ["numpy", "torch", "jax", "cupy", "array_api_strict", "numba"]
    for r in report["libraries"]:
        installed = importlib.util.find_spec(r["module"].split(".")[0]) is not None
        assert r["installed"] == installed, r["name"]


def test_platform_says_why_the_gpu_is_not_usable(report):
    gpu = report["platform"]["gpu"]
    if gpu["usable"]:
        assert gpu["devices"] and gpu["backend"] in ("cuda", "rocm")
    else:
        assert gpu["reason"]
        if importlib.util.find_spec("cupy") is not None:
            assert any(d.startswith("cupy") for d in gpu["cupy"]["distributions"])


# -- measured facts (the peers' behaviour in SPEC section 5) -------------------


def test_the_read_only_and_copy_cells_agree_with_the_rules_that_judge_them(report):
    # One read-only datum per library, displayed and judged: any of its
    # arrays where they are all immutable (JAX, TensorFlow, pyarrow), whose
    # legacy export is rule 5.2's failure and the display's "legacy export!".
    seen = 0
    for r in report["libraries"]:
        prod = r.get("producer") or {}
        rules, ro = prod.get("rules"), prod.get("read_only")
        if not prod.get("probed") or rules is None:
            continue
        flagged, legacy = rules["read-only-flagged"][0], rules["read-only-legacy-refused"][0]
        if ro is None:
            assert flagged == legacy == "not applicable", r["name"]
            continue
        seen += 1
        assert (ro["legacy"] == "exported") == (legacy == "failed"), (r["name"], ro, rules["read-only-legacy-refused"])
        # (a versioned request the producer cannot take fails 5.1 too: pyarrow 25 takes no max_version)
        assert (ro["flag"] is False or (ro["flag"] is None and "versioned export failed" in (ro["detail"] or ""))) == (
            flagged == "failed"), (r["name"], ro, rules["read-only-flagged"])
    assert seen  # NumPy's at least
    # The copy=True cell and rules 2.1 and 2.2 ask the same request of the same array.
    for r in report["libraries"]:
        prod = r.get("producer") or {}
        if prod.get("probed") and prod.get("rules") is not None:
            copy, rules = prod["copy"], prod["rules"]
            assert (copy["copies"] is True) == (rules["copy-true-new-memory"][0] == "passed"), (r["name"], copy)
            assert (copy["flag"] is False) == (rules["copy-true-flagged"][0] == "failed"), (r["name"], copy)
    jax_row = row(report, "jax")
    if jax_row["version"] is not None:
        assert jax_row["producer"]["read_only"]["legacy"] == "exported"


def test_producers_are_measured(report, jax):
    numpy = row(report, "numpy")["producer"]
    assert numpy["capsules"]["none"] == {"name": "dltensor", "version": None, "flags": 0}
    assert numpy["capsules"]["1.0"]["name"] == "dltensor_versioned" and numpy["capsules"]["1.0"]["flags"] == 0
    assert numpy["device_answer"] == [1, 0]
    assert numpy["read_only"] == {"flag": True, "legacy": "refused", "detail": None}
    assert numpy["copy"] == {"copies": True, "flag": True, "detail": None}
    torch_row = row(report, "torch")
    if torch_row["version"] is not None:
        # torch makes read-only data from 2.14 (ReadOnlyTensorWrapper), whose
        # versioned capsules say READ_ONLY (2.15.0 answers a request for a
        # legacy capsule with such a versioned one too: "versioned"); before,
        # it has none: not applicable.
        if _release(torch_row["version"]) >= (2, 14):
            got = torch_row["producer"]["read_only"]
            assert got["flag"] is True and got["detail"] is None and got["legacy"] in ("refused", "versioned"), got
        else:
            assert torch_row["producer"]["read_only"] is None
    jax_row = row(report, "jax")
    jax = jax_row["producer"]
    # JAX gives a legacy capsule whatever is asked before 0.12; 0.12 a versioned one (DLPack 1.3)
    if _release(jax_row["version"]) < (0, 12):
        assert jax["capsules"]["1.0"] == {"name": "dltensor", "version": None, "flags": 0}
    else:
        assert {k: jax["capsules"]["1.0"][k] for k in ("name", "version")} == {
            "name": "dltensor_versioned", "version": [1, 3]}
    assert jax["floor"] == [0, 5] and "JAX does not support" in jax["floor_error"]


def test_consumers_are_measured(report, torch, jax):
    numpy, torch, jax = (row(report, n)["consumer"] for n in ("numpy", "torch", "jax"))
    assert numpy["sends"] == {"max_version": [1, 0]} and numpy["read_only"]["honoured"] is True
    assert torch["read_only"]["honoured"] is False
    assert torch["raw_capsules"] == {"legacy": True, "versioned": True}
    if _release(row(report, "jax")["version"]) < (0, 12):
        assert jax["sends"] == {} and jax["read_only"]["honoured"] is None  # legacy: it cannot be told
    else:
        assert jax["sends"] == {"max_version": [1, 3]} and jax["read_only"]["honoured"] is True
    assert numpy["copy"]["forwarded"] is True and jax["copy"]["forwarded"] is False


def test_every_row_of_the_table_for_the_installed_version_is_listed_and_judged(report, torch):
    from gpu_dlpack import _peers

    r = row(report, "torch")
    peer = _peers.by_name("torch")
    listed = {(t["role"], t["fault"]): t["state"] for t in r["table"]}
    assert set(listed) == ({("consumer", f) for f in _peers.active_faults(peer, r["version"])}
                           | {("producer", f) for f in _peers.export_faults_of(peer, r["version"])})
    assert listed[("consumer", "read-only-ignored")] == "holds"  # torch 2.13 and 2.14 ignore READ_ONLY
    assert "gpu_dlpack's table of peer faults, for the installed versions" in doctor.render(report)


def test_every_installed_library_of_the_table_is_listed_each_fault_judged(report):
    # Every row of gpu_dlpack's table whose library is installed is in the
    # report, the ones with no fault for their version too ("none").
    installed = {p.name for p in _peers.PEERS if importlib.util.find_spec(p.module) is not None}
    listed = {_peers.by_name(r["module"]).name: r for r in report["libraries"]
              if r["installed"] and _peers.by_name(r["module"]) is not None}
    assert installed <= set(listed), installed - set(listed)
    text = doctor.render(report)
    table = text[text.index("gpu_dlpack's table of peer faults"):].split("\n\n")[0]
    for name in installed:
        r = listed[name]
        peer = _peers.by_name(r["module"])
        faults = set(_peers.active_faults(peer, r["version"])) | set(_peers.export_faults_of(peer, r["version"]))
        assert {t["fault"] for t in r["table"]} == faults
        assert any(line.split()[:1] == [name] for line in table.splitlines()), name
        if not faults:
            assert any(line.split()[:1] == [name] and "none for this version" in line for line in table.splitlines())


def test_tvm_ffi_is_judged_by_what_it_asks_a_plain_producer(report):
    # Through gpu_dlpack.wrap, tvm-ffi reads the C exchange API and gets a
    # versioned capsule; of a producer with __dlpack__ alone it asks for a
    # legacy one: its row "legacy-only" holds. Its Tensor takes no item
    # assignment: the write goes through NumPy's import of it, which is
    # writeable and reaches the read-only source ("read-only-ignored").
    pytest.importorskip("tvm_ffi")
    r = row(report, "tvm_ffi")
    cons = r["consumer"]
    assert cons["asks"] == {} and "max_version" in cons["sends"]
    assert cons["read_only"]["honoured"] is False and "export is writeable" in cons["read_only"]["detail"]
    assert {t["fault"]: t["state"] for t in r["table"]} == {"legacy-only": "holds", "read-only-ignored": "holds"}
    # ... and the direct path's finding says so too (an empty request is a legacy one).
    assert any(f.get("hazard") == "consumer-legacy-only" and f["subject"] == "tvm_ffi" for f in report["findings"])
    assert all(c["via"]["ok"] for c in host(report)["cells"] if c["consumer"] == "tvm_ffi")


def test_pyarrow_and_dask_are_producers_only_with_their_rows(report):
    pytest.importorskip("pyarrow")
    pytest.importorskip("dask.array")
    pa, d = row(report, "pyarrow"), row(report, "dask")
    assert pa["consumer"]["reason"] == d["consumer"]["reason"] == "imports no DLPack"
    # Before 26.0.1 its __dlpack__ takes no max_version: legacy capsules
    # only, which the doctor's probe (a versioned request, refused) cannot
    # judge; gpu_dlpack.testing measures it (tests/test_testing.py).
    legacy_only = [("legacy-only-export", "not measured")] if _peers.release(pa["version"]) < (26, 0, 1) else []
    assert pa["producer"]["probed"] and [(t["fault"], t["state"]) for t in pa["table"]] == [
        *legacy_only, ("read-only-legacy-export", "holds")]
    assert all(c["via"]["ok"] or c["via"]["outcome"] == "refused"
               for c in host(report)["cells"] if c["producer"] == "pyarrow")
    assert not d["producer"]["probed"] and "lazy array of chunks" in d["producer"]["reason"]
    assert d["table"] == []


def test_a_row_the_probe_no_longer_finds_says_so():
    # A consumer that honours READ_ONLY and takes a negative stride in place,
    # where the table says it does neither: both rows no longer hold.
    from gpu_dlpack.doctor import _faults

    honest = {"probed": True, "read_only": {"honoured": True, "detail": "refused a write"},
              "strides": {"negative": "zero-copy", "stepped": "zero-copy", "transposed": "zero-copy"}}
    r = {"name": "torch", "module": "torch", "installed": True, "version": "2.13.0", "consumer": honest}
    honest["faults"] = _faults.compare(r)
    states = {t["fault"]: t["state"] for t in _faults.table_rows(r) if t["role"] == "consumer"}
    assert states == {"read-only-ignored": "no longer holds", "negative-strides": "no longer holds"}
    assert sorted(honest["faults"]["gone"]) == ["negative-strides", "read-only-ignored"]
    honest["read_only"]["honoured"] = False
    honest["faults"] = _faults.compare(r)
    assert {t["fault"]: t["state"] for t in _faults.table_rows(r)}["read-only-ignored"] == "holds"


_KEPT = ["passed", ""]
_LEGACY = ["failed", "asked x.__dlpack__(max_version=(1, 0)); it gave a legacy 'dltensor' capsule"]
_WRITEABLE_LEGACY = ["failed", "asked x.__dlpack__() of read-only data; it gave a capsule its consumer may write through"]


@pytest.mark.parametrize("rules, states", [
    ({"versioned-when-asked": _LEGACY, "read-only-flagged": ["not applicable", "a legacy capsule has no flags"],
      "read-only-legacy-refused": _WRITEABLE_LEGACY,
      "dlpack-device": ["failed", "x.__dlpack_device__() returned (1, None), not a pair of ints"]},
     {"legacy-only-export": "holds", "immutable-unflagged": "holds", "device-id-none": "holds"}),
    ({"versioned-when-asked": _KEPT, "read-only-flagged": _KEPT, "read-only-legacy-refused": _KEPT, "dlpack-device": _KEPT},
     {"legacy-only-export": "no longer holds", "immutable-unflagged": "no longer holds",
      "device-id-none": "no longer holds"}),
    # JAX 0.12: versioned capsules flagged READ_ONLY, but its legacy ones cannot say it
    ({"versioned-when-asked": _KEPT, "read-only-flagged": _KEPT, "read-only-legacy-refused": _WRITEABLE_LEGACY,
      "dlpack-device": _KEPT},
     {"legacy-only-export": "no longer holds", "immutable-unflagged": "holds", "device-id-none": "no longer holds"}),
    # a rule that failed otherwise, or did not apply, cannot say
    ({"versioned-when-asked": ["failed", "asked x.__dlpack__(max_version=(1, 0)); it raised TypeError: no"],
      "read-only-flagged": ["failed", "its capsule's flags are 0: no READ_ONLY"], "read-only-legacy-refused": _KEPT,
      "dlpack-device": ["not applicable", "no capsule to compare with"]},
     {"legacy-only-export": "not measured", "immutable-unflagged": "holds", "device-id-none": "not measured"}),
])
def test_the_producer_rows_are_measured_by_the_rules_on_its_host_arrays(monkeypatch, rules, states):
    from gpu_dlpack import _peers
    from gpu_dlpack.doctor import _faults

    peer = _peers.Peer("lib", "lib", export_faults=tuple(_peers.Fault(f) for f in states))
    monkeypatch.setattr(_peers, "by_name", lambda name: peer)
    prod = {"probed": True, "rules": rules}
    r = {"name": "lib", "module": "lib", "installed": True, "version": "1.0", "producer": prod}
    assert {t["fault"]: t["state"] for t in _faults.table_rows(r) if t["role"] == "producer"} == states


def test_a_producer_row_that_no_longer_holds_fails_strict_where_the_layer_acts_on_it(monkeypatch):
    from gpu_dlpack import _peers
    from gpu_dlpack.doctor import _faults, _findings

    kept = {"versioned-when-asked": _KEPT, "read-only-flagged": _KEPT, "read-only-legacy-refused": _KEPT,
            "dlpack-device": _KEPT}
    keywords = {"stream": True, "max_version": True, "dl_device": True, "copy": True}
    versioned = {"name": "dltensor_versioned", "version": [1, 3], "flags": 1}
    capsules = {"none": versioned, "1.0": versioned}
    # A legacy-only export fixed: the layer's adaptation acts on nothing, a note in the table only.
    peer = _peers.Peer("lib", "lib", export_faults=(_peers.Fault("legacy-only-export"),))
    prod = {"probed": True, "rules": dict(kept), "keywords": keywords, "capsules": capsules}
    r = {"name": "lib", "module": "lib", "installed": True, "error": None, "version": "1.0", "producer": prod}
    monkeypatch.setattr(_peers, "by_name", lambda name: peer)
    r["table"] = _faults.table_rows(r)
    assert r["table"][0]["state"] == "no longer holds"
    assert not [f for f in _findings._library_findings(r) if f["hazard"] == "producer-fault-gone"]
    # Immutable arrays now flagged in every capsule: the layer still refuses their legacy capsules.
    peer = _peers.Peer("lib", "lib", export_faults=(_peers.Fault("immutable-unflagged"),))
    monkeypatch.setattr(_peers, "by_name", lambda name: peer)
    prod = {"probed": True, "rules": dict(kept), "keywords": keywords, "capsules": capsules}
    r = {"name": "lib", "module": "lib", "installed": True, "error": None, "version": "1.0", "producer": prod}
    r["table"] = _faults.table_rows(r)
    (found,) = [f for f in _findings._library_findings(r) if f["hazard"] == "producer-fault-gone"]
    assert found["strict"] and "immutable-unflagged" in found["problem"] and "lib 1.0" in found["problem"]
    prod["rules"]["read-only-legacy-refused"] = _WRITEABLE_LEGACY
    r["table"] = _faults.table_rows(r)
    assert not [f for f in _findings._library_findings(r) if f["hazard"] == "producer-fault-gone"]


def test_cupy_without_gpu_is_a_row_with_the_reason(report):
    if importlib.util.find_spec("cupy") is None or report["platform"]["gpu"]["usable"]:
        pytest.skip("needs CuPy installed on a machine without a usable GPU")
    cupy = row(report, "cupy")
    assert cupy["installed"] and cupy["version"]
    assert not cupy["producer"]["probed"] and "GPU" in cupy["producer"]["reason"]
    assert "CPU arrays cannot be directly imported" in cupy["consumer"]["error"]


def test_matrix_covers_every_host_producer_and_consumer(report, torch, jax, xp_strict):
    m = host(report)
    assert {"numpy", "numpy (read-only)", "torch", "jax", "array_api_strict"} <= set(m["producers"])
    assert {"numpy", "torch", "jax", "array_api_strict"} <= set(m["consumers"])
    assert "cupy" not in m["consumers"]


def test_a_sharded_jax_array_is_a_producer_row_the_layer_fixes(report, jax):
    if len(jax.devices("cpu")) < 2:
        pytest.skip("needs two JAX host devices")
    m = host(report)
    assert "jax (sharded)" in m["producers"]
    for consumer in ("numpy", "torch", "jax"):
        if importlib.util.find_spec(consumer) is None:
            continue  # torch is not installed on every interpreter of the matrix
        c = cell(report, "jax (sharded)", consumer)
        assert c["direct"]["outcome"] == "error"
        assert c["direct"]["explain"] in ("jax-unsharded-only", "jax-singular-device")
        assert c["via"]["outcome"] == "copied" and c["via"]["ok"]
    fixed = [f for f in report["findings"] if f["subject"].startswith("jax (sharded) -> ")]
    assert fixed and {f["severity"] for f in fixed} == {"fixed"}


def test_a_library_that_speaks_the_cuda_array_interface_is_named_so(libdir):
    name = libdir("doctor_test_cai", """
        import numpy as np

        class Array:
            def __init__(self, a):
                self.a = np.ascontiguousarray(a)
                self.__cuda_array_interface__ = {
                    "shape": self.a.shape, "typestr": self.a.dtype.str,
                    "data": (self.a.ctypes.data, False), "version": 3, "stream": None,
                }

        def asarray(a):
            return Array(a)
    """)
    rep = doctor.run(extra=[name])
    reason = row(rep, name)["producer"]["reason"]
    assert "speaks the CUDA Array Interface" in reason and "gpu_dlpack.wrap(x)" in reason


def test_zero_copy_is_judged_by_pointers(report, torch):
    c = cell(report, "torch", "numpy")
    assert c["direct"]["outcome"] == "zero-copy" and c["via"]["outcome"] == "zero-copy"
    assert c["via"]["call"] == "gpu_dlpack.from_dlpack(x)"


def test_read_only_numpy_into_jax_fails_directly_and_is_refused_by_rule(report, jax):
    c = cell(report, "numpy (read-only)", "jax")
    if _release(jax.__version__) >= (0, 12):  # it asks for versioned capsules: READ_ONLY can be said
        assert c["direct"]["outcome"] == c["via"]["outcome"] == "zero-copy" and c["via"]["ok"]
        assert c["via"]["request"] == {"max_version": [1, 3]}
        assert not [f for f in report["findings"] if f["subject"].startswith("numpy (read-only) -> jax")]
        return
    assert c["direct"]["outcome"] == "error" and c["direct"]["explain"] == "numpy-readonly-legacy"
    assert c["via"]["outcome"] == "refused" and c["via"]["explain"] == "gpu_dlpack-readonly-legacy"
    assert c["via"]["request"] == {}
    (f,) = [f for f in report["findings"] if f["subject"].startswith("numpy (read-only) -> jax")]
    assert f["severity"] == "refused" and "copy" in f["remedy"]


def test_consumer_writing_through_read_only_is_a_hazard_with_a_remedy(report, torch):
    c = cell(report, "numpy (read-only)", "torch")
    assert "consumer-ignores-read-only" in c["via"]["hazards"]
    (f,) = [f for f in report["findings"] if f.get("hazard") == "consumer-ignores-read-only" and f["subject"] == "torch"]
    assert "copy=True" in f["remedy"]


def test_findings_are_sorted_by_severity(report):
    order = [doctor.SEVERITIES.index(f["severity"]) for f in report["findings"]]
    assert order == sorted(order)


# -- exit status ---------------------------------------------------------------


def test_exit_status_0_when_every_exchange_through_gpu_dlpack_works(report):
    assert report["summary"]["through_gpu_dlpack_failed"] == 0
    assert report["exit_status"] == 0


@pytest.fixture
def libdir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name, source):
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    yield write
    for name in list(sys.modules):
        if name.startswith("doctor_test_"):
            del sys.modules[name]


NUMPY_LIKE = """
    import numpy as np

    class Array:
        def __init__(self, a):
            self.a = np.ascontiguousarray(a)
        def __dlpack__(self, **kw):
            {export}
        def __dlpack_device__(self):
            return (1, 0)
        def __setitem__(self, i, v):
            self.a[i] = v

    def asarray(a):
        return Array(a)

    def from_dlpack(x, copy=None):
        {consume}
"""


def test_exit_status_1_when_an_exchange_through_gpu_dlpack_fails(libdir):
    name = libdir("doctor_test_badconsumer", NUMPY_LIKE.format(
        export="return self.a.__dlpack__(**kw)",
        consume="raise RuntimeError('this consumer fails every import')",
    ))
    rep = doctor.run(extra=[name])
    check_schema(rep)
    assert name in host(rep)["consumers"]
    bad = [c for c in host(rep)["cells"] if c["consumer"] == name]
    assert bad and all(c["via"]["outcome"] == "error" for c in bad)
    assert rep["summary"]["through_gpu_dlpack_failed"] == len(bad)
    assert rep["exit_status"] == 1
    assert any(f["severity"] == "failure" and name in f["subject"] for f in rep["findings"])


def test_a_refusal_no_refusing_rule_demands_fails_the_run_when_the_direct_exchange_works(monkeypatch, torch):
    # A defect injected into the layer: every export of a host producer
    # other than NumPy is refused as unreachable (rule 3, Device), while the
    # direct exchanges work.
    from gpu_dlpack import _devices, _errors, _exchange

    def unreachable(x, source, *args):
        raise _errors.unreachable(source, _devices.CPU, "an injected defect")

    monkeypatch.setattr(_exchange, "host_answer", unreachable)
    from gpu_dlpack import _wiring
    from gpu_dlpack._compiled import core

    monkeypatch.setattr(_wiring, "EXCHANGE_API", False)  # the core would pass torch's tensor on in C
    core.forget()
    try:
        rep = doctor.run(peers=[p for p in doctor.PEERS if p.name in ("numpy", "torch")])
    finally:
        monkeypatch.undo()
        core.forget()
    check_schema(rep)
    c = cell(rep, "torch", "torch")
    assert c["direct"]["ok"] and c["via"]["outcome"] == "error"
    assert c["via"]["explain"] == "gpu_dlpack-unreachable"
    (f,) = [f for f in rep["findings"] if f["subject"] == "torch -> torch (cpu)"]
    assert f["severity"] == "failure" and "rule 3 (Device)" in f["problem"]
    assert rep["exit_status"] == 1 and rep["summary"]["through_gpu_dlpack_failed"] >= 1
    assert doctor.render(rep).rstrip().splitlines()[-1].startswith("FAILED:")


def test_a_refusal_by_a_rule_that_exists_to_refuse_names_the_rule(report, jax):
    if _release(jax.__version__) >= (0, 12):
        pytest.skip(f"JAX {jax.__version__} asks for versioned capsules: no read-only data is refused it")
    c = cell(report, "numpy (read-only)", "jax")
    assert c["via"]["outcome"] == "refused"
    (f,) = [f for f in report["findings"] if f["subject"] == "numpy (read-only) -> jax (cpu)"]
    assert f["severity"] == "refused" and "rule 5 (Read-only)" in f["problem"]


def test_the_doctor_finds_each_library_where_convert_does():
    # One table says where a library lives and where its from_dlpack is
    # (gpu_dlpack._peers): the doctor's peers say only how to make arrays,
    # and probe the very function convert hands arrays to.
    from gpu_dlpack import _convert, _peers

    checked = 0
    for peer in doctor.PEERS:
        if peer.where is not None:  # a library with no row (dpnp, dpctl)
            assert _peers.by_name(peer.name) is None, peer.name
            continue
        row_ = _peers.by_name(peer.name)
        assert (peer.module, peer.consumer, peer.submodules) == (row_.module, row_.consumer, row_.submodules)
        if row_.lands is not None or not row_.consumer or importlib.util.find_spec(row_.module) is None:
            continue  # gpu_dlpack lands NumPy and CuPy itself; pyarrow and dask take none
        try:
            module = importlib.import_module(peer.module)
        except Exception:  # installed, but broken here: the doctor says so
            continue
        for sub in peer.submodules:
            importlib.import_module(sub)
        assert _peers.named_callable(module, peer.consumer)[0] is _convert._read_consumer(peer.name).call, peer.name  # uncached
        checked += 1
    if not checked:  # the run on NumPy alone, or with the optional peers hidden
        pytest.skip("no library here whose own from_dlpack convert calls")


def test_missing_library_gets_a_row():
    absent = doctor.generic_peer("doctor_test_not_installed_anywhere")
    rep = doctor.run(peers=[doctor.PEERS[0], absent])
    r = row(rep, "doctor_test_not_installed_anywhere")
    assert r == {"name": "doctor_test_not_installed_anywhere", "module": "doctor_test_not_installed_anywhere",
                 "installed": False, "version": None, "error": "not installed", "unopened": None,
                 "producer": None, "consumer": None, "table": None}  # not installed: no row of the table applies
    check_schema(rep)


def test_the_tables_keep_their_columns_when_a_library_is_missing():
    # A row of a library that is not installed has a name and a reason: its
    # name, longer than any installed one's, widens the first column of
    # every table it is in, and each column starts where its heading does.
    absent = doctor.generic_peer("doctor_test_not_installed_anywhere")
    text = doctor.render(doctor.run(peers=[doctor.PEERS[0], absent]))
    for heading in ("Producers:", "Consumers:"):
        table = text[text.index(heading):].split("\n\n")[0].splitlines()[1:]
        starts = [i + 2 for i in range(len(table[0]) - 2) if table[0][i:i + 2] == "  " and table[0][i + 2] != " "]
        assert len(starts) >= 5, table[0]
        for line in table[1:]:
            name = line.split()[0]
            column = starts[1]  # after the library's name, the next column
            assert line[:column].rstrip() == "  " + name and line[column] != " ", (heading, line)
        assert any("doctor_test_not_installed_anywhere  " in line and "not installed" in line for line in table)


def test_library_that_fails_to_import_gets_a_row(libdir):
    name = libdir("doctor_test_broken_import", "raise RuntimeError('compiled for another Python')\n")
    rep = doctor.run(extra=[name])
    r = row(rep, name)
    assert r["installed"] and r["error"] == "import failed: RuntimeError: compiled for another Python"
    assert any(f["subject"] == name and f["severity"] == "note" for f in rep["findings"])
    check_schema(rep)
    assert rep["exit_status"] == 0


def test_library_that_raises_while_probed_gets_a_row(libdir):
    name = libdir("doctor_test_broken_export", NUMPY_LIKE.format(
        export="raise MemoryError('allocator is broken')",
        consume="return np.from_dlpack(x)",
    ))
    rep = doctor.run(extra=[name])
    prod = row(rep, name)["producer"]
    assert prod["probed"]
    assert prod["capsules"]["none"] == {"error": "MemoryError: allocator is broken"}
    check_schema(rep)
    bad = [c for c in host(rep)["cells"] if c["producer"] == name]
    # gpu_dlpack names the failing producer in the standard's BufferError
    assert bad and all(c["via"]["outcome"] == "error" for c in bad), [c["via"] for c in bad]
    # (MLX's binding makes any error of its argument a TypeError of its own.)
    assert all("allocator is broken" in c["via"]["error"] for c in bad if c["consumer"] != "mlx"), bad


def test_library_whose_arrays_speak_no_dlpack_is_skipped_not_failed(libdir):
    name = libdir("doctor_test_no_dlpack", """
        import numpy as np

        class Array:
            def __init__(self, a):
                self.a = a

        def asarray(a):
            return Array(a)

        def from_dlpack(x, copy=None):
            return np.from_dlpack(x)
    """)
    rep = doctor.run(extra=[name])
    check_schema(rep)
    m = host(rep)
    assert {"producer": name, "reason": "Array has no __dlpack__"} in m["skipped"]
    assert name not in m["producers"] and name in m["consumers"]
    assert not row(rep, name)["producer"]["probed"]
    assert rep["exit_status"] == 0


# -- terminal and command ------------------------------------------------------


def test_terminal_report_has_every_section(report, torch):
    text = doctor.render(report)
    for heading in ("Platform", "Producers:", "Consumers:", "Exchanges on cpu", "Findings"):
        assert heading in text, heading
    assert "numpy (read-only)" in text and "IGNORED" in text
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("OK:" if report["exit_status"] == 0 else "FAILED:")
    assert f"Exit status {report['exit_status']}" in last


def test_cli_doctor_json(capsys):
    status = _cli.main(["doctor", "--json"])
    doc = json.loads(capsys.readouterr().out)
    check_schema(doc)
    assert status == doc["exit_status"]


def test_python_m_gpu_dlpack_doctor():
    root = os.path.dirname(os.path.dirname(os.path.abspath(gpu_dlpack.__file__)))
    # The entry point, its text and its status; the probes of every peer are
    # the report fixture's (in this process) and test_cli_pipe's (a child).
    env = without_peers(dict(os.environ, PYTHONPATH=os.pathsep.join([root] + sys.path)))
    done = subprocess.run(
        [sys.executable, "-m", "gpu_dlpack", "doctor"], capture_output=True, text=True, env=env, timeout=300
    )
    assert "Exchanges on cpu" in done.stdout, done.stdout + done.stderr
    assert f"Exit status {done.returncode}." in done.stdout.rstrip().splitlines()[-1]


# -- the consumers' faults, against gpu_dlpack's table --------------------------


def test_each_consumers_faults_are_measured_and_match_the_table(report, jax, xp_strict):
    faults = {r["name"]: r["consumer"]["faults"] for r in report["libraries"] if (r["consumer"] or {}).get("faults")}
    # torch 2.13 ignores READ_ONLY and aborts on negative strides; JAX asks
    # for legacy capsules, shares memory for copy=True (0.9 to 0.12.0.1), copies unaligned
    # data and takes only compact layouts: the table says so, and the
    # probes find exactly that.
    if importlib.util.find_spec("torch") is not None:  # not on every interpreter of the matrix
        assert {"read-only-ignored", "negative-strides"} <= set(faults["torch"]["measured"])
    # What JAX does by release (docs/internals/faults.md, "JAX by release").
    have = _release(jax.__version__)
    expected = {"unaligned-copies", "non-compact-strides"}
    expected |= {"legacy-only"} if have < (0, 12) else set()
    expected |= {"copy-shares"} if (0, 9) <= have < (0, 12, 1) else set()
    expected |= {"c-order-only"} if have < (0, 8) else set()
    assert set(faults["jax"]["measured"]) == expected
    assert faults["array_api_strict"]["measured"] == [] and faults["numpy"]["measured"] == []
    for name, f in faults.items():
        assert f["unknown"] == [] and f["gone"] == [], (name, f)


def test_a_consumer_that_aborts_is_probed_in_a_child_and_is_a_hazard(report, torch):
    from gpu_dlpack import _peers

    cons = row(report, "torch")["consumer"]
    assert cons["strides"]["stepped"] == "zero-copy"
    if _peers.release(torch.__version__) >= (2, 14):
        # 2.14 raises instead of aborting: still the fault, no longer a dead process.
        assert cons["strides"]["negative"].startswith("raises: RuntimeError: Storage size calculation overflowed")
        assert not [f for f in report["findings"] if f.get("hazard") == "consumer-aborts"]
        assert "negative-strides" in cons["faults"]["measured"]
        return
    assert cons["strides"]["negative"].startswith("aborts the process")
    (f,) = [f for f in report["findings"] if f.get("hazard") == "consumer-aborts"]
    assert f["severity"] == "hazard" and "negative stride" in f["problem"]
    assert "gpu_dlpack.convert(x, 'torch')" in f["remedy"]


def test_a_fault_the_table_does_not_know_is_a_hazard(monkeypatch, torch):
    # The table as it would be without torch's READ_ONLY entry.
    from gpu_dlpack import _peers

    rows = tuple(
        p._replace(faults=tuple(f for f in p.faults if f.id != "read-only-ignored")) if p.name == "torch" else p
        for p in _peers.PEERS
    )
    monkeypatch.setattr(_peers, "PEERS", rows)
    rep = doctor.run(peers=[p for p in doctor.PEERS if p.name == "torch"])
    f = row(rep, "torch")["consumer"]["faults"]
    assert f["unknown"] == ["read-only-ignored"] and f["gone"] == []
    (h,) = [h for h in rep["findings"] if h.get("hazard") == "consumer-fault-unknown"]
    assert h["severity"] == "hazard" and "does not say so" in h["problem"]
    # The doctor names the release as its distribution says (the CUDA wheels
    # on PyPI say 2.14.1 where torch.__version__ says 2.14.1+cu130).
    assert f"torch {importlib.metadata.version('torch')} " in h["problem"]
    assert "{" not in h["problem"] + h["remedy"]


def test_a_table_entry_the_library_no_longer_has_is_a_note(monkeypatch, torch):
    # A table that says torch also shares memory for copy=True (it copies).
    from gpu_dlpack import _peers

    rows = tuple(
        p._replace(faults=p.faults + (_peers.Fault("copy-shares"),)) if p.name == "torch" else p
        for p in _peers.PEERS
    )
    monkeypatch.setattr(_peers, "PEERS", rows)
    rep = doctor.run(peers=[p for p in doctor.PEERS if p.name == "torch"])
    f = row(rep, "torch")["consumer"]["faults"]
    assert f["gone"] == ["copy-shares"] and f["unknown"] == []
    (n,) = [n for n in rep["findings"] if n.get("hazard") == "consumer-fault-gone"]
    assert n["severity"] == "note" and "did not find it" in n["problem"]


def test_a_stride_probe_that_kills_the_child_goes_on_with_the_rest(libdir):
    # A consumer that kills its process on every strided import (the
    # probes in this process use contiguous arrays): the probes of the
    # consumers after it still run, in a new child.
    name = libdir("doctor_test_killer", NUMPY_LIKE.format(
        export="return self.a.__dlpack__(**kw)",
        consume="a = np.from_dlpack(x); a.flags.c_contiguous or __import__('os')._exit(3); return a",
    ))
    rep = doctor.run(extra=[name])
    cons = row(rep, name)["consumer"]
    assert cons["strides"] == {"negative": "kills the process (exit status 3)",
                               "stepped": "kills the process (exit status 3)",
                               "transposed": "kills the process (exit status 3)"}
    # the consumers after it were probed (NumPy before 2.1 copies these layouts)
    assert set(row(rep, "numpy")["consumer"]["strides"].values()) <= {"zero-copy", "copies"}
    assert any(f.get("hazard") == "consumer-aborts" and f["subject"] == name for f in rep["findings"])


# -- the exit status -------------------------------------------------------------


def test_strict_passes_on_the_hazards_gpu_dlpack_corrects(report, capsys, torch):
    # torch ignores READ_ONLY, JAX asks for legacy capsules (before 0.12):
    # hazards of the direct path, each corrected through the layer, so a CI
    # job gated on --strict passes on this stack.
    assert report["summary"]["hazards"] and report["exit_status"] == 0
    assert any(f.get("hazard") == "consumer-ignores-read-only" for f in report["findings"])
    strict = doctor.run(strict=True)
    check_schema(strict)
    assert strict["strict"] and strict["summary"]["uncorrected"] == 0 and strict["exit_status"] == 0
    assert _cli.main(["doctor", "--strict"]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("OK: all ") and "corrected by gpu_dlpack" in last and "Exit status 0." in last


def _torch_row(monkeypatch, change):
    from gpu_dlpack import _peers

    rows = tuple(p._replace(faults=change(p.faults)) if p.name == "torch" else p for p in _peers.PEERS)
    monkeypatch.setattr(_peers, "PEERS", rows)
    return [p for p in doctor.PEERS if p.name == "torch"]


def test_strict_fails_on_a_fault_the_table_does_not_know(monkeypatch, torch):
    # The table without torch's READ_ONLY entry: convert would not correct it.
    peers = _torch_row(monkeypatch, lambda faults: tuple(f for f in faults if f.id != "read-only-ignored"))
    assert doctor.run(peers=peers)["exit_status"] == 0
    rep = doctor.run(peers=peers, strict=True)
    check_schema(rep)
    assert rep["exit_status"] == 1 and rep["summary"]["uncorrected"] == 1
    last = doctor.render(rep).rstrip().splitlines()[-1]
    assert last.startswith("FAILED (--strict):") and "consumer-fault-unknown (torch)" in last, last
    assert "Exit status 1." in last


def test_strict_fails_on_an_entry_the_probes_no_longer_find(monkeypatch, torch):
    # A row saying torch shares memory for copy=True, which it does not.
    from gpu_dlpack import _peers

    peers = _torch_row(monkeypatch, lambda faults: faults + (_peers.Fault("copy-shares"),))
    rep = doctor.run(peers=peers, strict=True)
    assert row(rep, "torch")["consumer"]["faults"]["gone"] == ["copy-shares"]
    (f,) = [f for f in rep["findings"] if f.get("hazard") == "consumer-fault-gone"]
    assert f["strict"] and rep["exit_status"] == 1
    assert doctor.run(peers=peers)["exit_status"] == 0


def test_an_unknown_library_is_an_error_not_a_missing_row(capsys):
    assert _cli.main(["doctor", "--library", "doctor_test_typo_of_a_module"]) == 2
    err = capsys.readouterr().err
    assert "--library doctor_test_typo_of_a_module: no module named" in err and "not installed" not in err
    with pytest.raises(ModuleNotFoundError, match="no module named 'doctor_test_typo_of_a_module'"):
        doctor.run(extra=["doctor_test_typo_of_a_module"])


def test_the_address_of_a_read_only_numpy_import_is_read():
    # NumPy before 2.1 imports legacy capsules read-only, and its own
    # __dlpack__ refuses read-only arrays: the doctor read no address and
    # reported NumPy as copying unaligned data it takes in place.
    from gpu_dlpack.doctor import _measure, _probes

    src = _measure._aligned(_measure.VALUES, offset=4)
    got = np.from_dlpack(gpu_dlpack.wrap(src))
    assert _measure._pointer(got) == got.ctypes.data == src.ctypes.data
    assert _probes._consumer_unaligned(np.from_dlpack) is True


def test_the_doctors_child_probes_keep_jax_on_the_cpu(monkeypatch):
    # A child cannot open an accelerator the parent holds (a TPU, libtpu's
    # lock file): it probes host memory with JAX on the CPU, whatever the
    # parent's JAX_PLATFORMS.
    from gpu_dlpack.doctor import _faults
    from gpu_dlpack.testing import _children

    seen = []

    def apart(target, rule_ids, dtypes, env=None):
        seen.append((target, dict(env or {})))
        return {rule_id: ("passed", "from_dlpack(wrap(a)) of a: zero-copy") for rule_id in rule_ids}

    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    monkeypatch.setattr(_children, "apart", apart)
    monkeypatch.setattr(_faults, "_measured", {})
    found = _faults.start([p for p in doctor.PEERS if p.name == "jax"]).results()
    if not seen:
        pytest.skip("JAX is not installed")
    assert seen == [("jax:dlpack.from_dlpack", {"JAX_PLATFORMS": "cpu"})]
    assert set(found.values()) == {"zero-copy"}


# -- a peer that cannot open its accelerator -------------------------------------

# A stand-in of JAX where the platforms it is set up for cannot be opened:
# as JAX does, it reads them from JAX_PLATFORMS at import, and each use
# opens them anew, raising what JAX raised as measured, until JAX is set up
# for its CPU.
JAX_UNOPENED = """
    import os

    import numpy as np

    class config:
        jax_platforms = os.environ.get("JAX_PLATFORMS") or None

        @classmethod
        def update(cls, name, value):
            setattr(cls, name, value)

    def _open():
        if config.jax_platforms != "cpu":
            raise {error}

    def devices(backend=None):
        _open()
        if backend not in (None, "cpu"):
            raise RuntimeError(f"Unknown backend: '{{backend}}' requested, but no platforms that are instances of "
                               f"{{backend}} are present. Platforms present are: cpu")
        return ["TFRT_CPU_0"]

    def default_backend():
        _open()
        return "cpu"

    class Array:
        def __init__(self, a):
            self.a = np.ascontiguousarray(a)
        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)
        def __dlpack_device__(self):
            return (1, 0)

    def device_put(a, device):
        _open()
        return Array(a)

    class dlpack:
        @staticmethod
        def from_dlpack(x, device=None, copy=None):
            _open()
            return Array(np.from_dlpack(x, copy=copy))
"""

BUSY_TPU = ("Unable to initialize backend 'tpu': ABORTED: The TPU is already in use by process with pid 4242. "
            "Not attempting to load libtpu.so in this process. (set JAX_PLATFORMS='' to automatically choose an "
            "available backend)")
# JAX 0.10.2's words on a TPU v5e while a second process held the chip
# (measured 2026-12-06): libtpu names its lock file, not the holder.
BUSY_TPU_LOCKFILE = ("Unable to initialize backend 'tpu': ABORTED: Internal error when accessing libtpu multi-process "
                     "lockfile. Run \"$ sudo rm /tmp/libtpu_lockfile\". (set JAX_PLATFORMS='' to automatically choose "
                     "an available backend)")
NO_TPU = ("Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so: libtpu.so: cannot open shared "
          "object file: No such file or directory (set JAX_PLATFORMS='' to automatically choose an available backend)")


def _jax_standin(libdir, name, error):
    module = libdir(name, JAX_UNOPENED.format(error=error))
    (jax_peer,) = [p for p in doctor.PEERS if p.name == "jax"]
    return dataclasses.replace(jax_peer, name=module, where=(module, ("dlpack.from_dlpack",), ()))


@pytest.mark.parametrize("platforms, error, platform, reason, explain_id", [
    ("tpu", f"RuntimeError({BUSY_TPU!r})", "tpu", "in use by another process (pid 4242)", "jax-backend-busy"),
    ("tpu", f"RuntimeError({BUSY_TPU_LOCKFILE!r})", "tpu", "in use by another process", "jax-backend-busy"),
    ("tpu", f"RuntimeError({NO_TPU!r})", "tpu", "INTERNAL: Failed to open libtpu.so: libtpu.so: cannot open shared "
     "object file: No such file or directory", "jax-backend-unavailable"),
    # JAX 0.10 with JAX_PLATFORMS=cuda where no NVIDIA GPU is visible: an
    # assertion without words; the platform is the one it is set up for.
    ("cuda", "AssertionError()", "cuda", "AssertionError, with no message", None),
], ids=["held-by-another-process", "held-libtpu-lockfile", "not-on-this-machine", "cuda-without-gpu"])
def test_a_peer_that_cannot_open_its_accelerator_is_probed_on_the_cpu_and_fails_nothing(
        libdir, monkeypatch, request, platforms, error, platform, reason, explain_id):
    # (This process's JAX read JAX_PLATFORMS at its import; the doctor's
    # child probes set it to cpu.)
    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    busy = explain_id == "jax-backend-busy"
    peer = _jax_standin(libdir, "doctor_test_unopened_" + request.node.callspec.id.replace("-", "_"), error)
    rep = doctor.run(peers=[doctor.PEERS[0], peer])
    check_schema(rep)
    r = row(rep, peer.name)
    unopened = r["unopened"]
    assert unopened["platform"] == platform and unopened["busy"] is busy and unopened["explain"] == explain_id
    assert unopened["probed_on"] == "cpu" and unopened["error"].startswith(error.partition("(")[0])
    assert unopened["reason"] == reason
    assert r["producer"]["probed"] and r["consumer"]["probed"] and r["consumer"]["error"] is None
    m = host(rep)
    assert peer.name in m["producers"] and peer.name in m["consumers"]
    assert all(c["via"]["ok"] for c in m["cells"]), [c for c in m["cells"] if not c["via"]["ok"]]
    assert not [f for f in rep["findings"] if peer.name in f["subject"]]
    assert rep["exit_status"] == 0
    assert row(rep, "numpy")["unopened"] is None
    # One line says which platform, why, and that the probes ran on the CPU.
    text = doctor.render(rep)
    (line,) = [ln for ln in text.splitlines() if f"Accelerator {platform} of {peer.name} could not be opened" in ln]
    assert unopened["reason"] in line and line.endswith(f"{peer.name} was probed on the CPU")
    assert text.rstrip().splitlines()[-1].startswith("OK:")


def test_a_peer_whose_cpu_fails_too_is_not_hidden(libdir, monkeypatch):
    # Nothing opens: the doctor says what failed, as before.
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    name = libdir("doctor_test_unopened_all", JAX_UNOPENED.format(error=f"RuntimeError({NO_TPU!r})")
                  .replace('if config.jax_platforms != "cpu":', "if True:"))
    (jax_peer,) = [p for p in doctor.PEERS if p.name == "jax"]
    peer = dataclasses.replace(jax_peer, name=name, where=(name, ("dlpack.from_dlpack",), ()))
    rep = doctor.run(peers=[doctor.PEERS[0], peer])
    assert row(rep, name)["unopened"] is None
    assert not row(rep, name)["producer"]["probed"]
    assert sys.modules[name].config.jax_platforms == "tpu"  # what it was set up for, left as it was


def _doctor_with_jax_set_up_for(platforms):
    """``gpu-dlpack doctor --json`` in a child whose JAX_PLATFORMS is
    ``platforms``, the peers hidden but NumPy and the real JAX: the report
    and the exit status."""
    env = without_peers()
    env["GPU_DLPACK_TEST_HIDE"] = ",".join(n for n in env["GPU_DLPACK_TEST_HIDE"].split(",") if n != "jax")
    root = os.path.dirname(os.path.dirname(os.path.abspath(gpu_dlpack.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], root])
    env["JAX_PLATFORMS"] = platforms
    done = subprocess.run([sys.executable, "-m", "gpu_dlpack", "doctor", "--json"], capture_output=True, text=True,
                          env=env, timeout=300)
    return json.loads(done.stdout), done.returncode


def test_jax_set_up_for_a_tpu_this_machine_lacks_is_probed_on_the_cpu():
    pytest.importorskip("jax")  # the run without the optional peers hides it from the child too
    doc, status = _doctor_with_jax_set_up_for("tpu")
    if doc["platform"]["gpu"]["jax"]["backend"] == "tpu":
        pytest.skip("JAX opens a TPU on this machine")
    r = row(doc, "jax")
    check_library(r)  # (the whole report is checked in this process: CuPy is hidden in the child)
    assert r["unopened"]["platform"] == "tpu" and r["unopened"]["busy"] is False
    assert r["unopened"]["set_up_for"] == "tpu" and r["unopened"]["explain"] == "jax-backend-unavailable"
    assert r["producer"]["probed"] and r["producer"]["device"] == "cpu"
    assert doc["platform"]["gpu"]["jax"]["backend"] == "cpu"
    assert doc["exit_status"] == 0 and status == 0
    # Every verdict is the one of JAX set up for its CPU from the start.
    cpu, _ = _doctor_with_jax_set_up_for("cpu")
    assert row(cpu, "jax")["unopened"] is None
    r["unopened"] = None
    assert doc["libraries"] == cpu["libraries"]
    for key in ("matrices", "findings", "summary", "exit_status"):
        assert doc[key] == cpu[key], key


def test_a_peer_library_added_in_its_one_place_is_picked_up_everywhere(libdir, monkeypatch):
    # "Add a peer library" (docs/internals/layout.md): its row in
    # gpu_dlpack._peers, which convert, from_dlpack and the doctor read; and,
    # for the doctor to make arrays of it, a doctor.Peer saying how.
    from gpu_dlpack import _peers

    name = libdir("doctor_test_standin", """
        import numpy as np

        __version__ = "1.0"

        class Array:
            def __init__(self, a):
                self.a = a

            def __dlpack__(self, **kw):
                return self.a.__dlpack__(**kw)

            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        def asarray(a):
            return Array(np.asarray(a))

        def from_dlpack(x, **kw):
            return Array(np.from_dlpack(x, **kw))
    """)
    lib = importlib.import_module(name)
    row_ = _peers.Peer(name, name, array="Array", faults=(_peers.Fault("negative-strides"),),
                       export_faults=(_peers.Fault("immutable-unflagged"),))
    monkeypatch.setattr(_peers, "PEERS", _peers.PEERS + (row_,))

    # convert: the row's consumer fault is acted on (the library's own import
    # would take the negative stride in place).
    src = np.arange(6.0)[::-1]
    assert np.from_dlpack(src).ctypes.data == src.ctypes.data
    done = gpu_dlpack.convert(src, name, report=True)
    assert type(done.array) is lib.Array and done.faults == ("negative-strides",) and done.copied
    assert done.array.a.tolist() == src.tolist() and done.array.a.strides == (8,)
    # from_dlpack: the row's producer fault (its arrays are immutable, their
    # capsules say writeable) makes the import read-only.
    x = lib.asarray(np.arange(3.0))
    assert x.a.flags.writeable  # NumPy's capsules of it say so (versioned ones: no READ_ONLY)
    got = gpu_dlpack.from_dlpack(x)
    assert got.ctypes.data == x.a.ctypes.data and not got.flags.writeable
    # the doctor: the row's faults, for the installed version, in its report.
    rep = doctor.run(peers=[doctor.PEERS[0], doctor.Peer(name, host=lambda m, a: m.asarray(a))])
    listed = {(t["role"], t["fault"]) for t in row(rep, name)["table"]}
    assert listed == {("consumer", "negative-strides"), ("producer", "immutable-unflagged")}
    check_schema(rep)
