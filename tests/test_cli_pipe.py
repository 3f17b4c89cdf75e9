"""The command when the reader of its standard output has gone (``| head``,
``| true``): it stops quietly with exit status 141 (128 + SIGPIPE)."""

import os
import subprocess
import sys

import pytest

from gpu_dlpack._cli import EXIT_BROKEN_PIPE
from .helpers import without_peers


def run_into_closed_pipe(args, unbuffered, peers=True):
    """Run ``python -m gpu_dlpack ARGS`` with stdout a pipe whose read end is
    already closed: every write fails with EPIPE, as after ``head`` exits.
    ``peers``: with every peer installed (else NumPy alone)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = dict(os.environ) if peers else without_peers()
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpu_dlpack", *args], stdout=write_end,
            stderr=subprocess.PIPE, text=True, env=env, timeout=300,
        )
    finally:
        os.close(write_end)
    return done


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", [["doctor"], ["doctor", "--json"], ["explain", "--list"], ["--version"], ["demo"]],
                         ids=" ".join)
def test_a_closed_stdout_ends_the_command_quietly_with_status_141(args, unbuffered):
    # The doctor with every peer once (its probes start children, which
    # must not write to the closed pipe either); its other forms write the
    # same way, so they probe NumPy alone.
    done = run_into_closed_pipe(args, unbuffered, peers=args[0] != "doctor" or (args == ["doctor"] and not unbuffered))
    assert done.stderr == ""
    assert done.returncode == EXIT_BROKEN_PIPE == 141


def test_a_real_shell_pipe_into_head_is_quiet():
    # The user's view: ``gpu-dlpack explain --list | head -1`` prints one line.
    script = f"{sys.executable!s} -m gpu_dlpack explain --list | head -1; echo status=${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[1] in ("status=0", "status=141"), done.stdout
    assert done.stderr == ""
