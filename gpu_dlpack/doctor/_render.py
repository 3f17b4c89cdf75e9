"""The terminal view of a doctor report."""

from __future__ import annotations

from .. import _explain


class _Span(str):
    """The last cell of its row, over the columns after it (a reason, not a value)."""


def _table(rows, indent="  "):
    # A span sets no width; the cells before it still set theirs (a library
    # not installed has a name).
    widths = [max(len(str(r[i])) for r in rows if i < len(r) and not isinstance(r[i], _Span))
              for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = (c if isinstance(c, _Span) else str(c).ljust(w) for c, w in zip(r, widths))
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _section(title, rows):
    """A table under its title, or nothing where it has no row but its header."""
    return ["", title] + _table(rows) if len(rows) > 1 else []


def _capsule_text(c):
    if "error" in c:
        return "error"
    if c["version"] is None:
        return "legacy"
    return f"{c['version'][0]}.{c['version'][1]}"


def _unprobed(row, side):
    """The cells of a library whose ``side`` was not probed (a reason that
    spans them), or None."""
    probe = row.get(side) or {}
    if not row["installed"] or row["error"]:
        return [_Span(row["error"] or "")]
    if not probe.get("probed"):
        return [_Span(f"not probed: {probe.get('reason')}")]
    return None


def _producer_cells(row):
    p = row["producer"]
    ro = p.get("read_only")
    if ro is None:
        ro_text = "n/a"
    else:
        ro_text = (ro.get("detail") or "?" if ro["flag"] is None else "sets" if ro["flag"] else "NOT SET") + (
            "" if ro["legacy"] != "exported" else ", legacy export!")
    c = p["copy"]
    if c["copies"] is None:
        copy_text = c["detail"] or "?"
    else:
        copy_text = ("copies" if c["copies"] else "SHARES") + (
            "" if c["flag"] is None else (", IS_COPIED" if c["flag"] else ", no IS_COPIED")
        )
    floor = p.get("floor")
    return [
        f"{_capsule_text(p['capsules']['none'])} / {_capsule_text(p['capsules']['1.0'])}",
        "-" if not floor else f"{floor[0]}.{floor[1]}",
        "all" if all(p["keywords"].values()) else ", ".join(k for k, taken in p["keywords"].items() if taken) or "none",
        ro_text,
        copy_text,
        p.get("device", ""),
    ]


def _consumer_cells(row):
    c = row["consumer"]
    sends = c.get("sends")
    if c.get("error"):
        sends_text = f"fails ({c['error'].split(':')[0]})"
    elif sends is None:
        sends_text = "?"
    else:
        sends_text = ", ".join(f"{k}={tuple(v) if isinstance(v, list) else v}" for k, v in sends.items()) or "nothing"
    copy = c["copy"]
    if copy.get("error"):
        copy_text = "not taken"
    else:
        copy_text = ("forwarded" if copy["forwarded"] else "not forwarded") + (
            "" if copy["copied"] is not False else ", SHARES"
        )
    ro = c["read_only"]
    ro_text = {True: "honoured", False: "IGNORED", None: "n/a"}[ro["honoured"]]
    raw = [k for k, v in c["raw_capsules"].items() if v is True]
    unaligned = {True: "0-copy", False: "copies"}.get(c.get("unaligned"), "fails")
    return [c["call"], sends_text, copy_text, ro_text, unaligned, "both" if len(raw) == 2 else (raw or ["no"])[0]]


_SHORT = {"zero-copy": "0-copy", "copied": "copied", "refused": "refused", "error": "ERROR",
          "wrong-values": "WRONG"}


def _cell_text(cell):
    def one(r):
        return _SHORT[r["outcome"]] + ("!" if r["hazards"] else "")

    return f"{one(cell['direct'])} > {one(cell['via'])}"


def render(report) -> str:
    g = report["gpu_dlpack"]
    lines = [
        f"gpu-dlpack doctor: gpu_dlpack {g['version']}, produces DLPack "
        f"{g['dlpack_version'][0]}.{g['dlpack_version'][1]}, floor "
        f"{g['min_dlpack_version'][0]}.{g['min_dlpack_version'][1]}",
        "",
        "Platform",
    ]
    p = report["platform"]
    lines.append(f"  Python  {p['python']} ({p['implementation']}) on {p['os']}")
    lines.append(f"  Core    {g['core']}")
    lines.append(f"  Runtime {g['runtime']}")
    lines += _gpu_lines(p["gpu"])
    lines += _accelerator_lines(p.get("accelerators", ()))
    lines += _unopened_lines(report["libraries"])
    lines += ["", "Producers: x.__dlpack__() / x.__dlpack__(max_version=(1, 0))"]
    rows = [["library", "version", "capsules", "floor", "keywords taken", "read-only data", "copy=True", "device"]]
    for row in report["libraries"]:
        rows.append([row["name"], row["version"] or "-"] + (_unprobed(row, "producer") or _producer_cells(row)))
    lines += _table(rows)
    lines += ["", "Consumers: what from_dlpack asks of a producer (measured with gpu_dlpack.wrap)"]
    rows = [["library", "call", "sends", "copy=True", "READ_ONLY", "unaligned", "raw capsules"]]
    for row in report["libraries"]:
        rows.append([row["name"]] + (_unprobed(row, "consumer") or _consumer_cells(row)))
    lines += _table(rows)
    lines += _fault_lines(report)
    lines += _table_lines(report)
    for mat in report["matrices"]:
        lines += ["", f"Exchanges on {mat['device']}: direct > through gpu_dlpack"]
        if mat.get("error"):
            lines.append(f"  could not run: {mat['error']}")
            continue
        by = {(c["producer"], c["consumer"]): c for c in mat["cells"]}
        rows = [["producer \\ consumer"] + mat["consumers"]]
        for prod in mat["producers"]:
            rows.append([prod] + [_cell_text(by[(prod, cons)]) for cons in mat["consumers"]])
        lines += _table(rows)
        for skip in mat.get("skipped", ()):
            lines.append(f"  ({skip['producer']} is not a producer here: {skip['reason']})")
        backend = "cupy" if mat["device"] != "cpu" else "numpy"
        lines += _explain.wrap_text(
            f"0-copy: zero-copy, copied: the consumer got a copy, ERROR: an exception, refused: "
            f"gpu_dlpack declines by rule, !: hazard. Through gpu_dlpack means "
            f"gpu_dlpack.from_dlpack(x) in the {backend} column, consumer(gpu_dlpack.wrap(x)) elsewhere.",
            "  ", "  ", 100,
        )
    lines += ["", "Findings"]
    if not report["findings"]:
        lines.append("  none")
    for f in report["findings"]:
        lines += _explain.wrap_text(f"[{f['severity']}] {f['subject']}: {f['problem']}", "  ", "      ", 100)
        lines += _explain.wrap_text(f"remedy: {f['remedy']}", "      ", "        ", 100)
    s = report["summary"]
    lines.append("")
    failed = s["through_gpu_dlpack_failed"]
    if report["exit_status"] and not failed:
        which = sorted({f"{f['hazard']} ({f['subject']})" for f in report["findings"] if f.get("strict")})
        lines.append(
            f"FAILED (--strict): all {s['exchanges']} exchanges through gpu_dlpack work, but "
            f"{s['uncorrected']} finding(s) gpu_dlpack does not correct: {', '.join(which)} "
            "(see Findings). Exit status 1."
        )
    elif report["exit_status"] == 0:
        corrected = s["hazards"] - s["uncorrected"]
        lines.append(
            f"OK: all {s['exchanges']} exchanges through gpu_dlpack work"
            + (f" ({s['refused']} refused by rule, see Findings)" if s["refused"] else "")
            + (f"; {corrected} hazard(s) of the direct path, each corrected by gpu_dlpack" if corrected else "")
            + ". Exit status 0."
        )
    else:
        lines.append(
            f"FAILED: {s['through_gpu_dlpack_failed']} of {s['exchanges']} exchanges through gpu_dlpack fail. "
            "Exit status 1; attach `gpu-dlpack doctor --json` to a bug report."
        )
    return "\n".join(lines)


def _table_lines(report):
    """Every row of gpu_dlpack's table of peers for the installed
    versions: each fault, both roles, and whether it still holds here; a
    library of the table with none for its version says so."""
    rows = [["library", "version", "role", "fault", "here"]]
    for row in report["libraries"]:
        table = row.get("table")
        if table is None:  # not a row of the table, or not installed
            continue
        if not table:
            rows.append([row["name"], row["version"] or "-", "both", "none for this version", "-"])
        for r in table:
            rows.append([row["name"], row["version"] or "-", r["role"], r["fault"],
                         r["state"] + (f": {r['why']}" if r["state"] == "not measured" else "")])
    return _section("gpu_dlpack's table of peer faults, for the installed versions (convert acts on every row)", rows)


def _fault_lines(report):
    """Each consumer's faults, measured beside what gpu_dlpack's table says
    for its version (what ``gpu_dlpack.convert`` acts on)."""
    rows = [["library", "version", "measured", "table (convert acts on)", "strides: negative / step"]]
    for row in report["libraries"]:
        cons = row.get("consumer") or {}
        faults = cons.get("faults")
        if not faults:
            continue
        strides = cons.get("strides") or {}
        short = {k: v.split(":")[0] for k, v in strides.items()}
        differ = [f"{f}: not in the table" for f in faults["unknown"]] + [f"{f}: not measured" for f in faults["gone"]]
        rows.append([
            row["name"], row["version"] or "-", ", ".join(faults["measured"]) or "none",
            ", ".join(faults["table"]) or "none",
            f"{short.get('negative', '?')} / {short.get('stepped', '?')}" + (f"  ({'; '.join(differ)})" if differ else ""),
        ])
    return _section("Consumer faults: measured, and in gpu_dlpack's table for the installed version", rows)


def _accelerator_lines(accelerators):
    lines = []
    for acc in accelerators:
        named = f" (DLPack {tuple(acc['dlpack'])})" if acc["dlpack"] else ""
        lines.append(f"  Accelerator {acc['device']} of {acc['library']}{named}, which DLPack does not reach:")
        for e in acc["exchanges"]:
            lines += _explain.wrap_text(f"{'ok  ' if e['ok'] else 'FAIL'} {e['call']}: {e['detail']}",
                                        "          ", "               ", 100)
    return lines


def _unopened_lines(libraries):
    """A line for each library that could not open the accelerator it is set
    up for, and was probed on the CPU."""
    return [f"  Accelerator {u['platform']} of {row['name']} could not be opened: {u['reason']}; "
            f"{row['name']} was probed on the CPU"
            for row in libraries if (u := row.get("unopened"))]


def _gpu_lines(gpu):
    lines = []
    if gpu["usable"]:
        lines.append(f"  GPU     {gpu['backend'].upper()} usable through CuPy")
    else:
        lines += _explain.wrap_text(f"none usable: {gpu['reason'] or 'unknown'}", "  GPU     ", "          ", 100)
    c = gpu["cupy"]
    if c is not None:
        rt = c.get("runtime_version") or "?"
        drv = c.get("driver_version") or "none"
        dists = ", ".join(c["distributions"]) or f"cupy {c.get('version')}"
        lines.append(f"          CuPy build: {dists}; runtime {rt}, driver {drv}")
        if c.get("capture"):
            lines.append(f"          CUDA graph capture: {c['capture']}")
    if gpu["nvidia_driver"]:
        lines.append(f"          {gpu['nvidia_driver']}")
    for d in gpu["devices"]:
        mem = d["memory_bytes"] / 2**30
        lines.append(f"          device {d['index']}: {d['name']}, {mem:.1f} GiB, compute capability {d['compute_capability']}")
    t = gpu["torch"]
    if t is not None:
        kind = f"CUDA {t['cuda_version']}" if t["cuda_version"] else (f"ROCm {t['hip_version']}" if t["hip_version"] else "CPU build")
        lines.append(f"          torch: {kind}, {t['device_count']} GPU(s) usable" if t["cuda_available"] else f"          torch: {kind}, no GPU usable")
    j = gpu["jax"]
    if j is not None:
        lines.append(f"          jax: backend {j['backend']}, devices {', '.join(j['devices']) or 'none'}")
    return lines
