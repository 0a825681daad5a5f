#!/usr/bin/env python3
"""The GPU suite: on a machine with a CUDA GPU, run everything that CI (no GPU) cannot, in one go.

1. `gpucourse doctor --measure`          -> benchmarks/results/<gpu>-doctor.txt
2. the test suite, `gpu` tests included   -> benchmarks/results/<gpu>-pytest.txt
3. every notebook executed on the GPU     -> executed in place (lessons keep these outputs when committed)
4. every registered benchmark             -> benchmarks/results/<gpu>.json (merged: other entries stay)
   Lessons that measure a benchmark in their own cells record it there too (gpucourse.benchmarks.record), so
   ``--skip-benchmarks`` with the lessons still refreshes their entries.

Usage: python benchmarks/gpu_suite.py [--skip-tests] [--skip-notebooks] [--notebooks GLOB ...] [--archive PATH]
``--archive`` also packs every file the suite wrote into one .tar.gz (handy when the GPU machine is remote).
Exit status: non-zero if the tests failed, a notebook raised, or a benchmark errored.
"""
from __future__ import annotations

import argparse
import glob
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def slug() -> str:
    import gpucourse
    from gpucourse import specs

    spec = specs.current()
    if spec is None:
        name = gpucourse.props().name
        return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return spec.key.lower().replace("-sxm", "")


def step(title: str) -> float:
    print(f"\n=== {title}", flush=True)
    return time.perf_counter()


def run_tests(tag: str, pytest_args: list) -> tuple:
    t0 = step("tests: pytest " + " ".join(pytest_args))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *pytest_args]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    log = f"$ pytest {' '.join(cmd[3:])}   (exit code {out.returncode})\n" + out.stdout + out.stderr
    path = RESULTS / f"{tag}-pytest.txt"
    path.write_text(log)
    print("\n".join(log.strip().splitlines()[-15:]))
    print(f"[{time.perf_counter() - t0:.0f} s] -> {path.relative_to(ROOT)}")
    return out.returncode == 0, [path]


def _strip_paths(nb) -> None:
    """Committed outputs must not hold this machine's paths (tracebacks, warnings)."""
    pattern = re.compile(r"(/[\w.+-]+)+/(site-packages|dist-packages)/")
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            for key in ("text",):
                if key in output:
                    output[key] = pattern.sub("<site-packages>/", output[key])
                    output[key] = output[key].replace(str(ROOT), "<repo>")


def run_notebooks(pattern: str, saved=lambda path: None) -> tuple:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    t0 = step("notebooks")
    paths = sorted(p for p in glob.glob(str(ROOT / pattern)) if "/.ipynb_checkpoints/" not in p)
    ok, written, timings = True, [], {}
    for p in paths:
        rel = os.path.relpath(p, ROOT)
        nb = nbformat.read(p, as_version=4)
        client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": ROOT}})
        t = time.perf_counter()
        try:
            client.execute()
            status = "ok"
        except CellExecutionError as e:
            ok, status = False, "FAILED: " + str(e).strip().splitlines()[-1][:300]
        timings[rel] = round(time.perf_counter() - t, 1)
        print(f"  {rel}: {status} ({timings[rel]} s)", flush=True)
        if rel.startswith("exercises/"):
            continue  # exercises ship without outputs; executing them only proves they run
        _strip_paths(nb)
        nbformat.write(nb, p)
        written.append(Path(p))
        saved(Path(p))  # archived at once: a run cut short keeps the notebooks already done
    print(f"[{time.perf_counter() - t0:.0f} s]")
    return ok, written, timings


def run_doctor(tag: str) -> list:
    t0 = step("doctor --measure")
    out = subprocess.run([sys.executable, "-m", "gpucourse.cli", "doctor", "--measure"], cwd=ROOT,
                         capture_output=True, text=True)
    path = RESULTS / f"{tag}-doctor.txt"
    path.write_text(out.stdout + out.stderr)
    print(out.stdout + out.stderr)
    print(f"[{time.perf_counter() - t0:.0f} s]")
    return [path]


def run_grader(tag: str, exercise: str) -> tuple:
    """Grade every known submission for ``exercise`` on this GPU; the JSON shows each one's status and speed."""
    t0 = step(f"grader: tests/submissions/{exercise}")
    path = RESULTS / f"{tag}-grade-{exercise}.json"
    subs = sorted(glob.glob(f"tests/submissions/{exercise}/*", root_dir=ROOT))  # relative: no machine paths
    out = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", exercise, *subs, "--jobs", "4",
                          "--timeout", "90", "--json", str(path)], cwd=ROOT, capture_output=True, text=True)
    print(out.stdout[-6000:] + out.stderr[-2000:])
    print(f"[{time.perf_counter() - t0:.0f} s] -> {path.relative_to(ROOT)}")
    return out.returncode == 0, [path] if path.exists() else []


def run_benchmarks(tag: str, extra: dict, names: list | None, saved=lambda: None) -> tuple:
    """Run the benchmarks, merging each result into ``<tag>.json`` as soon as it is done (earlier entries for other
    benchmarks stay), and call ``saved()`` after each write."""
    from gpucourse import benchmarks

    t0 = step("benchmarks")
    path = RESULTS / f"{tag}.json"

    def write(name, res):
        benchmarks.merge_into(str(path), name, res, suite=extra)
        saved()

    run = benchmarks.run(names or None, out=None, on_result=write)
    ok = not any("error" in r for r in run["results"].values())
    print(f"[{time.perf_counter() - t0:.0f} s] -> {path.relative_to(ROOT)}")
    return ok, [path]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--skip-notebooks", action="store_true")
    ap.add_argument("--skip-benchmarks", action="store_true")
    ap.add_argument("--notebooks", nargs="+", default=["notebooks/*.ipynb", "solutions/*.ipynb", "exercises/*.ipynb"],
                    help="globs relative to the repo (default: every notebook)")
    ap.add_argument("--bench", nargs="*", default=[], help="benchmarks to run (default: all registered)")
    ap.add_argument("--pytest-args", default="tests", help="arguments for pytest (default: 'tests', everything)")
    ap.add_argument("--grade", nargs="*", default=[], help="exercises whose tests/submissions/<id> to grade")
    ap.add_argument("--archive", help="also write every produced file into this .tar.gz (refreshed after each step)")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    import gpucourse

    if not gpucourse.on_gpu():
        print("The GPU suite needs a CUDA GPU; this machine runs in CPU mode. Use `make test` here.")
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    tag = slug()
    files, ok, extra = [], True, {}

    def archive():
        if not args.archive:
            return
        with tarfile.open(args.archive, "w:gz") as tar:
            for f in files:
                if os.path.exists(f):
                    tar.add(f, arcname=os.path.relpath(f, ROOT))
            tar.addfile(tarfile.TarInfo("SUITE_OK" if ok else "SUITE_FAILED"), io.BytesIO(b""))

    # Cheapest and most important first, refreshing the archive after each step, so a run cut short keeps the rest.
    files += run_doctor(tag)
    archive()
    if not args.skip_benchmarks:
        files.append(RESULTS / f"{tag}.json")
        b_ok, f = run_benchmarks(tag, extra, args.bench, saved=archive)
        ok &= b_ok
        archive()
    if not args.skip_notebooks:
        # Lessons that measure a registered benchmark in their own cells hand it to gpucourse.benchmarks.record,
        # which merges it into the results file: one measurement for the lesson's outputs and the committed JSON.
        os.environ["GPUCOURSE_RECORD"] = str(RESULTS / f"{tag}.json")
        if RESULTS / f"{tag}.json" not in files:
            files.append(RESULTS / f"{tag}.json")
        nb_ok, all_timings = True, {}

        def keep(path):
            if path not in files:
                files.append(path)
            archive()

        for g in args.notebooks:
            good, f, timings = run_notebooks(g, saved=keep)
            nb_ok &= good
            all_timings.update(timings)
            archive()
        ok &= nb_ok
        extra["notebooks_ok"], extra["notebook_seconds"] = nb_ok, all_timings
    for exercise in args.grade:
        g_ok, f = run_grader(tag, exercise)
        ok &= g_ok
        files += f
        archive()
    if not args.skip_tests:
        tests_ok, f = run_tests(tag, args.pytest_args.split())
        ok &= tests_ok
        files += f
        extra["tests_passed"] = tests_ok
    archive()
    print("\nGPU suite:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
