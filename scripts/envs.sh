#!/usr/bin/env bash
# Make the test command's environments besides .venv (scripts/_envs.sh), one
# after another, each in a subshell:  bash scripts/envs.sh [NAME ...]
# (default: every one). The test command runs it in the background while
# its first suites run, and waits for it before the steps that need them.
# A claimed CPython missing here is said and skipped (scripts/matrix.sh
# fails on it under CI=true); any other failure fails the script, at the end.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_envs.sh"
names=("$@")
[ ${#names[@]} -gt 0 ] || mapfile -t names < <(env_names)
failed=()
for name in "${names[@]}"; do
  started=$(date +%s)
  rc=0
  # A process of its own: set -e holds in it (not in a subshell left of ||).
  bash -c 'set -euo pipefail; source "$1/scripts/_envs.sh"; use_env "$2"' _ "$_envs_root" "$name" || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "envs: $name ready in $(($(date +%s) - started)) s" >&2
  elif [ "$rc" -ne 3 ]; then
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "envs: not made: ${failed[*]}" >&2
  exit 1
fi
