"""The matrix's summary: each interpreter, the peers it ran with, and what
passed, from the runs scripts/suite.sh recorded in build/matrix/ or another
folder (``python scripts/matrix_summary.py [DIR]``). Exits 1 when a recorded
run failed or recorded no result."""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET

PEERS = ("numpy", "torch", "jax")


def _counts(xml_path: str) -> dict:
    counts = {"passed": 0, "skipped": 0, "xfailed": 0, "failed": 0, "time": 0.0}
    for suite in ET.parse(xml_path).getroot().iter("testsuite"):
        counts["time"] += float(suite.get("time", 0))
        for case in suite.iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                counts["failed"] += 1
            elif (skip := case.find("skipped")) is not None:
                counts["xfailed" if skip.get("type") == "pytest.xfail" else "skipped"] += 1
            else:
                counts["passed"] += 1
    return counts


def main(folder: str) -> int:
    names = sorted(n[:-5] for n in os.listdir(folder) if n.endswith(".json")) if os.path.isdir(folder) else []
    if not names:
        print(f"matrix: no run recorded in {folder}")
        return 1
    head = ["run", "python", *PEERS, "passed", "skipped", "xfailed", "failed", "seconds"]
    metas = {}
    for name in names:
        with open(os.path.join(folder, name + ".json"), encoding="utf-8") as f:
            metas[name] = json.load(f)
    rows, bad = [], []
    for name in sorted(names, key=lambda n: (tuple(int(p) for p in metas[n]["python"].split(".")[:2]), n)):
        meta = metas[name]
        # The run's passes (scripts/_passes.sh): NAME.xml, and NAME-serial.xml
        # where the tests marked serial ran apart.
        xml_path = os.path.join(folder, name + ".xml")
        counts = _counts(xml_path) if os.path.exists(xml_path) else None
        serial_path = os.path.join(folder, name + "-serial.xml")
        if counts is not None and os.path.exists(serial_path):
            counts = {k: v + _counts(serial_path)[k] for k, v in counts.items()}
        if counts is None or counts["failed"]:
            bad.append(name)
        peers = [meta["peers"].get(p) or "-" for p in PEERS]
        figures = (["-"] * 4 + ["no result"]) if counts is None else [
            str(counts[k]) for k in ("passed", "skipped", "xfailed", "failed")] + [f"{counts['time']:.0f}"]
        rows.append([name, meta["python"], *peers, *figures])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    print("matrix: the suite on each interpreter")
    for row in [head, *rows]:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    if bad:
        print(f"matrix: failed or unfinished: {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build/matrix"))
