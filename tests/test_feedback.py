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

from gpucourse.grading import cli as grader_cli
from gpucourse.grading import feedback
from gpucourse.grading.gradebook import Entry

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "submissions", "vector_add")
HOSTILE = "<script>alert('x')</script>"
ENV = {"mode": "cpu", "fingerprint": "CPU | torch 2 | cpu mode"}
# Every tag a page may hold: no script, image, link, frame, form or object.
PAGE_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "strong", "table", "thead",
             "tbody", "tr", "th", "td", "pre", "span", "section", "ul", "li", "footer", "a"}


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
    assert _Tags((out / "index.html").read_text()).links == ["_i_eve/vector_add/vector_add.html",
                                                             "alice/vector_add/vector_add.html"]
