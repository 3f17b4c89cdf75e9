#!/usr/bin/env bash
# The main job: `gpu-dlpack doctor` (what in this stack interoperates) and
# the demo exchange, on the GPU when there is one, else on the CPU.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
status=0
gpu-dlpack doctor "$@" || status=$?
echo
gpu-dlpack demo || status=$?
exit $status
