#!/usr/bin/env bash
# The canary: the suite against the newest release of every peer, unpinned.
#   bash scripts/canary.sh [VERSION]   (default: the newest CPython the package claims that is here)
#
# In .venv-canary, made afresh each run: pip installs the `suite` dependency
# group of pyproject.toml with its version pins taken off (markers kept), so
# that each peer comes at the newest release pip admits today, then the
# package in editable mode; the compiled core is built for that interpreter
# and the suite runs on it, recorded in build/canary/ and summarized
# (scripts/matrix_summary.py). Not a step of the test command, whose result
# must not depend on the day it runs: the scheduled workflow
# .github/workflows/canary.yml runs it daily. A failure here, with the test
# command passing, is a new release of a peer that breaks an exchange: add
# its version to the table of that peer's faults (gpu_dlpack/_peers.py) or
# fix the layer, then move the pins (scripts/lock.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
source "$here/_pythons.sh"
version=${1:-}
if [ -z "$version" ]; then
  for v in $(claimed_pythons | sort -rV); do
    if [ -n "$(python_for "$v")" ]; then version=$v; break; fi
  done
fi
py=$(python_for "$version")
[ -n "$py" ] || { echo "canary: no CPython $version on this machine" >&2; exit 1; }
venv="$root/.venv-canary"
# The project's constraints in place of any machine-wide ones (requirements/constraints.txt).
export PIP_CONSTRAINT="$root/requirements/constraints.txt"
rm -rf "$venv" "$root/build/canary"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
mapfile -t reqs < <("$venv/bin/python" - "$root/pyproject.toml" <<'PY'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    groups = tomllib.load(f)["dependency-groups"]


def flat(name):
    for item in groups[name]:
        if isinstance(item, dict):
            yield from flat(item["include-group"])
        else:
            yield item


seen = set()
for req in flat("suite"):
    spec, _, marker = req.partition(";")
    name = re.match(r"[A-Za-z0-9._-]+", spec.strip()).group(0)
    line = name + (f"; {marker.strip()}" if marker else "")
    if line not in seen:
        seen.add(line)
        print(line)
PY
)
echo "canary: CPython $version, newest of: ${reqs[*]}" >&2
"$venv/bin/python" -m pip install -q --upgrade "${reqs[@]}"
"$venv/bin/python" -m pip install -q --no-deps -e "$root"
export PATH="$venv/bin:$PATH" GPU_DLPACK_RESULTS="$root/build/canary"
cd "$root"
python setup.py -q build_ext --inplace >/dev/null
status=0
bash "$here/suite.sh" "canary-py$version" -q -p no:cacheprovider || status=1
python "$here/matrix_summary.py" "$root/build/canary" >&2 || status=1
exit $status
