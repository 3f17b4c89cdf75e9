#!/usr/bin/env bash
# Run the test suite (and each benchmark once, as a smoke test) in .venv.
# Extra arguments go to pytest, e.g. scripts/test.sh -k versions
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
python -m pytest tests "$@"
python -m pytest bench --benchmark-disable -q -p no:randomly
