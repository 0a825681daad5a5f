"""Known wrong: the top kernel by number of launches, not by total GPU time (the profiler's table sorted by
# of Calls): the many short elementwise kernels win."""
import collections


def read_the_profile(trace):
    total = collections.Counter()
    for e in trace:
        if e["cat"] == "kernel":
            total[e["name"]] += 1
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"))
    busy, cur = 0.0, None
    for s, t in spans:
        if cur and s <= cur[1]:
            cur[1] = max(cur[1], t)
        else:
            if cur:
                busy += cur[1] - cur[0]
            cur = [s, t]
    busy += cur[1] - cur[0]
    window = max(t for _, t in spans) - spans[0][0]
    sync = next(e["args"]["line"] for e in trace
                if e["cat"] == "cuda_runtime" and e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize",
                                                                "cudaEventSynchronize"))
    return {"top_kernel": total.most_common(1)[0][0], "idle_share": 1 - busy / window, "sync_line": sync}
