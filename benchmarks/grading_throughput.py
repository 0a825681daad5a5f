"""Grading throughput: how many submissions per minute ``gpucourse grade --jobs J`` gets through.

It writes N distinct right submissions of an exercise (each a known right submission with a constant of its own in
the kernel source and, for CUDA, a build name of its own: no cache can serve one from another) plus a few exact
copies of the first ones, grades the folder with ``python3 -m gpucourse.cli grade EXERCISE FOLDER --jobs J --json``
and records submissions per minute (all of them over the batch's wall time), each one's seconds and verdict, the CPU
seconds by program, and from the grader's trace where each submission's seconds went (:func:`phase_summary`).

CUDA exercises (GPU mode) are graded once per build layout of ``gpucourse.cuda_build`` named by ``--layouts``
($GPUCOURSE_CUDA_BUILD: ``host``, ``split``, ``inline``), so the layouts are compared within one run. ``--phases``
first builds one submission in this process per layout and reads ninja's log: seconds per translation unit.

    # H100 (16 cores), CUDA, in the bubblewrap sandbox:
    python3 benchmarks/grading_throughput.py --exercise block_sum --distinct 28 --copies 4 --jobs 16 \\
        --isolation bubblewrap --layouts host --budget 300 --out benchmarks/results/h100-grading-throughput.json
    # CPU mode, Triton (TRITON_INTERPRET=1):
    python3 benchmarks/grading_throughput.py --exercise vector_add --distinct 30 --copies 3 --jobs 2 \\
        --out benchmarks/results/cpu-grading-throughput.json

Results are written after every step (a run cut short keeps what it measured).
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TEMPLATES = {  # exercise -> a right submission to vary
    # written as the workbook asks (its declarations), as a class's submissions are: the build links the binding
    # object the grader prepares for the exercise; right_atomic_per_block.py (its own names) compiles main.cpp too
    "block_sum": "tests/submissions/block_sum/right_workbook_declarations.py",
    "sum_many": "tests/submissions/sum_many/right_block_stride.py",
    "vector_add": "tests/submissions/vector_add/right_basic.py",
}


def vary(source: str, i: int) -> str:
    """Submission ``i``: the template with a constant of its own in the kernel source (and, for CUDA, its own build
    name), so it compiles to its own module."""
    if "cuda_build.build(" in source:
        out, n = re.subn(r'KERNELS = r"""\n', f'KERNELS = r"""\n__device__ int bench_submission_tag = {i};\n', source,
                         count=1)
        out, m = re.subn(r'cuda_build\.build\("(\w+)"', rf'cuda_build.build("\1_{i}"', out)
        assert n == 1 and m >= 1, "template: KERNELS or the build name not found"
        return out
    out, n = re.subn(r"(@triton\.jit\ndef \w+\([^)]*\):\n)(\s+)", rf"\1\2bench_submission_tag = {i}\n\2", source,
                     count=1)
    assert n == 1, "template: no @triton.jit kernel found"
    return out


def write_batch(folder: str, template: str, distinct: int, copies: int) -> list:
    with open(os.path.join(ROOT, template)) as f:
        source = f.read()
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(distinct):
        paths.append(os.path.join(folder, f"s{i:03d}.py"))
        with open(paths[-1], "w") as f:
            f.write(vary(source, i))
    for i in range(copies):  # exact copies of the first submissions
        paths.append(os.path.join(folder, f"s{i:03d}_copy.py"))
        shutil.copy(paths[i], paths[-1])
    return paths


# The grader's line per finished submission on stderr (grader._Progress): "[ 3/32] path  passed    1.00  (4.2 s)",
# the count padded to the total's width.
PROGRESS_LINE = re.compile(r"\s*\[\s*(\d+)/(\d+)\]\s+(\S+)\s+(\w+)")


def grade_batch(exercise: str, folder: str, jobs: int, timeout: float, isolation: str | None, env: dict,
                limit: float) -> dict:
    out = os.path.join(folder, "report.json")
    cmd = [sys.executable, "-m", "gpucourse.cli", "grade", exercise, folder, "--jobs", str(jobs), "--json", out,
           "--timeout", str(timeout)]
    if isolation:
        cmd += ["--isolation", isolation]
    cpu0 = cpu_counters()
    sampler = ProcSampler()
    t0 = time.perf_counter()
    # The grader prints "[k/N] path  status  score  (s)" on stderr as each submission finishes: kept with the
    # time it arrived, so a batch stopped at ``limit`` still says how far it got.
    done, err_tail = [], []
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                          start_new_session=True) as proc:
        def drain():
            for line in proc.stderr:
                err_tail.append(line)
                del err_tail[:-40]
                m = PROGRESS_LINE.match(line)
                if m:
                    done.append({"at_s": round(time.perf_counter() - t0, 1), "submission": os.path.basename(m[3]),
                                 "status": m[4]})

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
            reader.join(timeout=5)
            wall = time.perf_counter() - t0
            return {"error": f"stopped at the step's limit of {limit:.0f} s, {len(done)} submissions finished",
                    "wall_s": round(wall, 2), "finished": done,
                    "per_minute_so_far": round(len(done) / wall * 60, 1), "stderr": "".join(err_tail)[-2000:]}
        reader.join(timeout=5)
    wall = time.perf_counter() - t0
    cpu = cpu_used(cpu0, cpu_counters())
    cpu["by_program"] = sampler.stop()
    cpu["core_s"] = round(sum(v["core_s"] for v in cpu["by_program"].values()), 1)
    if not os.path.exists(out):
        return {"error": f"grade exited {proc.returncode} without a report", "stderr": "".join(err_tail)[-3000:],
                "wall_s": round(wall, 2)}
    with open(out) as f:
        report = json.load(f)
    results = report["results"]
    statuses = dict(collections.Counter(r["status"] for r in results))
    secs = sorted(r["seconds"] for r in results)
    bad = [{"submission": os.path.basename(r["submission"]), "status": r["status"], "message": r["message"][:400]}
           for r in results if r["status"] != "passed"]
    return {"submissions": len(results), "jobs": jobs, "wall_s": round(wall, 2),
            "per_minute": round(len(results) / wall * 60, 1), "statuses": statuses,
            "seconds_per_submission": {"min": secs[0], "median": secs[len(secs) // 2], "max": secs[-1]},
            "copies_seconds": [r["seconds"] for r in results if r["submission"].endswith("_copy.py")],
            "isolation": report.get("isolation"), "timing": sorted({r.get("timing", "") for r in results}),
            "not_passed": bad[:10], "exit_code": proc.returncode, "finished": done,
            "cpu": dict(cpu, per_submission_core_s=round(cpu["core_s"] / max(1, len(results)), 2))}


def cpu_counters() -> dict:
    """The machine's CPU time so far (/proc/stat: busy and all, in clock ticks)."""
    out = {"busy": None, "all": None}
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        out.update(busy=sum(fields) - idle, all=sum(fields))
    except (OSError, ValueError, IndexError):
        pass
    return out


class ProcSampler:
    """CPU seconds by program over a batch, read from /proc every ``every`` s: each process's user + system time (the
    last value seen; less what it had used before the sampler started), summed by what it runs (python's workers told
    apart by their command line). A process shorter than ``every`` may be missed: compilers and workers run longer."""

    def __init__(self, every: float = 0.2):
        self.every, self.seen, self.base, self.kind = every, {}, {}, {}
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.done = threading.Event()
        self._read(first=True)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _read(self, first: bool = False) -> None:
        try:
            pids = [p for p in os.listdir("/proc") if p.isdigit()]
        except OSError:
            return
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    text = f.read()
            except OSError:
                continue
            comm = text[text.index("(") + 1:text.rindex(")")]
            rest = text[text.rindex(")") + 2:].split()
            key = (pid, rest[19])  # pid and start time: a reused pid is another process
            used = (int(rest[11]) + int(rest[12])) / self.tick
            if first:
                self.base[key] = used
            if key not in self.kind:
                self.kind[key] = self._kind(pid, comm)
            self.seen[key] = used

    @staticmethod
    def _kind(pid: str, comm: str) -> str:
        if not comm.startswith("python") and comm not in ("cc1plus", "cc1"):
            return comm
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            return comm
        if not comm.startswith("python"):  # the compiler's input file: nvcc's own passes read tmpxft_* files
            files = [os.path.basename(a) for a in args[1:] if re.search(r"\.(cpp|cu|c|ii|i|h)$", a)]
            name = files[0] if files else "?"
            return f"{comm} {'(nvcc pass)' if name.startswith('tmpxft') else name}" + (" -E" if "-E" in args else "")
        for a in args[1:]:
            if a == "-c":
                return "python -c"
            if a.startswith("gpucourse") or "worker" in a or a.endswith(".py"):
                return f"python {os.path.basename(a)}"
        return "python " + " ".join(args[1:3])[:40]

    def _run(self) -> None:
        while not self.done.wait(self.every):
            self._read()

    def stop(self) -> dict:
        self.done.set()
        self.thread.join(timeout=5)
        self._read()
        by: dict = {}
        for key, used in self.seen.items():
            extra = used - self.base.get(key, 0.0)
            if extra > 0:
                k = self.kind[key]
                n, s = by.get(k, (0, 0.0))
                by[k] = (n + (key not in self.base), s + extra)
        top = sorted(by.items(), key=lambda kv: -kv[1][1])
        return {k: {"processes": n, "core_s": round(s, 1)} for k, (n, s) in top if s >= 0.05}


def cpu_used(before: dict, after: dict) -> dict:
    """``busy``: the fraction of the machine's cores busy during the batch (anything running counts; needs /proc/stat).
    Near 1, the batch is CPU bound: only fewer CPU seconds per submission (:class:`ProcSampler`) make it faster."""
    res = {"busy": None}
    if before["all"] is not None and after["all"] is not None and after["all"] > before["all"]:
        res["busy"] = round((after["busy"] - before["busy"]) / (after["all"] - before["all"]), 3)
    return res


PHASES = ("prebuild", "queued", "startup", "draw", "wait_shared", "cases", "perf_draw", "wait_exclusive", "timing",
          "rest")


def phase_summary(lines) -> dict:
    """Where each submission's seconds went, from the grader's trace ($GPUCOURSE_GRADE_TRACE, a JSON object a line):
    ``prebuild`` (the CUDA compile, in a worker that sees no GPU), ``queued`` (waiting for a grading slot), ``startup``
    (the graded worker's start and imports), ``draw``/``perf_draw`` (drawing the cases'/the timing's inputs),
    ``wait_shared``/``wait_exclusive`` (waiting for the GPU lock), ``cases`` (run under the shared lock), ``timing``
    (the exclusive hold) and ``rest``. Returns the median of each, the sum of ``timing`` (a floor on the batch's wall
    time), ``slot_wait_s`` (a free slot waiting for its prebuild), ``rounds`` (exclusive holds shared by timings)."""
    by: dict = {}
    for line in lines:
        if line.strip():
            e = json.loads(line)
            by.setdefault(e["submission"], []).append(e)
    per, slot_waits, rounds = [], [], {}
    for events in by.values():
        events.sort(key=lambda e: e["t"])
        first = {}
        for e in events:
            first.setdefault(e["event"], e["t"])
            if e["event"] == "waited" and e.get("exclusive") and "round" in e:
                key = (e.get("gpu"), e["round"])
                rounds[key] = rounds.get(key, 0) + 1
        if "start" not in first or "end" not in first:
            continue
        ph = dict.fromkeys(PHASES, 0.0)
        start, end = first["start"], first["end"]
        prebuilt = first.get("prebuilt", start)
        began = max(first["slot"], prebuilt) if "slot" in first else prebuilt  # the graded worker's start
        ph["prebuild"] = prebuilt - start
        ph["queued"] = began - prebuilt
        ph["startup"] = first.get("ready", began) - began
        if "slot" in first:
            slot_waits.append(max(0.0, prebuilt - first["slot"]))
        prev, held_from = first.get("ready", start), None
        for e in events:
            if e["event"] == "drawn":
                ph["draw"] += e["t"] - prev
            elif e["event"] == "perf_drawn":
                ph["perf_draw"] += e["t"] - prev
            elif e["event"] == "waited":
                ph["wait_exclusive" if e["exclusive"] else "wait_shared"] += e["seconds"]
                held_from = e["t"]
            elif e["event"] == "released" and held_from is not None:
                ph["timing" if e["exclusive"] else "cases"] += e["t"] - held_from
                held_from = None
            if e["event"] in ("ready", "drawn", "perf_drawn", "released"):
                prev = e["t"]
        ph["rest"] = (end - start) - sum(v for k, v in ph.items() if k != "rest")
        per.append(ph)
    if not per:
        return {"traced": 0}
    median = {k: round(sorted(p[k] for p in per)[len(per) // 2], 3) for k in PHASES}
    out = {"traced": len(per), "median_s": median, "timing_sum_s": round(sum(p["timing"] for p in per), 2),
           "note": "per submission; 'timing' is held alone on the GPU, so the batch's wall time is at least its sum"}
    if slot_waits:
        out["slot_wait_s"] = {"median": round(sorted(slot_waits)[len(slot_waits) // 2], 3),
                              "sum": round(sum(slot_waits), 2), "max": round(max(slot_waits), 3)}
    if rounds:
        out["rounds"] = {"count": len(rounds), "timings": sum(rounds.values()), "largest": max(rounds.values())}
    return out


def ninja_phases(build_dir: str) -> dict:
    """Seconds per target from ninja's log (start and end in ms)."""
    out = {}
    with open(os.path.join(build_dir, ".ninja_log")) as f:
        for line in f:
            parts = line.split("\t")
            if len(parts) >= 4 and not line.startswith("#"):
                out[parts[3]] = round((int(parts[1]) - int(parts[0])) / 1000, 2)
    return out


def build_phases(template: str, layout: str) -> dict:
    """One cold build of the template's extension in this process under ``layout``, in a fresh cache: wall seconds,
    seconds per translation unit, and a check that the module sums right."""
    import torch

    from gpucourse import cuda_build

    cache = tempfile.mkdtemp(prefix=f"gpucourse-phases-{layout}-")
    old = {k: os.environ.get(k) for k in ("GPUCOURSE_CACHE", cuda_build.BUILD_ENV, cuda_build.SHARED_ENV)}
    # a fresh cache, and the precompiled header prepared above, as a grading worker gets them
    os.environ.update({**cuda_build.worker_env(), "GPUCOURSE_CACHE": cache, cuda_build.BUILD_ENV: layout})
    try:
        ns: dict = {}
        with open(os.path.join(ROOT, template)) as f:
            exec(compile(vary(f.read(), 10_000 + len(layout)), template, "exec"), ns)
        cuda_build.forget_loaded()
        name = f"phases_{layout}"
        t0 = time.perf_counter()
        part = {end: next(v for k, v in ns.items() if k.endswith(end) and isinstance(v, str))
                for end in ("KERNELS", "BINDING", "CPP")}  # KERNELS or BLOCK_SUM_KERNELS (the workbook's names)
        fname = part["CPP"].split("(")[0].split()[-1]
        mod = cuda_build.build(name, part["KERNELS"], part["BINDING"], part["CPP"], [fname])
        wall = time.perf_counter() - t0
        x = torch.rand(1_000_003, device="cuda") - 0.25
        fn = getattr(mod, fname)
        got, want = float(fn(x)), float(x.double().sum())
        build_dir = max(glob.glob(os.path.join(cache, "cuda", f"{name}_*")), key=os.path.getmtime)
        return {"layout": getattr(mod, "build_layout", layout), "wall_s": round(wall, 2),
                "targets_s": ninja_phases(build_dir), "sum_ok": abs(got - want) <= 1e-4 * abs(want)}
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        cuda_build.forget_loaded()
        shutil.rmtree(cache, ignore_errors=True)


def worker_probe(isolation: str | None) -> dict:
    """What a grading worker finds, started as the grader starts one (its sandbox, its environment): the
    precompiled header it would include, and whether it can write there (it must not)."""
    from gpucourse import device
    from gpucourse.grading import grader, sandbox

    iso = sandbox.detect(isolation)
    code = ("import json, os; from gpucourse import cuda_build as c; h = c.shared_header(); "
            "print(json.dumps({'header': h, 'layout': c.build_layout(), "
            "'writable': bool(h) and os.access(os.path.dirname(h), os.W_OK)}))")
    tmp = tempfile.mkdtemp(prefix="gpucourse-probe-")
    try:
        argv = [sys.executable, "-c", code]
        if iso.sandboxed:
            argv = sandbox.command(iso, argv, tmp, None, device.on_gpu())
            env = grader._worker_env(None, sandbox.INSIDE_TMP)
        else:
            env = grader._worker_env(None, tmp)
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=env, timeout=120)
        try:
            seen = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            seen = {"error": (proc.stderr or proc.stdout)[-1500:]}
        return dict(seen, isolation=iso.level)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exercise", default="block_sum", choices=sorted(TEMPLATES))
    ap.add_argument("--template", default=None, help="a right submission to vary (default: TEMPLATES[exercise])")
    ap.add_argument("--distinct", type=int, default=32)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=300.0, help="per submission (the grader's --timeout)")
    ap.add_argument("--isolation", choices=("auto", "bubblewrap", "process"), default=None)
    build_layouts = ("host", "split", "inline")
    ap.add_argument("--layouts", nargs="+", default=["host", "split"], choices=build_layouts, help="in order")
    ap.add_argument("--inline-distinct", type=int, default=None, help="--distinct for the (slow) inline batch")
    ap.add_argument("--inline-jobs", type=int, default=None, help="--jobs for the inline batch (default --jobs)")
    ap.add_argument("--phases", nargs="*", default=[], choices=build_layouts, help="layouts to time one build of (GPU)")
    ap.add_argument("--prebuild-jobs", type=int, default=None, help="CUDA compiles at once ahead of the grading "
                    "slots ($GPUCOURSE_PREBUILD_JOBS for the grader; its default is --jobs)")
    ap.add_argument("--env", nargs="*", default=[], metavar="NAME=VALUE", help="set in the grade command's environment")
    ap.add_argument("--budget", type=float, default=3600.0, help="seconds: skip steps once this much has passed")
    ap.add_argument("--out", default=None, help="JSON results path")
    args = ap.parse_args(argv)
    start = time.perf_counter()

    from gpucourse import cuda_build, device, env
    from gpucourse.grading import grader
    from gpucourse.grading.exercise import get

    ex = get(args.exercise)
    cuda = ex.kind == "cuda"
    template = args.template or TEMPLATES[args.exercise]
    record = {"exercise": args.exercise, "template": template, "mode": device.mode(),
              "cpus": os.cpu_count(), "machine": platform.machine(), "environment": env.versions(),
              "command": " ".join(sys.argv), "steps": {}}

    def save():
        text = json.dumps(record, indent=2) + "\n"
        print(text if args.out is None else f"(results so far in {args.out})", flush=True)
        if args.out:
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            with open(args.out, "w") as f:
                f.write(text)

    def left() -> float:
        return args.budget - (time.perf_counter() - start)

    from gpucourse.grading import pycache

    def prepare(step: str, make, note: str, status=dict) -> None:
        """Time one of the grader's once-per-machine preparations; ``status()`` is read after it."""
        t0 = time.perf_counter()
        made = make()
        record["steps"][step] = dict(status(), seconds=round(time.perf_counter() - t0, 2), prepared=made is not None,
                                     note=note)

    prepare("prepare_pycache", pycache.prepare, "bytecode for the workers where the installed packages have none: once "
            "per machine and set of packages, kept in the grader's cache, so the batch below finds it ready",
            pycache.status)
    if cuda and device.on_gpu():
        prepare("prepare_shared", cuda_build.prepare_shared, "once per machine, compiler and torch; kept in the "
                "grader's cache, so later batches find it ready")
        if ex.cuda_binding:  # the exercise's pybind11 module: once per machine and exercise, as the header
            prepare("prepare_binding", lambda: cuda_build.prepare_binding(*ex.cuda_binding), "once per machine and "
                    "exercise, kept in the grader's cache: the batch below finds it ready")
        record["steps"]["worker_sees"] = worker_probe(args.isolation)
        save()
        for layout in args.phases:
            if left() < 60:
                record["steps"][f"phases_{layout}"] = "skipped: budget"
                continue
            record["steps"][f"phases_{layout}"] = build_phases(template, layout)
            save()
    layouts = args.layouts if cuda else ["-"]
    work = tempfile.mkdtemp(prefix="gpucourse-throughput-")
    try:
        for layout in layouts:
            inline = layout == "inline"
            distinct = args.inline_distinct if inline and args.inline_distinct else args.distinct
            jobs = args.inline_jobs if inline and args.inline_jobs else args.jobs
            if left() < 30:
                record["steps"][f"grade_{layout}"] = "skipped: budget"
                continue
            folder = os.path.join(work, layout.strip("-") or "batch")
            copies = min(args.copies, distinct)
            write_batch(folder, template, distinct, copies)
            run_env = dict(os.environ)
            if cuda:
                run_env[cuda_build.BUILD_ENV] = layout
            for item in args.env:
                name, sep, value = item.partition("=")
                if not sep or not name:
                    ap.error(f"--env {item!r}: expected NAME=VALUE")
                run_env[name] = value
            if args.prebuild_jobs:
                run_env[grader.PREBUILD_JOBS_ENV] = str(args.prebuild_jobs)
            trace = os.path.join(work, f"trace-{layout.strip('-') or 'batch'}.jsonl")
            run_env[grader.TRACE_ENV] = trace
            load_before = os.getloadavg()
            res = grade_batch(args.exercise, folder, jobs, args.timeout, args.isolation, run_env, max(30, left()))
            if os.path.exists(trace):
                with open(trace) as f:
                    res["phases"] = phase_summary(f)
            # other users of the machine's cores show here (the 1-minute load average counts this batch too)
            res["load_average_1m"] = {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)}
            res.update(distinct=distinct, copies=copies, layout=layout if cuda else None,
                       prebuild_jobs=(args.prebuild_jobs or jobs) if cuda and device.on_gpu() else None,
                       env=list(args.env))
            record["steps"][f"grade_{layout}" if cuda else "grade"] = res
            save()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    record["seconds"] = round(time.perf_counter() - start, 1)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
