"""Starting the lesson's multi-process programs from a notebook (torchrun in a subprocess), and the recorded multi-GPU
runs (``benchmarks/results/*-x<N>-multi-gpu10.json``, written by
``python -m gpucourse.lessons.l10_training_scale.multi_gpu`` on a machine with 2+ GPUs).
"""
from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import torch

from gpucourse import benchmarks

# NVLink multicast off in every launched process (the recorded run's setting; see the lesson).
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def backend(nproc: int = 2) -> str:
    """What torchrun's ranks will use here: NCCL when every rank gets its own GPU, else gloo on the CPU."""
    return "nccl" if gpus() >= nproc else "gloo"


def torchrun(task: str, nproc: int = 2, args: tuple = (), timeout: float = 600, retry: bool = True) -> dict:
    """Run ``dist_run TASK`` on ``nproc`` ranks with torchrun (``python -m torch.distributed.run --standalone``) and
    return rank 0's JSON. On the CPU each rank gets one thread (OMP_NUM_THREADS=1): the ranks share the cores."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = dict(os.environ, **NCCL_ENV)
        if backend(nproc) == "gloo":
            env["OMP_NUM_THREADS"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""  # gloo ranks on the CPU leave a lone GPU alone
        env.setdefault("GLOO_SOCKET_IFNAME", "lo") if sys.platform.startswith("linux") else None
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "gpucourse.lessons.l10_training_scale.dist_run", task, "--out", out, *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if proc.returncode != 0 and os.path.exists(out):
            # dist_run writes the file after a barrier that every rank passed with its task done, so what failed was
            # the teardown (on a loaded CPU a gloo rank may abort while the group is destroyed): the result stands.
            print(f"(torchrun {task}: every rank finished, then the teardown failed: {why_failed(proc)})")
        elif proc.returncode != 0 and retry:
            print(f"(torchrun {task} failed once, exit {proc.returncode}: {why_failed(proc)}; running it again)")
            return torchrun(task, nproc, args, timeout, retry=False)
        elif proc.returncode != 0 or not os.path.exists(out):
            tail = (proc.stdout + proc.stderr)[-3000:]
            raise RuntimeError(f"torchrun {task} failed (exit {proc.returncode}): {why_failed(proc)}\n{tail}")
        with open(out) as f:
            return json.load(f)


def why_failed(proc: subprocess.CompletedProcess) -> str:
    """Why a torchrun failed, from its output: the first exception a rank raised in Python; else a C++ exception
    that aborted a rank (its ``what():`` line, e.g. gloo's "Connection closed by peer"); else the signal or exit code
    torchrun reports for the first failed rank; else the last line. Warnings and torchrun's own ChildFailedError are
    never the answer."""
    lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines()]
    patterns = (r"^(?:\[rank\d+\]:?\s*)?([\w.]*(?:Error|Exception|Interrupt)\b:?.*)$",
                r"^(?:\[rank\d+\]:?\s*)?(what\(\):.*)$",
                r"^.*?(Signal \d+ \(\w+\) received by PID \d+.*)$", r"^.*?(exitcode\s*:\s*-?\d+.*)$")
    for pattern in patterns:
        for line in lines:
            m = re.match(pattern, line)
            if m and "ChildFailedError" not in line and "Warning" not in line:
                return m.group(1)[:400]
    return lines[-1][:400] if lines else "no output"


def recorded(world: int = 2) -> dict | None:
    """The committed multi-GPU run of this lesson on ``world`` GPUs (``benchmarks/results/*-x<world>-multi-gpu10
    .json``; the newest by its date where several GPUs' files exist), or None."""
    runs = []
    for path in glob.glob(os.path.join(benchmarks.results_dir(), f"*-x{world}-multi-gpu10.json")):
        res = benchmarks.recorded(os.path.basename(path))
        res["file"] = "benchmarks/results/" + os.path.basename(path)
        runs.append(res)
    return max(runs, key=lambda r: r.get("date", "")) if runs else None


NONE_RECORDED = ("No multi-GPU run of this lesson is recorded yet (benchmarks/results/*-x2-multi-gpu10.json is made by "
                 "`python -m gpucourse.lessons.l10_training_scale.multi_gpu` on a machine with 2+ GPUs); the figures "
                 "for this section will appear here once one is committed.")


def describe(rec: dict) -> str:
    """Where a recorded run was made: GPUs, host, versions, date, file."""
    host = rec.get("host_gpus", rec["world"])
    of = f" of a {host}-GPU host" if host != rec["world"] else ""
    return (f"Recorded on {rec['world']} GPUs{of} ({rec['device_name']}, torch {rec['torch']}, "
            f"NCCL {rec.get('nccl', '')}, "
            f"NCCL_NVLS_ENABLE=0; {rec['date']}; {rec['file']})")


def recorded_task(task: str, world: int = 2) -> dict | None:
    """One task's results from the recorded run on ``world`` GPUs, labelled with its machine, or None (and says
    so)."""
    rec = recorded(world)
    if rec is None or task not in rec.get("tasks", {}):
        print(NONE_RECORDED)
        return None
    print(describe(rec) + ":")
    return rec["tasks"][task]
