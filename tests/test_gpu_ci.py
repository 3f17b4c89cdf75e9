"""scripts/gpu-ci.sh on this machine, which has no GPU: the job says that
nothing ran and fails, and it compares its benchmarks with the last run of
main kept (GPU_CI_BASELINE), which it only reads: it writes nothing outside
its output folder. scripts/gpu-ci-history.sh, which the workflow's trusted
job runs, keeps a passed run on a branch of a (here local) repository.

A small selection keeps it short: the GPU suite stops before collecting
(no GPU), and one group of host benchmarks runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _gpu_ci(out, baseline, **env):
    full = dict(os.environ, PYTHON=shutil.which("python") or "python3", JAX_PLATFORMS="cpu", GPU_TESTS_BUILD="0",
                GPU_CI_BASELINE=str(baseline), GPU_CI_BENCH_ARGS="bench/test_host.py -k export_legacy_numpy")
    for name in ("GPU_TESTS_ALLOW_NO_GPU", "GPU_CI_ALLOW_NOTHING_RAN", "GPU_CI_FAIL_ON_MISSED_TARGET",
                 "GPU_CI_FAIL_ON_REGRESSION", "GPU_CI_REGRESSION_MARGIN", "GPU_CI_TESTS_ARGS"):
        full.pop(name, None)
    # The job runs on the runner's own Python, with every peer it has: not
    # with the suite's hidden peers (whose import hook also hides the
    # entry points pytest loads its plugins by).
    full.pop("GPU_DLPACK_TEST_HIDE", None)
    # Nor as a pytest-xdist worker (this test runs on one): pytest-benchmark
    # reads its variables and times nothing.
    for name in [n for n in full if n.startswith("PYTEST_")]:
        del full[name]
    hide = os.path.join(ROOT, "tests", "hide")
    full["PYTHONPATH"] = os.pathsep.join(p for p in full.get("PYTHONPATH", "").split(os.pathsep) if p and p != hide)
    full.update(env)
    done = subprocess.run(["bash", "scripts/gpu-ci.sh", str(out)], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=600)
    summary = (out / "summary.md").read_text(encoding="utf-8")
    return done, summary


# The benchmarks the job runs here, as the last run of main kept recorded
# them: gpu_dlpack ten times as fast against the same peer, which no run of
# these on any machine, however loaded, comes near (export is never faster
# than the peer's own __dlpack__ it calls): a regression each time.
GROUP = "export a numpy array, legacy"
LAST_RUN = {"benchmarks": [
    {"group": GROUP, "name": name, "fullname": f"bench/test_host.py::{name}", "stats": {"median": median},
     "extra_info": info}
    for name, median, info in [
        ("test_export_legacy_numpy_peer", 100e-9, {"label": "x.__dlpack__()", "role": "peer"}),
        ("test_export_legacy_numpy", 10e-9, {"label": "gpu_dlpack.export(x)", "role": "gpu_dlpack",
                                             "peer": "x.__dlpack__()", "target": 2.0}),
        ("test_export_legacy_numpy_wrapped", 10e-9, {"label": "w.__dlpack__(), w = wrap(x)",
                                                     "role": "gpu_dlpack", "peer": "x.__dlpack__()"}),
    ]], "machine_info": {}, "commit_info": {"id": "0123456789ab"}, "datetime": "2026-11-30T12:00:00"}


def test_without_a_gpu_the_job_says_nothing_ran_and_only_reads_the_run_it_compares_with(tmp_path):
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
    baseline = history / "latest.json"
    baseline.write_text(json.dumps(LAST_RUN))
    os.chmod(history, 0o555)  # read only (for a user other than root): a write would fail the job

    # 1. No GPU: the GPU suite stops before it runs, so nothing ran, and
    #    gpu_dlpack is slower against its peer than in the last run: the job
    #    fails on both.
    done, summary = _gpu_ci(tmp_path / "one", baseline)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "**Verdict: failed**" in summary
    assert "- GPU tests: nothing ran: no test results (gpu-tests.xml is missing; exit status 3)" in summary
    assert "no GPU usable by CuPy here, so scripts/gpu-tests.sh stopped before the suite" in summary
    assert "figures regressed by more than 25% against the last run of main kept" in summary
    assert "| benchmarks | 3 | 3 | 0 | 0 | 0 | 0 | 0 | ran |" in summary
    assert "| regressed |" in summary and "history" not in summary
    assert os.listdir(history) == ["latest.json"] and json.loads(baseline.read_text()) == LAST_RUN
    run = json.loads((tmp_path / "one" / "benchmarks.json").read_text())
    assert len(run["benchmarks"]) == 3 and all("data" not in b["stats"] for b in run["benchmarks"])

    # 2. Allowed to run nothing, with regressions shown, not failing: the run
    #    passes; it is still only compared (the history job keeps it).
    done, summary = _gpu_ci(tmp_path / "two", baseline, GPU_CI_ALLOW_NOTHING_RAN="1", GPU_CI_FAIL_ON_REGRESSION="0")
    assert done.returncode == 0, summary
    assert "**Verdict: passed**" in summary and "- GPU tests: nothing ran (allowed by --allow-nothing-ran)" in summary
    assert "figures regressed (not failing this run)" in summary
    assert os.listdir(history) == ["latest.json"] and json.loads(baseline.read_text()) == LAST_RUN
    os.chmod(history, 0o755)


def _git(*args, cwd=None):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60).stdout


def _keep(results, remote, label, **env):
    full = dict(os.environ, GPU_CI_HISTORY_REMOTE=str(remote), GPU_CI_RUN_LABEL=label, **env)
    return subprocess.run(["bash", "scripts/gpu-ci-history.sh", str(results)], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=120)


def test_the_history_job_keeps_each_passed_run_of_main_on_a_branch_of_its_own(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    remote = tmp_path / "repo.git"
    _git("init", "-q", "--bare", str(remote))
    runs = []
    for i in range(4):
        results = tmp_path / f"benchmarks-{i}.json"
        results.write_text(json.dumps(dict(LAST_RUN, datetime=f"run {i}")))
        runs.append(results)
        # the first run makes the branch; three are kept
        done = _keep(results, remote, f"abc12{i}", GPU_CI_HISTORY_KEEP="3")
        assert done.returncode == 0, done.stdout + done.stderr
    assert _git("branch", "--list", cwd=remote).split() == ["gpu-ci-history"]  # nothing else touched
    files = _git("ls-tree", "-r", "--name-only", "gpu-ci-history", cwd=remote).split()
    assert files[0] == "latest.json" and len(files) == 4 and all(f.startswith("runs/2") for f in files[1:])
    assert [f.rsplit("-", 1)[1] for f in files[1:]] == ["abc121.json", "abc122.json", "abc123.json"]
    latest = json.loads(_git("show", "gpu-ci-history:latest.json", cwd=remote))
    assert latest == json.loads(runs[-1].read_text())
    assert len(_git("log", "--format=%s", "gpu-ci-history", cwd=remote).splitlines()) == 4
    # What is not a results file is refused before anything is pushed.
    done = _keep(tmp_path / "missing.json", remote, "x")
    assert done.returncode == 2 and "usage: scripts/gpu-ci-history.sh BENCHMARKS.json" in done.stderr
