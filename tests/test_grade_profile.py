"""``gpucourse grade --profile`` (grading/profile.py) and the Nsight Compute runner it shares with lesson 09
(gpucourse/ncu.py): the raw-CSV parser, the per-kernel summary and its stall ordering, the one line where profiling
cannot run (CPU mode, ncu missing, counters not permitted), the profile command in the sandbox, the target run under
ncu, and the feedback page's table. The GPU test grades with --profile on a GPU where ncu can read the counters."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest

import gpucourse
from gpucourse import ncu
from gpucourse.grading import feedback, process, profile, sandbox, staging
from gpucourse.grading.exercise import get
from submissions_util import describe, expectation, load_expected, misgraded

HERE = os.path.dirname(os.path.abspath(__file__))
VECTOR_ADD = os.path.join(HERE, "submissions", "vector_add")
BLOCK_SUM = os.path.join(HERE, "submissions", "block_sum")

# A real capture: Nsight Compute 2025.3.1 on an H100 80GB HBM3 (torch 2.11, Triton 3.6), the profile's own command
# (ncu.command with profile.METRICS, SECTIONS, OPTIONS) on tests/submissions/vector_add/right_basic.py.
REAL_CSV = os.path.join(HERE, "data", "ncu-raw-h100-vector_add.csv")
# Several kernels, written by hand in the layout of that capture (a header row: ncu's fixed columns, then the
# metrics sorted by name; a units row; one row per kernel, numbers with thousands commas), for the ordering.
RAW_CSV = """\
==PROF== Connected to process 41 (/usr/bin/python3.12)
==PROF== Profiling "block_sum_kernel" - 0: 0%....50%....100% - 9 passes
==PROF== Disconnected from process 41
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",\
"dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__registers_per_thread",\
"sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active",\
"smsp__average_warp_latency_per_inst_issued.ratio",\
"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_selected_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",\
"smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio"
"","","","","","","","","","","","%","nsecond","register/thread","%","%","","","","","","","",""
"0","41","python3.12","127.0.0.1","block_sum_kernel(const float *, float *, long)","1","7","(256, 1, 1)",\
"(1048576, 1, 1)","0","9.0","88.41","412,384","16","23.77","81.06","21.64","2.31","14.02","0.41","1.00","0.87",\
"2.96","0"
"1","41","python3.12","127.0.0.1","void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, \
at::detail::Array<char *, 1>>(int, at::native::FillFunctor<float>, at::detail::Array<char *, 1>)","1","7",\
"(128, 1, 1)","(1, 1, 1)","0","9.0","0.12","2,080","16","0.03","6.12","40.1","0","0.5","0","1.00","0","38.6","0"
"2","41","python3.12","127.0.0.1","finish_kernel","1","7","(32, 1, 1)","(1, 1, 1)","0","9.0","0.5","3,104","32",\
"0.2","3.1","12.0","1.5","6.0","0","1.00","2.5","1.0","0"
"3","41","python3.12","127.0.0.1","tiny_kernel","1","7","(32, 1, 1)","(1, 1, 1)","0","9.0","0.1","1,024","8",\
"0.1","3.0","5.0","0","1.0","0","1.00","0","3.0","0"
"""


def test_a_real_h100_capture_summarized():
    with open(REAL_CSV) as f:
        rows = ncu.parse_csv(f.read())
    assert [r["name"] for r in rows] == ["add_kernel"]
    (k,) = profile.summarize(rows)
    assert k["duration_us"] == pytest.approx(259.424) and k["registers"] == 26.0
    assert k["dram_pct"] == pytest.approx(90.62) and k["sm_pct"] == pytest.approx(4.95)  # a streaming kernel
    assert k["occupancy_pct"] == pytest.approx(81.77)
    assert [s["reason"] for s in k["stalls"]] == ["long_scoreboard", "drain", "short_scoreboard"]
    assert k["stall_unit"] == "warp cycles per issued instruction"


def test_the_install_behind_a_linked_nsight_compute_folder_is_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(ncu, "PACKAGED", str(tmp_path / "none"))
    # NVIDIA's CUDA images: <toolkit>/nsight-compute-<v> -> /opt/nvidia/nsight-compute/<v>; the sandbox must see both
    toolkit, real = tmp_path / "cuda-13.0", tmp_path / "opt" / "nsight-compute" / "2025.3.1"
    (toolkit / "bin").mkdir(parents=True)
    real.mkdir(parents=True)
    (toolkit / "bin" / "ncu").write_text("#!/bin/sh\n")
    os.symlink(real, toolkit / "nsight-compute-2025.3.1")
    assert ncu.install_dirs(str(toolkit / "bin" / "ncu")) == [str(toolkit), str(real)]


def test_raw_csv_rows_parsed():
    rows = ncu.parse_csv(RAW_CSV)
    assert [r["name"] for r in rows][0] == "block_sum_kernel(const float *, float *, long)"
    assert rows[1]["name"].startswith("void at::native::vectorized_elementwise_kernel<4, ")  # commas inside quotes
    first = rows[0]
    assert first[profile.DURATION] == 412384.0 and first["units"][profile.DURATION] == "nsecond"
    assert first[profile.REGISTERS] == 16.0 and first[profile.OCCUPANCY] == 81.06
    assert "Block Size" not in first and "CC" not in first  # ncu's fixed columns are not metrics
    # lesson 09's reading keeps only its metrics, None where the row lacks one
    kept = ncu.parse_csv(RAW_CSV, ("gpu__time_duration.sum", "dram__bytes_read.sum"))
    assert kept[0]["gpu__time_duration.sum"] == 412384.0 and kept[0]["dram__bytes_read.sum"] is None
    assert ncu.parse_csv("==PROF== nothing profiled\n") == []


def test_summary_numbers_and_stall_order():
    kernels = profile.summarize(ncu.parse_csv(RAW_CSV))
    assert [k["name"] for k in kernels][0] == "block_sum_kernel(const float *, float *, long)"
    assert len(kernels) == profile.TOP_KERNELS  # 4 kernels ran: the 3 longest, longest first
    assert [round(k["duration_us"], 3) for k in kernels] == [412.384, 3.104, 2.08]
    top = kernels[0]
    assert (top["dram_pct"], top["sm_pct"], top["occupancy_pct"], top["registers"]) == (88.41, 23.77, 81.06, 16.0)
    # largest first; "selected" (issuing) is not a stall, zeros are left out; the top 3 kept
    assert [(s["reason"], s["value"]) for s in top["stalls"]] == [("long_scoreboard", 14.02), ("wait", 2.96),
                                                                  ("barrier", 2.31)]
    assert top["stall_unit"] == "warp cycles per issued instruction"
    text = profile.kernel_text(top)
    assert text == ("block_sum_kernel(const float *, float *, long): 412.4 us, DRAM 88%, SM 24%, occupancy 81%, "
                    "16 registers, stalls: long_scoreboard 14, wait 2.96, barrier 2.31")


def test_stall_families_and_units():
    sampled = {"name": "k", "smsp__pcsamp_warps_issue_stalled_long_scoreboard": 90.0,
               "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued": 80.0,
               "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle": 120.0}
    assert profile.stall_reasons(sampled) == ([{"reason": "math_pipe_throttle", "value": 120.0},
                                               {"reason": "long_scoreboard", "value": 90.0}], "samples")
    newer = {"smsp__average_warp_latency_issue_stalled_barrier.ratio": 4.0,
             "smsp__average_warp_latency_issue_stalled_wait.ratio": 5.0}
    assert [s["reason"] for s in profile.stall_reasons(newer)[0]] == ["wait", "barrier"]
    assert profile.stall_reasons({"name": "k"}) == ([], "")
    assert ncu.duration_us({"d": 2.5, "units": {"d": "usecond"}}, "d") == 2.5
    assert ncu.duration_us({"d": 2500.0}, "d") == 2.5  # no unit: the raw page's base, nanoseconds
    assert ncu.duration_us({"d": 1.0, "units": {"d": "furlong"}}, "d") is None


def test_reasons_for_no_rows():
    assert ncu.outcome(1, "", "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")["why"] == \
        ncu.NOT_PERMITTED
    got = ncu.outcome(3, "", "==PROF== Disconnected")
    assert not got["ok"] and got["why"].startswith("ncu returned 3 and no kernel rows: ==PROF== Disconnected")
    said = profile.outcome(3, "", f"==PROF== Connected\n{profile.MARK}raised RuntimeError: boom\n")
    assert said == {"ok": False, "why": "the timed call did not run under ncu: raised RuntimeError: boom"}
    ok = profile.outcome(0, RAW_CSV, "")
    assert ok["ok"] and ok["launched"] == 4 and len(ok["kernels"]) == 3


def _report(statuses):
    return {"exercise": "vector_add", "results": [
        {"submission": f"/s/{i}.py", "status": s, "score": 1.0 if s == "passed" else 0.0, "message": "m",
         "checks": [], "flags": [], "seconds": 1.0, "timing": ""} for i, s in enumerate(statuses)]}


def test_ncu_missing_gives_one_line(monkeypatch, tmp_path):
    monkeypatch.setattr(gpucourse.device, "on_gpu", lambda: True)
    monkeypatch.setenv("PATH", str(tmp_path))  # PATH without ncu
    for var in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(ncu, "SEARCH", (str(tmp_path / "nowhere" / "*" / "ncu"),))
    monkeypatch.setattr(profile, "profile_one", lambda *a, **k: pytest.fail("nothing is profiled without ncu"))
    said = []
    report = _report(["passed", "failed"])
    before = json.dumps(report["results"])
    got = profile.profile_batch(get("vector_add"), report, sandbox.Isolation("process", "p"), say=said.append)
    assert len(said) == 1 and said[0].startswith(f"profile: not profiled: {ncu.MISSING} (not on PATH")
    assert got == report["profile"] and got["profiled"] == 0 and got["why"].startswith(ncu.MISSING)
    assert json.dumps(report["results"]) == before  # grading unaffected


def test_no_timed_case_and_not_permitted_lines(monkeypatch):
    monkeypatch.setattr(gpucourse.device, "on_gpu", lambda: True)
    said = []
    no_perf = types.SimpleNamespace(id="vector_add", perf=None)
    profile.profile_batch(no_perf, _report(["passed"]), sandbox.Isolation("process", "p"), say=said.append)
    assert said == ["profile: not profiled: exercise vector_add has no timed GPU case"]
    monkeypatch.setattr(ncu, "find", lambda: "/opt/nvidia/nsight-compute/2025.1.0/ncu")
    calls = []

    def refused(ex, path, exe, isolation, limit):
        calls.append(path)
        return {"ok": False, "why": ncu.NOT_PERMITTED}

    monkeypatch.setattr(profile, "profile_one", refused)
    said.clear()
    report = _report(["passed", "passed"])
    got = profile.profile_batch(get("vector_add"), report, sandbox.Isolation("process", "p"), say=said.append)
    assert calls == ["/s/0.py"] and len(said) == 1 and "ERR_NVGPUCTRPERM" in said[0]  # said once, not per student
    assert got["profiled"] == 0 and "NVreg_RestrictProfilingToAdminUsers=0" in got["why"]
    assert all("profile" not in r for r in report["results"])


def test_profiled_entries_and_their_lines(monkeypatch):
    monkeypatch.setattr(gpucourse.device, "on_gpu", lambda: True)
    monkeypatch.setattr(ncu, "find", lambda: "/usr/local/cuda/bin/ncu")
    seen = []

    def fake(ex, path, exe, isolation, limit):
        seen.append((path, exe, limit))
        if path == "/s/2.py":
            raise OSError("no space left")
        return profile.outcome(0, RAW_CSV, "")

    monkeypatch.setattr(profile, "profile_one", fake)
    said = []
    report = _report(["passed", "failed", "passed"])
    got = profile.profile_batch(get("vector_add"), report, sandbox.Isolation("process", "p"), timeout=100.0,
                                say=said.append)
    assert [p for p, _, _ in seen] == ["/s/0.py", "/s/2.py"] and seen[0][2] == 300.0  # passing ones; 3x the limit
    assert got == {"profiled": 1, "why": ""}
    assert report["results"][0]["profile"]["kernels"][0]["registers"] == 16.0 and "profile" not in report["results"][1]
    assert report["results"][2]["profile"]["ok"] is False and "OSError('no space left')" in \
        report["results"][2]["profile"]["why"]
    assert said[0].startswith("profile: /s/0.py: block_sum_kernel(const float *, float *, long): 412.4 us, DRAM 88%")
    assert said[0].endswith("(+3 more kernels)") and said[1].startswith("profile: /s/2.py: not profiled: ")
    assert [r["status"] for r in report["results"]] == ["passed", "failed", "passed"]


def test_when_none_is_profiled_the_report_says_why(monkeypatch):
    # as on the H100 before ncu's package folder was bound in the sandbox: every run fails the same way
    monkeypatch.setattr(gpucourse.device, "on_gpu", lambda: True)
    monkeypatch.setattr(ncu, "find", lambda: "/usr/local/cuda/bin/ncu")
    missing = "ERROR : nsight-compute directory is not found under /usr/local/cuda-13.0/bin/../ or /opt/nvidia."
    monkeypatch.setattr(profile, "profile_one", lambda *a: profile.outcome(1, "", missing))
    said = []
    report = _report(["passed", "passed"])
    got = profile.profile_batch(get("vector_add"), report, sandbox.Isolation("process", "p"), say=said.append)
    assert got["profiled"] == 0 and got["why"].startswith("none of the 2 profiled; the first said: ncu returned 1")
    assert "nsight-compute directory is not found" in got["why"] and said[-1] == f"profile: not profiled: {got['why']}"
    assert all(r["profile"]["ok"] is False for r in report["results"])


def test_profile_command_in_the_sandbox(monkeypatch, tmp_path):
    """ncu wraps the target; in the sandbox, ncu's own folders (outside /usr) are bound read-only."""
    home = tmp_path / "nsight-compute" / "2025.1.0"
    home.mkdir(parents=True)
    exe = home / "ncu"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    staged = tmp_path / "stage" / "submission.py"
    staged.parent.mkdir()
    staged.write_text("def vector_add(x, y): ...\n")
    st = staging.Prepared(path="/c/alice.py", stage=str(staged.parent), staged=str(staged), tmp=str(tmp_path))
    argv, env = profile.profile_command(get("vector_add"), str(exe), st, sandbox.Isolation("process", "p"))
    assert argv[:4] == [str(exe), "--csv", "--page", "raw"]
    joined = " ".join(argv)
    assert "--profile-from-start off --target-processes all" in joined and "--section WarpStateStats" in joined
    assert argv[argv.index("--metrics") + 1].split(",") == list(profile.METRICS)
    assert argv[-9:] == [sys.executable, "-m", "gpucourse.grading.profile", "--exercise", "vector_add",
                         "--submission", str(staged), "--fsize-mb", str(process.FSIZE_MB)]
    assert env["HOME"] == str(tmp_path) and "alice" not in joined
    iso = sandbox.Isolation("bubblewrap", "b", bwrap="/usr/bin/bwrap")
    argv, env = profile.profile_command(get("vector_add"), str(exe), st, iso)
    assert argv[0] == "/usr/bin/bwrap" and env["HOME"] == sandbox.INSIDE_TMP
    binds = {argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"}
    assert str(home) in binds  # ncu's installation, visible read-only
    assert str(staged) in binds and sandbox.inside_path(str(staged)) in argv[argv.index(str(exe)):]
    monkeypatch.setattr(ncu, "PACKAGED", str(tmp_path / "opt-nvidia-nsight-compute"))  # not there
    assert ncu.install_dirs("/usr/local/cuda-12.8/bin/ncu") == ["/usr/local/cuda-12.8"]
    (tmp_path / "opt-nvidia-nsight-compute" / "2025.3.1").mkdir(parents=True)  # a .deb install: the wrapper's first
    assert ncu.install_dirs("/usr/local/cuda-12.8/bin/ncu") == ["/usr/local/cuda-12.8", ncu.PACKAGED]


def test_the_target_says_why_in_cpu_mode():
    """The program ncu runs loads the submission as the worker does, and says in one line why it did not profile:
    in CPU mode there is no timed step. What the submission prints never reaches stdout (ncu's CSV)."""
    if gpucourse.on_gpu():
        pytest.skip("CPU mode only: on a GPU the target profiles the call")
    p = subprocess.run([sys.executable, "-m", "gpucourse.grading.profile", "--exercise", "vector_add",
                        "--submission", os.path.join(VECTOR_ADD, "right_noisy_prints.py")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3 and p.stdout == ""
    assert p.stderr.strip().splitlines()[-1] == f"{profile.MARK}no timed step here (CPU mode, or no speed target)"


def test_a_profile_run_end_to_end_with_a_stand_in_ncu(tmp_path):
    """profile_one as a batch runs it (staged copy, the sandbox where this machine has one, the GPU lock, the time
    limit), with a stand-in for ncu outside /usr that runs the target it is given: in CPU mode the target says there
    is no timed step, and that line is the reason reported."""
    if gpucourse.on_gpu():
        pytest.skip("CPU mode only")
    home = tmp_path / "nsight-compute"
    home.mkdir()
    exe = home / "ncu"
    exe.write_text(f"#!{sys.executable}\nimport subprocess, sys\nargs = sys.argv[1:]\n"
                   "target = args[args.index('--print-units') + 2:]  # profile.OPTIONS end with it\n"
                   "sys.exit(subprocess.run(target).returncode)\n")
    exe.chmod(0o755)
    got = profile.profile_one(get("vector_add"), os.path.join(VECTOR_ADD, "right_noisy_prints.py"), str(exe),
                              sandbox.detect(), 120.0)
    assert got == {"ok": False, "why": "the timed call did not run under ncu: no timed step here (CPU mode, or no "
                                       "speed target)"}


def test_cpu_mode_batch_gives_one_line_and_unchanged_verdicts(tmp_path):
    if gpucourse.on_gpu():
        pytest.skip("CPU mode only")
    names = ["right_basic.py", "wrong_dtype.py"]
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", "vector_add",
                        *[os.path.join(VECTOR_ADD, n) for n in names], "--profile", "--json", str(out),
                        "--jobs", "2"], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if "profile" in ln]
    assert lines == ["gpucourse grade: profile: not profiled: there is no GPU (CPU mode): Nsight Compute profiles "
                     "GPU kernels"], p.stderr
    report = json.loads(out.read_text())
    assert report["profile"] == {"profiled": 0, "why": "there is no GPU (CPU mode): Nsight Compute profiles GPU "
                                                       "kernels"}
    expected = load_expected("vector_add")["EXPECTED"]
    for name, r in zip(names, report["results"]):
        problems = misgraded(r, expectation(expected[name], "cpu"))
        assert not problems, describe(name, r, problems)
        assert "profile" not in r


def test_feedback_page_shows_the_profile():
    result = {"submission": "/c/alice.py", "status": "passed", "score": 1.0, "message": "all 6 cases passed",
              "checks": [], "flags": [], "perf": {"text": "2,900 GB/s", "met": True},
              "profile": profile.outcome(0, RAW_CSV.replace("finish_kernel", "<b>finish</b>"), "")}
    html = feedback.page(result, "block_sum", "alice")
    assert "<h2>Profile</h2>" in html and html.index("<h2>Speed</h2>") < html.index("<h2>Profile</h2>")
    assert "<td>block_sum_kernel(const float *, float *, long)</td><td>412.4</td><td>88</td><td>24</td>" \
           "<td>81</td><td>16</td><td>long_scoreboard 14, wait 2.96, barrier 2.31</td>" in html
    assert "&lt;b&gt;finish&lt;/b&gt;" in html and "<b>finish" not in html  # a kernel's name is the student's text
    assert "4 kernels ran in the call; the 3 longest are shown." in html
    assert "(warp cycles per issued instruction)" in html
    not_run = feedback.page(dict(result, profile={"ok": False, "why": "ncu took over 180 s"}), "block_sum", "alice")
    assert "<p>Not profiled: ncu took over 180 s</p>" in not_run
    assert "<h2>Profile</h2>" not in feedback.page(dict(result, profile=None), "block_sum", "alice")


def test_help_and_docs_name_profile_mode():
    from gpucourse.grading import cli

    text = " ".join(cli._parser().format_help().split())
    assert "--profile" in text and "Nsight Compute" in text
    with open(os.path.join(HERE, "..", "docs", "grading.md")) as f:
        assert "## Profile mode" in f.read()


@pytest.mark.gpu
def test_profile_on_the_gpu(tmp_path):
    """A right Triton submission and a right CUDA one, graded with --profile: each profiled entry has a kernel with a
    duration, registers, an occupancy within (0, 100] and a stall reason. Where this machine's ncu is missing or may
    not read the counters, the report's one line says so and the test is skipped with it."""
    for exercise, path in (("vector_add", os.path.join(VECTOR_ADD, "right_basic.py")),
                           ("block_sum", os.path.join(BLOCK_SUM, "right_atomic_per_block.py"))):
        out = tmp_path / f"{exercise}.json"
        p = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", exercise, path, "--profile", "--json",
                            str(out), "--feedback", str(tmp_path / "fb")], capture_output=True, text=True,
                           timeout=900)
        assert p.returncode == 0, p.stderr
        report = json.loads(out.read_text())
        (r,) = report["results"]
        assert r["status"] == "passed", r
        why = report["profile"]["why"]
        if why.startswith((ncu.MISSING, ncu.NOT_PERMITTED)):
            pytest.skip(why)
        assert report["profile"] == {"profiled": 1, "why": ""}, (report["profile"], p.stderr[-3000:])
        prof = r["profile"]
        assert prof["ok"], prof
        k = prof["kernels"][0]
        assert k["duration_us"] > 0 and k["registers"] > 0 and 0 < k["occupancy_pct"] <= 100, k
        assert k["stalls"] and k["stalls"][0]["value"] > 0, k
        assert f"gpucourse grade: profile: {path}: " in p.stderr
