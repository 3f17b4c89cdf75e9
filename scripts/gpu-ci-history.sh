#!/usr/bin/env bash
# The benchmark results of main, kept: scripts/gpu-ci-history.sh BENCHMARKS.json
#
# Run by the GPU workflow's `history` job only (.github/workflows/gpu.yml):
# on pushes to main, once the GPU job passed, on a GitHub-hosted runner,
# never on the GPU runner and never in a job that runs a pull request's code.
# It adds BENCHMARKS.json (the passed run's benchmarks.json, an artifact of
# the GPU job) to a branch of the repository that holds nothing else:
#   runs/<UTC time>-<label>.json   one file per run of main that passed, the
#                                  newest 50 kept
#   latest.json                    the newest, which the next GPU run reads
#                                  (read only: a checkout without credentials)
# and pushes it. The branch is made on the first run. Like benchmark-action's
# gh-pages branch or asv's published results: the history is written by the
# trusted job alone, and every run only reads it.
#
# Settings, in the environment:
#   GPU_CI_HISTORY_REMOTE   the repository to push to (a URL git takes)
#   GPU_CI_HISTORY_BRANCH   the branch (default gpu-ci-history)
#   GPU_CI_HISTORY_TOKEN    a token with contents: write, sent as HTTP basic
#                           auth (the workflow's github.token); none: git's own
#   GPU_CI_RUN_LABEL        a name for the run (the commit; default "run")
#   GPU_CI_HISTORY_KEEP     how many runs to keep (default 50)
# Exits 0 once pushed, 1 on a failure (nothing pushed), 2 on a usage error.
set -euo pipefail
if [ $# -ne 1 ] || [ ! -s "$1" ]; then
  echo "usage: scripts/gpu-ci-history.sh BENCHMARKS.json (a file that exists and is not empty)" >&2
  exit 2
fi
remote=${GPU_CI_HISTORY_REMOTE:?set GPU_CI_HISTORY_REMOTE to the repository to push to}
branch=${GPU_CI_HISTORY_BRANCH:-gpu-ci-history}
keep=${GPU_CI_HISTORY_KEEP:-50}
results=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
label=$(printf '%s' "${GPU_CI_RUN_LABEL:-run}" | tr -c 'A-Za-z0-9_.-' '-' | cut -c1-60)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

auth=()
if [ -n "${GPU_CI_HISTORY_TOKEN:-}" ]; then
  auth=(-c "http.extraheader=AUTHORIZATION: basic $(printf 'x-access-token:%s' "$GPU_CI_HISTORY_TOKEN" | base64 -w0)")
fi
git() { command git "${auth[@]}" -C "$work" "$@"; }

git init -q
git config user.name "gpu-ci history"
git config user.email "gpu-ci-history@users.noreply.github.com"
if git fetch -q --depth 1 "$remote" "refs/heads/$branch" 2>/dev/null; then
  git checkout -q -B "$branch" FETCH_HEAD
else
  git checkout -q --orphan "$branch"  # the first run of main: the branch is made
fi
mkdir -p "$work/runs"
cp "$results" "$work/runs/$(date -u +%Y%m%dT%H%M%SZ)-$label.json"
cp "$results" "$work/latest.json"
# The newest runs only (the names sort by time).
find "$work/runs" -name '2*.json' | sort | head -n "-$keep" | xargs -r rm -f
git add -A
git commit -q -m "gpu-ci: the benchmarks of $label"
git push -q "$remote" "HEAD:refs/heads/$branch"
echo "gpu-ci-history: $label kept on $branch ($(find "$work/runs" -name '2*.json' | wc -l) runs)"
