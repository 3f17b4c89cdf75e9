#!/usr/bin/env bash
# Run the test suite in .venv (made on the first run), after running each
# benchmark once as a smoke test so that they never rot.
# Extra arguments go to the test run, e.g. scripts/test.sh -k versions
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
python -m pytest bench --benchmark-disable -q || [ $? -eq 5 ]  # 5: none collected
python -m pytest tests "$@"
