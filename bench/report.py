"""Summarise a benchmark run, and the GPU job around it, as markdown.

    python bench/report.py [BENCH.json] [-o SUMMARY.md] [--plot BANDWIDTH.png]
        [--suite NAME JUNIT.xml STATUS]... [--note TEXT]... [--allow-nothing-ran]
        [--fail-on-missed-target] [--compare EARLIER.json] [--max-regression PCT]
        [--fail-on-regression]

What ran (``--suite``, once per test run: its JUnit XML and exit status):
passed, failed, errors, skipped and xfailed counted from the XML. A suite
in which no test ran has not passed: skipped is not passed. The verdict
(the first lines, and the exit status: 0 passed, 1 failed) fails on a
failed test, an error, a bad exit status, a suite in which nothing ran
(unless ``--allow-nothing-ran``), a missed target with
``--fail-on-missed-target``, and a regression with ``--fail-on-regression``.

Exchange groups: each gpu_dlpack figure beside its peer measured in the
same run: medians, the ratio to the peer, the time added per call, and its
targets met or missed: a ratio to the peer (``target``) or a time
(``most``, in seconds: the longest median that meets it, as for a figure of
one step alone, ``minus`` the rest). Copy groups (benchmarks that record
``bytes``): bandwidth in GB/s by size and method, gpu_dlpack's share of the
pinned-copy ceiling, and each gpu_dlpack copy against its peer and the
ceiling with the targets it records (``target``, ``ceiling_share``).

``--compare`` sets each gpu_dlpack figure beside the same benchmark of an
earlier run (the last run of main kept, in the GPU job). A
figure regresses when its ratio to its peer, both measured in the same run,
grew by more than ``--max-regression`` percent (default 25): judged against
the peer, a slower machine or a peer's own change moves both and is not
counted against gpu_dlpack. A figure with no peer is judged on its time.

Every table has one unit per column, named in its header (times in µs). The plot
(bandwidth against size) needs matplotlib; without it the summary says so.
Only the standard library is used here, so the report runs anywhere the
benchmarks ran.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from typing import NamedTuple


def load(path):
    with open(path) as f:
        return json.load(f)


# -- units: one per column ---------------------------------------------------------

# Times are shown in µs in every table: host exchanges take a fraction of
# one, copies and gathers up to tens of thousands, and three significant
# digits read well at both ends (0.0923, 1.25, 10,300).
US = 1e-6


def number(x, signed=False):
    """``x`` with three significant digits (all the digits of a whole number
    of 100 or more) and thousands separators; "" for None."""
    if x is None:
        return ""
    if not math.isfinite(x):
        return str(x)
    sign = "+" if signed and x >= 0 else ""
    a = abs(x)
    digits = 0 if a >= 100 or a == 0 else 2 - math.floor(math.log10(a))
    return f"{sign}{x:,.{digits}f}"


def kib(n):
    """A size in KiB (sizes are whole KiB; smaller ones keep their fraction)."""
    return f"{n / 1024:,.0f}" if n % 1024 == 0 else f"{n / 1024:,.3g}"


def table(headers, rows, align):
    """Markdown table lines; ``align`` has one of "l", "r" per column."""
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


# -- the run's header ------------------------------------------------------------------

def _header(doc):
    m = doc.get("machine_info", {})
    cpu = m.get("cpu", {}).get("brand_raw") or m.get("processor") or "?"
    lines = [
        f"- machine: {m.get('node', '?')}, {cpu}, {m.get('system', '?')} {m.get('release', '')}".rstrip(),
        f"- python: {m.get('python_implementation', '')} {m.get('python_version', '?')}".rstrip(),
    ]
    versions = m.get("versions")
    if versions:
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    gpu = m.get("gpu")
    if gpu:
        lines.append(f"- GPU: {gpu}")
    lines.append("- " + _run_name(doc))
    return lines


def _run_name(doc):
    commit = doc.get("commit_info", {})
    parts = []
    if commit.get("id"):
        dirty = " (with uncommitted changes)" if commit.get("dirty") else ""
        parts.append(f"commit {commit['id'][:12]}{dirty}")
    if doc.get("datetime"):
        parts.append(f"run {doc['datetime']}")
    return ", ".join(parts) or "run: not recorded"


# -- what ran: JUnit XML -------------------------------------------------------------

class Suite(NamedTuple):
    name: str
    path: str
    status: int | None
    found: bool  # the XML exists and parses
    counts: Counter  # passed, failed, errors, skipped, xfailed
    skip_reasons: Counter

    @property
    def tests(self):
        return sum(self.counts.values())

    @property
    def ran(self):
        """Tests that ran: all but the skipped (an xfailed test ran)."""
        return self.tests - self.counts["skipped"]


def read_junit(name, path, status=None):
    """What a JUnit XML file (pytest's ``--junitxml``) says ran."""
    counts, reasons = Counter(passed=0, failed=0, errors=0, skipped=0, xfailed=0), Counter()
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return Suite(name, path, status, False, counts, reasons)
    for case in root.iter("testcase"):
        kinds = {child.tag: child for child in case}
        if "failure" in kinds:
            counts["failed"] += 1
        elif "error" in kinds:
            counts["errors"] += 1
        elif "skipped" in kinds:
            skipped = kinds["skipped"]
            if skipped.get("type") == "pytest.xfail":
                counts["xfailed"] += 1
            else:
                counts["skipped"] += 1
                reasons[_skip_reason(skipped.get("message") or skipped.text or "")] += 1
        else:
            counts["passed"] += 1
    return Suite(name, path, status, True, counts, reasons)


def _skip_reason(message):
    # pytest writes "file:line: reason" for some skips; keep the reason.
    message = message.strip()
    head, sep, rest = message.partition(": ")
    if sep and ":" in head and head.split(":")[-1].isdigit():
        message = rest
    return message or "no reason given"


def _stopped(status):
    return status in (124, 137)


def suite_problems(suite, allow_nothing_ran=False):
    """Why ``suite`` did not pass (empty when it did)."""
    c = suite.counts
    out = []
    if _stopped(suite.status):
        out.append(f"{suite.name}: stopped at its time limit (exit status {suite.status})")
    if not suite.found:
        if not allow_nothing_ran:
            out.append(f"{suite.name}: nothing ran: no test results ({os.path.basename(suite.path)} is missing; "
                       f"exit status {suite.status})")
        return out
    if c["failed"] or c["errors"]:
        out.append(f"{suite.name}: {c['failed']} failed, {c['errors']} errors")
    elif suite.status not in (0, None, 5) and not _stopped(suite.status):
        out.append(f"{suite.name}: exit status {suite.status}")
    if suite.ran == 0 and not allow_nothing_ran:
        out.append(f"{suite.name}: nothing ran: 0 of {suite.tests} tests ran, {c['skipped']} skipped "
                   "(skipped is not passed)")
    return out


def what_ran_table(suites):
    rows = []
    for s in suites:
        if not s.found:
            rows.append([s.name, "", "", "", "", "", "", "" if s.status is None else str(s.status),
                         "no results"])
            continue
        c = s.counts
        said = "nothing ran" if s.ran == 0 else "ran"
        rows.append([s.name, str(s.tests), str(c["passed"]), str(c["failed"]), str(c["errors"]),
                     str(c["skipped"]), str(c["xfailed"]), "" if s.status is None else str(s.status), said])
    lines = table(["suite", "tests", "passed", "failed", "errors", "skipped", "xfailed", "exit status", ""],
                  rows, "lrrrrrrrl")
    skips = [(s.name, n, reason) for s in suites for reason, n in s.skip_reasons.most_common(5)]
    if skips:
        lines += ["", "Skipped, by reason (the five most common per suite):", ""]
        lines += table(["suite", "tests", "reason"], [[name, str(n), reason] for name, n, reason in skips], "lrl")
    return lines


# -- exchanges ----------------------------------------------------------------------

class Row(NamedTuple):
    fullname: str
    group: str
    label: str
    role: str | None
    median: float  # seconds
    peer: str | None
    ratio: float | None  # median / the peer's median, same run
    added: float | None  # median - the peer's median, seconds
    target: float | None  # the highest ratio that meets the target
    most: float | None  # the longest median that meets a target of time (seconds)


def exchange_rows(doc):
    """Per group: [Row] with the peer first. Benchmarks that record bytes
    are copies, not exchanges."""
    groups = defaultdict(list)
    for b in doc["benchmarks"]:
        info = b.get("extra_info", {})
        if "bytes" in info or "label" not in info:
            continue
        groups[b.get("group") or b["name"]].append(b)
    out = {}
    for group, benches in groups.items():
        medians = {b["extra_info"]["label"]: b["stats"]["median"] for b in benches}
        peers = {b["extra_info"]["label"]: b["stats"]["median"] for b in benches
                 if b["extra_info"].get("role") == "peer"}
        rows = []
        for b in sorted(benches, key=lambda b: b["extra_info"].get("role") != "peer"):
            info = b["extra_info"]
            label, median = info["label"], b["stats"]["median"]
            minus = info.get("minus")
            if minus in medians:
                # The cost of one step alone: this call less the same call without it.
                median -= medians[minus]
                label = f"{label}` less `{minus}"
            peer_label = info.get("peer") or (next(iter(peers)) if info.get("role") == "other" and peers else None)
            peer = peers.get(peer_label) if peer_label else None
            ratio = median / peer if peer else None
            added = median - peer if peer else None
            rows.append(Row(b.get("fullname") or b["name"], group, label, info.get("role"), median,
                            peer_label if peer else None, ratio, added, info.get("target"), info.get("most")))
        out[group] = rows
    return out


def verdict(ratio, target):
    """"met" or "missed by ..." for a ratio (at most the target meets it);
    "" without a target or a ratio."""
    if target is None or ratio is None:
        return ""
    return "met" if ratio <= target else f"missed by {ratio - target:.2f}"


def time_verdict(median, most):
    """The same for a median against the longest that meets its target
    (seconds; the excess in µs, as the tables show times)."""
    if most is None or median is None:
        return ""
    return "met" if median <= most else f"missed by {number((median - most) / US)} µs"


def row_verdict(r):
    """Each target of an exchange row, met or missed ("met" when all are)."""
    found = [v for v in (verdict(r.ratio, r.target), time_verdict(r.median, r.most)) if v]
    missed = [v for v in found if v != "met"]
    return "; ".join(missed) if missed else ("met" if found else "")


def share_verdict(share, want):
    """The same for a share of the ceiling (at least the target meets it),
    in whole percent as the table shows them."""
    if want is None or share is None:
        return ""
    shown, wanted = round(share * 100), round(want * 100)
    return "met" if shown >= wanted else f"missed by {wanted - shown}"


def exchange_table(doc):
    groups = exchange_rows(doc)
    if not groups:
        return []
    rows = [r for group in groups.values() for r in group]
    cells = []
    for r in rows:
        shown = f"`{r.label}`" + {"peer": " (peer)", "other": " (context)"}.get(r.role, "")
        cells.append([
            r.group, shown, number(r.median / US),
            number(r.ratio), "" if r.added is None else number(r.added / US, signed=True),
            "" if r.most is None else f"≤ {number(r.most / US)}",
            "" if r.target is None else f"≤ {r.target:g}", row_verdict(r),
        ])
    return table(["group", "call", "median (µs)", "ratio to peer (x)", "added per call (µs)",
                  "target (µs)", "target (x)", "verdict"], cells, "llrrrrrl")


# -- copies --------------------------------------------------------------------------

def bandwidth_rows(doc):
    """{direction: {size: {label: (GB/s, role)}}} for copy benchmarks."""
    out = defaultdict(lambda: defaultdict(dict))
    for b in doc["benchmarks"]:
        info = b.get("extra_info", {})
        if "bytes" not in info:
            continue
        gbs = info["bytes"] / b["stats"]["median"] / 1e9
        out[info.get("direction", b.get("group"))][info["bytes"]][info["label"]] = (gbs, info.get("role"))
    return out


def bandwidth_table(doc):
    data = bandwidth_rows(doc)
    lines = []
    for direction, sizes in data.items():
        labels = []
        for by_label in sizes.values():
            for label in by_label:
                if label not in labels:
                    labels.append(label)
        lines += [f"**{direction}** (median bandwidth)", ""]
        rows = []
        for size in sorted(sizes):
            by_label = sizes[size]
            cells = [f"{by_label[label][0]:.2f}" if label in by_label else "" for label in labels]
            ours = [v for v, role in by_label.values() if role == "gpu_dlpack"]
            ceiling = [v for v, role in by_label.values() if role == "ceiling"]
            share = f"{ours[0] / ceiling[0] * 100:.0f}" if ours and ceiling else ""
            rows.append([kib(size)] + cells + [share])
        lines += table(["size (KiB)"] + [f"`{label}` (GB/s)" for label in labels] + ["gpu_dlpack / ceiling (%)"],
                       rows, "r" * (len(labels) + 2))
        lines.append("")
    return lines


class CopyRow(NamedTuple):
    fullname: str
    direction: str
    nbytes: int
    label: str
    median: float
    peer: str | None
    ratio: float | None  # time against the peer's
    share: float | None  # of the ceiling's bandwidth
    target: float | None  # the highest ratio that meets the target
    ceiling_share: float | None  # the lowest share that meets the target


def copy_target_rows(doc):
    """[CopyRow] for each gpu_dlpack copy: its median against the peer
    named in the same group (ratio of times) and against the group's
    ceiling (share of its bandwidth), with the targets it records
    (``target``: the highest ratio; ``ceiling_share``: the lowest share)."""
    groups = defaultdict(list)
    for b in doc["benchmarks"]:
        info = b.get("extra_info", {})
        if "bytes" in info and "label" in info:
            groups[b.get("group") or b["name"]].append(b)
    rows = []
    for benches in groups.values():
        by_label = {b["extra_info"]["label"]: b["stats"]["median"] for b in benches}
        ceilings = [b["stats"]["median"] for b in benches if b["extra_info"].get("role") == "ceiling"]
        for b in benches:
            info = b["extra_info"]
            if info.get("role") != "gpu_dlpack":
                continue
            median = b["stats"]["median"]
            peer = by_label.get(info.get("peer"))
            rows.append(CopyRow(b.get("fullname") or b["name"], info.get("direction", ""), info["bytes"],
                                info["label"], median, info.get("peer"), median / peer if peer else None,
                                ceilings[0] / median if ceilings else None, info.get("target"),
                                info.get("ceiling_share")))
    rows.sort(key=lambda r: (r.direction, r.nbytes, r.label))
    return rows


def copy_target_table(doc):
    rows = copy_target_rows(doc)
    if not rows:
        return []
    cells = []
    for r in rows:
        cells.append([
            r.direction, kib(r.nbytes), f"`{r.label}`", number(r.median / US),
            f"`{r.peer}`" if r.peer else "", number(r.ratio), "" if r.target is None else f"≤ {r.target:g}",
            verdict(r.ratio, r.target),
            "" if r.share is None else f"{r.share * 100:.0f}",
            "" if r.ceiling_share is None else f"≥ {r.ceiling_share * 100:.0f}",
            share_verdict(r.share, r.ceiling_share),
        ])
    return table(["direction", "size (KiB)", "call", "median (µs)", "peer", "ratio to peer (x)",
                  "target (x)", "verdict", "share of ceiling (%)", "target (%)", "verdict"], cells, "lrlrlrrlrrl")


# -- targets -------------------------------------------------------------------------

class Target(NamedTuple):
    call: str
    group: str
    nbytes: int | None  # copies
    ratio: float | None  # against the peer, with its target (at most)
    peer: str | None
    ratio_target: float | None
    share: float | None  # of the ceiling, with its target (at least)
    share_target: float | None
    met: bool
    median: float | None = None  # seconds, with a target of time (at most)
    most: float | None = None


def targets(doc):
    """Every target the run records, met or missed: a ratio to the peer, a
    share of the ceiling or a time (``most``: the longest median, in
    seconds), one target each."""
    out = []
    for rows in exchange_rows(doc).values():
        for r in rows:
            if r.target is not None and r.ratio is not None:
                out.append(Target(r.label, r.group, None, r.ratio, r.peer, r.target, None, None,
                                  verdict(r.ratio, r.target) == "met"))
            if r.most is not None:
                out.append(Target(r.label, r.group, None, None, None, None, None, None, r.median <= r.most,
                                  r.median, r.most))
    for r in copy_target_rows(doc):
        if r.target is not None and r.ratio is not None:
            out.append(Target(r.label, r.direction, r.nbytes, r.ratio, r.peer, r.target, None, None,
                              verdict(r.ratio, r.target) == "met"))
        if r.ceiling_share is not None and r.share is not None:
            out.append(Target(r.label, r.direction, r.nbytes, None, None, None, r.share, r.ceiling_share,
                              share_verdict(r.share, r.ceiling_share) == "met"))
    return out


def targets_section(found):
    if not found:
        return []
    missed = [t for t in found if not t.met]
    lines = [f"{len(found) - len(missed)} met, {len(missed)} missed.", ""]
    if missed:
        rows = [[f"`{t.call}`", t.group, "" if t.nbytes is None else kib(t.nbytes), number(t.ratio),
                 f"`{t.peer}`" if t.peer else "", "" if t.ratio_target is None else f"≤ {t.ratio_target:g}",
                 "" if t.share is None else f"{t.share * 100:.0f}",
                 "" if t.share_target is None else f"≥ {t.share_target * 100:.0f}",
                 "" if t.median is None else number(t.median / US),
                 "" if t.most is None else f"≤ {number(t.most / US)}"] for t in missed]
        lines += table(["missed", "group", "size (KiB)", "ratio to peer (x)", "peer", "target (x)",
                        "share of ceiling (%)", "target (%)", "median (µs)", "target (µs)"], rows, "llrrlrrrrr")
    return lines


# -- against an earlier run -----------------------------------------------------------------

class Change(NamedTuple):
    label: str
    group: str
    now: float
    before: float
    ratio_now: float | None
    ratio_before: float | None
    change: float  # the fraction the judged figure grew by (ratio, else time)
    judged_on: str  # "ratio" or "time"
    regressed: bool


def _figures(doc):
    """{fullname: (label, group, median, ratio to its peer or None)} of each
    gpu_dlpack figure, exchanges and copies."""
    out = {}
    for rows in exchange_rows(doc).values():
        for r in rows:
            if r.role == "gpu_dlpack":
                out[r.fullname] = (r.label, r.group, r.median, r.ratio)
    for r in copy_target_rows(doc):
        out[r.fullname] = (r.label, f"{r.direction} {kib(r.nbytes)} KiB", r.median, r.ratio)
    return out


def compare(doc, earlier, margin):
    """[Change] for each gpu_dlpack figure in both runs, and the names of
    those only in this one. ``margin``: the fraction a figure may grow by."""
    now, before = _figures(doc), _figures(earlier)
    changes = []
    for name, (label, group, median, ratio) in now.items():
        if name not in before:
            continue
        _, _, median_before, ratio_before = before[name]
        if ratio is not None and ratio_before:
            grew, judged = ratio / ratio_before - 1, "ratio"
        else:
            grew, judged = median / median_before - 1, "time"
        changes.append(Change(label, group, median, median_before, ratio, ratio_before, grew, judged,
                              grew > margin))
    return changes, sorted(set(now) - set(before))


def compare_section(doc, earlier, margin, source):
    changes, new = compare(doc, earlier, margin)
    lines = [f"Against {source} ({_run_name(earlier)}): a figure regresses when its ratio to its peer (same "
             f"run), or its time where it has no peer, grew by more than {margin:.0%}.", ""]
    v_now = doc.get("machine_info", {}).get("versions", {})
    v_before = earlier.get("machine_info", {}).get("versions", {})
    differ = [f"{k} {v_before.get(k, '-')} -> {v_now.get(k, '-')}" for k in sorted(set(v_now) | set(v_before))
              if v_now.get(k) != v_before.get(k)]
    if differ:
        lines += ["Versions differ: " + ", ".join(differ) + ".", ""]
    if not changes:
        return lines + ["No gpu_dlpack figure of this run is in the earlier one.", ""]
    cells = []
    for c in sorted(changes, key=lambda c: -c.change):
        cells.append([c.group, f"`{c.label}`", number(c.before / US), number(c.now / US),
                      number(c.ratio_before), number(c.ratio_now), number(c.change * 100, signed=True),
                      c.judged_on, "regressed" if c.regressed else "ok"])
    lines += table(["group", "call", "median before (µs)", "median now (µs)", "ratio before (x)",
                    "ratio now (x)", "change (%)", "judged on", "verdict"], cells, "llrrrrrll")
    regressed = sum(c.regressed for c in changes)
    lines += ["", f"{regressed} of {len(changes)} figures regressed."
              + (f" {len(new)} figures are new in this run." if new else ""), ""]
    return lines


# -- the plot --------------------------------------------------------------------------

def plot(doc, path):
    """Bandwidth against size, one line per method and direction. Returns
    None when written, else the reason it was not."""
    data = bandwidth_rows(doc)
    if not data:
        return "no copy benchmarks in this run"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed"
    fig, axes = plt.subplots(1, len(data), figsize=(6 * len(data), 4.5), squeeze=False)
    colors = {"gpu_dlpack": "tab:blue", "peer": "tab:orange", "ceiling": "tab:green"}
    for ax, direction in zip(axes[0], data):
        sizes = data[direction]
        labels = {(label, role) for by_label in sizes.values() for label, (_, role) in by_label.items()}
        for label, role in sorted(labels, key=lambda lr: lr[1] or ""):
            xs = [s for s in sorted(sizes) if label in sizes[s]]
            ax.plot(xs, [sizes[s][label][0] for s in xs], marker="o", color=colors.get(role), label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bytes per copy")
        ax.set_ylabel("GB/s (median)")
        ax.set_title(direction)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    fig.suptitle("gpu_dlpack copies against CuPy and the pinned-copy ceiling")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


# -- the summary -------------------------------------------------------------------------

class Report(NamedTuple):
    text: str
    problems: list  # why the verdict is failed; empty when passed


def report(doc=None, suites=(), notes=(), plot_note=None, allow_nothing_ran=False, fail_on_missed_target=False,
           earlier=None, earlier_source="the earlier run", margin=0.25, fail_on_regression=False):
    problems = [p for s in suites for p in suite_problems(s, allow_nothing_ran)]
    found = targets(doc) if doc else []
    missed = [t for t in found if not t.met]
    if missed and fail_on_missed_target:
        problems.append(f"{len(missed)} of {len(found)} benchmark targets missed")
    changes = compare(doc, earlier, margin)[0] if doc and earlier else []
    regressed = [c for c in changes if c.regressed]
    if regressed and fail_on_regression:
        problems.append(f"{len(regressed)} figures regressed by more than {margin:.0%} against {earlier_source}")

    title = "gpu_dlpack GPU CI" if suites else "gpu_dlpack benchmarks"
    lines = [f"# {title}", ""]
    if suites or fail_on_missed_target or fail_on_regression or earlier is not None:
        lines += [f"**Verdict: {'failed' if problems else 'passed'}**", ""]
        lines += [f"- {p}" for p in problems]
        lines += [f"- {n}" for n in notes]
        if allow_nothing_ran:
            lines += [f"- {s.name}: nothing ran (allowed by --allow-nothing-ran)" for s in suites
                      if not s.found or s.ran == 0]
        if missed and not fail_on_missed_target:
            lines.append(f"- {len(missed)} of {len(found)} benchmark targets missed (not failing this run)")
        if regressed and not fail_on_regression:
            lines.append(f"- {len(regressed)} figures regressed (not failing this run)")
        lines.append("")
    if suites:
        lines += ["## What ran", ""] + what_ran_table(suites) + [""]
    if doc is None:
        lines += ["## Benchmarks", "", "No benchmark results.", ""]
        return Report("\n".join(lines), problems)
    lines += _header(doc) + [""]
    if found:
        lines += ["## Targets", ""] + targets_section(found) + [""]
    ex = exchange_table(doc)
    if ex:
        lines += ["## Exchanges", "", "Medians per call; the ratio and the added time are against the peer "
                  "(the row marked peer) measured in the same run; a ratio at most the target meets it.", ""]
        lines += ex + [""]
    bw = bandwidth_table(doc)
    if bw:
        lines += ["## Copies", ""] + bw
    copy_targets = copy_target_table(doc)
    if copy_targets:
        lines += ["## Copy targets", "", "Each gpu_dlpack copy against its peer (median time ratio; at most "
                  "the target meets it) and the pinned `cudaMemcpyAsync` ceiling of its group (share of its "
                  "bandwidth; at least the target meets it).", ""] + copy_targets + [""]
    if earlier is not None:
        lines += ["## Against the last run", ""] + compare_section(doc, earlier, margin, earlier_source)
    if plot_note:
        lines += [plot_note, ""]
    return Report("\n".join(lines), problems)


def summary(doc, plot_note=None):
    """The markdown summary of one benchmark run (no verdict)."""
    return report(doc, plot_note=plot_note).text


def _percent(text):
    value = float(text.rstrip("%"))
    if value < 0:
        raise argparse.ArgumentTypeError("a margin is not negative")
    return value / 100


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="?", help="pytest-benchmark JSON (--benchmark-json); absent or missing: "
                        "no benchmark results")
    parser.add_argument("-o", "--output", help="write the markdown summary here (default: stdout)")
    parser.add_argument("--plot", help="write a PNG plot of bandwidth against size here")
    parser.add_argument("--suite", nargs=3, action="append", default=[], metavar=("NAME", "JUNIT", "STATUS"),
                        help="a test run: its name, JUnit XML and exit status (repeatable)")
    parser.add_argument("--note", action="append", default=[], help="a line for the verdict (repeatable)")
    parser.add_argument("--allow-nothing-ran", action="store_true",
                        help="a suite in which no test ran does not fail the verdict")
    parser.add_argument("--fail-on-missed-target", action="store_true", help="a missed target fails the verdict")
    parser.add_argument("--compare", metavar="EARLIER.json", help="an earlier run to compare with")
    parser.add_argument("--compare-name", default="the earlier run",
                        help="what the earlier run is, in words")
    parser.add_argument("--max-regression", type=_percent, default=0.25, metavar="PCT",
                        help="the percent a figure may grow by before it regresses (default 25)")
    parser.add_argument("--fail-on-regression", action="store_true", help="a regression fails the verdict")
    args = parser.parse_args(argv)
    doc = load(args.json) if args.json and os.path.exists(args.json) and os.path.getsize(args.json) else None
    suites = [read_junit(name, path, int(status) if status.lstrip("-").isdigit() else None)
              for name, path, status in args.suite]
    earlier = load(args.compare) if args.compare and os.path.exists(args.compare) else None
    note = None
    if args.plot and doc is not None:
        why_not = plot(doc, args.plot)
        note = f"Plot: no plot written ({why_not})." if why_not else f"Plot: `{os.path.basename(args.plot)}`."
    done = report(doc, suites, args.note, note, args.allow_nothing_ran, args.fail_on_missed_target, earlier,
                  args.compare_name, args.max_regression, args.fail_on_regression)
    if args.output:
        with open(args.output, "w") as f:
            f.write(done.text + "\n")
    else:
        sys.stdout.write(done.text + "\n")
    return 1 if done.problems else 0


if __name__ == "__main__":
    sys.exit(main())
