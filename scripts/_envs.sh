# Sourced by the scripts: the test command's environments besides .venv, by
# name, each stated once here.
#   env_names               every name, in the order the test command uses them
#   use_env NAME            make (once) and activate that environment, as
#                           scripts/_venv.sh does, in the current shell
#   numpy-floor   .venv-numpy-floor: numpy 1.26.4, the oldest NumPy the
#                 package admits, with ml_dtypes, pytest and hypothesis
#   numpy-2.2     .venv-numpy-2.2: numpy 2.2.6 (NumPy 2.1 to 2.3 leave a
#                 C-contiguous array's strides out of their versioned capsules)
#   py3.X         .venv-py3.X: every other claimed CPython, from
#                 requirements/test-py3.X.txt, with the compiled core built
#                 in place for it (scripts/matrix.sh)
source "$(dirname "${BASH_SOURCE[0]}")/_pythons.sh"
_envs_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_envs_tools="pytest hypothesis pytest-xdist"

env_names() {
  local main v
  main=$(main_python_version)
  echo numpy-floor
  echo numpy-2.2
  for v in $(claimed_pythons); do
    [ "$v" = "$main" ] || echo "py$v"
  done
}

use_env() {
  local name=$1
  case "$name" in
    numpy-floor | numpy-2.2)
      local numpy=1.26.4
      [ "$name" = numpy-2.2 ] && numpy=2.2.6
      export GPU_DLPACK_VENV="$_envs_root/.venv-$name" GPU_DLPACK_LOCK="" GPU_DLPACK_EXTRAS=bf16
      export GPU_DLPACK_PIP="numpy==$numpy $_envs_tools"
      source "$_envs_root/scripts/_venv.sh"
      python -c "import numpy, sys; sys.exit(numpy.__version__ != '$numpy' and 'numpy ' + numpy.__version__)"
      ;;
    py3.*)
      local py
      py=$(python_for "${name#py}")
      if [ -z "$py" ]; then
        echo "envs: CPython ${name#py} is claimed but not on this machine" >&2
        return 3
      fi
      export PYTHON=$py GPU_DLPACK_VENV="$_envs_root/.venv-$name"
      source "$_envs_root/scripts/_venv.sh"
      python setup.py -q build_ext --inplace >/dev/null
      ;;
    *)
      echo "envs: no environment named $name (scripts/_envs.sh)" >&2
      return 2
      ;;
  esac
}
