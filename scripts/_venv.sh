# Sourced by the scripts: make (once) and activate the project's virtual
# environment in .venv, with the package installed in editable mode and the
# extras named in GPU_DLPACK_EXTRAS, plus the requirements in GPU_DLPACK_PIP
# (e.g. "numpy==1.26.4 pytest"). Re-installs only when pyproject.toml or
# those change.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="${GPU_DLPACK_VENV:-$root/.venv}"
extras="${GPU_DLPACK_EXTRAS:-test}"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv" >&2
  "$py" -m venv "$venv"
fi
pins="${GPU_DLPACK_PIP:-}"
stamp="$venv/.gpu_dlpack-$extras-$( (cat "$root/pyproject.toml"; echo "$pins") | sha1sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  echo "installing gpu_dlpack[$extras] into $venv (first run takes a few minutes)" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip
  # torch==2.13.0 is pinned in the extras so that pip never pulls a multi-GB CUDA build.
  # shellcheck disable=SC2086  # the pins are separate words
  "$venv/bin/python" -m pip install -q -e "$root[$extras]" $pins
  touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
cd "$root"
