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
#      docstring examples of the reference); those marked `:skipif: not gpu`
#      run only where CuPy sees a GPU.
# The pages are built from the tree, with its compiled core built in place
# (python setup.py build_ext --inplace; scripts/test.sh builds it first):
# docs/conf.py stops the build when it does not load. About 10 seconds.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
out="${1:-$root/build/docs}"
rm -rf "$out"
opts=(-q -n -W --keep-going -d "$out/doctrees")
python -m sphinx -E "${opts[@]}" -b html docs "$out/html"
python -m sphinx "${opts[@]}" -b doctest docs "$out/doctest"  # the pages as read above
tail -n 5 "$out/doctest/output.txt" >&2
echo "docs: $out/html/index.html" >&2
