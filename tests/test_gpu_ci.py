"""scripts/gpu-ci.sh on this machine, which has no GPU: the job says that
nothing ran and fails, and it compares its benchmarks with the last run kept
in the runner's history, adding a run to it only when the run passed.

A small selection keeps it short: the GPU suite stops before collecting
(no GPU), and one group of host benchmarks runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gpu_ci(out, history, **env):
    full = dict(os.environ, PYTHON=shutil.which("python") or "python3", JAX_PLATFORMS="cpu", GPU_TESTS_BUILD="0",
                GPU_CI_HISTORY=str(history), GPU_CI_SAVE_HISTORY="1", GPU_CI_RUN_LABEL="push abc123",
                GPU_CI_BENCH_ARGS="bench/test_host.py -k export_legacy_numpy")
    for name in ("GPU_TESTS_ALLOW_NO_GPU", "GPU_CI_ALLOW_NOTHING_RAN", "GPU_CI_FAIL_ON_MISSED_TARGET",
                 "GPU_CI_FAIL_ON_REGRESSION", "GPU_CI_REGRESSION_MARGIN", "GPU_CI_TESTS_ARGS"):
        full.pop(name, None)
    # The job runs on the runner's own Python, with every peer it has: not
    # with the suite's hidden peers (whose import hook also hides the
    # entry points pytest loads its plugins by).
    full.pop("GPU_DLPACK_TEST_HIDE", None)
    hide = os.path.join(ROOT, "tests", "hide")
    full["PYTHONPATH"] = os.pathsep.join(p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p and p != hide)
    full.update(env)
    done = subprocess.run(["bash", "scripts/gpu-ci.sh", str(out)], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=600)
    summary = (out / "summary.md").read_text(encoding="utf-8")
    return done, summary


# The benchmarks the job runs here, as the last run kept on the runner
# recorded them: gpu_dlpack twice as fast against the same peer.
GROUP = "export a numpy array, legacy"
LAST_RUN = {"benchmarks": [
    {"group": GROUP, "name": name, "fullname": f"bench/test_host.py::{name}", "stats": {"median": median},
     "extra_info": info}
    for name, median, info in [
        ("test_export_legacy_numpy_peer", 100e-9, {"label": "x.__dlpack__()", "role": "peer"}),
        ("test_export_legacy_numpy", 50e-9, {"label": "gpu_dlpack.export(x)", "role": "gpu_dlpack",
                                             "peer": "x.__dlpack__()", "target": 2.0}),
        ("test_export_legacy_numpy_wrapped", 50e-9, {"label": "w.__dlpack__(), w = wrap(x)",
                                                     "role": "gpu_dlpack", "peer": "x.__dlpack__()"}),
    ]], "machine_info": {}, "commit_info": {"id": "0123456789ab"}, "datetime": "2026-11-30T12:00:00"}


def test_without_a_gpu_the_job_says_nothing_ran_and_keeps_only_a_passed_run(tmp_path):
    pytest.importorskip("pytest_benchmark")
    if os.environ.get("GPU_DLPACK_TEST_HIDE"):
        # The job runs with every peer the runner has (_gpu_ci unhides them):
        # here it would repeat the run of the pass with the peers.
        pytest.skip("the job does not hide peers: the same run as without GPU_DLPACK_TEST_HIDE")
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("this machine has a GPU")
    except Exception:
        pass
    history = tmp_path / "history"
    history.mkdir()
    (history / "latest.json").write_text(json.dumps(LAST_RUN))

    # 1. No GPU: the GPU suite stops before it runs, so nothing ran, and
    #    gpu_dlpack is slower against its peer than in the last run: the job
    #    fails on both, and its run is not kept.
    done, summary = _gpu_ci(tmp_path / "one", history)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "**Verdict: failed**" in summary
    assert "- GPU tests: nothing ran: no test results (gpu-tests.xml is missing; exit status 3)" in summary
    assert "no GPU usable by CuPy here, so scripts/gpu-tests.sh stopped before the suite" in summary
    assert "figures regressed by more than 25% against the last run kept on this runner" in summary
    assert "| benchmarks | 3 | 3 | 0 | 0 | 0 | 0 | 0 | ran |" in summary
    assert "| regressed |" in summary and "Not kept in the runner's history" in summary
    assert os.listdir(history) == ["latest.json"]
    run = json.loads((tmp_path / "one" / "benchmarks.json").read_text())
    assert len(run["benchmarks"]) == 3 and all("data" not in b["stats"] for b in run["benchmarks"])

    # 2. Allowed to run nothing, with regressions shown, not failing: the run
    #    passes and becomes the one the next run is compared with.
    done, summary = _gpu_ci(tmp_path / "two", history, GPU_CI_ALLOW_NOTHING_RAN="1", GPU_CI_FAIL_ON_REGRESSION="0")
    assert done.returncode == 0, summary
    assert "**Verdict: passed**" in summary and "- GPU tests: nothing ran (allowed by --allow-nothing-ran)" in summary
    assert "figures regressed (not failing this run)" in summary
    kept = sorted(os.listdir(history))
    assert len(kept) == 2 and kept[1] == "latest.json" and kept[0].endswith("-push-abc123.json")
    assert json.loads((history / "latest.json").read_text()) == json.loads(
        (tmp_path / "two" / "benchmarks.json").read_text())
