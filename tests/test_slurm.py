"""Grading across machines on a real Slurm (issue 35, item 7): docs/slurm/grade-array.sbatch submitted as a job array
of 3 shards to a single-node Slurm started here (Debian's slurm-wlm and munge, as root), then docs/slurm/merge.sbatch
after it (--dependency=afterok); the merged gradebook must equal one machine's run of the same class.

The cluster is started by the ``slurm`` fixture from a temporary folder: a munge key and munged on a socket of its
own, a minimal slurm.conf (one node, this host with its CPUs; one partition; no accounting; linuxproc process
tracking and no task plugin, so no cgroup is needed), slurmctld and slurmd in the foreground, stopped at the end.
Elsewhere (not root, Slurm or munge missing) every test skips, saying why, unless GPUCOURSE_SLURM_TEST=required
(CI), where it fails instead.
"""
from __future__ import annotations

import csv
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from gpucourse.grading import merge, shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBMISSIONS = os.path.join(ROOT, "tests", "submissions", "vector_add")
RECIPE = os.path.join(ROOT, "docs", "slurm", "grade-array.sbatch")
MERGE_JOB = os.path.join(ROOT, "docs", "slurm", "merge.sbatch")
REQUIRED = os.environ.get("GPUCOURSE_SLURM_TEST", "") == "required"
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol")
N = 3
# Names chosen so that each of the 3 shards grades someone (shards.shard_of: ada, ken -> 0; grace, linus -> 1;
# edsger -> 2); messages that are the same in every run (no drawn size in them), so two runs compare equal.
CLASS = {"ada": "right_basic.py", "ken": "wrong_inplace_input.py", "grace": "right_strided_kernel.py",
         "linus": "error_raises.py", "edsger": "error_missing_function.py"}


def _unavailable() -> str | None:
    if not sys.platform.startswith("linux"):
        return "Slurm runs on Linux only"
    if os.geteuid() != 0:
        return "needs root: the test starts its own munged, slurmctld and slurmd (SlurmUser=root)"
    missing = [b for b in BINARIES if not shutil.which(b)]
    if missing:
        return (f"{', '.join(missing)} not installed (Debian: apt-get install slurm-wlm munge; "
                f"python3 scripts/bootstrap.py --only-slurm)")
    return None


def _skip_or_fail(why: str):
    if REQUIRED:
        pytest.fail(f"GPUCOURSE_SLURM_TEST=required, but {why}")
    pytest.skip(why)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, n: int = 2000) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


class Cluster:
    """A running single-node Slurm: ``env`` has SLURM_CONF; ``logs`` the daemons' log files."""

    def __init__(self, folder, env: dict, procs: list, logs: list):
        self.folder, self.env, self.procs, self.logs = folder, env, procs, logs

    def run(self, argv: list, **kw) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=kw.pop("env", self.env), capture_output=True, text=True,
                              timeout=kw.pop("timeout", 60), **kw)

    def logs_text(self) -> str:
        return "\n".join(f"--- {p}:\n{_tail(p)}" for p in self.logs)


@pytest.fixture(scope="module")
def slurm():
    why = _unavailable()
    if why:
        _skip_or_fail(why)
    # munged's socket must be reachable by every user (it checks each folder above it), so the cluster's folder is
    # not under pytest's (mode 0700): its own under the system's temporary folder, removed at the end.
    d = pathlib.Path(tempfile.mkdtemp(prefix="gpucourse-slurm-"))
    os.chmod(d, 0o755)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))  # what mungekey -c writes: random bytes, readable by root only
    os.chmod(key, 0o400)
    sock = d / "munge.socket"
    host = socket.gethostname().split(".")[0]
    (d / "state").mkdir()
    (d / "spool").mkdir()
    (d / "plugstack.conf").write_text("")  # not /etc/slurm's: nothing of this machine's Slurm set-up is read
    (d / "slurm.conf").write_text(f"""\
ClusterName=gpucourse-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
PlugStackConfig={d}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=grading Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(d / "slurm.conf"))
    for var in [v for v in env if v.startswith(("SLURM_", "SBATCH_", "SRUN_")) and v != "SLURM_CONF"]:
        del env[var]  # a test run inside a Slurm job must not hand that job's settings to the test's jobs
    procs, logs = [], [d / "munged.log", d / "slurmctld.log", d / "slurmd.log"]

    def start(argv, name):
        out = open(d / f"{name}.out", "w")
        procs.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
        out.close()
        logs.append(d / f"{name}.out")

    try:
        start(["munged", "--foreground", f"--socket={sock}", f"--key-file={key}", f"--pid-file={d}/munged.pid",
               f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"], "munged")
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.1)
        start(["slurmctld", "-D", "-i"], "slurmctld")
        start(["slurmd", "-D", "-N", host], "slurmd")
        cluster = Cluster(d, env, procs, logs)
        state, deadline = "", time.monotonic() + 60
        while time.monotonic() < deadline:
            dead = [p.args[0] for p in procs if p.poll() is not None]
            if dead:
                pytest.fail(f"{', '.join(dead)} stopped while starting:\n{cluster.logs_text()}")
            state = cluster.run(["sinfo", "-h", "-N", "-o", "%T"]).stdout.strip()
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the Slurm node is {state or 'not listed'} after 60 s, not idle:\n{cluster.logs_text()}")
        yield cluster
    finally:
        for p in reversed(procs):  # slurmd, slurmctld, then munged: only the processes this fixture started
            if p.poll() is None:
                p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        shutil.rmtree(d, ignore_errors=True)


def _gpucourse() -> str:
    """The gpucourse command of the Python running the tests (its venv), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "gpucourse")
    return here if os.access(here, os.X_OK) else shutil.which("gpucourse") or "gpucourse"


def _rows(path) -> list:
    with open(path, newline="", encoding="utf-8") as f:
        return [(r["student"], r["points"], r["status"], r["message"]) for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def graded(slurm, tmp_path_factory):
    """The class graded twice: by the recipe as a Slurm job array of 3 shards and its merge job, and by one
    machine (one `gpucourse grade` of the whole class)."""
    base = tmp_path_factory.mktemp("class")
    course = base / "course"
    course.mkdir()
    for student, source in CLASS.items():
        shutil.copy(os.path.join(SUBMISSIONS, source), course / f"{student}.py")
    work = base / "grading"
    work.mkdir()
    # The graders inherit the environment (sbatch exports it), $GPUCOURSE_ISOLATION included: bubblewrap in CI.
    env = dict(slurm.env, GPUCOURSE=_gpucourse(), GRADE_ARGS="--jobs 1 --allow-process-isolation",
               MERGE_ARGS="--allow-process-isolation --points 10")
    # CPU mode: no GPU to ask for (--gres=none overrides the recipe's GPU line), and 1 CPU per shard.
    submitted = slurm.run(["sbatch", "--parsable", "--gres=none", "--cpus-per-task=1", RECIPE, "vector_add",
                           str(course)], cwd=work, env=env)
    assert submitted.returncode == 0, submitted.stderr + slurm.logs_text()
    array_id = submitted.stdout.strip().split(";")[0]
    merged = slurm.run(["sbatch", "--parsable", "--wait", f"--dependency=afterok:{array_id}", MERGE_JOB], cwd=work,
                       env=env, timeout=240)
    outs = "\n".join(f"--- {f}:\n{_tail(work / f)}" for f in sorted(os.listdir(work)) if f.endswith(".out"))
    assert merged.returncode == 0, f"{merged.stdout}{merged.stderr}\n{outs}\n{slurm.logs_text()}"
    one = subprocess.run([_gpucourse(), "grade", "vector_add", str(course), "--jobs", "2", "--points", "10",
                          "--allow-process-isolation", "--gradebook", str(base / "one.csv"), "--json",
                          str(base / "one.json")], env=env, capture_output=True, text=True, timeout=240)
    assert one.returncode == 0, one.stderr
    return {"work": work, "course": course, "one": base, "array_id": array_id, "outs": outs}


def test_the_job_array_ran_each_shard_as_a_task(graded):
    for k in range(N):
        log = graded["work"] / f"grade-{graded['array_id']}_{k}.out"
        assert log.exists(), graded["outs"]
        students = sum(1 for s in CLASS if shards.shard_of(s, N) == k)
        assert f"shard {k}/{N}: grades {students} of the class's {len(CLASS)} students" in log.read_text()


def test_every_student_landed_in_exactly_one_shard(graded):
    seen = []
    for k in range(N):
        report = json.loads((graded["work"] / "shards" / f"{k}.json").read_text())
        assert report["shard"]["k"] == k and report["shard"]["n"] == N
        mine = [e["student"] for e in report["entries"]]
        assert all(shards.shard_of(s, N) == k for s in mine), (k, mine)
        assert [os.path.basename(r["submission"]) for r in report["results"]] == [f"{s}.py" for s in mine]
        seen += mine
    assert sorted(seen) == sorted(CLASS)


def test_the_merged_gradebook_equals_one_machines(graded):
    merged, one = _rows(graded["work"] / "grades.csv"), _rows(graded["one"] / "one.csv")
    assert merged == one
    assert [r[0] for r in merged] == sorted(CLASS)  # a folder's students, in the one-machine order
    by = {r[0]: r for r in merged}
    assert by["ada"][1:3] == ("10", "passed") and by["grace"][1:3] == ("10", "passed")
    assert by["ken"][2] == "failed" and by["linus"][2] == "error" and by["edsger"][2] == "error"
    assert "modified its input" in by["ken"][3] and "does not define `vector_add`" in by["edsger"][3]
    assert (graded["work"] / "grades-summary.md").exists() and (graded["work"] / "leaderboard.html").exists()
    report = json.loads((graded["work"] / "merged.json").read_text())
    whole = json.loads((graded["one"] / "one.json").read_text())
    assert [(r["submission"], r["status"], r["message"]) for r in report["results"]] == \
        [(r["submission"], r["status"], r["message"]) for r in whole["results"]]
    assert [s["k"] for s in report["merged"]["shards"]] == list(range(N))
    assert report["isolation"]["level"] == whole["isolation"]["level"]
    if os.environ.get("GPUCOURSE_ISOLATION") == "bubblewrap":  # CI: the jobs' graders sandboxed too
        assert report["isolation"]["level"] == "bubblewrap"


def _merge(args, capsys) -> tuple:
    rc = merge.main([str(a) for a in args])
    return rc, capsys.readouterr().err


def test_the_merge_refuses_a_missing_shard_a_student_twice_and_another_exercise(graded, tmp_path, capsys):
    reports = [graded["work"] / "shards" / f"{k}.json" for k in range(N)]
    rc, err = _merge([*reports[:2], "--gradebook", tmp_path / "g.csv"], capsys)
    assert rc == 2 and "shard 2/3 missing: a merge needs all 3 shards' reports (given: 0/3, 1/3)" in err, err

    data = [json.loads(p.read_text()) for p in reports]
    data[0]["entries"].append(dict(data[1]["entries"][0], index=99))  # shard 1's first student, in shard 0 too
    twice = [tmp_path / f"twice-{k}.json" for k in range(N)]
    for p, d in zip(twice, data):
        p.write_text(json.dumps(d))
    rc, err = _merge(twice, capsys)
    student = data[1]["entries"][0]["student"]
    assert rc == 2 and f"student {student} is in two shards: {twice[0]} (shard 0/3) and {twice[1]} (shard 1/3)" \
        in err, err

    data = [json.loads(p.read_text()) for p in reports]
    data[2]["exercise"] = "softmax"
    other = [tmp_path / f"other-{k}.json" for k in range(N)]
    for p, d in zip(other, data):
        p.write_text(json.dumps(d))
    rc, err = _merge(other, capsys)
    assert rc == 2 and f"shards of different exercises: {other[0]} (shard 0/3) grades vector_add and {other[2]} " \
        f"(shard 2/3) grades softmax" in err, err
    assert not (tmp_path / "g.csv").exists()
