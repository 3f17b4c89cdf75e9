"""The GitHub workflows: who can run code on the GPU runner, what the
release may publish, and that it builds every wheel the configuration names.

The job condition of ``gpu.yml`` and the expressions it passes on are
evaluated here against the events that reach it (a push, a manual run, pull
requests from this repository and from a fork, labelled or not), with the
operators and loose equality of GitHub's expression language (the subset
the workflows use; no library evaluates it outside GitHub). zizmor, a static
analyser of GitHub Actions, audits every workflow. The release's tag check
runs as written in ``release.yml``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from .helpers import load_toml

yaml = pytest.importorskip("yaml")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKFLOWS = os.path.join(ROOT, ".github", "workflows")
REPO = "owner/gpu_dlpack"


def _load(name):
    with open(os.path.join(WORKFLOWS, name), encoding="utf-8") as f:
        text = f.read()
    doc = yaml.safe_load(text)
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc, text


# -- GitHub's expression language, the part the workflows use ----------------

_TOKEN = re.compile(r"\s*(\|\||&&|==|!=|!|\(|\)|'(?:[^']|'')*'|[A-Za-z_][\w.-]*|\d+(?:\.\d+)?)")


def _tokens(text):
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"cannot read {text[pos:]!r}")
        out.append(m.group(1))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _number(v):
    if v is None:
        return 0.0
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v.strip()) if v.strip() else 0.0
    except ValueError:
        return math.nan


def _truthy(v):
    return not (v is None or v is False or v == "" or (isinstance(v, (int, float)) and (v == 0 or math.isnan(v))))


def _equal(a, b):
    if isinstance(a, str) and isinstance(b, str):
        return a.casefold() == b.casefold()  # string comparison ignores case
    if type(a) is type(b) and not isinstance(a, (str, float, int)):
        return a == b
    return _number(a) == _number(b)  # other types are compared as numbers


def evaluate(expression, context):
    """The value of a GitHub expression (without ``${{ }}``) in ``context``."""
    tokens = _tokens(expression)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def primary():
        t = take()
        if t == "(":
            v = either()
            assert take() == ")"
            return v
        if t == "!":
            return not _truthy(primary())
        if t.startswith("'"):
            return t[1:-1].replace("''", "'")
        if t[0].isdigit():
            return float(t)
        if t in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[t]
        value = context
        for part in t.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        return value

    def compare():
        left = primary()
        while peek() in ("==", "!="):
            op = take()
            right = primary()
            left = _equal(left, right) if op == "==" else not _equal(left, right)
        return left

    def both():
        left = compare()
        while peek() == "&&":
            take()
            right = compare()
            left = left if not _truthy(left) else right
        return left

    def either():
        left = both()
        while peek() == "||":
            take()
            right = both()
            left = left if _truthy(left) else right
        return left

    value = either()
    assert pos == len(tokens), tokens[pos:]
    return value


def _interpolate(value, context):
    """A workflow value with its ``${{ }}`` expressions evaluated."""
    def one(m):
        v = evaluate(m.group(1), context)
        return "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    return re.sub(r"\$\{\{(.*?)\}\}", one, value)


def test_the_expression_reader_follows_githubs_rules():
    ctx = {"a": {"b": "X"}, "n": None, "e": ""}
    assert evaluate("a.b == 'x'", ctx) is True  # case-insensitive
    assert evaluate("a.missing == 'x'", ctx) is False and evaluate("n == e", ctx) is True  # null and '' are 0
    assert evaluate("n || 'y'", ctx) == "y" and evaluate("a.b && 'z'", ctx) == "z"
    assert evaluate("!(a.b != 'X') && (n || e || 'w') == 'W'", ctx) is True
    assert evaluate("'it''s'", ctx) == "it's"


# -- the GPU job: who gets the runner -----------------------------------------

def _event(name, **kw):
    """The context of a workflow run for event ``name``."""
    github = {"event_name": name, "repository": REPO, "sha": "base0000", "ref": "refs/heads/main", "event": {}}
    inputs = {}
    if name == "push":
        github["ref"] = kw.get("ref", "refs/heads/main")
        github["sha"] = "push1111"
    elif name == "workflow_dispatch":
        inputs = {"ref": kw.get("ref_input", "")}
    elif name == "pull_request_target":
        head_repo = kw.get("head_repo", REPO)
        github["event"] = {
            "action": kw["action"],
            "pull_request": {"number": 7, "head": {"sha": "head2222", "repo": {"full_name": head_repo}}},
        }
        if kw["action"] == "labeled":
            github["event"]["label"] = {"name": kw["label"]}
    return {"github": github, "inputs": inputs}


GPU_RUNS = [
    ("a push to main", _event("push"), True),
    ("a manual run", _event("workflow_dispatch"), True),
    ("a pull request from this repository, opened", _event("pull_request_target", action="opened"), True),
    ("a pull request from this repository, new commits",
     _event("pull_request_target", action="synchronize"), True),
    ("a pull request from this repository, labelled gpu-ci",
     _event("pull_request_target", action="labeled", label="gpu-ci"), True),
    ("a pull request from this repository, labelled otherwise",
     _event("pull_request_target", action="labeled", label="docs"), False),
    ("a fork's pull request, opened", _event("pull_request_target", action="opened", head_repo="x/fork"), False),
    ("a fork's pull request, reopened",
     _event("pull_request_target", action="reopened", head_repo="x/fork"), False),
    ("a fork's pull request, new commits after the label",
     _event("pull_request_target", action="synchronize", head_repo="x/fork"), False),
    ("a fork's pull request, labelled otherwise",
     _event("pull_request_target", action="labeled", label="bug", head_repo="x/fork"), False),
    ("a fork's pull request, labelled gpu-ci by a maintainer",
     _event("pull_request_target", action="labeled", label="gpu-ci", head_repo="x/fork"), True),
    ("a fork named like this repository under another owner",
     _event("pull_request_target", action="opened", head_repo="other/gpu_dlpack"), False),
]


def _gpu_job():
    doc, _ = _load("gpu.yml")
    return doc, doc["jobs"]["gpu"]


@pytest.mark.parametrize("case, context, runs", GPU_RUNS, ids=[c[0] for c in GPU_RUNS])
def test_the_gpu_runner_gets_only_trusted_code(case, context, runs):
    _, job = _gpu_job()
    assert _truthy(evaluate(job["if"], context)) is runs, case


def test_the_gpu_job_checks_out_the_commit_the_event_names_and_only_a_labelled_fork_needs_the_unsafe_switch():
    _, job = _gpu_job()
    (checkout,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")
                   and "path" not in s["with"]]  # the code tested (the other: the history, read only)
    w = checkout["with"]
    assert w["persist-credentials"] is False
    cases = [
        (_event("push"), "push1111", "false"),
        (_event("workflow_dispatch"), "base0000", "false"),
        (_event("workflow_dispatch", ref_input="v0.1.0"), "v0.1.0", "false"),
        (_event("pull_request_target", action="synchronize"), "head2222", "false"),
        (_event("pull_request_target", action="labeled", label="gpu-ci", head_repo="x/fork"), "head2222", "true"),
    ]
    for context, ref, unsafe in cases:
        assert _interpolate(w["ref"], context) == ref
        assert _interpolate(w["allow-unsafe-pr-checkout"], context) == unsafe


# -- the benchmark history: written by a trusted job alone, read by every run -------

def _history_job():
    doc, _ = _load("gpu.yml")
    return doc["jobs"]["history"]


def test_the_benchmark_history_is_written_only_by_a_job_on_pushes_to_main_that_runs_no_pull_requests_code():
    doc, _ = _load("gpu.yml")
    job = _history_job()
    # The workflow's one write permission is this job's, and it is for the branch only.
    assert job["permissions"] == {"contents": "write"} and doc["permissions"] == {"contents": "read"}
    assert [name for name, j in doc["jobs"].items() if "permissions" in j] == ["history"]
    # Pushes to main only: never a pull request (from a fork or not, labelled or
    # not), a manual run, or a push elsewhere.
    runs = {case: _truthy(evaluate(job["if"], context)) for case, context, _ in GPU_RUNS}
    assert runs == {case: case == "a push to main" for case, _, _ in GPU_RUNS}
    assert not _truthy(evaluate(job["if"], _event("push", ref="refs/heads/topic")))
    # After the GPU run of the same push passed (needs: its success), on a
    # runner GitHub makes afresh, not the GPU runner a labelled fork ran on.
    assert job["needs"] == "gpu" and job["runs-on"] == "ubuntu-latest"
    assert job["concurrency"] == {"group": "gpu-ci-history", "cancel-in-progress": False}
    (checkout,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"] == {"persist-credentials": False}  # main's own commit, no credentials left
    (download,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@")]
    assert download["with"] == {"name": "gpu-ci-results", "path": "results/gpu-ci"}  # this run's results
    (push,) = [s for s in job["steps"] if "run" in s]
    assert push["run"] == "bash scripts/gpu-ci-history.sh results/gpu-ci/benchmarks.json"
    assert push["env"]["GPU_CI_HISTORY_TOKEN"] == "${{ github.token }}"
    assert _interpolate(push["env"]["GPU_CI_HISTORY_REMOTE"], _event("push")) == f"https://github.com/{REPO}.git"


def test_every_gpu_run_reads_the_history_and_cannot_change_it():
    _, job = _gpu_job()
    assert "permissions" not in job  # the workflow's: contents: read
    (history,) = [s for s in job["steps"] if s.get("with", {}).get("ref") == "gpu-ci-history"]
    assert history["uses"].startswith("actions/checkout@") and history["continue-on-error"] is True
    assert history["with"] == {"ref": "gpu-ci-history", "path": ".gpu-ci-history", "persist-credentials": False}
    (run,) = [s for s in job["steps"] if "gpu-ci.sh" in s.get("run", "")]
    assert run["env"] == {"GPU_CI_BASELINE": ".gpu-ci-history/latest.json"}  # a file to read, nothing to save
    steps = job["steps"]
    assert steps.index(history) < steps.index(run)
    # Nothing in the job or its script writes a history: gpu-ci.sh writes only
    # into its output folder (tests/test_gpu_ci.py runs it).
    with open(os.path.join(ROOT, "scripts", "gpu-ci.sh"), encoding="utf-8") as f:
        script = f.read()
    assert "SAVE_HISTORY" not in script and "GPU_CI_HISTORY" not in script and "git push" not in script
    assert "token" not in str(job).lower()


def test_a_run_whose_job_is_skipped_cancels_no_gpu_run():
    # A workflow-level group is joined before the job's condition is read:
    # adding any label to a pull request would cancel the GPU run under way.
    doc, job = _gpu_job()
    assert "concurrency" not in doc and job["concurrency"]["cancel-in-progress"] is True
    labelled = _event("pull_request_target", action="labeled", label="gpu-ci", head_repo="x/fork")
    assert _interpolate(job["concurrency"]["group"], labelled) == "gpu-7"
    assert _interpolate(job["concurrency"]["group"], _event("push")) == "gpu-refs/heads/main"


def test_pull_requests_reach_the_gpu_job_only_through_mains_copy_of_the_workflow():
    doc, text = _gpu_job()[0], _load("gpu.yml")[1]
    assert set(doc["on"]) == {"push", "pull_request_target", "workflow_dispatch"}
    assert doc["on"]["push"] == {"branches": ["main"]}
    assert doc["permissions"] == {"contents": "read"}
    # No job of a pull request writes: the one write permission is the
    # history job's, which runs on pushes to main only (above).
    assert all("permissions" not in job for name, job in doc["jobs"].items() if name != "history")
    assert "secrets." not in text and "actions/cache" not in text


# -- the release ----------------------------------------------------------------

def _release():
    return _load("release.yml")


def test_the_release_publishes_a_tag_by_trusted_publishing_and_nothing_else_gets_a_token():
    doc, text = _release()
    assert doc["on"]["push"] == {"tags": ["v*"]} and set(doc["on"]) == {"push", "workflow_dispatch"}
    assert doc["permissions"] == {"contents": "read"}
    jobs = doc["jobs"]
    publish = jobs["publish"]
    assert publish["permissions"] == {"id-token": "write"}
    assert [job for name, job in jobs.items() if name != "publish" and "permissions" in job] == []
    assert publish["environment"]["name"] == "pypi"
    assert set(publish["needs"]) == {"sdist", "wheels"}
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in publish["steps"])
    assert "secrets." not in text and "password" not in text  # no token stored: trusted publishing
    for context, publishes in [(_event("push", ref="refs/tags/v0.1.0"), True), (_event("workflow_dispatch"), False),
                               (_event("push"), False)]:
        context["github"]["ref_type"] = "tag" if context["github"]["ref"].startswith("refs/tags/") else "branch"
        assert _truthy(evaluate(publish["if"], context)) is publishes


def _wheel_jobs():
    """(id, runner, cibuildwheel's platform, its CIBW_* environment) of each job of the wheels matrix."""
    doc, _ = _release()
    wheels = doc["jobs"]["wheels"]
    (cibw,) = [s for s in wheels["steps"] if s.get("uses", "").startswith("pypa/cibuildwheel@")]
    jobs = []
    for entry in wheels["strategy"]["matrix"]["include"]:
        context = {"matrix": entry}
        runner = _interpolate(wheels["runs-on"], context)
        platform = {"ubuntu": "linux", "macos": "macos", "windows": "windows"}[runner.split("-")[0]]
        jobs.append((entry["id"], runner, platform, {k: _interpolate(v, context) for k, v in cibw["env"].items()}))
    return jobs


def test_the_wheels_are_built_from_the_sdist_by_the_cibuildwheel_the_tests_check():
    doc, text = _release()
    wheels = doc["jobs"]["wheels"]
    assert wheels["needs"] == "sdist" and wheels["strategy"]["fail-fast"] is False
    (cibw,) = [s for s in wheels["steps"] if s.get("uses", "").startswith("pypa/cibuildwheel@")]
    assert cibw["with"]["package-dir"] == "${{ steps.sdist.outputs.path }}"
    assert cibw["env"] == {"CIBW_ARCHS": "${{ matrix.arch }}", "CIBW_SKIP": "${{ matrix.skip }}"}
    (qemu,) = [s for s in wheels["steps"] if s.get("uses", "").startswith("docker/setup-qemu-action@")]
    assert qemu["if"] == "matrix.arch == 'aarch64'"
    # The job runs on Windows too, whose default shell is PowerShell; there
    # the test command's `bash` must be Git's, not WSL's launcher.
    runs = [s for s in wheels["steps"] if "run" in s]
    assert runs and all(s.get("shell") == "bash" for s in runs)
    (git_bash,) = [s for s in runs if "GITHUB_PATH" in s["run"]]
    assert git_bash["if"] == "runner.os == 'Windows'" and "Git\\bin" in git_bash["run"]
    assert wheels["steps"].index(git_bash) < wheels["steps"].index(cibw)
    (upload,) = [s for s in wheels["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert upload["with"]["name"] == "wheels-${{ matrix.id }}"
    version = re.search(r"pypa/cibuildwheel@[0-9a-f]{40}  # v(\S+)", text).group(1)
    test_group = load_toml(os.path.join(ROOT, "pyproject.toml"))["dependency-groups"]["test"]
    assert f"cibuildwheel=={version}" in test_group
    with open(os.path.join(ROOT, "requirements", "test-py3.11.txt"), encoding="utf-8") as f:
        assert f"cibuildwheel=={version}\n" in f.read()  # and the environment the test command installs


def test_the_release_has_a_job_for_each_platform_and_arch_of_the_wheels():
    # Read as written, where cibuildwheel is not installed.
    jobs = _wheel_jobs()
    assert len({job_id for job_id, _, _, _ in jobs}) == len(jobs)  # the artifacts' names
    cibw = load_toml(os.path.join(ROOT, "pyproject.toml"))["tool"]["cibuildwheel"]
    configured = {(platform, arch) for platform in ("linux", "macos", "windows") for arch in cibw[platform]["archs"]}
    assert {(platform, env["CIBW_ARCHS"]) for _, _, platform, env in jobs} == configured
    # Linux: manylinux and musllinux apart, each arch of each in one job.
    linux = sorted((env["CIBW_ARCHS"], env["CIBW_SKIP"]) for _, _, platform, env in jobs if platform == "linux")
    assert linux == sorted((arch, f"*-{libc}_*") for arch in cibw["linux"]["archs"]
                           for libc in ("manylinux", "musllinux"))
    # macOS: each arch on a runner of that arch, where its wheels can be tested.
    for _, runner, platform, env in jobs:
        if platform == "macos":
            assert runner.endswith("-intel") is (env["CIBW_ARCHS"] == "x86_64"), runner


def test_the_release_builds_every_wheel_the_configuration_names_once():
    import importlib.util

    if importlib.util.find_spec("cibuildwheel") is None:
        pytest.skip("cibuildwheel is not installed")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}

    def identifiers(platform, env):
        done = subprocess.run([sys.executable, "-m", "cibuildwheel", "--print-build-identifiers", "--platform",
                               platform], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env=dict(clean, **env))
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    built = [i for _, _, platform, env in _wheel_jobs() for i in identifiers(platform, env)]
    configured = [i for platform in ("linux", "macos", "windows") for i in identifiers(platform, {})]
    assert sorted(built) == sorted(configured)  # each in exactly one job
    # tests/test_packaging.py checks that these are every claimed CPython on every platform.
    assert len(configured) == 4 * (4 + 2 + 1)


def _tag_check():
    if sys.version_info < (3, 11):  # the step reads pyproject.toml with tomllib
        pytest.skip("the release workflow runs this step with CPython 3.11 (its setup-python)")
    doc, _ = _release()
    (step,) = [s for s in doc["jobs"]["sdist"]["steps"] if s.get("name", "").startswith("The tag names")]
    return step["run"]


@pytest.mark.parametrize("tag, passes", [("v{version}", True), ("v{version}.1", False), ("{version}", False)])
def test_the_release_refuses_a_tag_that_is_not_the_version_with_its_changelog(tag, passes):
    import gpu_dlpack

    tag = tag.format(version=gpu_dlpack.__version__)
    done = subprocess.run(["bash", "-c", _tag_check()], cwd=ROOT, env=dict(os.environ, TAG=tag),
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode == 0) is passes, done.stdout + done.stderr
    if not passes:
        assert f"::error::tag {tag} does not name the version in pyproject.toml" in done.stdout


def test_the_release_refuses_a_version_the_changelog_does_not_describe(tmp_path):
    for name in ("pyproject.toml", "CHANGELOG.md"):
        shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    text = (tmp_path / "CHANGELOG.md").read_text(encoding="utf-8")
    import gpu_dlpack

    (tmp_path / "CHANGELOG.md").write_text(text.replace(f"## [{gpu_dlpack.__version__}] - ", "## [0.0.0] - "))
    done = subprocess.run(["bash", "-c", _tag_check()], cwd=tmp_path,
                          env=dict(os.environ, TAG=f"v{gpu_dlpack.__version__}"), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "CHANGELOG.md has no section" in done.stdout


def test_zizmor_finds_nothing_in_the_workflows():
    zizmor = shutil.which("zizmor")
    if zizmor is None:
        pytest.skip("zizmor is not installed")
    done = subprocess.run([zizmor, "--offline", "--no-progress", WORKFLOWS], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the GPU runner's software ------------------------------------------------------

def _requirements(name):
    from packaging.requirements import Requirement

    index, pins = None, {}
    with open(os.path.join(ROOT, "requirements", name), encoding="utf-8") as f:
        for line in f:
            body, _, comment = line.partition("#")
            body = body.strip()
            if not body:
                continue
            if body.startswith("--extra-index-url "):
                index = body.split()[1]
                continue
            req = Requirement(body)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{name}: {body} is not pinned to one version"
            assert comment.strip().startswith(("known", "assumed")), f"{name}: {body} says neither known nor assumed"
            pins[req.name.lower().replace("_", "-")] = (spec.version, req.extras, comment.strip())
    return index, pins


@pytest.mark.parametrize("cuda", ["12", "13"])
def test_the_gpu_runners_requirements_pin_each_package_and_say_whether_the_version_is_known(cuda):
    index, pins = _requirements(f"gpu-cuda{cuda}.txt")
    extras = load_toml(os.path.join(ROOT, "pyproject.toml"))["project"]["optional-dependencies"]
    cupy = f"cupy-cuda{cuda}x"
    assert any(r.startswith(cupy) for r in extras[f"cuda{cuda}"]) and cupy in pins  # the extra's CuPy
    torch_version = pins["torch"][0]
    local = torch_version.split("+")[1]
    assert local.startswith(f"cu{cuda}") and index == f"https://download.pytorch.org/whl/{local}"
    assert pins["jax"][1] == {f"cuda{cuda}"} and pins["numba-cuda"][1] == {f"cu{cuda}"}
    # What the GPU suite and the benchmarks import.
    assert {"numpy", "torch", "jax", "numba", "numba-cuda", "ml-dtypes", "apache-tvm-ffi", "pytest", "hypothesis",
            "pytest-benchmark", "matplotlib"} <= set(pins)


def test_the_cuda_13_requirements_are_those_the_gpu_job_last_ran_with():
    _, pins = _requirements("gpu-cuda13.txt")
    known = {name: version for name, (version, _, comment) in pins.items() if comment.startswith("known")}
    assert known == {"numpy": "2.5.2", "cupy-cuda13x": "14.2.0", "torch": "2.11.0+cu130", "jax": "0.11.2",
                     "numba": "0.68.1"}
    _, pins12 = _requirements("gpu-cuda12.txt")
    assert all(comment.startswith("assumed") for _, _, comment in pins12.values())  # never run on CUDA 12
