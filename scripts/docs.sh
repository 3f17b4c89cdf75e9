#!/usr/bin/env bash
# The documentation: scripts/docs.sh [OUT_DIR]  (default build/docs, ignored by git)
#
# In .venv (the test extra pulls in the docs extra: Sphinx, the PyData theme,
# numpydoc and MyST, pinned in pyproject.toml), every page read afresh each
# time (-E), so that every warning is shown again:
#   1. the HTML pages, every warning an error and every cross-reference
#      checked (-n -W --keep-going): the API reference from the numpydoc
#      docstrings, validated by numpydoc; a public name without its entry
#      fails the build (docs/_ext);
#   2. every example of the pages as a doctest (Sphinx's doctest builder:
#      the {doctest} blocks, each {testcode} with its {testoutput}, and the
#      docstring examples of the reference), on the compiled core and again
#      on the pure-Python path; those marked `:skipif: not gpu` run only
#      where CuPy sees a GPU.
# The pages are built from the tree, with its compiled core when it is built
# in place (scripts/test.sh builds it first and sets GPU_DLPACK_EXPECT_CORE=1,
# which docs/conf.py checks). About 25 seconds.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
out="${1:-$root/build/docs}"
rm -rf "$out"
opts=(-q -n -W --keep-going -d "$out/doctrees")
python -m sphinx -E "${opts[@]}" -b html docs "$out/html"
python -m sphinx "${opts[@]}" -b doctest docs "$out/doctest"  # the pages as read above
tail -n 5 "$out/doctest/output.txt" >&2
GPU_DLPACK_PURE_PYTHON=1 GPU_DLPACK_EXPECT_CORE=0 python -m sphinx "${opts[@]}" -b doctest docs "$out/doctest-pure"
echo "docs: the examples on the pure-Python path too: $(grep -c '^Document' "$out/doctest-pure/output.txt") pages" >&2
echo "docs: $out/html/index.html" >&2
