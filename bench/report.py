"""Summarise a pytest-benchmark JSON file as markdown, with an optional plot.

    python bench/report.py BENCH.json [-o SUMMARY.md] [--plot BANDWIDTH.png]

Exchange groups: each gpu_dlpack figure beside its peer measured in the
same run: medians, the ratio to the peer, the time added per call, and
whether the target ratio is met. Copy groups (benchmarks that record
``bytes``): bandwidth in GB/s by size and method, gpu_dlpack's share of
the pinned-copy ceiling, and each gpu_dlpack copy against its peer and the
ceiling with the targets it records (``target``, ``ceiling_share``). The plot (bandwidth against size) needs matplotlib;
without it the summary is still written and says so.

Only the standard library is used here, so the report runs anywhere the
benchmarks ran.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

def load(path):
    with open(path) as f:
        return json.load(f)


def _ns(seconds):
    ns = seconds * 1e9
    if ns >= 100_000:
        return f"{ns / 1000:,.0f} µs"
    return f"{ns:,.0f} ns"


def _size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


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
    commit = doc.get("commit_info", {})
    if commit.get("id"):
        dirty = " (with uncommitted changes)" if commit.get("dirty") else ""
        lines.append(f"- commit: {commit['id'][:12]}{dirty}")
    if doc.get("datetime"):
        lines.append(f"- run: {doc['datetime']}")
    return lines


def exchange_rows(doc):
    """Per group: [(label, role, median_s, ratio, added_s, target)] with the
    peer first. Benchmarks that record bytes are copies, not exchanges."""
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
            rows.append((label, info.get("role"), median, ratio, added, info.get("target")))
        out[group] = rows
    return out


def _verdict(ratio, target):
    if target is None or ratio is None:
        return ""
    if ratio <= target:
        return f"≤ {target:g}x: met"
    return f"≤ {target:g}x: missed by {ratio - target:.2f}x"


def exchange_table(doc):
    groups = exchange_rows(doc)
    if not groups:
        return []
    lines = [
        "| group | call | median | ratio to peer | added per call | target |",
        "|---|---|---:|---:|---:|---|",
    ]
    for group, rows in groups.items():
        for label, role, median, ratio, added, target in rows:
            shown = f"`{label}`" + {"peer": " (peer)", "other": " (context)"}.get(role, "")
            r = "" if ratio is None else f"{ratio:.2f}x"
            a = "" if added is None else f"{added * 1e9:+,.0f} ns"
            lines.append(f"| {group} | {shown} | {_ns(median)} | {r} | {a} | {_verdict(ratio, target)} |")
    return lines


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
        lines += [f"**{direction}** (GB/s, median)", ""]
        lines.append("| size | " + " | ".join(f"`{label}`" for label in labels) + " | gpu_dlpack / ceiling |")
        lines.append("|---:|" + "---:|" * len(labels) + "---|")
        for size in sorted(sizes):
            by_label = sizes[size]
            cells = [f"{by_label[label][0]:.2f}" if label in by_label else "" for label in labels]
            ours = [v for v, role in by_label.values() if role == "gpu_dlpack"]
            ceiling = [v for v, role in by_label.values() if role == "ceiling"]
            share = ""
            if ours and ceiling:
                s = ours[0] / ceiling[0]
                share = f"{s:.0%}"
            lines.append(f"| {_size(size)} | " + " | ".join(cells) + f" | {share} |")
        lines.append("")
    return lines


def copy_target_rows(doc):
    """[(direction, bytes, label, median_s, peer_label, ratio, share, target,
    ceiling_share)] for each gpu_dlpack copy: its median against the peer
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
            ratio = median / peer if peer else None
            share = ceilings[0] / median if ceilings else None
            rows.append((info.get("direction", ""), info["bytes"], info["label"], median, info.get("peer"), ratio,
                         share, info.get("target"), info.get("ceiling_share")))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return rows


def copy_target_table(doc):
    rows = copy_target_rows(doc)
    if not rows:
        return []
    lines = [
        "| direction | size | call | median | ratio to peer (time) | target | share of ceiling | target |",
        "|---|---:|---|---:|---:|---|---:|---|",
    ]
    for direction, size, label, median, peer, ratio, share, target, want in rows:
        r = "" if ratio is None else f"{ratio:.2f}x `{peer}`"
        sh = "" if share is None else f"{share:.0%}"
        met = ""
        if want is not None and share is not None:
            met = f"≥ {want:.0%}: met" if share >= want else f"≥ {want:.0%}: missed by {want - share:.0%}"
        lines.append(f"| {direction} | {_size(size)} | `{label}` | {_ns(median)} | {r} | {_verdict(ratio, target)} "
                     f"| {sh} | {met} |")
    return lines


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


def summary(doc, plot_note=None):
    lines = ["# gpu_dlpack benchmarks", ""] + _header(doc) + [""]
    table = exchange_table(doc)
    if table:
        lines += ["## Exchanges", "", "Medians per call; ratio and added time are against the peer "
                  "(the row marked peer) measured in the same run.", ""] + table + [""]
    bw = bandwidth_table(doc)
    if bw:
        lines += ["## Copies", ""] + bw
    targets = copy_target_table(doc)
    if targets:
        lines += ["## Copy targets", "", "Each gpu_dlpack copy against its peer (median time ratio; ≤ the "
                  "target is met) and the pinned `cudaMemcpyAsync` ceiling of its group (share of its "
                  "bandwidth; ≥ the target is met).", ""] + targets + [""]
    if plot_note:
        lines += [plot_note, ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", help="pytest-benchmark JSON (--benchmark-json)")
    parser.add_argument("-o", "--output", help="write the markdown summary here (default: stdout)")
    parser.add_argument("--plot", help="write a PNG plot of bandwidth against size here")
    args = parser.parse_args(argv)
    doc = load(args.json)
    note = None
    if args.plot:
        why_not = plot(doc, args.plot)
        name = os.path.basename(args.plot)
        note = f"Plot: no plot written ({why_not})." if why_not else f"Plot: `{name}`."
    text = summary(doc, note)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
