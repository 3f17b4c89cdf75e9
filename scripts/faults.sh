#!/usr/bin/env bash
# The fault tests in their long form (the test command runs the short form,
# tests/test_faults.py): scripts/faults.sh
#
# In child processes (tests/faults.py), on the compiled core built in place:
#   - every exchange kind with each of its allocations failing in turn;
#   - every exchange kind interrupted at each point where an interrupt lands;
#   - 20,000 interrupts from a timer (GPU_DLPACK_SOAK_INTERRUPTS);
#   - 1,000 children forked while two threads exchange;
#   - 20 epochs of a torch DataLoader(num_workers=2) whose workers exchange.
# Prints the counts of each; exits 1 if anything was freed twice, leaked,
# hung, crashed or raised other than the result or MemoryError.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
python setup.py -q build_ext --inplace
python -m tests.faults all \
  --interrupts "${GPU_DLPACK_SOAK_INTERRUPTS:-20000}" --forks 1000 --epochs 20
