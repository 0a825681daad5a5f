"""Nsight Compute (``ncu``) from Python: find it, run a command under it with ``--csv --page raw`` and metrics or
sections, read its rows (one per profiled kernel), and say in one line why there are none (ncu missing, counters not
permitted, timed out, no kernel rows). Used by lesson 09 (its counters next to the clocks) and by ``gpucourse grade
--profile`` (grading/profile.py). Standard library only: the grader imports it without torch."""
from __future__ import annotations

import csv
import glob
import io
import os
import shutil
import subprocess

# Where an ncu that is not on PATH usually lives: the CUDA toolkit's bin/ (a wrapper, or the NsightCompute-<version>
# folder beside it) and the standalone installer's folder. Newest version first (sorted names, reversed).
SEARCH = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/usr/local/cuda-*/nsight-compute-*/ncu",
          "/usr/local/cuda-*/NsightCompute-*/ncu", "/opt/nvidia/nsight-compute/*/ncu")

MISSING = "ncu (Nsight Compute) is not installed here"
NOT_PERMITTED = "ERR_NVGPUCTRPERM: this GPU does not let this user read its performance counters"
# ncu's fixed columns of a raw-page row (the rest are metrics, named unit__counter...)
NOT_METRICS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
               "Grid Size", "Device", "CC")


def find() -> str | None:
    """The ncu executable: on PATH, next to nvcc, else in :data:`SEARCH`; None where there is none."""
    found = shutil.which("ncu")
    if found:
        return found
    try:
        from .cuda import tools

        found = tools.tool("ncu")
    except Exception:  # no toolkit found: the usual folders below
        found = None
    if found:
        return found
    for pattern in SEARCH:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return None


# Where Nsight Compute's .deb/.rpm packages install it (<version>/ folders); the toolkit's bin/ncu wrapper looks here
# first, then for <toolkit>/nsight-compute-<version> (a .run install): the H100 machine's CUDA image has the former.
PACKAGED = "/opt/nvidia/nsight-compute"


def install_dirs(exe: str) -> list:
    """The folders ``exe`` (an ncu) needs to run, for a sandbox to bind read-only: its own folder, and where it is a
    link or a wrapper in a ``bin/`` folder, the installation it belongs to (the folder above ``bin/``, holding
    ``nsight-compute-<version>/``, or the standalone version folder holding ``target/`` and ``sections/``); and where
    those ``nsight-compute-<version>`` entries are links, what they point to: NVIDIA's CUDA images install Nsight
    Compute under /opt/nvidia/nsight-compute/<version> and link it from the toolkit's folder, and the toolkit's
    ``bin/ncu`` wrapper, run in a sandbox without /opt, then says "nsight-compute directory is not found"."""
    out = []
    for path in dict.fromkeys((os.path.abspath(exe), os.path.realpath(exe))):
        folder = os.path.dirname(path)
        out.append(os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder)
    for prefix in list(out):
        for entry in sorted(glob.glob(os.path.join(prefix, "nsight-compute*"))):
            if os.path.isdir(entry):
                out.append(os.path.realpath(entry))
    if os.path.isdir(PACKAGED):
        out.append(PACKAGED)
    return list(dict.fromkeys(out))


def command(exe: str, target: list, metrics: tuple = (), sections: tuple = (), extra: tuple = ()) -> list:
    """``exe`` profiling ``target`` (an argv), its results as CSV of the raw page (every collected metric a column,
    one row per kernel): the ``metrics`` and ``sections`` asked for, ``extra`` options before the target."""
    cmd = [exe, "--csv", "--page", "raw"]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    for section in sections:
        cmd += ["--section", section]
    return cmd + list(extra) + list(target)


def outcome(returncode: int | None, stdout: str, stderr: str, metrics: tuple | None = None) -> dict:
    """{"ok", "why", "kernels"} from a finished ncu run: its rows (:func:`parse_csv`), or why there are none (counters
    not permitted; no kernel rows, with the end of what ncu said)."""
    text = stdout + stderr
    if "ERR_NVGPUCTRPERM" in text:
        return {"ok": False, "why": NOT_PERMITTED, "kernels": []}
    rows = parse_csv(stdout, metrics)
    if not rows:
        return {"ok": False, "why": f"ncu returned {returncode} and no kernel rows: {text.strip()[-300:]}",
                "kernels": []}
    return {"ok": True, "why": "", "kernels": rows}


def run(target: list, metrics: tuple = (), sections: tuple = (), extra: tuple = (), timeout: float = 180,
        keep: tuple | None = None) -> dict:
    """Run ``target`` (an argv) under ncu here (no sandbox) and return :func:`outcome`'s {"ok", "why", "kernels"};
    ``keep``: the metrics each row holds (default: every metric column). ``ok`` is False where ncu is missing,
    takes over ``timeout`` seconds, may not read the counters or profiles no kernel."""
    exe = find()
    if exe is None:
        return {"ok": False, "why": MISSING, "kernels": []}
    try:
        p = subprocess.run(command(exe, target, metrics, sections, extra), capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": timed_out(timeout), "kernels": []}
    return outcome(p.returncode, p.stdout, p.stderr, keep)


def timed_out(timeout: float) -> str:
    return f"ncu took over {timeout:g} s"


def parse_csv(text: str, metrics: tuple | None = None) -> list:
    """The kernel rows of ncu's ``--csv --page raw`` output ``text`` (its header row, then a units row, then one row
    per kernel; lines not starting with a quote, ncu's ``==PROF==`` notes, are skipped): [{"name", "units": {metric:
    unit}, metric: float or None}]. ``metrics``: those to keep (absent or unreadable: None); default every metric
    column (named ``unit__counter...``), values that are not numbers left out. Numbers may carry thousands commas."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 2:
        return []
    reader = list(csv.reader(io.StringIO("\n".join(lines))))
    has_units = len(reader) > 2 and reader[1] and not reader[1][0].isdigit()
    head, rows = reader[0], reader[2:] if has_units else reader[1:]
    units = dict(zip(head, reader[1])) if has_units else {}
    wanted = list(metrics) if metrics is not None else [h for h in head if h not in NOT_METRICS and "__" in h]
    out = []
    for r in rows:
        d = dict(zip(head, r))
        k = {"name": d.get("Kernel Name", "?"), "units": {m: units[m] for m in wanted if units.get(m)}}
        for m in wanted:
            value = number(d.get(m))
            if value is not None or metrics is not None:
                k[m] = value
        out.append(k)
    return out


def number(text) -> float | None:
    """A value of ncu's CSV as a float ("1,234.5" -> 1234.5); None for an empty or non-numeric cell."""
    try:
        return float(str(text).replace(",", "")) if text is not None else None
    except ValueError:
        return None


_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


def duration_us(kernel: dict, metric: str = "gpu__time_duration.sum") -> float | None:
    """A row's duration in microseconds, from ``metric`` and its unit (ncu scales units unless told
    ``--print-units base``: nsecond, usecond, msecond); nanoseconds where the row has no unit (raw page's base)."""
    v = kernel.get(metric)
    if v is None:
        return None
    unit = (kernel.get("units") or {}).get(metric, "nsecond").strip().lower()
    return v * _TO_US[unit] if unit in _TO_US else None
