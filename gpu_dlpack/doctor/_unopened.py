"""A peer that cannot open the accelerator it is set up for: another process
holds it (a training job on the TPU), or JAX_PLATFORMS names one this machine
lacks.

Nothing of gpu_dlpack is at fault then, and the peer works on the CPU: the
doctor sets it up for the CPU (``Peer.to_cpu``), probes it there, says so
in one line, and makes no finding of it. Which platform it could not open,
and whether another process holds it, are read from the peer's message by
the entries of ``gpu-dlpack explain`` that know it."""

from __future__ import annotations

import re

from .. import _explain
from ._measure import _err, _quiet

#: The entry of ``gpu-dlpack explain`` for a platform another process holds.
BUSY = "jax-backend-busy"

# JAX's words around the platform's own: the cause is what lies between.
_PREFIX = re.compile(r"^(?:Unable to initialize backend|Backend) '\w+'(?: failed to initialize)?: ")
_SUFFIX = re.compile(r" \(set JAX_PLATFORMS=.*$")
_PID = re.compile(r"\bpid (\d+)")
_WIDTH = 200  # the reason is said in one line of the terminal report


def _set_up_for(platforms) -> str:
    """The accelerator among the platforms a peer is set up for ("cpu,tpu": tpu)."""
    names = [p for p in str(platforms or "").split(",") if p]
    return next((p for p in names if p != "cpu"), ",".join(names) or "its accelerator")


def _reason(error: BaseException, busy: bool) -> str:
    if busy:
        pid = _PID.search(str(error))
        return "in use by another process" + (f" (pid {pid.group(1)})" if pid else "")
    cause = _SUFFIX.sub("", _PREFIX.sub("", " ".join(str(error).split())))
    if len(cause) > _WIDTH:
        cause = cause[: _WIDTH - 3] + "..."
    return cause or f"{type(error).__name__}, with no message"


def unopened(peer, module) -> dict | None:
    """What the report says of ``peer`` where it could not open its
    accelerator, having set itself up for the CPU; None where it opens it
    (or the CPU fails too: its probes then say what fails). Never raises."""
    if peer.to_cpu is None or module is None:
        return None
    try:
        with _quiet():
            moved = peer.to_cpu(module)
    except Exception:  # a library that cannot be set up otherwise is probed as it is
        return None
    if moved is None:
        return None
    error, platforms = moved
    text = _err(error)
    found = _explain.first(text)
    busy = found is not None and found.id == BUSY
    return {
        "platform": (found.groups.get("platform") if found else None) or _set_up_for(platforms),
        "set_up_for": None if platforms is None else str(platforms),
        "busy": busy,
        "reason": _reason(error, busy),
        "error": text,
        "explain": None if found is None else found.id,
        "probed_on": "cpu",
    }
