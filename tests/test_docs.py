"""The documentation runs: every ``python`` block of README.md, and every
docstring example of the package's modules (doctest). A block or docstring
that imports a peer that is not installed is skipped, and one that needs a
GPU is skipped without one. A README block followed by a ``text`` block that
starts with ``# prints`` must print exactly that."""

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
    assert len(readme_blocks()) >= 2  # the Use block and the GPU example


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
        "gpu_dlpack._import.from_dlpack", "gpu_dlpack.inspect",
    }


def test_the_readmes_explain_sample_is_the_commands_whole_output():
    import shlex

    from gpu_dlpack import _cli

    with open(README, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^```text\n\$ gpu-dlpack explain (.*?)\n(.*?)^```\n", text, re.M | re.S)
    assert m, "the README shows a sample of gpu-dlpack explain"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _cli.main(["explain", *shlex.split(m.group(1))]) == 0
    assert m.group(2) == out.getvalue()
