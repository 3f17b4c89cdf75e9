"""Findings: what the probes and the matrices found, by severity, each with
a remedy."""

from __future__ import annotations

from .. import _capsule, _explain
from .._peers import FAULTS
from ._faults import MEASURED, _legacy_judged
from ._verdicts import is_unjustified_refusal, rule_of, rule_text


SEVERITIES = ("failure", "refused", "hazard", "fixed", "note")


def _hazard(hazard_id, subject, severity="hazard", **fields):
    text = _explain.hazards()[hazard_id]
    return {"severity": severity, "subject": subject, "problem": _explain.fill(text["problem"], fields),
            "remedy": _explain.fill(text["remedy"], fields), "hazard": hazard_id,
            "strict": bool(text.get("strict", False))}  # what --strict fails on (docs/guide/doctor.md)


def _library_findings(row):
    out = []
    name = row["name"]
    if row["installed"] and row["error"]:
        out.append(_hazard("library-unusable", name, "note", library=name, error=row["error"]))
    prod = row.get("producer") or {}
    if prod.get("probed"):
        if prod["keywords"]["max_version"] and prod["capsules"]["1.0"].get("name") == _capsule.LEGACY:
            out.append(_hazard("producer-legacy-only", name, producer=name))
        if prod.get("floor"):
            f = prod["floor"]
            out.append(_hazard("producer-floor", name, producer=name, floor=f"({f[0]}, {f[1]})",
                               error=prod.get("floor_error") or ""))
        missing = [k for k, taken in prod["keywords"].items() if not taken]
        if missing:
            out.append(_hazard("producer-missing-keyword", name, producer=name, keywords=", ".join(missing)))
        copy = prod.get("copy") or {}
        if copy.get("copies") is False:
            out.append(_hazard("producer-copy-shares", name, producer=name))
        elif copy.get("copies") and copy.get("flag") is False:
            out.append(_hazard("producer-no-is-copied", name, producer=name))
        ro = prod.get("read_only") or {}
        if ro.get("flag") is False:
            out.append(_hazard("producer-no-read-only", name, producer=name))
        if ro.get("legacy") == "exported":
            out.append(_hazard("producer-read-only-legacy", name, producer=name))
        for t in row.get("table") or ():
            if t["role"] == "producer" and t["state"] == "no longer holds" and t.get("acts"):
                out.append(_hazard("producer-fault-gone", name, "note", producer=name, version=row.get("version") or "",
                                   fault=t["fault"], detail=t["why"]))
    cons = row.get("consumer") or {}
    if cons.get("probed"):
        call = cons["call"]
        copy = cons.get("copy") or {}
        ro = cons.get("read_only") or {}
        if ro.get("honoured") is False:
            copy_call = f"{call}(gpu_dlpack.wrap(a), copy=True)" if copy.get("forwarded") else f"{call}(a.copy())"
            out.append(_hazard("consumer-ignores-read-only", name, consumer=name, copy_call=copy_call))
        if _legacy_judged(cons) is False:  # asked a plain producer (else wrap) for no version
            out.append(_hazard("consumer-legacy-only", name, consumer=name, consumer_call_copy=f"{call}(a.copy())"))
        if copy.get("copied") is False and copy.get("error") is None:
            out.append(_hazard("consumer-copy-ignored", name, consumer=name))
        out += _fault_findings(row, cons)
    return out


def _fault_findings(row, cons):
    """The consumer's faults against gpu_dlpack's table, and any probe that
    killed its process."""
    out = []
    name, version = row["name"], row.get("version") or ""
    for case, outcome in (cons.get("strides") or {}).items():
        if outcome.startswith(("aborts", "kills", "hangs")):
            what = {"negative": "an array with a negative stride", "stepped": "an array with a step of 2",
                    "transposed": "a transposed array"}[case]
            out.append(_hazard("consumer-aborts", name, consumer=name, version=version, case=what,
                               detail=f"{cons['call']}(gpu_dlpack.wrap(a)) {outcome}", call=cons["call"]))
    faults = cons.get("faults") or {}
    for fault in faults.get("unknown", ()):
        seen, hint = MEASURED[fault]
        out.append(_hazard("consumer-fault-unknown", name, consumer=name, version=version,
                           what=FAULTS[fault][0], detail=seen(cons), hint=hint))
    for fault in faults.get("gone", ()):
        out.append(_hazard("consumer-fault-gone", name, "note", consumer=name, version=version,
                           what=FAULTS[fault][0], detail=MEASURED[fault][0](cons)))
    return out


def _remedy_for(result):
    found = _explain.first(result["error"] or "")
    if found is None:
        return "Unknown to `gpu-dlpack explain`; please report it with `gpu-dlpack doctor --json`."
    return found.remedies[0]


def _first_sentence(text):
    """The first sentence of a message, ending with a period."""
    return text and text.partition(". ")[0].rstrip(".") + "."


def _cell_findings(mat):
    out = []
    for cell in mat["cells"]:
        subject = f"{cell['producer']} -> {cell['consumer']} ({mat['device']})"
        direct, via = cell["direct"], cell["via"]
        if via["outcome"] in ("error", "wrong-values"):
            problem = f"through gpu_dlpack, {via['call']}: " + (via["error"] or "the values arrived wrong")
            remedy = _remedy_for(via) if via["error"] else "Please report it with `gpu-dlpack doctor --json`."
            if is_unjustified_refusal(via):
                rule = rule_of(via)
                problem += (f" gpu_dlpack refused it ({rule_text(rule)}), but no rule that exists to refuse "
                            f"demands it, and {direct['call']} works.")
                remedy = "A defect of gpu_dlpack: please report it with `gpu-dlpack doctor --json`."
            out.append({"severity": "failure", "subject": subject, "problem": problem, "remedy": remedy})
        elif via["outcome"] == "refused":
            out.append({"severity": "refused", "subject": subject,
                        "problem": f"{direct['call']}: {_first_sentence(direct['error']) or direct['outcome']} "
                                   f"Through gpu_dlpack, refused by {rule_text(rule_of(via))}: "
                                   f"{_first_sentence(via['error'])}",
                        "remedy": _remedy_for(via)})
        elif not direct["ok"]:
            out.append({"severity": "fixed", "subject": subject,
                        "problem": f"{direct['call']}: {direct['error'] or direct['outcome']}",
                        "remedy": f"Use {via['call']} ({via['outcome']})."})
    return out


def findings(report) -> list:
    out = []
    gpu = report["platform"]["gpu"]
    if not gpu["usable"] and gpu["cupy"] is not None and gpu["cupy"].get("error"):
        out.append(_hazard("gpu-unusable", "gpu", "note", error=gpu["cupy"]["error"]))
    for row in report["libraries"]:
        out += _library_findings(row)
    for mat in report["matrices"]:
        out += _cell_findings(mat)
    out.sort(key=lambda f: SEVERITIES.index(f["severity"]))
    return out
