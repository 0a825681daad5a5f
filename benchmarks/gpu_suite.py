#!/usr/bin/env python3
"""The GPU suite: on a machine with a CUDA GPU, run everything that CI (no GPU) cannot, in one go.

Steps, in this order (cheapest and most important first, so a run cut short keeps the rest):

1. `gpucourse doctor --measure`           -> benchmarks/results/<gpu>-doctor.txt
2. the registered benchmarks              -> benchmarks/results/<gpu>.json (merged: other entries stay)
   Lessons that measure a benchmark in their own cells hand it to gpucourse.benchmarks.record, which merges it
   into the same file; when those notebooks run (step 3), such benchmarks are left to them, not measured twice.
3. the notebooks, executed on the GPU      -> in place (lessons and solutions keep these outputs when committed;
                                              exercises are only run)
4. the grader on tests/submissions/<id>   -> benchmarks/results/<gpu>-grade-<id>.json (only with --grade)
5. the test suite, `gpu` tests included    -> benchmarks/results/<gpu>-pytest.txt
6. the run's summary (notebooks_ok, notebook_seconds, notebooks_over_budget, tests_passed) -> "suite" in
   benchmarks/results/<gpu>.json; a notebook whose Restart & Run All takes over NOTEBOOK_BUDGET_S (3 minutes) fails
   the suite, and the seconds of notebooks this run did not execute are kept from earlier runs

Usage: python benchmarks/gpu_suite.py [--skip-benchmarks] [--skip-notebooks] [--skip-tests] [--bench NAME ...]
           [--notebooks GLOB ...] [--grade EXERCISE ...] [--pytest-args ARGS] [--archive PATH]
``--archive`` also packs every file the suite wrote into one .tar.gz (handy when the GPU machine is remote).
Exit status: non-zero if the tests failed, a notebook raised, a submission was misgraded or a benchmark errored.
"""
from __future__ import annotations

import argparse
import glob
import io
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
NOTEBOOK_BUDGET_S = 180  # Restart & Run All of any notebook on the course's GPU (issue #18): over it, the suite fails


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


SITE_PACKAGES = re.compile(r"(/[\w.+-]+)+/(site-packages|dist-packages)/")
RECORD_CALL = re.compile(r"""record\(\s*["'](\w+)["']""")


def _strip_paths(nb) -> None:
    """Committed outputs must not hold this machine's paths (printed text, warnings, tracebacks of errors)."""
    # Folders on $PYTHONPATH hold packages too (the GPU machine's carried wheels are installed into one); a child
    # process's warnings print them.
    extra = [d.rstrip("/") for d in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if os.path.isabs(d) and os.path.realpath(d) != str(ROOT)]

    def clean(text: str) -> str:
        text = SITE_PACKAGES.sub("<site-packages>/", text)
        for d in extra:
            text = text.replace(d + "/", "<site-packages>/")
        return text.replace(str(ROOT), "<repo>")

    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if "text" in output:
                output["text"] = clean(output["text"])
            if "traceback" in output:
                output["traceback"] = [clean(line) for line in output["traceback"]]


def notebook_paths(patterns: list) -> list:
    """The notebooks the globs ``patterns`` (relative to the repository) select, in order."""
    paths = []
    for pattern in patterns:
        paths += sorted(p for p in glob.glob(str(ROOT / pattern)) if "/.ipynb_checkpoints/" not in p)
    return paths


def recorded_by(paths: list) -> set:
    """Names of the benchmarks that these notebooks measure in their own cells and hand to
    ``gpucourse.benchmarks.record`` (which writes them into the results file)."""
    from gpucourse.workbooks import code_cells

    names = set()
    for path in paths:
        for source in code_cells(path):
            names.update(RECORD_CALL.findall(source))
    return names


def run_notebooks(pattern: str, saved=lambda path: None) -> tuple:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    t0 = step("notebooks")
    ok, written, timings = True, [], {}
    for p in notebook_paths([pattern]):
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
    folder = f"tests/submissions/{exercise}"  # relative: no machine paths; grade expands it (expected.py skipped)
    out = subprocess.run([sys.executable, "-m", "gpucourse.cli", "grade", exercise, folder, "--jobs", "4",
                          "--timeout", "90", "--json", str(path)], cwd=ROOT, capture_output=True, text=True)
    print(out.stdout[-6000:] + out.stderr[-2000:])
    print(f"[{time.perf_counter() - t0:.0f} s] -> {path.relative_to(ROOT)}")
    return out.returncode == 0, [path] if path.exists() else []


def run_benchmarks(tag: str, names: list, saved=lambda: None) -> tuple:
    """Run the benchmarks ``names``, merging each result into ``<tag>.json`` as soon as it is done (earlier entries
    for other benchmarks stay), and call ``saved()`` after each write."""
    from gpucourse import benchmarks

    t0 = step("benchmarks")
    path = RESULTS / f"{tag}.json"

    def write(name, res):
        benchmarks.merge_into(str(path), name, res)
        saved()

    run = benchmarks.run(names, out=None, on_result=write)
    ok = not any("error" in r for r in run["results"].values())
    print(f"[{time.perf_counter() - t0:.0f} s] -> {path.relative_to(ROOT)}")
    return ok, [path]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-tests", action="store_true", help="do not run pytest")
    ap.add_argument("--skip-notebooks", action="store_true", help="do not execute notebooks")
    ap.add_argument("--skip-benchmarks", action="store_true",
                    help="run no benchmark here (the notebooks still record theirs)")
    ap.add_argument("--notebooks", nargs="+", default=["notebooks/*.ipynb", "solutions/*.ipynb", "exercises/*.ipynb"],
                    help="globs relative to the repo (default: every notebook)")
    ap.add_argument("--bench", nargs="*", default=[],
                    help="benchmarks to run (default: all registered); those the selected notebooks record are "
                         "left to them")
    ap.add_argument("--pytest-args", default="tests", help="arguments for pytest (default: 'tests', everything)")
    ap.add_argument("--grade", nargs="*", default=[], help="exercises whose tests/submissions/<id> to grade")
    ap.add_argument("--archive", help="also write every produced file into this .tar.gz (refreshed after each step)")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    import gpucourse
    from gpucourse import benchmarks

    if not gpucourse.on_gpu():
        print("The GPU suite needs a CUDA GPU; this machine runs in CPU mode. Use `make test` here.")
        return 2
    RESULTS.mkdir(parents=True, exist_ok=True)
    tag = slug()
    results = RESULTS / f"{tag}.json"
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
        names = args.bench or list(benchmarks.registry())
        if not args.skip_notebooks:
            # Lessons that measure a registered benchmark in their own cells hand it to gpucourse.benchmarks.record,
            # which merges it into the results file: one measurement for the lesson's outputs and the committed
            # JSON. Measuring it here as well would only be overwritten.
            in_notebooks = recorded_by(notebook_paths(args.notebooks))
            left = sorted(n for n in names if n in in_notebooks)
            if left:
                print("measured by the notebooks that run next, not here: " + ", ".join(left))
            names = [n for n in names if n not in in_notebooks]
        if names:
            files.append(results)
            b_ok, f = run_benchmarks(tag, names, saved=archive)
            ok &= b_ok
            archive()
    if not args.skip_notebooks:
        os.environ["GPUCOURSE_RECORD"] = str(results)
        if results not in files:
            files.append(results)
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
        over = {nb: sec for nb, sec in all_timings.items() if sec > NOTEBOOK_BUDGET_S}
        for nb, sec in over.items():
            print(f"  {nb}: {sec} s, over the {NOTEBOOK_BUDGET_S} s budget for a notebook's Restart & Run All")
        nb_ok &= not over
        ok &= nb_ok
        # Seconds of notebooks this run did not execute stay as an earlier run recorded them (a run of one lesson
        # must not erase the others'); this run's figures replace their own.
        earlier = benchmarks._read_results(str(results)).get("suite", {}).get("notebook_seconds", {})
        extra["notebooks_ok"] = nb_ok
        extra["notebook_seconds"] = {**earlier, **all_timings}
        extra["notebooks_over_budget"] = over
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
    if extra or results in files:  # the run's summary, written once it is known
        benchmarks.set_fields(str(results), suite=extra)
        if results not in files:
            files.append(results)
    archive()
    print("\nGPU suite:", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
