"""The report: probe everything, judge it, and the exit status."""

from __future__ import annotations

import json

from .. import __version__, _fastpath, _versions
from ._findings import findings
from ._matrix import matrix
from ._measure import _err
from ._peers import PEERS, _peer_gpu_usable, generic_peer
from ._platform import probe_platform
from ._probes import load

SCHEMA = "gpu_dlpack.doctor/1"


# -- the report --------------------------------------------------------------


def _summary(report):
    cells = [c for m in report["matrices"] for c in m["cells"]]
    return {
        "exchanges": len(cells),
        "through_gpu_dlpack_ok": sum(c["via"]["ok"] for c in cells),
        "through_gpu_dlpack_failed": sum(c["via"]["outcome"] in ("error", "wrong-values") for c in cells),
        "refused": sum(c["via"]["outcome"] == "refused" for c in cells),
        "hazards": sum(f["severity"] == "hazard" for f in report["findings"]),
    }


def run(extra=(), peers=None) -> dict:
    """Probe the environment; the report as a JSON-ready dict (schema above).

    ``extra`` names more modules to probe; ``peers`` replaces ``PEERS``.
    """
    peers = PEERS if peers is None else tuple(peers)
    peers = peers + tuple(generic_peer(m) for m in extra if m not in {p.module for p in peers})
    loaded = [load(p) for p in peers]
    loaded = [item for item in loaded if item.peer.always or item.row["installed"]]
    report = {
        "schema": SCHEMA,
        "gpu_dlpack": {
            "version": __version__,
            "dlpack_version": list(_versions.DLPACK_VERSION),
            "min_dlpack_version": list(_versions.min_version()),
            "path": _fastpath.active(),
            "path_detail": _fastpath.describe(),
        },
        "platform": probe_platform(),
        "libraries": [item.row for item in loaded],
        "matrices": [],
    }
    for gpu in (False, True):
        if gpu and not any(_peer_gpu_usable(i.peer, i.module) for i in loaded):
            continue
        try:
            mat = matrix(loaded, gpu=gpu)
        except Exception as exc:  # the report goes on without this matrix
            mat = {"device": "gpu" if gpu else "cpu", "producers": [], "consumers": [], "skipped": [],
                   "cells": [], "error": _err(exc)}
        if mat is not None:
            report["matrices"].append(mat)
    report["findings"] = findings(report)
    report["summary"] = _summary(report)
    report["exit_status"] = 1 if report["summary"]["through_gpu_dlpack_failed"] else 0
    return report


def to_json(report) -> str:
    return json.dumps(report, indent=2)


