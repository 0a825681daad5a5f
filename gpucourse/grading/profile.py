"""``gpucourse grade --profile``: after a batch is graded, each submission that passed an exercise with a timed GPU
case runs that case once more under Nsight Compute, and its report entry, feedback page and a line on stderr get a
short summary per kernel: duration, DRAM and SM throughput, achieved occupancy, registers, the top stall reasons.

How a submission is profiled (:func:`profile_one`): staged again as for grading (staging.prepare: a private folder,
a CUDA submission compiled first by a worker that sees no GPU), then ``ncu ... python -m gpucourse.grading.profile``
(:func:`main`, the target) runs in the same bubblewrap sandbox as its graded worker where the batch had one (ncu's
own folders bound read-only: ncu.install_dirs), with a time limit, holding its GPU's lock exclusive (gpulock.py), so
it never overlaps a timing or a case of another grader. The target loads the submission as the worker does, draws
the timed step's inputs and makes its first call (compiles, first allocations: check_perf.prepare_perf), then calls
it once between ``torch.cuda.profiler.start()`` and ``stop()``; ncu runs with ``--profile-from-start off``, so only
that call's kernels are profiled, and ``--target-processes all``, so kernels of a child process are too.

The profile is information, never the verdict, and like the timing it is the submission's to forge (it runs in the
profiled process): it changes no status, score or rank. Where profiling cannot run (CPU mode, an exercise without a
timed GPU case, ncu missing, counters not permitted: ERR_NVGPUCTRPERM) one line says so, on stderr and in the report
(its "profile": {"profiled", "why"}); grading is unaffected.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading

from .. import ncu

# The metrics asked for by name (each also read by lesson 09 on the H100; present in Nsight Compute 2019.5-2025.x):
DURATION = "gpu__time_duration.sum"  # the kernel's duration
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"  # DRAM throughput, % of peak (SpeedOfLight's)
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"  # compute (SM) throughput, % of peak (SpeedOfLight's)
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"  # achieved occupancy, % (Occupancy section's)
REGISTERS = "launch__registers_per_thread"  # registers per thread (LaunchStats')
METRICS = (DURATION, DRAM, SM, OCCUPANCY, REGISTERS)
# The stall reasons come from the WarpStateStats section, whose metric names changed across versions: its own, found
# by pattern in the rows rather than asked for by name (a name ncu does not know fails the whole run). In order of
# preference: warp cycles per issued instruction spent in each state,
# smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio (Nsight Compute 2019.5 to 2025.x), or
# smsp__average_warp_latency_issue_stalled_<reason>(.ratio), its newer spelling; else the sampled counts of the
# SourceCounters section, smsp__pcsamp_warps_issue_stalled_<reason>.
SECTIONS = ("WarpStateStats",)
STALLS = ((re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio"),
           "warp cycles per issued instruction"),
          (re.compile(r"smsp__average_warp_latency_issue_stalled_(\w+?)(?:\.ratio)?"),
           "warp cycles per issued instruction"),
          (re.compile(r"smsp__pcsamp_warps_issue_stalled_(\w+)"), "samples"))
NOT_STALLS = ("selected",)  # a warp "selected" was issuing: the cycle every instruction needs, not a stall
OPTIONS = ("--profile-from-start", "off", "--target-processes", "all", "--print-units", "base")
TOP_KERNELS = 3
TOP_STALLS = 3
NAME_CHARS = 120  # a kernel's name as shown (a C++ template's can be thousands of characters)
OUTPUT_BYTES = 8 << 20  # what is read of ncu's stdout and stderr (the rest is dropped)
MARK = "gpucourse-profile: "  # the target's own line on stderr: why the timed call did not run
MIN_SECONDS = 180.0  # the time limit of a profile run: ncu replays each kernel, so well over the timing's


def summarize(rows: list) -> list:
    """The :data:`TOP_KERNELS` longest kernels of ncu's rows (ncu.parse_csv), longest first: {"name",
    "duration_us", "dram_pct", "sm_pct", "occupancy_pct", "registers", "stalls": [{"reason", "value"}],
    "stall_unit"} (a number ncu did not give is None)."""
    out = []
    for k in rows:
        stalls, unit = stall_reasons(k)
        out.append({"name": str(k.get("name", "?"))[:NAME_CHARS], "duration_us": ncu.duration_us(k, DURATION),
                    "dram_pct": k.get(DRAM), "sm_pct": k.get(SM), "occupancy_pct": k.get(OCCUPANCY),
                    "registers": k.get(REGISTERS), "stalls": stalls[:TOP_STALLS], "stall_unit": unit})
    out.sort(key=lambda d: -(d["duration_us"] or 0.0))
    return out[:TOP_KERNELS]


def stall_reasons(row: dict) -> tuple:
    """([{"reason", "value"}], unit): a row's warp stall reasons, largest first, from the first family of
    :data:`STALLS` it holds (zero values, "selected" and the ``_not_issued`` variants left out)."""
    for pattern, unit in STALLS:
        found = {}
        for key, value in row.items():
            m = pattern.fullmatch(key) if isinstance(key, str) else None
            if m is None or not isinstance(value, float):
                continue
            reason = m.group(1)
            if reason in NOT_STALLS or reason.endswith("_not_issued") or value <= 0:
                continue
            found[reason] = value
        if found or any(isinstance(k, str) and pattern.fullmatch(k) for k in row):
            ordered = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
            return [{"reason": r, "value": v} for r, v in ordered], unit
    return [], ""


def _fmt(value, spec: str, suffix: str = "") -> str:
    return "?" if value is None else f"{value:{spec}}{suffix}"


def kernel_text(k: dict) -> str:
    """One kernel's summary in a line: "name: 12.3 us, DRAM 85%, SM 20%, occupancy 78%, 16 registers, stalls:
    long_scoreboard 5.1, wait 1.2"."""
    stalls = ", ".join(f"{s['reason']} {s['value']:.3g}" for s in k.get("stalls") or []) or "none reported"
    return (f"{k['name']}: {_fmt(k.get('duration_us'), ',.1f', ' us')}, DRAM {_fmt(k.get('dram_pct'), '.0f', '%')}, "
            f"SM {_fmt(k.get('sm_pct'), '.0f', '%')}, occupancy {_fmt(k.get('occupancy_pct'), '.0f', '%')}, "
            f"{_fmt(k.get('registers'), '.0f')} registers, stalls: {stalls}")


def line(submission: str, profile: dict) -> str:
    """The stderr line of one profiled submission: its longest kernel's summary, and how many others ran."""
    from .gradebook import printable

    if not profile.get("ok"):
        return f"profile: {printable(submission)}: not profiled: {printable(profile.get('why', '?'))}"
    kernels = profile.get("kernels") or []
    more = profile.get("launched", len(kernels)) - 1
    return (f"profile: {printable(submission)}: {printable(kernel_text(kernels[0]))}"
            + (f" (+{more} more kernel{'s' if more != 1 else ''})" if more > 0 else ""))


def unavailable(ex, on_gpu: bool | None = None) -> str:
    """Why no submission of ``ex`` can be profiled on this machine ("" where it can, ncu aside)."""
    from .. import device

    if not (device.on_gpu() if on_gpu is None else on_gpu):
        return "there is no GPU (CPU mode): Nsight Compute profiles GPU kernels"
    if ex.perf is None:
        return f"exercise {ex.id} has no timed GPU case"
    return ""


def profile_batch(ex, report: dict, isolation, timeout: float | None = None, say=None) -> dict:
    """Profile each submission of ``report`` (grader.grade's) that passed: its entry gets "profile" ({"ok": True,
    "kernels": summarize's, "launched": kernels profiled} or {"ok": False, "why"}), and a line on stderr. The report
    gets "profile": {"profiled": n, "why": ""}, or why none could be (one line). Returns that."""
    say = say or _say
    passed = [r for r in report["results"] if r.get("status") == "passed"]
    why = unavailable(ex)
    exe = None
    if not why and not passed:
        why = "no submission passed"
    if not why:
        exe = ncu.find()
        if exe is None:
            why = (f"{ncu.MISSING} (not on PATH, beside nvcc or in {', '.join(ncu.SEARCH)}; it comes with the CUDA "
                   f"toolkit or NVIDIA's Nsight Compute installer)")
    if why:
        report["profile"] = {"profiled": 0, "why": why}
        say(f"profile: not profiled: {why}")
        return report["profile"]
    limit = max(3 * (timeout or 0.0), MIN_SECONDS)
    done = 0
    for r in passed:
        try:
            prof = profile_one(ex, r["submission"], exe, isolation, limit)
        except Exception as exc:  # a bug or the machine: said, and the grades stand as they are
            prof = {"ok": False, "why": f"the profile run failed (not the submission's fault): {exc!r}"[:400]}
        # The machine's setting, the same for every submission: said once. (After a profile that worked, it is this
        # submission's run alone, e.g. a line it wrote into ncu's output: kept in its entry.)
        if not prof["ok"] and prof["why"] == ncu.NOT_PERMITTED and not done:
            why = (f"{ncu.NOT_PERMITTED} (an administrator allows it: `modprobe nvidia NVreg_RestrictProfilingToAdmin"
                   f"Users=0`, see NVIDIA's ERR_NVGPUCTRPERM page)")
            report["profile"] = {"profiled": done, "why": why}
            say(f"profile: not profiled: {why}")
            return report["profile"]
        r["profile"] = prof
        done += bool(prof["ok"])
        say(line(r["submission"], prof))
    failed = [r["profile"]["why"] for r in passed if not r["profile"]["ok"]]
    report["profile"] = {"profiled": done, "why": f"none of the {len(passed)} profiled; the first said: {failed[0]}"
                         if failed and not done else ""}
    if report["profile"]["why"]:
        say(f"profile: not profiled: {report['profile']['why']}")
    return report["profile"]


def _say(text: str) -> None:
    print(f"gpucourse grade: {text}", file=sys.stderr, flush=True)


class _Drain:
    """Reads a pipe in a thread, keeping its first OUTPUT_BYTES."""

    def __init__(self, stream):
        self.data = bytearray()
        self.thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.thread.start()

    def _run(self, stream):
        try:
            while chunk := stream.read1(1 << 16):
                room = OUTPUT_BYTES - len(self.data)
                if room > 0:
                    self.data += chunk[:room]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        self.thread.join(timeout=5)
        return bytes(self.data).decode(errors="replace")


def profile_command(ex, exe: str, st, isolation) -> tuple:
    """(argv, env) of the profile run of the staged submission ``st`` (staging.Prepared): ncu around the target
    (:func:`main`), in the sandbox where ``isolation`` has one, with ncu's folders bound read-only there."""
    from . import process, sandbox, staging

    inside = isolation.sandboxed
    seen_as = sandbox.inside_path(st.staged) if inside else os.path.abspath(st.staged)
    target = [sys.executable, "-m", "gpucourse.grading.profile", "--exercise", ex.id, "--submission", seen_as,
              "--fsize-mb", str(process.FSIZE_MB)]
    argv = ncu.command(exe, target, METRICS, SECTIONS, OPTIONS)
    env = process.worker_env(None, sandbox.INSIDE_TMP if inside else st.tmp)
    if staging.needs_prebuild(ex):  # built for this GPU by its prebuild: the same build key here
        env.update(process.build_env())
    if inside:
        argv = sandbox.command(isolation, argv, st.tmp, st.staged, True, tools=tuple(ncu.install_dirs(exe)))
    return argv, env


def profile_one(ex, path: str, exe: str, isolation, limit: float) -> dict:
    """Profile one passing submission's timed call (see the module's text): {"ok": True, "kernels", "launched"} or
    {"ok": False, "why"}."""
    from . import gpulock, process, staging
    from .batch import gpu_index

    st = staging.prepare(ex, path, limit, isolation)
    if st.result is not None:
        return {"ok": False, "why": st.result.message}
    proc = None
    try:
        argv, env = profile_command(ex, exe, st, isolation)
        with gpulock.for_gpu(gpu_index(None)).exclusive():
            proc = subprocess.Popen(argv, cwd=st.tmp, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
            out, err = _Drain(proc.stdout), _Drain(proc.stderr)
            try:
                code = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                return {"ok": False, "why": ncu.timed_out(limit)}
            finally:
                process.kill_group(proc)
        return outcome(code, out.text(), err.text())
    finally:
        st.discard()


def outcome(code, stdout: str, stderr: str) -> dict:
    """A profile run's result from ncu's exit status and output: the summary, or why there is none (the target's
    own line where it said why the timed call did not run)."""
    got = ncu.outcome(code, stdout, stderr)
    if got["ok"]:
        return {"ok": True, "kernels": summarize(got["kernels"]), "launched": len(got["kernels"])}
    said = [ln[len(MARK):].strip() for ln in stderr.splitlines() if ln.startswith(MARK)]
    if said and got["why"] != ncu.NOT_PERMITTED:
        return {"ok": False, "why": f"the timed call did not run under ncu: {said[-1][:300]}"}
    return {"ok": False, "why": got["why"]}


# ---------------------------------------------------------------------------------------------------------------------
# The target, run under ncu (in the sandbox): ``python -m gpucourse.grading.profile --exercise ID --submission PATH``.


def main(argv=None) -> int:
    """Load the submission, make the timed step's first call, then call it once between the CUDA profiler's start
    and stop. What the submission prints goes nowhere (ncu's CSV is on stdout); this program's own failure is one
    line on the original stderr, starting with :data:`MARK`. Exit status 0 once the call ran, 3 otherwise."""
    ap = argparse.ArgumentParser(prog="python -m gpucourse.grading.profile")
    ap.add_argument("--exercise", required=True)
    ap.add_argument("--submission", required=True)
    ap.add_argument("--fsize-mb", type=int, default=256)
    args = ap.parse_args(argv)
    from . import worker

    worker._limit(0, args.fsize_mb, limit_address_space=False)
    said = os.dup(2)
    os.set_inheritable(said, False)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    write = os.write

    def fail(text: str) -> int:
        write(said, f"{MARK}{text}".replace("\n", " ")[:400].encode(errors="replace") + b"\n")
        return 3

    import gpucourse  # noqa: F401  (selects the mode before triton is imported)
    import torch

    from . import check_perf
    from .exercise import get

    ex = get(args.exercise)
    path = args.submission
    try:
        source, filename = worker.submission_source(path)
        module = type(sys)("submission")
        module.__file__ = filename
        module.__dict__["display"] = worker._display
        module.__dict__["get_ipython"] = worker.NoIPython
        sys.modules["submission"] = module
        exec(compile(source, filename, "exec"), module.__dict__)
        fn = module.__dict__.get(ex.function)
        if not callable(fn):
            return fail(f"the submission does not define {ex.function}")
        prepared = check_perf.prepare_perf(ex, fn, check_perf.draw_perf(ex))  # the first call: compiles, allocations
        if prepared is None:
            return fail("no timed step here (CPU mode, or no speed target)")
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        try:
            fn(*prepared["args"])
            torch.cuda.synchronize()
        finally:
            torch.cuda.profiler.stop()
    except BaseException as exc:  # noqa: BLE001 - whatever the submission raised, said in one line
        return fail(f"raised {type(exc).__name__}: {str(exc)[:200]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
