"""Consumer faults: what each installed consumer cannot honour, measured,
and compared with gpu_dlpack's table (``_peers``: the faults by library and
version that ``gpu_dlpack.convert`` acts on).

Most faults are read from the consumer probe (``_probes``): READ_ONLY
ignored, legacy capsules only, ``copy=True`` that shares, unaligned data
copied. Layouts are checked by ``gpu_dlpack.testing``'s rules of an
importer (a negative stride, a step, a transposition), each in a child
process, because a consumer may abort the process on them (torch 2.12 and
2.13 on a negative stride): when a child dies, the rule it was in is the
one that killed it, and a new child goes on with the rest. They run in a
thread while the doctor probes the rest; results are kept per process for
the same libraries and versions.

A fault measured that the table does not list for the installed version,
or one the table lists that was not measured, is a finding.
"""

from __future__ import annotations

import threading

from .. import _peers
from ..testing import _children
from ..testing._report import FAILED, NOT_APPLICABLE, PASSED
from ._measure import _origin

#: The layouts probed: case -> the importer's rule of gpu_dlpack.testing
#: that checks it (a negative stride, a step, and a transposition of an
#: aligned dense buffer, which a consumer that copies unaligned data takes
#: in place).
CASES = {"negative": "negative-strides", "stepped": "stepped-strides", "transposed": "fortran-order"}


def _outcome(outcome: str, evidence: str) -> str:
    """The doctor's word for a layout rule's row (``OUTCOME``)."""
    if outcome == _children.DIED:
        return evidence
    if outcome == _children.NOT_RUN:
        return f"not probed: {evidence}"
    return evidence.partition(": ")[2]  # "<the call> of <what>: <outcome>"


#: Outcomes measured by this process's children: (unit, where its module is) -> outcome.
_measured: dict = {}


class StrideProbe:
    """The layout rules of the host consumers, checked in child processes
    from a thread while the doctor probes the rest (made by ``start``)."""

    def __init__(self, units: list):
        self.units = units
        self.keys = {u: (u, _origin(u[1])) for u in units}
        self.todo = [u for u in units if self.keys[u] not in _measured]
        self.found: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True) if self.todo else None
        if self.thread is not None:
            self.thread.start()

    def _run(self) -> None:
        for u in self.todo:
            name, module, paths = u
            # A child cannot open an accelerator the parent may hold (a TPU
            # is one process's at a time: libtpu's lock file): JAX is kept
            # on the CPU there, so that no finding comes from that.
            rows = _children.apart(f"{module}:{'|'.join(paths)}", CASES.values(), ("float32",),
                                  env={"JAX_PLATFORMS": "cpu"})
            self.found[u] = {case: _outcome(*rows[rule_id]) for case, rule_id in CASES.items()}

    def results(self) -> dict:
        """``{(name, case): outcome}`` for every unit, once every child is done."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        for u in self.todo:
            _measured[self.keys[u]] = self.found[u]
        self.todo = []
        return {(u[0], case): outcome for u in self.units for case, outcome in _measured[self.keys[u]].items()}


def start(peers) -> StrideProbe:
    """Start the layout checks of ``peers`` whose from_dlpack takes host
    data and whose module is installed."""
    units = [(peer.name, peer.module, tuple(peer.consumer)) for peer in peers
             if peer.host_consumer and _origin(peer.module) is not None]
    return StrideProbe(units)


def strides_of(results: dict, name: str) -> dict | None:
    """The outcomes of one library's cases, or None when it was not probed."""
    found = {case: results[(name, case)] for case in CASES if (name, case) in results}
    return found or None


# -- what was measured, against the table ----------------------------------------

def _fails(outcome) -> bool:
    return outcome.startswith(("raises", "aborts", "kills", "hangs", "wrong"))


def _legacy_judged(cons: dict):
    """Whether the consumer asks for versioned capsules: of a plain
    producer (``asks``, what the table's row says), else of gpu_dlpack.wrap
    (``sends``, through its C exchange API where it reads one); None where
    it asked neither."""
    asks = cons.get("asks")
    if asks is not None:
        return "max_version" in asks
    sends = cons.get("sends")
    return None if sends is None or cons.get("error") else "max_version" in sends


def measured(cons: dict) -> tuple:
    """``(faults found, faults the probes could judge)`` from a consumer row."""
    sends, unaligned, strides = cons.get("sends"), cons.get("unaligned"), cons.get("strides") or {}
    # fault -> False where the consumer has it, True where not, None where no probe could say
    honours = {
        "read-only-ignored": (cons.get("read_only") or {}).get("honoured"),
        "legacy-only": _legacy_judged(cons),
        "copy-shares": (cons.get("copy") or {}).get("copied"),
        "unaligned-copies": unaligned if isinstance(unaligned, bool) else None,
    }
    if strides and not any(o.startswith("not probed") for o in strides.values()):
        negative, stepped = _fails(strides["negative"]), _fails(strides["stepped"])
        honours["non-compact-strides"] = not stepped
        honours["negative-strides"] = stepped or not negative  # a step fails first: non-compact
        honours["c-order-only"] = not _fails(strides.get("transposed") or "zero-copy")  # wrong values, or refused
    judged = {fault for fault, honoured in honours.items() if honoured is not None}
    return {fault for fault in judged if honours[fault] is False}, judged


def _table_of(row: dict) -> set:
    """The faults gpu_dlpack's table lists for the row's library and version
    (none for a library without a row)."""
    peer = _peers.by_name(row["module"])
    return set(_peers.active_faults(peer, row.get("version"))) if peer is not None else set()


def _covers(a: str, b: str) -> bool:
    """Whether acting on fault ``a`` also handles fault ``b``: a compact
    copy (non-compact strides) has no negative stride either."""
    return a == b or (a == "non-compact-strides" and b == "negative-strides")


def compare(row: dict) -> dict | None:
    """The consumer's faults: measured, in the table for its version, and
    where the two differ: ``unknown`` (measured, not in the table) and
    ``gone`` (in the table, judged by a probe, not measured)."""
    cons = row.get("consumer") or {}
    if not cons.get("probed"):
        return None
    listed = _table_of(row)
    table = listed & MEASURED.keys()
    found, judged = measured(cons)
    return {
        "measured": sorted(found),
        "table": sorted(listed),
        "unknown": sorted(f for f in found if not any(_covers(t, f) for t in table)),
        "gone": sorted(t for t in table & judged if not any(_covers(f, t) for f in found)),
    }


def table_rows(row: dict) -> list | None:
    """Every row of gpu_dlpack's table (``_peers``) for the library's
    installed version (None: the library is not installed, or not in the
    table), in both roles, each as it stands measured here:
    ``{"role", "fault", "state", "why"}``, the state ``holds`` (the probe
    found it), ``no longer holds`` (a probe judged it and did not find it:
    the layer still acts on it) or ``not measured`` (``why`` says why)."""
    peer = _peers.by_name(row["module"])
    if peer is None or not row.get("installed"):
        return None
    version = row.get("version")
    cons = row.get("consumer") or {}
    probed = cons.get("faults") is not None
    found, judged = measured(cons) if probed else (set(), set())
    out = []
    for fault in sorted(_peers.active_faults(peer, version)):
        if not probed:
            state, why = "not measured", "its importer was not probed here"
        elif fault not in MEASURED:
            state, why = "not measured", "no probe of the doctor; the test suite measures it"
        elif any(_covers(f, fault) for f in found):
            state, why = "holds", MEASURED[fault][0](cons)
        elif fault in judged:
            state, why = "no longer holds", MEASURED[fault][0](cons)
        else:
            state, why = "not measured", "the probe could not judge it"
        out.append({"role": "consumer", "fault": fault, "state": state, "why": why})
    prod = row.get("producer") or {}
    for fault in sorted(_peers.export_faults_of(peer, version)):
        probe, looked_at, acts = _PRODUCER_PROBES.get(fault, (None, "", True))
        held = probe(prod) if probe is not None and prod.get("probed") else None
        if not prod.get("probed"):
            state, why = "not measured", "its arrays were not probed here"
        elif held is None:
            state, why = "not measured", "no probe of the doctor; the test suite measures it"
        else:
            state, why = ("holds" if held else "no longer holds"), looked_at
        out.append({"role": "producer", "fault": fault, "state": state, "why": why, "acts": acts})
    return out


def _rule(prod: dict, rule_id: str) -> tuple:
    """(outcome, evidence) of a producer rule of gpu_dlpack.testing, as the
    probe of its host arrays found it ((None, "") where it did not run)."""
    return tuple((prod.get("rules") or {}).get(rule_id) or (None, ""))


def _judged(outcome, broken: bool):
    """True where the rule failed as the fault breaks it, False where it
    passed, None where it cannot say (not applicable, or failed otherwise)."""
    return False if outcome == PASSED else True if outcome == FAILED and broken else None


def _legacy_export(prod: dict):
    outcome, evidence = _rule(prod, "versioned-when-asked")
    return _judged(outcome, "a legacy 'dltensor' capsule" in evidence)


def _device_id_none(prod: dict):
    outcome, evidence = _rule(prod, "dlpack-device")
    return _judged(outcome, evidence.endswith("None), not a pair of ints"))


def _unflagged(prod: dict):
    """Whether a capsule of its (immutable) host arrays cannot say READ_ONLY:
    a legacy one given for them, or a versioned one unflagged."""
    flagged, refused = _rule(prod, "read-only-flagged")[0], _rule(prod, "read-only-legacy-refused")[0]
    if FAILED in (flagged, refused):
        return True
    return False if refused == PASSED and flagged in (PASSED, NOT_APPLICABLE) else None


#: The producer faults the doctor measures with gpu_dlpack.testing's rules
#: of a producer, on its host arrays: fault -> (True where it holds, False
#: where not, None where the rules cannot say; what was looked at; whether
#: the layer's correction acts where the fault no longer holds: adapting a
#: legacy answer, or reading a None device id, acts on nothing once the
#: producer stops giving them, while a refusal of its legacy capsules stays).
_PRODUCER_PROBES = {
    "legacy-only-export": (
        _legacy_export, "rule 1.3 (versioned-when-asked) on a host array: __dlpack__(max_version=(1, 0))", False),
    "immutable-unflagged": (
        _unflagged, "rules 5.1 and 5.2 (read-only-flagged, read-only-legacy-refused) on its immutable host arrays",
        True),
    "device-id-none": (_device_id_none, "rule 3.1 (dlpack-device) on a host array: __dlpack_device__()", False),
    "read-only-legacy-export": (
        _unflagged, "rules 5.1 and 5.2 (read-only-flagged, read-only-legacy-refused) on its immutable host arrays",
        True),
}


def _strides_seen(cons: dict) -> str:
    strides = cons.get("strides") or {}
    return f"a negative stride: {strides.get('negative')}; a step of 2: {strides.get('stepped')}"


#: The consumer faults the doctor measures on the host: fault -> (what the
#: probe saw, for its finding; what to hand a consumer that has it).
MEASURED = {
    "read-only-ignored": (
        lambda cons: (cons.get("read_only") or {}).get("detail") or "?", "a writeable copy of read-only data"),
    "legacy-only": (
        lambda cons: f"it asks __dlpack__ of a plain producer for {cons.get('asks') or 'nothing'}"
        if cons.get("asks") is not None else f"it sends {cons.get('sends') or 'nothing'}", "writeable data"),
    "copy-shares": (
        lambda cons: "copy=True gave memory shared with the source", "a copy made before the exchange"),
    "unaligned-copies": (
        lambda cons: "data 4 bytes past a 64-byte boundary was copied", "data aligned to 64 bytes"),
    "negative-strides": (_strides_seen, "compact arrays (numpy.ascontiguousarray)"),
    "non-compact-strides": (_strides_seen, "compact arrays (numpy.ascontiguousarray)"),
    "c-order-only": (
        lambda cons: f"a transposed aligned array: {(cons.get('strides') or {}).get('transposed')}",
        "C-order arrays (numpy.ascontiguousarray)"),
}
