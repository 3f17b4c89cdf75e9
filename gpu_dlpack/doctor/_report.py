"""The report: probe everything, judge it, and the exit status."""

from __future__ import annotations

import importlib.util
import json

from .. import __version__, _compiled, _errors, _handoff, _versions
from ._faults import compare, strides_of, table_rows
from ._faults import start as start_stride_probes
from ._findings import findings
from ._matrix import matrix
from ._measure import _err
from ._peers import PEERS, _peer_gpu_usable, generic_peer
from ._platform import probe_platform
from ._probes import load

SCHEMA = "gpu_dlpack.doctor/1"


def _summary(report):
    cells = [c for m in report["matrices"] for c in m["cells"]]
    return {
        "exchanges": len(cells),
        "through_gpu_dlpack_ok": sum(c["via"]["ok"] for c in cells),
        "through_gpu_dlpack_failed": sum(c["via"]["outcome"] in ("error", "wrong-values") for c in cells),
        "refused": sum(c["via"]["outcome"] == "refused" for c in cells),
        "hazards": sum(f["severity"] == "hazard" for f in report["findings"]),
        "uncorrected": sum(bool(f.get("strict")) for f in report["findings"]),
    }


def run(extra=(), peers=None, strict=False) -> dict:
    """Probe the environment; the report as a JSON-ready dict (schema above).

    ``extra`` names more modules to probe (each must be importable:
    ModuleNotFoundError otherwise); ``peers`` replaces ``PEERS``.
    ``strict``: the exit status is 1 on hazards too.
    """
    for name in extra:  # one that is found but fails to import gets its row, with the error
        try:
            found = importlib.util.find_spec(name)
        except (ImportError, ValueError) as exc:
            raise _errors.doctor_library_not_importable(name, exc) from None
        if found is None:
            raise _errors.doctor_library_not_importable(name, ModuleNotFoundError(f"No module named {name!r}"))
    peers = PEERS if peers is None else tuple(peers)
    peers = peers + tuple(generic_peer(m) for m in extra if m not in {p.module for p in peers})
    probe = start_stride_probes(peers)  # in a child process, meanwhile
    loaded = [item for item in map(load, peers) if item.peer.always or item.row["installed"]]
    strides = probe.results()
    for item in loaded:
        cons = item.row.get("consumer")
        if cons and cons.get("probed") and item.peer.host_consumer:
            cons["strides"] = strides_of(strides, item.peer.name)
            cons["faults"] = compare(item.row)
        item.row["table"] = table_rows(item.row)
    report = {
        "schema": SCHEMA,
        "gpu_dlpack": {
            "version": __version__,
            "dlpack_version": list(_versions.DLPACK_VERSION),
            "min_dlpack_version": list(_versions.min_version()),
            "core": _compiled.PATH,
        },
        "platform": probe_platform(),
        "libraries": [item.row for item in loaded],
        "matrices": [],
    }
    # Asked once CuPy is imported (probe_platform imports it).
    report["gpu_dlpack"]["runtime"] = _handoff.binding()
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
    report["summary"] = summary = _summary(report)
    report["strict"] = bool(strict)
    report["exit_status"] = 1 if summary["through_gpu_dlpack_failed"] or (strict and summary["uncorrected"]) else 0
    return report


def to_json(report) -> str:
    return json.dumps(report, indent=2)
