#!/usr/bin/env python3
"""Grade the known submissions of some exercises as tests/test_known_submissions.py does (verdict and message
asserted against each folder's expected.py), and keep every verdict: on a GPU machine this is the GPU half of the
rule "the same verdict in both modes for every known submission".

    python benchmarks/known_submissions.py --tag h100 fp8_matmul int8_gemv ...   (default: lessons 06-11's folders)

Merges into benchmarks/results/<tag>-known-submissions.json: "runs" (each run's mode, versions, isolation, pytest's
exit code) and "folders" (per folder, a later run replacing it: its run, pytest's outcome, each submission's status,
score, message, flags and seconds). Run i's pytest log: <tag>-known-submissions-pytest-<i>.txt. Exit status: pytest's.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
LESSONS_06_11 = ("choose_tile", "fp8_matmul", "gemm_waves", "int4_gemv", "int8_gemv", "pack_int4", "unpack_int4",
                 "quantize_per_channel", "flash_attention", "online_softmax", "fused_rmsnorm_residual",
                 "read_the_profile", "memory_budget", "ring_all_reduce", "decode_attention", "tokens_per_second_floor")
OUTCOME = re.compile(r"(PASSED|FAILED|SKIPPED|ERROR)\s.*?test_known_submissions_get_their_verdict\[([\w]+)\]")


def verdicts(graded: dict) -> list:
    rows = []
    for call in graded["calls"]:
        for r in (call.get("report") or {}).get("results", []):
            rows.append({"submission": os.path.relpath(r["submission"], ROOT) if os.path.isabs(r["submission"])
                         else r["submission"], "status": r["status"], "score": r["score"],
                         "message": r["message"], "flags": r["flags"], "seconds": round(r["seconds"], 1),
                         **({"perf": r["perf"]} if "perf" in r else {})})
        if call.get("report") is None:
            rows.append({"call_failed": call.get("returncode"), "stderr_tail": call.get("stderr", "")[-2000:]})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", default=list(LESSONS_06_11))
    ap.add_argument("--tag", default="cpu")
    ap.add_argument("-n", "--workers", type=int, default=3, help="pytest-xdist workers (each grades with --jobs 2)")
    args = ap.parse_args()

    import gpucourse  # first: it chooses the mode before triton is imported
    import torch
    import triton
    from gpucourse.grading import sandbox

    base = Path(tempfile.mkdtemp(prefix="known-"))
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-v", "-n", str(args.workers),
           "--dist", "load", "--basetemp", str(base), "tests/test_known_submissions.py",
           "-k", " or ".join(f"[{f}]" for f in args.folders)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    log = f"$ {' '.join(cmd[2:])}   (exit code {out.returncode}, {seconds:.0f} s)\n{out.stdout}{out.stderr}"
    log = log.replace(str(base), "<basetemp>").replace(str(ROOT), "<repo>")

    outcomes = {m.group(2): m.group(1) for m in OUTCOME.finditer(out.stdout)}
    folders = {}
    for f in args.folders:
        path = base / f"known-{f}" / "graded.json"
        graded = json.loads(path.read_text()) if path.exists() else None
        folders[f] = {"pytest": outcomes.get(f, "not run"),
                      "seconds": round(graded["seconds"], 1) if graded else None,
                      "verdicts": verdicts(graded) if graded else []}
    isolation = sandbox.detect()
    run = {"mode": "gpu" if gpucourse.on_gpu() else "cpu",
           "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor(),
           "torch": torch.__version__, "triton": triton.__version__, "isolation": isolation.to_dict(),
           "date": time.strftime("%Y-%m-%d %H:%M"), "pytest_exit": out.returncode, "seconds": round(seconds),
           "folders": sorted(folders)}
    # Folders graded again replace their earlier entries; each says which run it came from (runs[i]).
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{args.tag}-known-submissions.json"
    result = json.loads(path.read_text()) if path.exists() else {"runs": [], "folders": {}}
    result["runs"].append(run)
    (RESULTS / f"{args.tag}-known-submissions-pytest-{len(result['runs']) - 1}.txt").write_text(log)
    for f, v in folders.items():
        result["folders"][f] = {"run": len(result["runs"]) - 1, **v}
    text = json.dumps(result, indent=1).replace(str(ROOT) + "/", "")
    path.write_text(text + "\n")
    print("\n".join(log.strip().splitlines()[-40:]))
    for f, v in folders.items():
        print(f"{f:24s} {v['pytest']:8s} {len(v['verdicts']):3d} submissions  {v['seconds']} s")
    return out.returncode


if __name__ == "__main__":
    sys.exit(main())
