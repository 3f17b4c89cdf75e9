# Sourced by the scripts: make (once) and activate a virtual environment with
# the package installed in editable mode. Re-installs only when what it is
# made from changes.
#   PYTHON             the interpreter (default python3, the main one: CPython 3.11)
#   GPU_DLPACK_VENV    where (default .venv)
#   GPU_DLPACK_LOCK    the pinned requirement file to install (default
#                      requirements/test-py3.X.txt of that interpreter, made
#                      by scripts/lock.sh; empty: none)
#   GPU_DLPACK_EXTRAS  the package's own extras (e.g. bf16)
#   GPU_DLPACK_GROUPS  more of pyproject.toml's dependency groups (e.g. mutation)
#   GPU_DLPACK_PIP     more requirements (e.g. "numpy==1.26.4 pytest")
#   GPU_DLPACK_CONSTRAIN  non-empty: what is installed is held to the versions
#                      of requirements/test-py3.X.txt of that interpreter
#                      (pip's -c), without installing the rest of it
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py="${PYTHON:-python3}"
venv="${GPU_DLPACK_VENV:-$root/.venv}"
# The project's constraints in place of any machine-wide ones (requirements/constraints.txt).
export PIP_CONSTRAINT="$root/requirements/constraints.txt"
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv ($("$py" --version 2>&1))" >&2
  "$py" -m venv "$venv"
fi
version=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
lock="${GPU_DLPACK_LOCK-$root/requirements/test-py$version.txt}"
if [ -n "$lock" ] && [ ! -f "$lock" ]; then
  echo "no pinned environment for CPython $version: $lock (scripts/lock.sh $version makes it)" >&2
  return 1 2>/dev/null || exit 1
fi
extras="${GPU_DLPACK_EXTRAS:-}"
groups="${GPU_DLPACK_GROUPS:-}"
pins="${GPU_DLPACK_PIP:-}"
constraints=""
[ -z "${GPU_DLPACK_CONSTRAIN:-}" ] || constraints="$root/requirements/test-py$version.txt"
stamp="$venv/.gpu_dlpack-$( (cat "$root/pyproject.toml" ${lock:+"$lock"} ${constraints:+"$constraints"}; echo "$extras|$groups|$pins") | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "installing gpu_dlpack${extras:+[$extras]} into $venv${lock:+ from ${lock#"$root"/}} (first run takes a few minutes)" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip  # 25.1+ reads dependency groups
  args=(-e "$root${extras:+[$extras]}")
  [ -z "$lock" ] || args+=(-r "$lock")
  [ -z "$constraints" ] || args+=(-c "$constraints")
  for g in ${groups//,/ }; do args+=(--group "$root/pyproject.toml:$g"); done
  # shellcheck disable=SC2086  # the pins are separate words
  "$venv/bin/python" -m pip install -q "${args[@]}" $pins
  rm -f "$venv"/.gpu_dlpack-*
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
cd "$root"
