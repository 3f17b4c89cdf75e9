#!/usr/bin/env bash
# Pin the test environments: scripts/lock.sh [VERSION ...]   (default: every claimed CPython)
#
# For each CPython the package claims (pyproject.toml's classifiers), in a
# fresh venv, pip installs the newest releases that interpreter admits of the
# dependency group its runs need (pyproject.toml's [dependency-groups]:
# `test` on the main interpreter, CPython 3.11, which runs the whole test
# command; `suite` on the others, which run the suite), and
# writes what it installed, every package at its exact version, to
# requirements/test-py3.X.txt. The test command installs those files, so
# that a run is reproducible; run this to move the pins, then the test
# command. pip's own resolver does the work (with this machine's indexes;
# 2.13.0's CPU build of torch for CPython 3.11 lies on this disk, and a
# machine-wide constraint, which capped torch at 2.14.1 here, is replaced by
# the project's requirements/constraints.txt).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
source "$here/_pythons.sh"
# The project's constraints in place of any machine-wide ones (requirements/constraints.txt).
export PIP_CONSTRAINT="$root/requirements/constraints.txt"
main=3.11
versions=("$@")
[ ${#versions[@]} -gt 0 ] || mapfile -t versions < <(claimed_pythons)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in "${versions[@]}"; do
  py=$(python_for "$v")
  [ -n "$py" ] || { echo "lock: no CPython $v on this machine" >&2; exit 1; }
  group=suite
  [ "$v" = "$main" ] && group=test
  echo "lock: CPython $v ($py): the $group group" >&2
  "$py" -m venv "$tmp/$v"
  "$tmp/$v/bin/python" -m pip install -q --upgrade pip
  (cd "$root" && "$tmp/$v/bin/python" -m pip install -q --group "$group")
  out="$root/requirements/test-py$v.txt"
  {
    echo "# The test environment of CPython $v: pyproject.toml's '$group' dependency group,"
    echo "# as scripts/lock.sh resolved it on $(date -u +%Y-%m-%d) with pip $("$tmp/$v/bin/python" -m pip --version | cut -d' ' -f2)."
    echo "# Made by scripts/lock.sh; installed by scripts/_venv.sh. Do not edit by hand."
    "$tmp/$v/bin/python" -m pip freeze --all --exclude-editable | grep -v -E '^(pip|wheel)=='
  } >"$out"
  echo "lock: $out ($(grep -c '==' "$out") packages)" >&2
  rm -rf "${tmp:?}/$v"
done
