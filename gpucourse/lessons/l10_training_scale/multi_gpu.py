"""Lesson 10's multi-GPU run: every figure the lesson's sections 3-5 show from GPUs, in one go, on a machine with 2+
GPUs (NCCL, NVLink multicast off in every process):

    python -m gpucourse.lessons.l10_training_scale.multi_gpu [--nproc 2 4] [--out-dir benchmarks/results]

For each ``--nproc`` N it runs the lesson's torchrun tasks (:mod:`dist_run`) on N GPUs: ``comm`` (all-reduce sweep
1 KiB - 1 GiB; the ring from sends, and two rings at once, against ``dist.all_reduce`` at 256 MiB), ``ddp`` (weak
scaling of the lesson's model in bf16 autocast, batch 8 x 1024 per GPU, DDP's settings side by side, profiler
timelines), ``fsdp`` (FSDP2 against DDP: peak memory per GPU and step time, where activations dominate and where the
states do) and ``tp`` (a tensor-parallel MLP). Each N writes ``<out-dir>/<gpu>-x<N>-multi-gpu10.json`` (device, the
host's GPU count, versions, date, NCCL settings, each task's results, the targets with their ratios); the lesson's
notebook reads those files on machines with fewer GPUs, labelled as recorded.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

from gpucourse import benchmarks
from gpucourse.lessons.l10_training_scale import launch

TASKS = ("comm", "ddp", "fsdp", "tp")
# (name, goal on 2 GPUs, goal on 4 or more, ">=" or "<=")
GOALS = {"ddp": 0.9, "ddp4": 0.85, "ring": 0.8, "ring4": 0.7, "fsdp_time": 1.25, "fsdp_states_peak": 0.6}


def targets(tasks: dict, world: int) -> list:
    """The lesson's targets as ratios measured in this run (each from one task's interleaved timings)."""
    four = world >= 4
    out = []
    if "ddp" in tasks:
        out.append({"name": "DDP weak-scaling efficiency (step alone / DDP step, interleaved), bf16 autocast",
                    "value": tasks["ddp"]["weak_scaling_efficiency"], "goal": GOALS["ddp4" if four else "ddp"],
                    "op": ">="})
    if "comm" in tasks:
        rv = tasks["comm"]["ring_vs_all_reduce"]
        for key, what in (("ring_s", "ring from sends"), ("bidirectional_ring_s", "two rings from sends")):
            out.append({"name": f"{what}: dist.all_reduce time / its time at {rv['bytes'] >> 20} MiB",
                        "value": rv["all_reduce_s"] / rv[key], "goal": GOALS["ring4" if four else "ring"],
                        "op": ">="})
    if "fsdp" in tasks:
        f = tasks["fsdp"]
        for kind in ("fsdp2", "fsdp2_tuned"):
            out.append({"name": f"{kind} step / DDP step (activations regime)",
                        "value": f["activations"][kind]["step_s"] / f["activations"]["ddp"]["step_s"],
                        "goal": GOALS["fsdp_time"], "op": "<="})
        out.append({"name": "fsdp2_tuned / DDP peak memory per GPU (states regime)",
                    "value": f["states"]["fsdp2_tuned"]["peak_bytes"] / f["states"]["ddp"]["peak_bytes"],
                    "goal": GOALS["fsdp_states_peak"], "op": "<="})
    dc = tasks.get("ddp", {}).get("compiled", {})
    if "weak_scaling_efficiency" in dc:
        out.append({"name": "DDP weak-scaling efficiency, model compiled (both sides)",
                    "value": dc["weak_scaling_efficiency"], "goal": GOALS["ddp4" if four else "ddp"], "op": ">="})
    fc = tasks.get("fsdp", {}).get("compiled", {})
    for kind in ("fsdp2_tuned", "fsdp2_one_unit"):
        if kind in fc:
            out.append({"name": f"{kind} step / DDP step, blocks compiled (activations regime)",
                        "value": fc[kind]["step_s"] / fc["ddp"]["step_s"], "goal": GOALS["fsdp_time"], "op": "<="})
    for t in out:
        t["met"] = t["value"] >= t["goal"] if t["op"] == ">=" else t["value"] <= t["goal"]
    return out


def run(nproc: int, tasks, out_dir: str, compile: bool = True, merge: bool = False) -> dict:
    import torch

    name = torch.cuda.get_device_name(0)
    gpu = "h200" if "H200" in name else "h100" if "H100" in name else name.split()[-1].lower()
    res = {"device_name": name, "world": nproc, "host_gpus": torch.cuda.device_count(), "torch": torch.__version__,
           "nccl": ".".join(map(str, torch.cuda.nccl.version())), "python": sys.version.split()[0],
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "env": dict(launch.NCCL_ENV), "tasks": {}, "seconds": {}}
    path = os.path.join(out_dir, f"{gpu}-x{nproc}-multi-gpu10.json")
    os.makedirs(out_dir, exist_ok=True)
    if merge and os.path.exists(path):  # rerun some tasks, keep the others (each task carries its own date)
        with open(path) as f:
            old = json.load(f)
        res["tasks"], res["seconds"] = dict(old["tasks"]), dict(old.get("seconds", {}))
        res["task_dates"] = {t: old.get("task_dates", {}).get(t, old["date"]) for t in old["tasks"]}
    for task in tasks:
        t0 = time.time()
        try:
            extra = (("--compile",) if compile and task in ("ddp", "fsdp") else ()) + \
                (("--wide",) if task == "fsdp" else ())
            res["tasks"][task] = launch.torchrun(task, nproc=nproc, args=("--precision", "bf16", *extra),
                                                 retry=False)
        except Exception as exc:  # noqa: BLE001 - keep the other tasks' results
            res.setdefault("errors", {})[task] = str(exc)[-3000:]
        res["seconds"][task] = round(time.time() - t0, 1)
        res.setdefault("task_dates", {})[task] = res["date"]
        res["targets"] = targets(res["tasks"], nproc)
        with open(path, "w") as f:
            json.dump(res, f, indent=1)
        print(f"{nproc} GPUs, {task}: {res['seconds'][task]} s" + (" FAILED" if task in res.get("errors", {}) else ""),
              flush=True)
    for t in res["targets"]:
        print(f"  [{'met' if t['met'] else 'MISSED'}] {t['name']}: {t['value']:.3f} (target {t['op']} {t['goal']})")
    print(f"wrote {path}")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, nargs="+", default=[2], help="GPU counts to run on, one after the other")
    ap.add_argument("--tasks", nargs="*", default=list(TASKS), choices=TASKS)
    ap.add_argument("--out-dir", default=benchmarks.results_dir())
    ap.add_argument("--no-compile", action="store_true", help="skip the compiled DDP and FSDP2 timings")
    ap.add_argument("--merge", action="store_true", help="keep the other tasks of an existing results file")
    args = ap.parse_args(argv)
    n = launch.gpus()
    if min(args.nproc) < 2 or max(args.nproc) > n:
        print(f"the multi-GPU run needs 2 <= --nproc <= the GPUs here ({n})", file=sys.stderr)
        return 2
    errors = 0
    for nproc in args.nproc:
        res = run(nproc, args.tasks, args.out_dir, compile=not args.no_compile, merge=args.merge)
        errors += bool(res.get("errors"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
