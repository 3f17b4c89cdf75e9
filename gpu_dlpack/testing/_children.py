"""The checks of an importer in child processes: each child imports the
importer by name and runs the checks it is given, a line before and after
each (and each case of one); a check the child dies in is reported with how
it died, and a new child goes on with the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Mapping

_CHILD = "import sys; from gpu_dlpack.testing._consumer import child; child(sys.argv[1])"
MARK = "gpu_dlpack.testing:"  # what starts each line of the child's that the parent reads
_CHILD_TIMEOUT = 300  # seconds, for one child


def target_of(fn) -> str | None:
    """``"module:qualified.name"`` of ``fn`` where importing it gives ``fn``
    back, in a child process; None where it does not."""
    if isinstance(fn, str):
        return fn
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not name or "<" in name or module == "__main__":
        return None
    try:
        found = resolved(f"{module}:{name}")
    except Exception:
        return None
    return f"{module}:{name}" if found is fn else None


def resolved(target: str):
    """The object ``"module:dotted.name"`` names (its parts may be
    submodules, imported as needed); ``"module:name|other.name"``: the
    first of them the module has."""
    import importlib

    module, _, names = target.partition(":")
    for name in names.split("|"):
        obj, path = importlib.import_module(module), module
        try:
            for part in name.split("."):
                path += "." + part
                try:
                    obj = getattr(obj, part)
                except AttributeError:
                    obj = importlib.import_module(path)
        except ImportError:
            continue
        return obj
    raise AttributeError(f"{module} has no {' or '.join(names.split('|'))}")


def importable(target: str) -> None:
    """Raise ModuleNotFoundError where the module of ``"module:name"`` is
    not installed (its children would each die importing it)."""
    import importlib.util

    module = target.partition(":")[0]
    try:
        found = importlib.util.find_spec(module)
    except ImportError:  # a parent package that is not there
        found = None
    if found is None:
        raise ModuleNotFoundError(f"no module named {module!r} here: {target!r} cannot be imported to be checked",
                                  name=module)


IN_CHILD = False


def in_case(what) -> None:
    """In a child process, say which case of a check runs (a death in it is
    reported with it)."""
    if IN_CHILD:
        print(MARK + json.dumps({"case": what}), flush=True)


def death(status) -> str:
    """What a child process's exit ``status`` (None: it timed out) says happened to it."""
    if status is None:
        return "hangs: the child process timed out"
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = f"signal {-status}"
        return f"aborts the process ({name})"
    if status == 134:  # 128 + SIGABRT, as a shell reports it
        return "aborts the process (SIGABRT)"
    return f"kills the process (exit status {status})"


#: What apart says of a check the child did not finish: it died in it, or before it.
DIED, NOT_RUN = "died", "not run"


def apart(target: str, rule_ids, dtypes, env: Mapping[str, str] | None = None) -> dict:
    """rule id -> (outcome, evidence), each check run in a child process
    (with ``env`` added to its environment); a check the child died in is
    (DIED, how it died), and a new child goes on with the rest: those it
    died before are (NOT_RUN, its exit status)."""
    rows: dict = {}
    todo = list(rule_ids)
    # What the parent imports from, and what its environment adds for the
    # interpreters it starts (PYTHONPATH: a sitecustomize there runs in the child too).
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) + [os.getcwd()] + sys.path if p]
    env = dict(os.environ, **(env or {}), PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)))
    while todo:
        spec = json.dumps({"target": target, "rules": todo, "dtypes": list(dtypes)})
        try:
            done = subprocess.run([sys.executable, "-c", _CHILD, spec], capture_output=True, text=True, env=env,
                                  timeout=_CHILD_TIMEOUT)
            out, status = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            out, status = exc.stdout or "", None
            out = out.decode() if isinstance(out, bytes) else out
        started = case = None
        for line in out.splitlines():
            if not line.startswith(MARK):
                continue  # the library's own output
            msg = json.loads(line[len(MARK):])
            if "start" in msg:
                started, case = msg["start"], None
            elif "case" in msg:
                case = msg["case"]
            else:
                rows[msg["done"]] = tuple(msg["row"])
                started = None
        if started is not None:
            rows[started] = (DIED, death(status) + (f" (a capsule of {case})" if case else ""))
        elif status:
            rows.update({rule_id: (NOT_RUN, f"the child process exited with status {status}")
                         for rule_id in todo if rule_id not in rows})
        todo = [rule_id for rule_id in todo if rule_id not in rows]
    return rows
