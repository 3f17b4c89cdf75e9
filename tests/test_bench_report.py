"""bench/report.py, the GPU job's summary: what ran (read from JUnit XML),
the verdict, targets met or missed, the comparison with an earlier run, one
unit per column. Fed small JUnit and pytest-benchmark files written here
(the report's own input formats); tests/test_gpu_ci.py runs it on real
benchmarks, through scripts/gpu-ci.sh."""

from __future__ import annotations

import json
import re

from bench import report


# -- inputs ---------------------------------------------------------------------------

def junit(path, passed=0, failed=0, errors=0, skipped=0, xfailed=0, reason="needs a GPU usable by CuPy"):
    """A JUnit file as pytest writes it (--junitxml)."""
    cases = []
    for i in range(passed):
        cases.append(f'<testcase classname="tests.test_gpu" name="test_p{i}" time="0.1"/>')
    for i in range(failed):
        cases.append(f'<testcase classname="tests.test_gpu" name="test_f{i}" time="0.1">'
                     '<failure message="assert 1 == 2">...</failure></testcase>')
    for i in range(errors):
        cases.append(f'<testcase classname="tests.test_gpu" name="test_e{i}" time="0.1">'
                     '<error message="failed on setup">...</error></testcase>')
    for i in range(skipped):
        cases.append(f'<testcase classname="tests.test_gpu" name="test_s{i}" time="0.0">'
                     f'<skipped type="pytest.skip" message="{reason}">tests/test_gpu.py:12: {reason}</skipped>'
                     '</testcase>')
    for i in range(xfailed):
        cases.append(f'<testcase classname="tests.test_gpu" name="test_x{i}" time="0.1">'
                     '<skipped type="pytest.xfail" message="known" /></testcase>')
    n = passed + failed + errors + skipped + xfailed
    path.write_text(f'<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
                    f'<testsuite name="gpu_dlpack-gpu" errors="{errors}" failures="{failed}" '
                    f'skipped="{skipped + xfailed}" tests="{n}">{"".join(cases)}</testsuite></testsuites>')
    return str(path)


def bench(group, label, role, median, **info):
    """One benchmark as pytest-benchmark's JSON holds it (the fields read)."""
    extra = dict(label=label, role=role, **info)
    return {"group": group, "name": label, "fullname": f"bench/test_x.py::{group}::{label}",
            "stats": {"median": median}, "extra_info": extra}


def run_doc(*benchmarks, versions=None, commit="abc123def4567"):
    return {"benchmarks": list(benchmarks), "machine_info": {"versions": versions or {"torch": "2.11.0"}},
            "commit_info": {"id": commit}, "datetime": "2026-12-01T10:00:00"}


EXPORT = "export a numpy array"


def exchange(peer_s, ours_s, target=2.0, group=EXPORT):
    return [bench(group, "x.__dlpack__()", "peer", peer_s),
            bench(group, "gpu_dlpack.export(x)", "gpu_dlpack", ours_s, peer="x.__dlpack__()", target=target)]


# -- what ran -------------------------------------------------------------------------------

def test_junit_counts_each_outcome_and_the_reasons_for_skips(tmp_path):
    s = report.read_junit("GPU tests", junit(tmp_path / "t.xml", passed=3, failed=2, errors=1, skipped=4,
                                             xfailed=1), 1)
    assert s.found and dict(s.counts) == {"passed": 3, "failed": 2, "errors": 1, "skipped": 4, "xfailed": 1}
    assert s.tests == 11 and s.ran == 7
    assert s.skip_reasons == {"needs a GPU usable by CuPy": 4}
    assert report._skip_reason("tests/test_gpu.py:12: needs two GPUs") == "needs two GPUs"


def test_skipped_is_not_passed_a_suite_in_which_nothing_ran_fails(tmp_path):
    s = report.read_junit("GPU tests", junit(tmp_path / "t.xml", skipped=84), 0)
    assert report.suite_problems(s) == ["GPU tests: nothing ran: 0 of 84 tests ran, 84 skipped "
                                        "(skipped is not passed)"]
    assert report.suite_problems(s, allow_nothing_ran=True) == []
    done = report.report(None, [s])
    assert done.problems and "**Verdict: failed**" in done.text
    assert "| GPU tests | 84 | 0 | 0 | 0 | 84 | 0 | 0 | nothing ran |" in done.text
    assert "| GPU tests | 84 | needs a GPU usable by CuPy |" in done.text
    allowed = report.report(None, [s], allow_nothing_ran=True)
    assert not allowed.problems and "**Verdict: passed**" in allowed.text
    assert "- GPU tests: nothing ran (allowed by --allow-nothing-ran)" in allowed.text


def test_an_xfailed_test_ran_and_a_passed_one_passes(tmp_path):
    s = report.read_junit("GPU tests", junit(tmp_path / "t.xml", passed=1, skipped=3), 0)
    assert report.suite_problems(s) == []
    x = report.read_junit("GPU tests", junit(tmp_path / "x.xml", xfailed=1, skipped=3), 0)
    assert report.suite_problems(x) == []


def test_missing_results_failures_bad_statuses_and_time_limits_fail(tmp_path):
    missing = report.read_junit("GPU tests", str(tmp_path / "none.xml"), 3)
    assert not missing.found
    assert report.suite_problems(missing) == ["GPU tests: nothing ran: no test results (none.xml is missing; "
                                              "exit status 3)"]
    assert report.suite_problems(missing, allow_nothing_ran=True) == []
    failed = report.read_junit("GPU tests", junit(tmp_path / "f.xml", passed=5, failed=1, errors=2), 1)
    assert report.suite_problems(failed) == ["GPU tests: 1 failed, 2 errors"]
    crashed = report.read_junit("GPU tests", junit(tmp_path / "c.xml", passed=5), 139)
    assert report.suite_problems(crashed) == ["GPU tests: exit status 139"]
    stopped = report.read_junit("benchmarks", junit(tmp_path / "s.xml", passed=5), 124)
    assert report.suite_problems(stopped) == ["benchmarks: stopped at its time limit (exit status 124)"]
    unparsable = tmp_path / "u.xml"
    unparsable.write_text("<testsuites><testsuite")
    assert not report.read_junit("GPU tests", str(unparsable), 1).found


# -- targets ----------------------------------------------------------------------------------

def test_each_target_is_shown_met_or_missed_and_fails_the_job_only_when_asked():
    doc = run_doc(*exchange(100e-9, 150e-9, target=2.0),
                  *exchange(100e-9, 250e-9, target=2.0, group="import a numpy array"))
    found = report.targets(doc)
    assert [(t.met, t.ratio, t.peer, t.ratio_target) for t in found] == [
        (True, 1.5, "x.__dlpack__()", 2.0), (False, 2.5, "x.__dlpack__()", 2.0)]
    text = "\n".join(report.exchange_table(doc))
    assert "| ≤ 2 | met |" in text and "| ≤ 2 | missed by 0.50 |" in text
    shown = report.report(doc, fail_on_missed_target=False)
    assert not shown.problems and "1 met, 1 missed." in shown.text
    assert "| `gpu_dlpack.export(x)` | import a numpy array |  | 2.50 | `x.__dlpack__()` | ≤ 2 |  |  |" in shown.text
    failing = report.report(doc, fail_on_missed_target=True)
    assert failing.problems == ["1 of 2 benchmark targets missed"] and "**Verdict: failed**" in failing.text


INSPECT = "inspect a capsule"


def inspect_rows(capsule_s, both_s, most=0.4e-6):
    """inspect's own time: the call less making the capsule, against a time."""
    return [bench(INSPECT, "x.__dlpack__()", "peer", capsule_s),
            bench(INSPECT, "gpu_dlpack.inspect(x.__dlpack__())", "gpu_dlpack", both_s, peer="x.__dlpack__()",
                  minus="x.__dlpack__()", most=most)]


def test_a_target_of_time_is_met_by_the_median_of_the_step_alone():
    met = run_doc(*inspect_rows(90e-9, 450e-9))  # 360 ns alone
    missed = run_doc(*inspect_rows(90e-9, 540e-9))  # 450 ns alone
    (t,) = report.targets(met)
    assert t.met and round(t.median * 1e9) == 360 and t.most == 0.4e-6 and t.ratio is None
    (t,) = report.targets(missed)
    assert not t.met and round(t.median * 1e9) == 450
    row = "| inspect a capsule | `gpu_dlpack.inspect(x.__dlpack__())` less `x.__dlpack__()` | 0.360 | 4.00 | +0.270 | ≤ 0.400 |  | met |"
    assert row in "\n".join(report.exchange_table(met))
    text = report.report(missed).text
    assert "0 met, 1 missed." in text and "missed by 0.0500 µs" in text
    assert "| inspect a capsule |  |  |  |  |  |  | 0.450 | ≤ 0.400 |" in text  # the missed table: the times


def test_a_row_with_two_targets_is_met_when_both_are():
    rows = [bench(EXPORT, "x.__dlpack__()", "peer", 100e-9),
            bench(EXPORT, "gpu_dlpack.export(x)", "gpu_dlpack", 150e-9, peer="x.__dlpack__()", target=2.0,
                  most=0.12e-6)]
    found = report.targets(run_doc(*rows))
    assert [t.met for t in found] == [True, False]
    assert "| ≤ 0.120 | ≤ 2 | missed by 0.0300 µs |" in "\n".join(report.exchange_table(run_doc(*rows)))


def test_a_copy_meets_its_share_of_the_ceiling_as_the_table_rounds_it():
    group = "device to host 16 MiB"
    n = 16 << 20
    doc = run_doc(bench(group, "a.get()", "peer", 1700e-6, bytes=n, direction="device to host"),
                  bench(group, "bare", "ceiling", 300e-6, bytes=n, direction="device to host"),
                  bench(group, "wrap", "gpu_dlpack", 300e-6 / 0.8951, bytes=n, direction="device to host",
                        peer="a.get()", ceiling_share=0.9))
    (t,) = report.targets(doc)
    assert round(t.share, 4) == 0.8951 and t.met  # 89.51% shows as 90%: met, as the table says
    assert "| 90 | ≥ 90 | met |" in "\n".join(report.copy_target_table(doc))


# -- against the last run -------------------------------------------------------------------------

def test_a_figure_regresses_when_its_ratio_to_its_peer_grows_beyond_the_margin():
    before = run_doc(*exchange(100e-9, 150e-9))
    worse = run_doc(*exchange(100e-9, 195e-9))  # ratio 1.5 -> 1.95: +30%
    (c,), new = report.compare(worse, before, 0.25)
    assert c.judged_on == "ratio" and c.regressed and round(c.change, 2) == 0.30 and new == []
    (c,), _ = report.compare(worse, before, 0.35)
    assert not c.regressed


def test_a_slower_machine_is_no_regression_a_slower_gpu_dlpack_is():
    before = run_doc(*exchange(100e-9, 150e-9))
    slower_machine = run_doc(*exchange(200e-9, 300e-9))  # both twice as slow: the ratio holds
    (c,), _ = report.compare(slower_machine, before, 0.25)
    assert not c.regressed and c.now == 300e-9 and c.before == 150e-9
    faster_peer = run_doc(*exchange(50e-9, 150e-9))  # the peer got faster, gpu_dlpack did not
    (c,), _ = report.compare(faster_peer, before, 0.25)
    assert c.regressed


def test_a_figure_without_a_peer_is_judged_on_its_time_and_new_figures_are_listed():
    lone = bench("gather", "gpu_dlpack.from_dlpack(j)", "gpu_dlpack", 10e-3, peer="np.asarray(j)")
    before = run_doc(lone)
    now = run_doc(dict(lone, stats={"median": 13e-3}), *exchange(100e-9, 150e-9))
    changes, new = report.compare(now, before, 0.25)
    (c,) = changes
    assert c.judged_on == "time" and c.regressed and c.ratio_now is None
    assert new == ["bench/test_x.py::export a numpy array::gpu_dlpack.export(x)"]


def test_a_regression_fails_the_job_when_asked_and_the_summary_names_what_changed():
    before = run_doc(*exchange(100e-9, 150e-9), versions={"torch": "2.11.0", "cupy": "14.2.0"})
    now = run_doc(*exchange(100e-9, 195e-9), versions={"torch": "2.12.0", "cupy": "14.2.0"})
    shown = report.report(now, earlier=before, earlier_source="the last run", margin=0.25)
    assert not shown.problems and "- 1 figures regressed (not failing this run)" in shown.text
    assert "Versions differ: torch 2.11.0 -> 2.12.0." in shown.text
    assert ("| export a numpy array | `gpu_dlpack.export(x)` | 0.150 | 0.195 | 1.50 | 1.95 | +30.0 | ratio "
            "| regressed |") in shown.text
    failing = report.report(now, earlier=before, earlier_source="the last run", margin=0.25, fail_on_regression=True)
    assert failing.problems == ["1 figures regressed by more than 25% against the last run"]


# -- units ---------------------------------------------------------------------------------------

def test_numbers_have_three_significant_digits_and_no_unit():
    assert [report.number(x) for x in (0.0923456, 0.5, 1.25, 12.345, 180.4, 19406.7)] == \
        ["0.0923", "0.500", "1.25", "12.3", "180", "19,407"]
    assert report.number(-587.672, signed=True) == "-588" and report.number(0.04, signed=True) == "+0.0400"
    assert report.number(None) == "" and report.kib(4096) == "4" and report.kib(1 << 30) == "1,048,576"


def _tables(text):
    """Each markdown table of ``text``: (header cells, rows of cells)."""
    out, rows = [], None
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if rows is None:
                rows = [cells]
            elif not set(line) <= set("|-: "):
                rows.append(cells)
        elif rows is not None:
            out.append((rows[0], rows[1:]))
            rows = None
    return out


UNIT = re.compile(r"\((µs|x|%|KiB|GB/s)\)$")
PLAIN = re.compile(r"^[+-]?[\d,]+(\.\d+)?$")
WITH_UNIT = re.compile(r"^(≤ |≥ )?[+-]?[\d,]+(\.\d+)?\s*(ns|µs|us|ms|s|x|%|GB/s|B|KiB|MiB|GiB)(\W|$)")


def test_every_table_has_one_unit_per_column_named_in_its_header(tmp_path):
    # The row the GPU job once showed as "19,407 µs | 0.97x | -587,672 ns".
    n = 16 << 20
    doc = run_doc(
        bench("gather", "np.asarray(j)", "peer", 20_000e-6),
        bench("gather", "gpu_dlpack.from_dlpack(j)", "gpu_dlpack", 19_407e-6, peer="np.asarray(j)", target=1.2),
        *exchange(90e-9, 140e-9),
        *inspect_rows(90e-9, 500e-9),
        bench("d2h 16 MiB", "a.get()", "peer", 1700e-6, bytes=n, direction="device to host"),
        bench("d2h 16 MiB", "bare", "ceiling", 300e-6, bytes=n, direction="device to host"),
        bench("d2h 16 MiB", "wrap", "gpu_dlpack", 330e-6, bytes=n, direction="device to host", peer="a.get()",
              ceiling_share=0.9),
        bench("d2h 4 KiB", "a.get()", "peer", 12e-6, bytes=4096, direction="device to host"),
        bench("d2h 4 KiB", "wrap", "gpu_dlpack", 15e-6, bytes=4096, direction="device to host", peer="a.get()",
              target=1.0),
    )
    text = report.report(doc, [report.read_junit("GPU tests", junit(tmp_path / "t.xml", passed=2), 0)],
                         earlier=run_doc(*doc["benchmarks"][:2])).text
    assert "| gather | `gpu_dlpack.from_dlpack(j)` | 19,407 | 0.970 | -593 |  | ≤ 1.2 | met |" in text
    tables = _tables(text)
    assert len(tables) == 6  # what ran, missed targets, exchanges, bandwidth, copy targets, comparison
    for headers, rows in tables:
        for i, header in enumerate(headers):
            values = [r[i] for r in rows if r[i]]
            numeric = [v for v in values if PLAIN.match(v)]
            if numeric:  # a column of figures: its unit in the header (or counts), and figures only
                assert UNIT.search(header) or header in ("tests", "passed", "failed", "errors", "skipped",
                                                         "xfailed", "exit status"), (header, values)
                assert numeric == values, (header, values)
        # No figure carries its own unit ("10,000 ns", "0.83x", "80%", "4 KiB", "1.25x `a.get()`").
        assert not [c for r in rows for c in r if WITH_UNIT.match(c)], rows


# -- the command line ----------------------------------------------------

def test_the_command_exits_1_on_a_failed_verdict_and_0_on_a_passed_one(tmp_path):
    out = tmp_path / "summary.md"
    xml = junit(tmp_path / "t.xml", skipped=84)
    bench_json = tmp_path / "b.json"
    bench_json.write_text(json.dumps(run_doc(*exchange(100e-9, 150e-9))))
    assert report.main([str(bench_json), "--suite", "GPU tests", xml, "0", "-o", str(out)]) == 1
    assert "nothing ran: 0 of 84 tests ran" in out.read_text()
    assert report.main([str(bench_json), "--suite", "GPU tests", xml, "0", "--allow-nothing-ran",
                        "-o", str(out)]) == 0
    # No benchmark JSON (a run that stopped early): the summary says so.
    assert report.main([str(tmp_path / "none.json"), "--suite", "GPU tests", xml, "0", "--allow-nothing-ran",
                        "-o", str(out)]) == 0
    assert "No benchmark results." in out.read_text()
    assert report.main([str(bench_json)]) == 0  # a plain summary, no verdict to fail
