#!/usr/bin/env bash
# The release artefacts, checked here as PyPI and a user will meet them:
#   bash scripts/release-check.sh [OUT_DIR]     (default: a temporary folder)
#
# 1. `python -m build` from the tracked files: the sdist, then the wheel
#    built from that sdist, in an isolated build environment (as the
#    release workflow builds them);
# 2. `twine check --strict` of both (the metadata and README PyPI renders);
# 3. their contents, and the sdist installed where no compiler works
#    (CC=/nonexistent), which must stop at its build with the remedies and
#    install nothing: tests/test_packaging.py on exactly these two files;
# 4. the wheel in a fresh venv (its dependencies resolved by pip from the
#    wheel's metadata, as a user's install does, plus cibuildwheel's
#    test-requires): cibuildwheel's test command from pyproject.toml, run in
#    a copy of its test-sources, as cibuildwheel runs it on each wheel: the
#    suite on the wheel's compiled core.
# 5. the pytest plugin as the conformance page has a maintainer use it, in a
#    fresh venv of the wheel and pytest alone (NumPy comes with the wheel):
#    a test per rule of NumPy's export and import, NumPy's one broken
#    importer rule allowed.
# What needs containers, macOS, Windows or PyPI itself (the wheels for each
# platform, the upload) runs in .github/workflows/release.yml. About a minute.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
say() { echo "release-check: $*" >&2; }
python -c "import build, twine" 2>/dev/null || python -m pip install -q build twine
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=${1:-$tmp/dist}
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)

src=$root
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # What a fresh clone holds (with this checkout's uncommitted edits), not
  # the untracked files and build outputs lying in the tree.
  src=$tmp/src
  mkdir -p "$src"
  (cd "$root" && git ls-files -z | while IFS= read -r -d '' f; do
    if [ -e "$f" ]; then cp --parents "$f" "$src/"; fi
  done)
fi

say "1. python -m build (the sdist, then the wheel from the sdist)"
python -m build --outdir "$out" "$src" >"$tmp/build.log" 2>&1 || { tail -n 40 "$tmp/build.log"; exit 1; }
sdist=$(ls "$out"/*.tar.gz)
wheel=$(ls "$out"/*.whl)
ls -l "$sdist" "$wheel" | awk '{print "release-check:   " $5 " bytes  " $NF}' >&2

say "2. twine check --strict"
python -m twine check --strict "$sdist" "$wheel"

say "3. the contents of the sdist and the wheel, the sdist without a compiler (tests/test_packaging.py)"
GPU_DLPACK_DIST=$out python -m pytest tests/test_packaging.py -q -p no:cacheprovider -k "sdist or wheel or compiler"

say "4. the wheel in a fresh venv, tested as cibuildwheel tests it"
python - "$root/pyproject.toml" >"$tmp/cibw.sh" <<'PY'
import shlex
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    cibw = tomllib.load(f)["tool"]["cibuildwheel"]
print("requires=(" + " ".join(shlex.quote(r) for r in cibw["test-requires"]) + ")")
print("sources=(" + " ".join(shlex.quote(s) for s in cibw["test-sources"]) + ")")
print("command=" + shlex.quote(cibw["test-command"]))
PY
source "$tmp/cibw.sh"
"$py" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel" "${requires[@]}"
mkdir "$tmp/test_cwd"
(cd "$root" && cp -r --parents "${sources[@]}" "$tmp/test_cwd/")
in_venv() {
  (cd "$tmp/test_cwd" && env -u PYTHONPATH -u PYTHON PATH="$tmp/venv/bin:$PATH" VIRTUAL_ENV="$tmp/venv" sh -c "$1")
}
in_venv "$command"

say "5. the pytest plugin, in a venv of the wheel and pytest alone"
"$py" -m venv "$tmp/plain"
"$tmp/plain/bin/python" -m pip install -q --disable-pip-version-check "$wheel" pytest
mkdir "$tmp/plugin"
# The test module as the conformance page shows it, taken from the page.
python - "$root/docs/guide/conformance.md" "$tmp/plugin/test_dlpack.py" <<'PY'
import re
import sys

page = open(sys.argv[1]).read()
open(sys.argv[2], "w").write(re.search(r"```python\n# test_numpy_dlpack\.py\n(.*?)```", page, re.S).group(1))
PY
(cd "$tmp/plugin" && env -u PYTHONPATH "$tmp/plain/bin/python" -m pytest -p no:cacheprovider -v -rsx . \
  >"$tmp/plugin.log" 2>&1) || { tail -n 40 "$tmp/plugin.log"; exit 1; }
rules=$(grep -cE "^test_dlpack.py::test_(export|import)::[a-z0-9-]+ (PASSED|SKIPPED|XFAIL)" "$tmp/plugin.log" || true)
if [ "$rules" != 30 ] || ! grep -q "^XFAIL test_dlpack.py::test_import::malformed-refused - allowed" "$tmp/plugin.log"; then
  tail -n 40 "$tmp/plugin.log"
  say "the plugin reported $rules of the 30 rules (14 of the producer, 16 of the importer)"
  exit 1
fi
say "   $(tail -n 1 "$tmp/plugin.log" | tr -d '=')"

say "passed: $(basename "$sdist") and $(basename "$wheel")"
