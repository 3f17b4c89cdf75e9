#!/usr/bin/env bash
# Run the test suite (and each benchmark once, as a smoke test) in .venv.
# Extra arguments go to pytest, e.g. scripts/test.sh -k versions
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
python -m pytest tests "$@"
# Each benchmark once, as a test, so that they never rot (exit 5: none collected).
python -m pytest bench --benchmark-disable -q || [ $? -eq 5 ]
