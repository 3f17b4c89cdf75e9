# Sourced by the scripts: the CPythons the package claims and where they are.
#   claimed_pythons          the versions pyproject.toml's classifiers name (3.10 ...)
#   python_for VERSION       the newest interpreter of that version on this
#                            machine (python3.X on PATH, else pyenv's), or nothing
#   main_python_version      the main interpreter's version (python3, or $PYTHON)
claimed_pythons() {
  sed -n 's/^ *"Programming Language :: Python :: \(3\.[0-9]*\)",$/\1/p' "$(dirname "${BASH_SOURCE[0]}")/../pyproject.toml"
}
python_for() {
  local v=$1 candidate
  for candidate in $(command -v "python$v" 2>/dev/null) \
      $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/"python$v" 2>/dev/null | sort -rV); do
    # (a pyenv shim of a version not selected here fails: the next is tried)
    if "$candidate" -c 'import sys; assert sys.implementation.name == "cpython"' >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  return 0
}
main_python_version() {
  "${PYTHON:-python3}" -c 'import sys; print("%d.%d" % sys.version_info[:2])'
}
