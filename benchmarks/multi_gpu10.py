"""Lesson 10's multi-GPU run: every figure the lesson's sections 3-5 and the issue's multi-GPU targets need, in one go,
on a machine with 2+ GPUs (NCCL, NVLink multicast off in every process).

    python3 benchmarks/multi_gpu10.py [--nproc 2] [--notebooks] [--out-dir benchmarks/results] [--archive A.tar.gz]

It runs the lesson's torchrun tasks (``gpucourse/lessons/l10_training_scale/dist_run.py``) on ``--nproc`` GPUs:
``comm`` (all-reduce sweep 1 KiB - 1 GiB, the ring from sends against dist.all_reduce at 256 MiB), ``ddp`` (weak
scaling of the lesson's model in bf16 autocast, batch 8 x 1024 per GPU, and a profiler timeline), ``fsdp`` (FSDP2
against DDP: peak memory per GPU and step time, with and without checkpointing) and ``tp`` (a tensor-parallel MLP),
and writes ``<out-dir>/<gpu>-x<N>-multi-gpu10.json`` (device, versions, date, NCCL settings, each task's results, the
targets). The lesson's notebook reads that file on machines with fewer GPUs. ``--notebooks`` then executes the
lesson and its workbook here through the GPU suite (their multi-GPU cells run live on NCCL), ``--tag`` naming the
suite's results file (default ``<gpu>-x<N>``); ``--archive`` packs the results and the executed notebooks.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from gpucourse.lessons.l10_training_scale import launch  # noqa: E402

for _k, _v in launch.NCCL_ENV.items():
    os.environ[_k] = _v

TASKS = ("comm", "ddp", "fsdp", "tp")


def targets(tasks: dict) -> list:
    out = []
    if "ddp" in tasks:
        out.append({"name": "DDP weak-scaling efficiency (step alone / DDP step), bf16 autocast",
                    "value": tasks["ddp"]["weak_scaling_efficiency"], "goal": 0.9, "op": ">="})
    if "comm" in tasks:
        rv = tasks["comm"]["ring_vs_all_reduce"]
        out.append({"name": f"ring_all_reduce speed / dist.all_reduce speed at {rv['bytes'] >> 20} MiB",
                    "value": rv["all_reduce_s"] / rv["ring_s"], "goal": 0.7, "op": ">="})
    if "fsdp" in tasks:
        for ckpt in ("none", "block"):
            r = tasks["fsdp"][ckpt]
            out.append({"name": f"FSDP2 / DDP peak memory per GPU (checkpoint={ckpt})",
                        "value": r["fsdp2"]["peak_bytes"] / r["ddp"]["peak_bytes"], "goal": 0.6, "op": "<="})
    for t in out:
        t["met"] = t["value"] >= t["goal"] if t["op"] == ">=" else t["value"] <= t["goal"]
    return out


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--tasks", nargs="*", default=list(TASKS), choices=TASKS)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "benchmarks", "results"))
    ap.add_argument("--notebooks", action="store_true", help="also execute the lesson and workbook (GPU suite)")
    ap.add_argument("--tag", default=None, help="the GPU suite's results file name (default <gpu>-x<N>)")
    ap.add_argument("--archive", default=None)
    args = ap.parse_args()
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < args.nproc or args.nproc < 2:
        print(f"multi_gpu10 needs --nproc >= 2 GPUs; this machine has {n}", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0)
    gpu = "h200" if "H200" in name else "h100" if "H100" in name else name.split()[-1].lower()
    stem = f"{gpu}-x{args.nproc}"
    res = {"device_name": name, "world": args.nproc, "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())), "python": sys.version.split()[0],
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "env": dict(launch.NCCL_ENV), "tasks": {}, "seconds": {}}
    path = os.path.join(args.out_dir, f"{stem}-multi-gpu10.json")
    os.makedirs(args.out_dir, exist_ok=True)
    for task in args.tasks:
        t0 = time.time()
        try:
            res["tasks"][task] = launch.torchrun(task, nproc=args.nproc, args=("--precision", "bf16"))
        except Exception as exc:  # noqa: BLE001 - keep the other tasks' results
            res.setdefault("errors", {})[task] = str(exc)[-3000:]
        res["seconds"][task] = round(time.time() - t0, 1)
        res["targets"] = targets(res["tasks"])
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
        print(f"{task}: {res['seconds'][task]} s" + (" FAILED" if task in res.get("errors", {}) else ""), flush=True)
    for t in res["targets"]:
        print(f"  [{'met' if t['met'] else 'MISSED'}] {t['name']}: {t['value']:.3f} (target {t['op']} {t['goal']})")
    made = [path]
    if args.notebooks:
        nbs = ["notebooks/10_training_scale.ipynb", "solutions/10_training_scale.ipynb"]
        cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "gpu_suite.py"), "--skip-tests", "--skip-benchmarks",
               "--notebooks", *nbs, "--tag", args.tag or stem]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=False)
        made += [os.path.join(ROOT, p) for p in nbs]
        made += [os.path.join(ROOT, "benchmarks", "results", f"{args.tag or stem}.json")]
    if args.archive:
        with tarfile.open(args.archive, "w:gz") as tar:
            for p in made:
                if os.path.exists(p):
                    tar.add(p, arcname=os.path.relpath(p, ROOT))
    return 0 if not res.get("errors") else 1


if __name__ == "__main__":
    sys.exit(main())
