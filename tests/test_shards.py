"""``gpucourse grade --shard K/N`` and ``gpucourse grade merge`` without Slurm (tests/test_slurm.py runs them on a
real one): the shards partition a class deterministically, bad values are usage errors, an empty shard still writes
its report, a sharded class merges into the gradebook one machine writes (a folder of files and an nbgrader
assignment, graded by a stand-in grader: the grading itself is tested elsewhere), and the merge's refusals and
leaderboard (ties judged over the merged timings, GPU models ranked apart)."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil

import pytest

from gpucourse.grading import batch, cli, gradebook, grader, merge, shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKBOOK = "09_compile_profiling"  # two exercises, as in tests/test_assignment.py


def _names(n):
    return [f"student{i:03d}" for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_the_shards_partition_the_class_deterministically(n):
    entries = [gradebook.Entry(s, f"{s}.py") for s in _names(200)]
    picked = [shards.Shard(k, n).pick(list(entries), say=False) for k in range(n)]
    seen = [e.student for part in picked for e in part]
    assert sorted(seen) == sorted(_names(200)) and len(seen) == len(set(seen))  # each in exactly one shard
    for k, part in enumerate(picked):
        assert all(shards.shard_of(e.student, n) == k for e in part)
        assert [e.index for e in part] == sorted(e.index for e in part)  # the class's order kept
        if n > 1:
            assert 0 < len(part) < 200  # sha256 spreads 200 names over every shard
    assert [shards.shard_of(s, 3) for s in ("ada", "ken", "grace", "linus", "edsger")] == [0, 0, 1, 1, 2]


def test_adding_students_moves_nobody_else():
    before = {s: shards.shard_of(s, 5) for s in _names(50)}
    entries = [gradebook.Entry(s, f"{s}.py") for s in _names(80)]
    for k in range(5):
        for e in shards.Shard(k, 5).pick(entries, say=False):
            if e.student in before:
                assert before[e.student] == k


def test_pick_says_how_many_students_of_how_many(capsys):
    entries = [gradebook.Entry(s, f"{s}.py") for s in ("ada", "ken", "grace", "linus", "edsger")]
    shard = shards.Shard(0, 3)
    assert [e.student for e in shard.pick(entries)] == ["ada", "ken"]
    assert (shard.students, shard.of) == (2, 5)
    assert "shard 0/3: grades 2 of the class's 5 students" in capsys.readouterr().err


@pytest.mark.parametrize("value, said", [
    ("3/3", "K must be between 0 and N-1 = 2"), ("-1/3", "K must be between 0 and N-1 = 2"),
    ("0/0", "N (the number of shards) must be at least 1"), ("1", "expected K/N"), ("a/b", "expected K/N"),
    ("1/2/3", "expected K/N")])
def test_bad_shards_are_usage_errors(tmp_path, capsys, value, said):
    (tmp_path / "ada.py").write_text("")
    assert cli.main(["vector_add", str(tmp_path), f"--shard={value}", "--json", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "argument --shard" in err and said in err, err


def test_a_shard_needs_json(tmp_path, capsys):
    (tmp_path / "ada.py").write_text("")
    assert cli.main(["vector_add", str(tmp_path), "--shard", "0/3"]) == 2
    assert "--shard 0/3 needs --json PATH" in capsys.readouterr().err


def _fake_grade(ex, paths, **kw):
    """grader.grade's report for ``paths`` without grading: a status and message that depend on the file only."""
    results = []
    for p in paths:
        text = open(p).read()
        ok = "right" in text
        results.append({"submission": p, "status": "passed" if ok else "failed", "score": 1.0 if ok else 0.5,
                        "message": f"{ex.id}: {'all cases passed' if ok else '1 of 2 cases failed'}",
                        "checks": [{"name": "n=1", "passed": ok, "detail": "" if ok else "wrong values"}],
                        "flags": [], "seconds": 0.1, "timing": "not timed (CPU mode)"})
    iso = kw["isolation"]
    return {"exercise": ex.id, "environment": batch.environment(), "isolation": iso.to_dict(),
            "standing": batch.standing(iso, kw.get("allow_process_isolation")), "results": results}


def _class_folder(root, students):
    root.mkdir()
    for s, right in students.items():
        if isinstance(right, list):  # a student with several files: no grade, each file graded for the report
            (root / s).mkdir()
            for i, r in enumerate(right):
                (root / s / f"try{i}.py").write_text("# right\n" if r else "# wrong\n")
        else:
            (root / f"{s}.py").write_text("# right\n" if right else "# wrong\n")
    return root


def _run_shards(target, args, out, n=3):
    """Every shard of a batch run as its own `gpucourse grade --shard K/N`, as the array's tasks do."""
    out.mkdir()
    for k in range(n):
        assert cli.main([*target, "--shard", f"{k}/{n}", "--json", str(out / f"{k}.json"), *args]) == 0
    return sorted(glob.glob(str(out / "*.json")))


def test_a_sharded_folder_merges_into_one_machines_outputs(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grader, "grade", _fake_grade)
    course = _class_folder(tmp_path / "course", {"ada": True, "ken": False, "grace": True, "linus": [True, False],
                                                 "edsger": False, "margaret": True})
    common = ["--allow-process-isolation", "--points", "10"]
    assert cli.main(["vector_add", str(course), "--gradebook", str(tmp_path / "one.csv"), "--csv",
                     str(tmp_path / "one-r.csv"), "--json", str(tmp_path / "one.json"), *common]) == 0
    reports = _run_shards(["vector_add", str(course)], common, tmp_path / "shards")
    capsys.readouterr()
    assert merge.main([*reports, "--gradebook", str(tmp_path / "m.csv"), "--csv", str(tmp_path / "m-r.csv"),
                       "--json", str(tmp_path / "m.json"), "--points", "10", "--leaderboard",
                       str(tmp_path / "b.md")]) == 0
    err = capsys.readouterr().err
    assert "vector_add: 3 shards, 6 students, 7 submissions graded on CPU" in err, err
    assert (tmp_path / "m.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()
    assert (tmp_path / "m-r.csv").read_bytes() == (tmp_path / "one-r.csv").read_bytes()
    assert (tmp_path / "m-summary.md").read_text().split("Written")[0] == \
        (tmp_path / "one-summary.md").read_text().split("Written")[0]
    one, merged = (json.loads((tmp_path / f).read_text()) for f in ("one.json", "m.json"))
    assert merged["results"] == one["results"]
    assert "CPU mode: no speed was measured" in (tmp_path / "b.md").read_text()


def test_an_empty_shard_writes_its_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grader, "grade", _fake_grade)
    course = _class_folder(tmp_path / "course", {"grace": True, "linus": False})  # both in shard 1 of 3
    assert cli.main(["vector_add", str(course), "--shard", "0/3", "--json", str(tmp_path / "0.json"),
                     "--allow-process-isolation"]) == 0
    assert "shard 0/3: grades 0 of the class's 2 students" in capsys.readouterr().err
    report = json.loads((tmp_path / "0.json").read_text())
    assert report["results"] == [] and report["entries"] == []
    assert report["shard"] == {"k": 0, "n": 3, "students": 0, "class_students": 2, "device": "CPU"}


def _nbgrader_course(root, students):
    sub = root / "submitted"
    for student, source in students.items():
        (sub / student / WORKBOOK).mkdir(parents=True)
        if source:
            (sub / student / WORKBOOK / f"{WORKBOOK}.ipynb").write_text("# right\n" if source == "right"
                                                                         else "# wrong\n")
    return root


def test_a_sharded_nbgrader_assignment_merges_into_one_gradebook(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grader, "grade", _fake_grade)
    course = _nbgrader_course(tmp_path / "course", {"ada": "right", "ken": "wrong", "grace": "right",
                                                    "linus": None, "edsger": "wrong"})
    common = ["--allow-process-isolation"]
    assert cli.main([WORKBOOK, str(course), "--gradebook", str(tmp_path / "one.csv"), *common]) == 0
    reports = _run_shards([WORKBOOK, str(course)], common, tmp_path / "shards")
    assert [os.path.basename(p) for p in reports] == [f"{k}-{ex}.json" for k in range(3)
                                                      for ex in ("fused_rmsnorm_residual", "read_the_profile")]
    capsys.readouterr()
    assert merge.main([*reports, "--gradebook", str(tmp_path / "m.csv"), "--json", str(tmp_path / "m.json")]) == 0
    assert (tmp_path / "m.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()
    assert json.loads((tmp_path / "m-read_the_profile.json").read_text())["assignment"] == WORKBOOK
    for ex in ("fused_rmsnorm_residual", "read_the_profile"):  # a summary per exercise, named as one machine's
        assert (tmp_path / f"m-summary-{ex}.md").read_text().split("Written")[0] == \
            (tmp_path / f"one-summary-{ex}.md").read_text().split("Written")[0]
    env = json.loads((tmp_path / "m.env.json").read_text())
    assert env["exercise"] == WORKBOOK and env["students"] == 5
    rc = merge.main([p for p in reports if "read_the_profile" not in p or p.startswith(str(tmp_path / "shards/0"))])
    assert rc == 2 and "shards 1/3, 2/3 of exercise read_the_profile missing" in capsys.readouterr().err


# --- Feedback pages from the shards' reports ----------------------------------------------------------------------

def _fake_grade_in_detail(ex, paths, **kw):
    """_fake_grade's report with what else a feedback page shows: a hint line (with characters to escape) in a failed
    case's text, a flag, a speed and the profile `--profile` adds to a passing submission."""
    report = _fake_grade(ex, paths, **kw)
    for r in report["results"]:
        r["checks"].append({"name": "n=1023", "passed": r["status"] == "passed",
                            "detail": "3 of 1023 elements differ <&>\nhint: mask the last block's loads"})
        if r["status"] == "passed":
            r["flags"] = ["calls torch.add"]
            r["perf"] = {"text": "1.3x the reference", "met": True}
            r["profile"] = {"ok": True, "launched": 1, "kernels": [
                {"name": "add_kernel", "duration_us": 12.5, "dram_pct": 81.0, "sm_pct": 20.0, "occupancy_pct": 60.0,
                 "registers": 32, "stalls": [{"reason": "long_scoreboard", "value": 3.5}], "stall_unit": "cycles"}]}
    return report


def _tree(root) -> dict:
    """Every file under ``root`` (relative path -> text), the index's date (the run's own) taken out."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            text = open(path, encoding="utf-8").read()
            out[os.path.relpath(path, root)] = re.sub(r" written \d{4}-\d\d-\d\d \d\d:\d\d UTC\.", " written DATE.",
                                                      text) if f == "index.html" else text
    return out


def _same_feedback(one, merged, expected: list) -> dict:
    tree, other = _tree(one), _tree(merged)
    assert sorted(tree) == sorted(other) == sorted(expected)
    for name in tree:
        assert other[name] == tree[name], name
    return tree


def test_merge_writes_the_feedback_pages_one_machine_writes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grader, "grade", _fake_grade_in_detail)
    course = _class_folder(tmp_path / "course", {"ada": True, "ken": False, "grace": True, "linus": [True, False],
                                                 "edsger": False, "margaret": True})
    common = ["--allow-process-isolation"]
    assert cli.main(["vector_add", str(course), "--feedback", str(tmp_path / "one"), *common]) == 0
    reports = _run_shards(["vector_add", str(course)], common, tmp_path / "shards")
    capsys.readouterr()
    assert merge.main([*reports, "--feedback", str(tmp_path / "merged")]) == 0
    assert f"feedback: 7 pages in {tmp_path / 'merged'}, listed in index.html" in capsys.readouterr().err
    pages = [f"{s}/vector_add/vector_add.html" for s in ("ada", "ken", "grace", "edsger", "margaret")]
    tree = _same_feedback(tmp_path / "one", tmp_path / "merged", [
        *pages, "linus/vector_add/vector_add-try0.py.html", "linus/vector_add/vector_add-try1.py.html", "index.html"])
    ada, ken = tree["ada/vector_add/vector_add.html"], tree["ken/vector_add/vector_add.html"]
    assert "<h2>Profile</h2>" in ada and "add_kernel" in ada and "<li>calls torch.add</li>" in ada
    assert "1.3x the reference" in ada and "<h2>Profile</h2>" not in ken
    assert '<span class="hint">hint: mask the last block&#x27;s loads</span>' in ken and "differ &lt;&amp;&gt;" in ken
    assert "linus: " in tree["index.html"] and " written DATE." in tree["index.html"]


def test_merge_writes_an_assignments_feedback_as_one_machine_does(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grader, "grade", _fake_grade_in_detail)
    course = _nbgrader_course(tmp_path / "course", {"ada": "right", "ken": "wrong", "grace": "right",
                                                    "linus": None, "edsger": "wrong"})
    common = ["--allow-process-isolation"]
    assert cli.main([WORKBOOK, str(course), "--feedback", str(tmp_path / "one"), *common]) == 0
    reports = _run_shards([WORKBOOK, str(course)], common, tmp_path / "shards")
    assert merge.main([*reports, "--feedback", str(tmp_path / "merged")]) == 0
    exercises = ("fused_rmsnorm_residual", "read_the_profile")
    tree = _same_feedback(tmp_path / "one", tmp_path / "merged", [
        f"{s}/{WORKBOOK}/{ex}.html" for s in ("ada", "ken", "grace", "edsger") for ex in exercises] + ["index.html"])
    index = tree["index.html"]  # the last exercise's batch, the first's pages kept from the batch before it
    assert "Feedback: read_the_profile" in index and "Pages from earlier batches" in index
    assert "linus: " in index and f"ada/{WORKBOOK}/fused_rmsnorm_residual.html" in index


def test_merge_feedback_into_a_folder_of_earlier_pages_keeps_them_as_one_machine_does(tmp_path, monkeypatch,
                                                                                          capsys):
    monkeypatch.setattr(grader, "grade", _fake_grade_in_detail)
    course = _class_folder(tmp_path / "course", {"ada": True, "ken": False, "grace": True, "edsger": False})
    earlier = {"zoe/vector_add/vector_add.html": "zoe's page, graded last week\n", "notes.txt": "the instructor's\n",
               "ada/vector_add/vector_add.html": "ada's page of last week\n"}
    for name in ("one", "merged"):
        for rel, text in earlier.items():
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text(text)
    common = ["--allow-process-isolation"]
    assert cli.main(["vector_add", str(course), "--feedback", str(tmp_path / "one"), *common]) == 0
    reports = _run_shards(["vector_add", str(course)], common, tmp_path / "shards")
    assert merge.main([*reports, "--feedback", str(tmp_path / "merged")]) == 0
    tree = _same_feedback(tmp_path / "one", tmp_path / "merged", [
        *earlier, *(f"{s}/vector_add/vector_add.html" for s in ("ken", "grace", "edsger")), "index.html"])
    assert tree["zoe/vector_add/vector_add.html"] == earlier["zoe/vector_add/vector_add.html"]  # kept, listed
    assert tree["notes.txt"] == earlier["notes.txt"] and "zoe/vector_add/vector_add.html" in tree["index.html"]
    ada = tree["ada/vector_add/vector_add.html"]
    assert "last week" not in ada and "feedback for ada</h1>" in ada  # this batch's page replaces the earlier one
    capsys.readouterr()
    (tmp_path / "f").write_text("")
    assert merge.main([*reports, "--feedback", str(tmp_path / "f"), "--json", str(tmp_path / "m.json")]) == 2
    assert f"--feedback {tmp_path / 'f'} is a file: name a folder" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


def test_really_graded_shards_pages_come_back_from_their_json_byte_for_byte(tmp_path, capsys):
    """Real grading (CPU mode): each shard also writes its own pages (--feedback), from the report in memory; the
    merge writes them again from the shards' JSON alone, and they are the same files, byte for byte. (A one-machine
    run of the class is not compared here: each grading run draws its cases' sizes afresh, and the checker's text
    quotes them, so two runs' pages differ where a case draws sizes; the tests above compare with one machine.)"""
    known = os.path.join(ROOT, "tests", "submissions", "vector_add")
    course = tmp_path / "course"
    course.mkdir()
    for student, source in (("ada", "right_basic.py"), ("ken", "wrong_ignores_strides.py"),
                            ("grace", "error_syntax.py")):
        shutil.copy(os.path.join(known, source), course / f"{student}.py")
    (tmp_path / "shards").mkdir()
    for k in range(3):
        assert cli.main(["vector_add", str(course), "--shard", f"{k}/3", "--json",
                         str(tmp_path / "shards" / f"{k}.json"), "--feedback", str(tmp_path / f"own{k}"), "--jobs",
                         "1", "--timeout", "120"]) == 0
    assert merge.main([*sorted(glob.glob(str(tmp_path / "shards" / "*.json"))), "--feedback",
                       str(tmp_path / "merged")]) == 0
    own = {}
    for k in range(3):
        if (tmp_path / f"own{k}").exists():
            own.update({p: t for p, t in _tree(tmp_path / f"own{k}").items() if p != "index.html"})
    merged = _tree(tmp_path / "merged")
    assert sorted(own) == [f"{s}/vector_add/vector_add.html" for s in ("ada", "grace", "ken")]
    assert sorted(merged) == sorted([*own, "index.html"])
    for name, text in own.items():
        assert merged[name] == text, name
    ken = merged["ken/vector_add/vector_add.html"]
    assert '<span class="hint">hint: the inputs of this case are not contiguous' in ken
    assert "sizes drawn for this run" in ken


def test_a_shard_without_what_a_page_shows_is_refused_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(grader, "grade", _fake_grade)
    course = _class_folder(tmp_path / "course", {"ada": True, "ken": False, "grace": True, "linus": False})
    reports = _run_shards(["vector_add", str(course)], ["--allow-process-isolation"], tmp_path / "shards")
    stripped = json.loads(open(reports[1]).read())  # grace and linus
    assert stripped["results"]
    for r in stripped["results"]:
        del r["checks"]
    with open(reports[1], "w") as f:
        json.dump(stripped, f)
    capsys.readouterr()
    out = tmp_path / "feedback"
    assert merge.main([*reports, "--feedback", str(out), "--json", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert f"{reports[1]} (shard 1/3) lacks what a feedback page shows: its result for " \
           f"{stripped['results'][0]['submission']} is missing checks; re-grade that shard" in err, err
    assert not out.exists() and not (tmp_path / "m.json").exists()
    stripped["results"][0]["checks"] = [{"name": "n=1", "passed": True}]
    stripped["results"][1]["checks"] = []
    with open(reports[1], "w") as f:
        json.dump(stripped, f)
    assert merge.main([*reports, "--feedback", str(out)]) == 2
    err = capsys.readouterr().err
    assert "(shard 1/3) lacks what a feedback page shows" in err and \
        "is missing each case's name, passed and detail" in err, err
    assert not out.exists()
    assert merge.main([*reports, "--json", str(tmp_path / "m.json")]) == 0  # the rest of the merge needs no cases


# --- The merge of hand-made shard reports -------------------------------------------------------------------------

def _env(gpu):
    return {"mode": "gpu", "gpu": gpu, "torch": "2.11.0", "triton": "3.6.0", "driver": "570",
            "fingerprint": f"{gpu} | driver 570 | torch 2.11.0 | triton 3.6.0 | gpu mode"}


def _timed(student, ms, lo, hi):
    return {"submission": f"course/{student}.py", "status": "passed", "score": 1.0, "message": "all 6 cases passed",
            "checks": [], "flags": [], "seconds": 1.0, "timing": "alone on GPU 0",
            "perf": {"ratio": 1.0 / ms, "ms": ms, "q25_ms": lo, "q75_ms": hi, "pct_of_peak": 50.0,
                     "baseline": "torch", "met": True}}


def _shard(k, gpu, timed, order, n=3, level="bubblewrap", class_students=5):
    results = [_timed(*t) for t in timed]
    return {"exercise": "vector_add", "environment": _env(gpu), "isolation": {"level": level, "detail": level},
            "standing": {"for_points": level == "bubblewrap", "why": level}, "results": results,
            "shard": {"k": k, "n": n, "students": len(results), "class_students": class_students, "device": gpu},
            "entries": [{"student": t[0], "path": f"course/{t[0]}.py", "assignment": "", "problem": "", "status": "",
                         "candidates": [], "notes": [], "index": order.index(t[0])} for t in timed]}


ORDER = ["alice", "bob", "carol", "dave", "erin"]
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


def _hand_made(tmp_path, **kw):
    """Shards 0 and 1 on H100s, shard 2 on an A100: alice (shard 0) and bob (shard 1) are within each other's noise;
    carol, on the A100, is fastest of all but is compared with nobody on the H100."""
    made = [_shard(0, H100, [("alice", 1.00, 0.95, 1.05), ("erin", 2.0, 1.9, 2.1)], ORDER),
            _shard(1, H100, [("bob", 1.02, 0.98, 1.10)], ORDER, **kw),
            _shard(2, A100, [("carol", 0.50, 0.45, 0.55), ("dave", 0.7, 0.65, 0.75)], ORDER)]
    paths = []
    for k, data in enumerate(made):
        paths.append(str(tmp_path / f"{k}.json"))
        with open(paths[-1], "w") as f:
            json.dump(data, f)
    return paths


def test_merged_timings_judge_ties_and_gpu_models_are_ranked_apart(tmp_path, capsys):
    paths = _hand_made(tmp_path)
    assert merge.main([*paths, "--leaderboard", str(tmp_path / "b.md"), "--leaderboard", str(tmp_path / "b.html"),
                       "--summary", str(tmp_path / "s.md"), "--csv", str(tmp_path / "r.csv")]) == 0
    page = (tmp_path / "b.md").read_text()
    assert page.startswith(merge.PER_MODEL.format(models=f"{H100}, {A100}"))
    h100, a100 = page.split(f"# Leaderboard: vector\\_add on {A100.replace('-', chr(92) + '-')}")
    rows = [line.split(" | ")[:2] for line in h100.splitlines() if line.startswith("| ") and "rank" not in line]
    assert rows == [["| =1", "alice"], ["| =1", "bob"], ["| 3", "erin"]]  # the tie is across shards 0 and 1
    rows = [line.split(" | ")[:2] for line in a100.splitlines() if line.startswith("| ") and "rank" not in line]
    assert rows == [["| 1", "carol"], ["| 2", "dave"]]
    html = (tmp_path / "b.html").read_text()
    assert html.count("<table>") == 2 and html.count("<html>") == 1 and "never ranked together" in html
    summary_text = (tmp_path / "s.md").read_text()
    assert "=1 \\(NVIDIA H100 80GB HBM3\\)" in summary_text and "1 \\(NVIDIA A100\\-SXM4\\-80GB\\)" in summary_text
    csv_rows = (tmp_path / "r.csv").read_text().splitlines()[1:]
    assert [(r.split(",")[0], H100 in r, A100 in r) for r in csv_rows] == [
        ("course/alice.py", True, False), ("course/bob.py", True, False), ("course/carol.py", False, True),
        ("course/dave.py", False, True), ("course/erin.py", True, False)]


def test_merged_feedback_pages_name_the_environment_each_was_graded_in(tmp_path, capsys):
    paths = _hand_made(tmp_path)
    assert merge.main([*paths, "--feedback", str(tmp_path / "feedback")]) == 0
    for student, gpu in (("alice", H100), ("bob", H100), ("carol", A100), ("dave", A100), ("erin", H100)):
        page = (tmp_path / "feedback" / student / "vector_add" / "vector_add.html").read_text()
        assert f"Graded on {_env(gpu)['fingerprint']}." in page, student


def test_one_gpu_model_is_one_leaderboard(tmp_path):
    made = [_shard(0, H100, [("alice", 1.0, 0.95, 1.05)], ORDER[:2], n=2, class_students=2),
            _shard(1, H100, [("bob", 0.8, 0.75, 0.85)], ORDER[:2], n=2, class_students=2)]
    paths = [str(tmp_path / f"{k}.json") for k in range(2)]
    for p, d in zip(paths, made):
        with open(p, "w") as f:
            json.dump(d, f)
    assert merge.main([*paths, "--leaderboard", str(tmp_path / "b.md")]) == 0
    page = (tmp_path / "b.md").read_text()
    assert page.startswith("# Leaderboard: vector\\_add\n") and "never ranked together" not in page
    assert "| 1 | bob |" in page and "| 2 | alice |" in page


def test_the_merge_refuses_shards_that_do_not_belong_together(tmp_path, capsys):
    paths = _hand_made(tmp_path)

    def refused(args):
        assert merge.main([str(a) for a in args]) == 2
        return capsys.readouterr().err

    assert "shard 1/3 given twice" in refused([paths[0], paths[1], paths[1], paths[2]])
    (tmp_path / "plain.json").write_text(json.dumps({"exercise": "vector_add", "results": []}))
    assert "plain.json is not a shard's report" in refused([*paths, tmp_path / "plain.json"])
    assert "not a JSON report" in refused([*paths[:2], __file__])
    wrong_n = _shard(2, A100, [("carol", 0.5, 0.45, 0.55)], ORDER, n=4)
    (tmp_path / "n4.json").write_text(json.dumps(wrong_n))
    assert "is one of 3 shards and" in refused([*paths[:2], tmp_path / "n4.json"])
    small = _shard(2, A100, [("carol", 0.5, 0.45, 0.55)], ORDER)  # dave is missing: another class list
    (tmp_path / "small.json").write_text(json.dumps(small))
    assert "saw different classes" in refused([*paths[:2], tmp_path / "small.json"])


def test_shards_at_different_isolation_levels_need_allow_process_isolation(tmp_path, capsys):
    paths = _hand_made(tmp_path, level="process")
    assert merge.main([*paths, "--gradebook", str(tmp_path / "g.csv")]) == 2
    err = capsys.readouterr().err
    assert "shards graded at different isolation levels (bubblewrap: " in err and "process: " in err
    assert "--allow-process-isolation" in err and not (tmp_path / "g.csv").exists()
    assert merge.main([*paths, "--gradebook", str(tmp_path / "g.csv"), "--json", str(tmp_path / "m.json"),
                       "--allow-process-isolation"]) == 0
    merged = json.loads((tmp_path / "m.json").read_text())
    assert merged["isolation"]["level"] == "process" and merged["standing"]["for_points"]


def test_process_level_shards_not_accepted_are_not_for_points(tmp_path, capsys):
    made = [_shard(k, H100, [(s, 1.0, 0.9, 1.1)], ["a", "b"], n=2, level="process", class_students=2)
            for k, s in enumerate(["a", "b"])]
    paths = [str(tmp_path / f"{k}.json") for k in range(2)]
    for p, d in zip(paths, made):
        with open(p, "w") as f:
            json.dump(d, f)
    assert merge.main([*paths, "--gradebook", str(tmp_path / "g.csv")]) == 2
    assert "no --gradebook or --leaderboard: graded at the process level" in capsys.readouterr().err
    assert merge.main([*paths, "--json", str(tmp_path / "m.json")]) == 0
    assert not json.loads((tmp_path / "m.json").read_text())["standing"]["for_points"]


def test_grade_merge_is_dispatched_from_grade(tmp_path, capsys):
    assert cli.main(["merge", "--help"]) == 0
    assert "usage: gpucourse grade merge" in capsys.readouterr().out
    assert cli.main(["merge", str(tmp_path / "none.json")]) == 2
    assert "none.json: cannot be read" in capsys.readouterr().err


def test_the_recipe_grades_a_shard_per_array_task():
    text = open(os.path.join(ROOT, "docs", "slurm", "grade-array.sbatch")).read()
    assert "#SBATCH --array=0-2\n" in text and "#SBATCH --gres=gpu:1\n" in text
    assert '--shard "$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT"' in text
    assert '--json "shards/$SLURM_ARRAY_TASK_ID.json"' in text
    if shutil.which("bash"):
        import subprocess

        for name in ("grade-array.sbatch", "merge.sbatch"):
            checked = subprocess.run(["bash", "-n", os.path.join(ROOT, "docs", "slurm", name)], capture_output=True,
                                     text=True)
            assert checked.returncode == 0, checked.stderr
