"""Lab: why did lesson 01's CPU add take ~6 ms at 65,536 and 262,144 elements on the course's GPU host (and its
64x64 matmul 5.5 ms in an earlier run), when its neighbours took microseconds? Suspect: torch's intra-op thread pool
sized for more CPUs than the process may use (affinity / cgroup quota), so a parallel op waits for descheduled threads.

    python lab/explore_cpu_threads.py [--json OUT]

Prints the CPUs torch sees and may use, then the median and max of many timed adds/matmuls at each thread count."""
import argparse
import json
import os
import statistics
import time

import torch


def cpu_quota():
    try:
        with open("/sys/fs/cgroup/cpu.max") as f:
            q, p = f.read().split()
        return None if q == "max" else float(q) / float(p)
    except (OSError, ValueError):
        return None


def timed(fn, n=200):
    fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e6)
    return {"median_us": statistics.median(ts), "max_us": max(ts), "over_1ms": sum(t > 1000 for t in ts)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    env = {"os_cpu_count": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "cgroup_quota_cpus": cpu_quota(),
           "torch_threads_default": torch.get_num_threads(), "parallel_info": torch.__config__.parallel_info()}
    print({k: v for k, v in env.items() if k != "parallel_info"})
    default = torch.get_num_threads()
    rows = []
    for threads in sorted({1, 2, 4, 8, 16, len(os.sched_getaffinity(0)), default}):
        torch.set_num_threads(threads)
        for op, sizes in (("add", (16384, 65536, 262144, 1048576)), ("matmul", (32, 64, 128))):
            for n in sizes:
                if op == "add":
                    x, y = torch.randn(n), torch.randn(n)
                    r = timed(lambda: x + y)
                else:
                    a, b = torch.randn(n, n), torch.randn(n, n)
                    r = timed(lambda: a @ b)
                rows.append({"threads": threads, "op": op, "n": n, **r})
                print(f"threads {threads:3d}  {op:6s} n={n:8d}  median {r['median_us']:9.1f} us  max "
                      f"{r['max_us']:9.1f} us  calls over 1 ms: {r['over_1ms']}")
    torch.set_num_threads(default)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
