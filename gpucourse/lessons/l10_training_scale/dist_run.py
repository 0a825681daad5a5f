"""The lesson's multi-process programs, one per task, each started by torchrun on every rank:

    torchrun --standalone --nproc_per_node=2 -m gpucourse.lessons.l10_training_scale.dist_run TASK --out result.json

NCCL on GPUs when every rank has its own (one GPU per rank); otherwise gloo on the CPU at small sizes (the same code:
only the backend, the device and the sizes change). Rank 0 writes the task's results as JSON to ``--out``.

Tasks: ``comm`` (all-reduce time against size; the ring built from sends checked against dist.all_reduce and timed
beside it), ``ddp`` (DistributedDataParallel: same gradients as one process on the whole batch, step time against one
process alone, a profiler timeline of one step), ``fsdp`` (FSDP2's fully_shard against DDP: memory per rank and step
time), ``tp`` (a tensor-parallel MLP: same output as unsplit, weight bytes per rank).

The tasks are in dist_comm.py, dist_ddp.py and dist_shard.py, what they measure with in dist_measure.py; this module
starts the process group, runs one task and writes its JSON.
"""
from __future__ import annotations

import argparse
import json
import os

# NVLink multicast (NVLS) off in every process, before NCCL or torch's symmetric memory read their settings.
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from gpucourse.lessons.l10_training_scale import model as M  # noqa: E402
from gpucourse.lessons.l10_training_scale.dist_comm import task_comm  # noqa: E402
from gpucourse.lessons.l10_training_scale.dist_ddp import task_ddp  # noqa: E402
from gpucourse.lessons.l10_training_scale.dist_shard import task_fsdp, task_tp  # noqa: E402


def setup() -> tuple:
    """(rank, world, device, backend): NCCL with one GPU per rank where there are enough, else gloo on the CPU."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if torch.cuda.is_available() and torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", world)):
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
        return rank, world, dev, "nccl"
    dist.init_process_group("gloo")
    return rank, world, torch.device("cpu"), "gloo"


TASKS = {"comm": task_comm, "ddp": task_ddp, "fsdp": task_fsdp, "tp": task_tp}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task", choices=sorted(TASKS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--compile", action="store_true", help="GPU: also time the model compiled (ddp, fsdp)")
    ap.add_argument("--wide", action="store_true",
                    help="GPU: fsdp also at width 2048 (the recorded run's third regime)")
    ap.add_argument("--precision", default=None, choices=M.PRECISIONS,
                    help="default: bf16, or fp16 with a GradScaler on GPUs without bf16 tensor cores (a T4)")
    args = ap.parse_args()
    rank, world, dev, backend = setup()
    if args.precision is None:  # rank 0 says why on a T4; gloo ranks on the CPU run bf16
        args.precision = M.mixed_precision(say=rank == 0) if dev.type == "cuda" else "bf16"
    try:
        res = TASKS[args.task](rank, world, dev, backend, args)
        dist.barrier()  # every rank finished its task, and none tears down while another still talks to it
        if rank == 0:  # so the result file exists only when all ranks got this far (launch.torchrun relies on it)
            res.update(task=args.task, world=world, backend=backend, device=str(dev),
                       device_name=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                       torch=torch.__version__)
            with open(args.out + ".part", "w") as f:
                json.dump(res, f)
            os.replace(args.out + ".part", args.out)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
