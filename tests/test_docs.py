"""The documentation runs: every ``python`` block of README.md, and every
docstring example of the package's modules (doctest). A block or docstring
that imports a peer that is not installed is skipped, and one that needs a
GPU is skipped without one. A README block followed by a ``text`` block that
starts with ``# prints`` must print exactly that. And the pages of docs/
(whose own examples Sphinx's doctest builder runs: scripts/docs.sh) give
every public name its entry in the API reference, and show the commands'
real output."""

from __future__ import annotations

import ast
import contextlib
import doctest
import importlib
import importlib.util
import io
import os
import pkgutil
import re

import pytest

import gpu_dlpack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
DOCS = os.path.join(ROOT, "docs")
# What needs a GPU: CuPy arrays, PyTorch's CUDA API, a GPU target.
GPU_WORDS = re.compile(r"\bcupy\b|\bcp\.|torch\.cuda|device=.cuda|dl_device=\(2")


def _imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def _skip_unless_runnable(source: str) -> None:
    for name in sorted(_imports(source)):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"needs {name}, which is not installed")
    if GPU_WORDS.search(source) and not _gpu():
        pytest.skip("needs a GPU usable by CuPy")
    if "jax.enable_x64(" in source:
        import jax

        if not hasattr(jax, "enable_x64"):  # JAX 0.6.2, the newest for CPython 3.10
            pytest.skip(f"JAX {jax.__version__} has the x64 block only as jax.experimental.enable_x64")


def _gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def readme_blocks():
    """(line, source, expected output or None) of each python block."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    blocks = []
    pattern = re.compile(r"^```python\n(.*?)^```\n(?:\n```text\n# prints\n(.*?)^```\n)?", re.M | re.S)
    for m in pattern.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        blocks.append(pytest.param(m.group(1), m.group(2), id=f"README.md:{line}"))
    return blocks


@pytest.mark.parametrize("source, expected", readme_blocks())
def test_readme_block_runs(source, expected, floor):
    _skip_unless_runnable(source)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, README, "exec"), {"__name__": "__readme__"})
    if expected is not None:
        assert out.getvalue() == expected


def test_the_readme_has_runnable_blocks():
    assert len(readme_blocks()) >= 1  # the first exchange (the GPU example is in docs/guide/gpu.md)


def _doctests():
    finder = doctest.DocTestFinder(exclude_empty=True)
    names = ["gpu_dlpack"] + [
        m.name for m in pkgutil.walk_packages(gpu_dlpack.__path__, "gpu_dlpack.")
        if not m.name.endswith("__main__")
    ]
    found = []
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue  # a backend whose library is missing
        for test in finder.find(module, name):
            if test.examples:
                found.append(pytest.param(test, id=test.name))
    return found


@pytest.mark.parametrize("test", _doctests())
def test_docstring_examples_run(test, floor):
    _skip_unless_runnable("\n".join(e.source for e in test.examples))
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    out = io.StringIO()
    result = runner.run(test, out=out.write, clear_globs=True)
    assert result.failed == 0, out.getvalue()


def test_every_public_function_has_an_example():
    assert {t.values[0].name for t in _doctests()} >= {
        "gpu_dlpack", "gpu_dlpack._export.export", "gpu_dlpack._export.wrap",
        "gpu_dlpack._import.from_dlpack", "gpu_dlpack.inspect_capsule",
    }


def test_every_public_function_and_class_has_the_sections_of_its_reference():
    # The API reference is built from these docstrings (numpydoc): each
    # public function says its parameters, what it returns and shows an
    # example; each class (but the errors, shown in use on their page)
    # shows an example. Sphinx's numpydoc validation checks the parameters
    # against the signatures.
    import inspect

    missing = []
    for name in gpu_dlpack.__all__:
        obj = getattr(gpu_dlpack, name)
        if isinstance(obj, (int, tuple)):
            continue  # data, documented by the comment beside it
        doc = inspect.getdoc(obj) or ""
        if isinstance(obj, type) and issubclass(obj, Exception | Warning):
            continue
        sections = ["Examples\n--------\n"]
        if not isinstance(obj, type):
            sections += ["Parameters\n----------\n", "Returns\n-------\n" if name != "use_stream" else "Yields\n------\n"]
        missing += [f"{name}: {s.splitlines()[0]}" for s in sections if s not in doc]
        if ">>> " not in doc:
            missing.append(f"{name}: no example")
    assert not missing, missing


def _explain_output(args: str) -> str:
    import shlex

    from gpu_dlpack import _cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _cli.main(["explain", *shlex.split(args)]) == 0
    return out.getvalue()


def test_the_guides_explain_sample_is_the_commands_whole_output():
    with open(os.path.join(DOCS, "guide", "doctor.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^```text\n\$ gpu-dlpack explain (.*?)\n(.*?)^```\n", text, re.M | re.S)
    assert m, "the guide shows a sample of gpu-dlpack explain"
    assert m.group(2) == _explain_output(m.group(1))


def test_the_readmes_explain_sample_is_the_commands_output_abridged():
    # The front door shows the first and the last lines; each is the
    # command's, in its order, and "..." stands for what is left out.
    with open(README, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^```sh\n\$ gpu-dlpack explain (.*?)\n(.*?)^```\n", text, re.M | re.S)
    assert m, "the README shows a sample of gpu-dlpack explain"
    real = _explain_output(m.group(1)).splitlines()
    shown = m.group(2).splitlines()
    assert "  ..." in shown and shown[0] == real[0]
    at = 0
    for line in shown:
        if line != "  ...":
            assert line in real[at:], line
            at = real.index(line, at) + 1


def _reference_entries() -> set[str]:
    """The names the API pages document, as ``gpu_dlpack.<name>`` (the
    members of a class, indented under it, are not counted)."""
    names = set()
    directive = re.compile(r"^\.\. (?:auto\w+|py:\w+):: ([\w.]+)", re.M)
    api = os.path.join(DOCS, "api")
    for page in sorted(os.listdir(api)):
        with open(os.path.join(api, page), encoding="utf-8") as f:
            text = f.read()
        module = re.search(r"^\.\. currentmodule:: ([\w.]+)", text, re.M)
        for name in directive.findall(text):
            names.add(name if name.startswith("gpu_dlpack.") or module is None else f"{module.group(1)}.{name}")
    return names


def test_every_public_name_has_its_entry_in_the_api_reference():
    # Sphinx fails the build on the same omission (docs/_ext); this says so
    # in the suite, without building the pages.
    missing = sorted(set(gpu_dlpack.__all__) - {n.removeprefix("gpu_dlpack.") for n in _reference_entries()})
    assert not missing, f"public but not in docs/api/: {missing}"


def test_the_reference_documents_no_name_that_is_not_public():
    stale = sorted(
        n for n in _reference_entries()
        if n.count(".") == 1 and n.removeprefix("gpu_dlpack.") not in gpu_dlpack.__all__
    )
    assert not stale, f"in docs/api/ but not in gpu_dlpack.__all__: {stale}"


def test_every_page_is_reachable_from_the_index():
    # Sphinx warns (an error under -W) about a page in no toctree; this
    # checks the same of the Markdown a reader follows on a forge.
    toctree = re.compile(r"^```\{toctree\}\n(.*?)^```", re.M | re.S)
    pages = set()
    for dirpath, _, files in os.walk(DOCS):
        for name in files:
            if name.endswith(".md") and "_ext" not in dirpath:
                pages.add(os.path.relpath(os.path.join(dirpath, name), DOCS)[:-3])
    reached, todo = set(), ["index"]
    while todo:
        page = todo.pop()
        if page in reached:
            continue
        reached.add(page)
        with open(os.path.join(DOCS, page + ".md"), encoding="utf-8") as f:
            text = f.read()
        for block in toctree.findall(text):
            for entry in block.splitlines():
                if entry and not entry.startswith(":"):
                    todo.append(os.path.normpath(os.path.join(os.path.dirname(page), entry.strip())))
    assert pages - reached == set()


def test_the_rules_the_doctor_and_explain_name_are_the_rules_pages():
    from gpu_dlpack import _explain
    from gpu_dlpack.doctor import _verdicts

    with open(os.path.join(DOCS, "internals", "rules.md"), encoding="utf-8") as f:
        text = f.read()
    titles = dict(re.findall(r"^\(rule-(\d+)\)=\n### \1\. (.+)$", text, re.M))
    assert {int(n): title for n, title in titles.items()} == _verdicts.RULE_NAMES
    named = {e.rule for e in _explain.entries() if e.rule is not None}
    assert named and named <= set(_verdicts.RULE_NAMES)
