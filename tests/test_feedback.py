"""Feedback pages to hand back (gpucourse/grading/feedback.py, `gpucourse grade --feedback DIR`): what a page shows,
that everything from the submission or the checker is escaped, that file names made of student names stay inside
DIR, and one batch through the real command line."""
from __future__ import annotations

import html
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from gpucourse.grading import cli as grader_cli
from gpucourse.grading import compare, drawing, feedback, guards, report
from gpucourse.grading.gradebook import Entry

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "submissions", "vector_add")
HOSTILE = "<script>alert('x')</script>"
ENV = {"mode": "cpu", "fingerprint": "CPU | torch 2 | cpu mode"}
# Every tag a page may hold: no script, image, link, frame, form or object.
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "strong", "table", "thead",
             "tbody", "tr", "th", "td", "pre", "span", "section", "ul", "li", "footer", "a", "svg", "path", "rect",
             "line"}


class _Tags(html.parser.HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.tags: list = []
        self.links: list = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.links += [value for name, value in attrs if name in ("href", "src")]


def _result(checks, status="failed", message="m", flags=(), perf=None, submission="/course/alice.py"):
    r = {"submission": submission, "status": status, "message": message, "checks": checks, "flags": list(flags),
         "seconds": 1.0, "timing": "not timed (CPU mode)",
         "score": sum(c["passed"] for c in checks) / len(checks) if checks else 0.0}
    if perf is not None:
        r["perf"] = perf
    return r


CHECKS = [{"name": "n=1", "passed": True, "detail": "ok"},
          {"name": "large", "passed": False, "detail": "3 of 9 elements differ\nsizes drawn for this run: n=9\n"
                                                       "hint: mask the last block's loads"},
          {"name": "strided", "passed": True, "detail": "ok"}]


def test_a_hostile_message_case_name_student_and_flag_are_escaped():
    checks = [{"name": HOSTILE, "passed": False, "detail": f"</pre>{HOSTILE}\nhint: <img src=x onerror=alert(1)>"}]
    page = feedback.page(_result(checks, message=HOSTILE, flags=[HOSTILE]), "vector_add", f"<b>{HOSTILE}",
                         f"{HOSTILE}\x1b[2J", ENV)
    parsed = _Tags(page)
    assert set(parsed.tags) <= PAGE_TAGS, set(parsed.tags) - PAGE_TAGS
    assert "<script" not in page.lower() and "<img" not in page and "\x1b" not in page
    assert page.count(html.escape(HOSTILE)) >= 5  # message, case name, detail, flag, student in title and table
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert parsed.links == []  # self-contained: nothing fetched, no link out


def test_every_case_is_shown_and_the_pass_fail_counts_match_the_result():
    r = _result(CHECKS)
    page = feedback.page(r, "vector_add", "alice", environment=ENV)
    passes = len(re.findall(r'<span class="verdict">PASS</span>', page))
    fails = len(re.findall(r'<span class="verdict">FAIL</span>', page))
    assert (passes, fails) == (sum(c["passed"] for c in CHECKS), sum(not c["passed"] for c in CHECKS)) == (2, 1)
    for c in CHECKS:
        assert f"</span>{html.escape(c['name'])}</h3>" in page
    assert "2 of 3 passed" in page and f"{r['score']:.2f}" in page
    assert "3 of 9 elements differ\nsizes drawn for this run: n=9\n" in page  # the detail as written, preformatted


def test_hint_lines_are_highlighted_and_other_lines_are_not():
    page = feedback.page(_result(CHECKS), "vector_add", "alice")
    assert '<span class="hint">hint: mask the last block&#x27;s loads</span>' in page
    assert '<span class="hint">3 of 9' not in page and '<span class="hint">sizes' not in page


def test_the_page_shows_status_message_flags_perf_and_what_statuses_mean():
    perf = {"baseline": "the reference", "met": False, "suspicious": False, "text": "0.8x the reference"}
    page = feedback.page(_result(CHECKS[:1], status="passed", message="all 1 cases passed", flags=["huge output"],
                                 perf=perf, submission="/home/teacher/course/submitted/alice/a1/a1.ipynb"),
                         "vector_add", "alice", "a1", ENV)
    assert '<strong class="passed">passed</strong>' in page and "all 1 cases passed" in page
    assert "<li>huge output</li>" in page and feedback.FLAGS_NOTE in page
    assert "0.8x the reference (below the speed target)" in page
    assert "<td>a1.ipynb</td>" in page and "teacher" not in page  # the file's name, not the instructor's folders
    assert "<td>a1</td>" in page and html.escape(ENV["fingerprint"]) in page
    for status in feedback.STATUSES:
        assert f"<strong>{status}</strong>: " in page


def _map(shape, codes=None, past=None) -> dict:
    """The report's form (report.where_field) of the checker's where map of an output of ``shape``."""
    return report.where_field(compare.where_map(shape, codes, None if past is None else torch.tensor(past)))


def _cells(page: str) -> dict:
    """{colour: [(x, y) of each cell of that colour]} of the pictures of where an output is wrong on ``page``."""
    cells: dict = {}
    for svg in re.findall(r'<svg class="where".*?</svg>', page):
        for colour, d in re.findall(r'<path fill="(#[0-9a-f]{6})" d="([^"]*)"/>', svg):
            for x, y, w in re.findall(r"M(\d+) (\d+)h(\d+)v1h-\d+z", d):
                cells.setdefault(colour, []).extend((int(x) + i, int(y)) for i in range(int(w)))
    return cells


def _failed(where) -> list:
    return [{"name": "n=1", "passed": True, "detail": "ok"},
            {"name": "large", "passed": False, "detail": "elements differ", "where": where}]


def test_a_failed_cases_map_is_drawn_cell_by_cell_with_its_legend():
    """1-D, 100 elements: one wrong value, the last 10 never written, 2 written past the end; the strip wraps into
    rows of feedback.WRAP cells, the writes past the end after the last element."""
    codes = torch.zeros(100, dtype=torch.int8)
    codes[10], codes[90:] = compare.WRONG, compare.NEVER
    page = feedback.page(_result(_failed(_map((100,), codes, [0, 1]))), "vector_add", "alice", environment=ENV)
    wrap = feedback.WRAP
    assert {c: sorted(at) for c, at in _cells(page).items()} == {
        drawing.COLOURS[compare.WRONG]: [(10, 0)],
        drawing.COLOURS[compare.NEVER]: sorted((i % wrap, i // wrap) for i in range(90, 100)),
        drawing.COLOURS[compare.PAST]: [(100 % wrap, 1), (101 % wrap, 1)],
        drawing.COLOURS[compare.RIGHT]: sorted((i % wrap, i // wrap) for i in range(90) if i != 10)}
    for code, n in ((compare.RIGHT, 89), (compare.WRONG, 1), (compare.NEVER, 10), (compare.PAST, 2)):
        assert f"</svg>{drawing.NAMES[code]}: {n}</span>" in page
    assert "output of 100 elements; wrapped into rows of 64 elements" in page
    assert page.count("<svg class=\"where\"") == 1 and set(_Tags(page).tags) <= PAGE_TAGS
    assert _Tags(page).links == []  # drawn in the page: nothing fetched


def test_a_larger_outputs_map_shows_its_slice_and_the_writes_past_its_end_below_a_line():
    codes = torch.zeros(2, 3, 4, dtype=torch.int8)
    codes[1, 2, 3] = compare.WRONG
    page = feedback.page(_result(_failed(_map((2, 3, 4), codes, [0, 5]))), "matmul", "bob")
    assert _cells(page)[drawing.COLOURS[compare.WRONG]] == [(3, 2)]
    assert _cells(page)[drawing.COLOURS[compare.PAST]] == [(0, 3), (1, 4)]  # rows of the output's width, below it
    assert "slice [1, :, :], the first with a wrong element" in page and "<line " in page
    assert "written past the end: 2</span>" in page and "wrong value: 1</span>" in page


def test_a_large_output_is_pooled_and_its_counts_stay_exact():
    codes = torch.zeros(3000, 5000, dtype=torch.int8)
    codes[2999, 4999] = compare.NEVER
    where = _map((3000, 5000), codes)
    assert where["block"] == [128, 256] and len(where["codes"]) == 24 and len(where["codes"][0]) == 20
    page = feedback.page(_result(_failed(where)), "matmul", "bob")
    assert _cells(page)[drawing.COLOURS[compare.NEVER]] == [(19, 23)]
    assert "never written: 1</span>" in page and f"right: {3000 * 5000 - 1:,}</span>" in page
    assert "a cell is 128x256 elements, coloured by its worst" in page


def test_the_reports_map_stays_small_in_the_worst_case():
    """The most a failed case's map adds to the JSON report (written with indent=2, at its depth there): the
    largest map compare keeps (MAX_SIDE**2 cells, every element in the guard band written) is pooled to at most
    report.WHERE_SIDE cells per side, about 21 KB, as report.py says."""
    def added(where):
        def doc(check):
            return json.dumps({"exercise": "x", "results": [{"checks": [check]}]}, indent=2)
        check = {"name": "large", "passed": False, "detail": ""}
        return len(doc({**check, "where": where})) - len(doc(check))
    n = compare.MAX_SIDE ** 2 * 4
    one_d = _map((n,), torch.arange(n).remainder(3).to(torch.int8), list(range(guards.GUARD)))
    two_d = _map((3, 1000, 1000), torch.arange(3 * 10**6).remainder(3).to(torch.int8).view(3, 1000, 1000),
                 list(range(guards.GUARD)))
    assert len(one_d["codes"]) == 1 and len(one_d["codes"][0]) == report.WHERE_SIDE ** 2
    assert len(two_d["codes"]) == len(two_d["codes"][0]) == report.WHERE_SIDE
    assert one_d["n_past"] == guards.GUARD and len(one_d["past_end"]) == report.WHERE_PAST
    assert max(added(one_d), added(two_d)) < 22_000, (added(one_d), added(two_d))


def test_a_report_without_a_map_and_a_passed_case_get_no_picture():
    assert "<svg" not in feedback.page(_result(CHECKS), "vector_add", "alice")  # an older report: no "where"
    passed = [{"name": "n=1", "passed": True, "detail": "ok", "where": _map((4,), torch.ones(4, dtype=torch.int8))}]
    assert "<svg" not in feedback.page(_result(passed, status="passed"), "vector_add", "alice")


def _good() -> dict:
    codes = torch.zeros(10, dtype=torch.int8)
    codes[9] = compare.NEVER
    return _map((10,), codes)


@pytest.mark.parametrize("field, value", [
    ("shape", [10**30]), ("shape", [2**40]), ("shape", [2**31] * 3), ("shape", HOSTILE), ("shape", [10.0]),
    ("shape", [True] * 10), ("block", [0]), ("block", [1, 1]), ("slice", [0]), ("n_right", 1e9),
    ("n_wrong", True), ("n_never", -1), ("n_never", HOSTILE), ("n_past", "2"), ("codes", [["0"] * 10]),
    ("codes", [[HOSTILE] * 10]), ("codes", [[0] * 9 + [3]]), ("codes", [[0.0] * 10]), ("codes", [[[0]] * 10]),
    ("codes", [[0] * 10] * 2), ("codes", [[0] * 10**6]), ("codes", HOSTILE), ("codes", None),
    ("past_end", [guards.GUARD]), ("past_end", [0]), ("past_end", {"<script>": 1})])
def test_a_hand_edited_map_is_refused_with_a_line_and_nothing_of_it_reaches_the_page(field, value):
    where = dict(_good(), **{field: value})
    page = feedback.page(_result(_failed(where)), "vector_add", "alice")
    assert "map in the report is malformed" in page and "<svg" not in page
    assert "<script" not in page.lower() and set(_Tags(page).tags) <= PAGE_TAGS - {"svg", "path", "rect", "line"}


@pytest.mark.parametrize("where", [None, [], HOSTILE, 7, {}])
def test_a_map_that_is_not_one_is_refused_with_a_line(where):
    page = feedback.page(_result(_failed(where)), "vector_add", "alice")
    assert "malformed" in page and "<svg" not in page and "<script" not in page.lower()


def test_the_untouched_map_of_those_edits_is_drawn_and_a_key_it_does_not_know_is_not_shown():
    page = feedback.page(_result(_failed(dict(_good(), **{HOSTILE: HOSTILE}))), "vector_add", "alice")
    assert "malformed" not in page and _cells(page)[drawing.COLOURS[compare.NEVER]] == [(9, 0)]
    assert "<script" not in page.lower() and "alert" not in page


def test_a_result_with_no_case_says_so():
    page = feedback.page(_result([], status="timeout", message="over the time limit of 10 s"), "vector_add", "bob")
    assert "No case was run" in page and "none was run" in page and "over the time limit of 10 s" in page
    assert "verdict" not in page.split("<footer>")[0].split("</style>")[1]


@pytest.mark.parametrize("name", ["../../etc", "..", ".", "", "/abs/path", "a\\b", ".hidden", "a\x00b\nc",
                                  "x" * 500, "..\\..\\windows"])
def test_safe_names_stay_one_plain_component(name, tmp_path):
    safe = feedback.safe_name(name)
    assert safe and len(safe) <= feedback.NAME_CHARS
    assert "/" not in safe and "\\" not in safe and "\x00" not in safe and not safe.startswith(".")
    inside = os.path.normpath(os.path.join(str(tmp_path), safe, "x.html"))
    assert os.path.dirname(os.path.dirname(inside)) == str(tmp_path)


def test_safe_names_keep_ordinary_names():
    assert [feedback.safe_name(n) for n in ("alice", "bob_2", "05_triton", "Zoë", "a b", "a.b-c")] == \
        ["alice", "bob_2", "05_triton", "Zoë", "a_b", "a.b-c"]


def _report(results):
    return {"exercise": "vector_add", "environment": ENV, "isolation": {"level": "bubblewrap"},
            "standing": {"for_points": True, "why": ""}, "results": results}


def _files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_write_keeps_every_page_inside_the_folder_and_lists_them(tmp_path):
    out = tmp_path / "out" / "feedback"
    entries = [Entry("../../etc", "/c/submitted/../../etc/a1/a1.ipynb", "../a1"),
               Entry("a b", "/c/a b.py"), Entry("a_b", "/c/a_b.py"), Entry("index.html", "/c/index.html.py"),
               Entry("dave", None, status="missing", problem="nothing handed in"),
               Entry("carol", None, status="ambiguous", problem="2 files", candidates=["/c/carol/x.py",
                                                                                      "/c/carol/y.py"])]
    paths = ["/c/submitted/../../etc/a1/a1.ipynb", "/c/a b.py", "/c/a_b.py", "/c/index.html.py", "/c/carol/x.py",
             "/c/carol/y.py"]
    results = [_result(CHECKS, submission=p, message=f"message {i}") for i, p in enumerate(paths)]
    pages = feedback.write(_report(results), entries, str(out))
    assert _files(tmp_path) == sorted(os.path.join("out", "feedback", p) for p in [
        "___.._etc/___a1/vector_add.html", "a_b/vector_add/vector_add.html", "a_b-2/vector_add/vector_add.html",
        "index-2.html/vector_add/vector_add.html", "carol/vector_add/vector_add-x.py.html",
        "carol/vector_add/vector_add-y.py.html", "index.html"])
    assert [os.path.relpath(p, out) for p in pages] == [
        "___.._etc/___a1/vector_add.html", "a_b/vector_add/vector_add.html", "a_b-2/vector_add/vector_add.html",
        "index-2.html/vector_add/vector_add.html", "carol/vector_add/vector_add-x.py.html",
        "carol/vector_add/vector_add-y.py.html"]
    for i, p in enumerate(pages):  # each page is its own submission's
        assert f"message {i}" in open(p, encoding="utf-8").read()
    index = (out / "index.html").read_text()
    links = _Tags(index).links
    assert len(links) == len(pages) and all((out / p).is_file() for p in links)
    assert "dave: nothing handed in" in index and "carol: 2 files" in index
    assert "carol (x.py)" in index and "../../etc" in index  # the names as the gradebook shows them


def test_a_regrade_keeps_the_earlier_pages_and_lists_them(tmp_path):
    first = [Entry("alice", "/c/alice.py"), Entry("bob", "/c/bob.py")]
    feedback.write(_report([_result(CHECKS, submission=e.path) for e in first]), first, str(tmp_path))
    feedback.write(_report([_result(CHECKS, submission="/c/bob.py", message="re-graded")]), [first[1]],
                   str(tmp_path))
    assert "re-graded" in (tmp_path / "bob" / "vector_add" / "vector_add.html").read_text()
    index = (tmp_path / "index.html").read_text()
    assert "1 page written" in index and "Pages from earlier batches" in index
    assert _Tags(index).links == ["bob/vector_add/vector_add.html", "alice/vector_add/vector_add.html"]


def test_results_that_are_not_the_entries_files_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not the entries' files"):
        feedback.write(_report([_result(CHECKS, submission="/c/other.py")]), [Entry("alice", "/c/alice.py")],
                       str(tmp_path))
    assert not os.listdir(tmp_path)


def _grade(args, **kw):
    return subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", *args], capture_output=True, text=True,
                          **kw)


def test_help_describes_feedback():
    text = " ".join(grader_cli._parser().format_help().split())
    assert "--feedback DIR" in text and "DIR/<student>/<assignment>/<exercise>.html" in text and "index.html" in text


def test_feedback_naming_a_file_is_a_usage_error(tmp_path):
    (tmp_path / "f").write_text("")
    proc = _grade(["vector_add", os.path.join(FOLDER, "right_basic.py"), "--feedback", str(tmp_path / "f")])
    assert proc.returncode == 2 and "--feedback" in proc.stderr and "is a file" in proc.stderr


def test_grade_writes_a_page_per_submission_through_the_command_line(tmp_path):
    """Two students of a folder: one passing all but one case (with a hint), one whose file does not compile."""
    subs = tmp_path / "subs"
    (subs / "<i>eve").mkdir(parents=True)
    shutil.copy(os.path.join(FOLDER, "wrong_ignores_strides.py"), subs / "alice.py")
    shutil.copy(os.path.join(FOLDER, "error_syntax.py"), subs / "<i>eve" / "work.py")
    out, report_path = tmp_path / "feedback", tmp_path / "r.json"
    proc = _grade(["vector_add", str(subs), "--jobs", "2", "--timeout", "120", "--json", str(report_path),
                   "--feedback", str(out)], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"feedback: 2 pages in {out}" in proc.stderr
    results = json.loads(report_path.read_text())["results"]
    assert _files(out) == ["_i_eve/vector_add/vector_add.html", "alice/vector_add/vector_add.html", "index.html"]
    for r, student, folder in ((results[0], "&lt;i&gt;eve", "_i_eve"), (results[1], "alice", "alice")):
        page = (out / folder / "vector_add" / "vector_add.html").read_text()
        assert f"feedback for {student}</h1>" in page and f'class="{r["status"]}">{r["status"]}' in page
        assert page.count('<span class="verdict">PASS</span>') == sum(c["passed"] for c in r["checks"])
        assert page.count('<span class="verdict">FAIL</span>') == sum(not c["passed"] for c in r["checks"])
        assert set(_Tags(page).tags) <= PAGE_TAGS
    alice = (out / "alice" / "vector_add" / "vector_add.html").read_text()
    assert results[1]["status"] == "failed" and '<span class="hint">hint: the inputs of this case are not ' \
                                                'contiguous' in alice
    assert drawing.COLOURS[compare.WRONG] in _cells(alice)  # where its strided case's values are wrong
    assert "<svg" not in (out / "_i_eve" / "vector_add" / "vector_add.html").read_text()  # no case ran
    assert _Tags((out / "index.html").read_text()).links == ["_i_eve/vector_add/vector_add.html",
                                                             "alice/vector_add/vector_add.html"]


def test_a_graded_failure_carries_its_map_in_the_report_and_its_page_draws_it(tmp_path):
    """A grid one program short (wrong_unwritten_tail.py) leaves each case's tail never written: the report's map
    counts what the checker's text says, and the page draws those cells and counts; a passing page has no picture."""
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(os.path.join(FOLDER, "wrong_unwritten_tail.py"), subs / "tail.py")
    shutil.copy(os.path.join(FOLDER, "right_basic.py"), subs / "right.py")
    out, report_path = tmp_path / "feedback", tmp_path / "r.json"
    proc = _grade(["vector_add", str(subs), "--jobs", "2", "--timeout", "120", "--json", str(report_path),
                   "--feedback", str(out)], timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    right, tail = json.loads(report_path.read_text())["results"]
    assert right["status"] == "passed" and not any("where" in c for c in right["checks"])
    assert "<svg" not in (out / "right" / "vector_add" / "vector_add.html").read_text()
    failed = [c for c in tail["checks"] if not c["passed"]]
    assert failed and all("where" in c for c in failed) and not any("where" in c for c in tail["checks"]
                                                                       if c["passed"])
    page = (out / "tail" / "vector_add" / "vector_add.html").read_text()
    assert page.count('<svg class="where"') == len(failed) and set(_Tags(page).tags) <= PAGE_TAGS
    for c in failed:
        never, numel = map(int, re.search(r"elements never written: (\d+) of (\d+)", c["detail"]).groups())
        w = c["where"]
        assert (w["shape"], w["n_never"], w["n_wrong"], w["n_right"], w["n_past"]) == ([numel], never, 0,
                                                                                      numel - never, 0)
        assert w["codes"][0][-1] == compare.NEVER and len(w["codes"][0]) == -(-numel // w["block"][0])
        assert f"never written: {never:,}</span>" in page and f"right: {numel - never:,}</span>" in page
    assert drawing.COLOURS[compare.NEVER] in _cells(page) and drawing.COLOURS[compare.WRONG] not in _cells(page)
