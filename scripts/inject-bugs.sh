#!/usr/bin/env bash
# Stream and lifetime bugs put into gpu_dlpack one at a time, each of which the
# gpu tests on the simulated CUDA must catch: scripts/inject-bugs.sh [-j JOBS] [NAME ...]
#
# The bugs are a table (tests/simcuda/bugs.py): each replaces one exact piece
# of a source file in a copy of the tree (the core rebuilt there for a bug in
# its sources), and names the tests that must catch it, run on the simulated
# CUDA (tests/simcuda/inject.py). First the same tests run on the tree as it
# is. Prints, per bug, what caught it: the checker's report, or a test's
# assertion; exits 1 when a bug went unnoticed. About a minute on two cores
# (scripts/test.sh runs it).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
python -m tests.simcuda.inject "$@"
