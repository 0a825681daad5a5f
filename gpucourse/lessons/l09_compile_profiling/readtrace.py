"""Reading a profiler trace as data: the events of a Chrome/Perfetto trace (what ``torch.profiler`` writes with
``prof.export_chrome_trace``), and a generator of training-step traces with a hidden bottleneck for the exercise
``read_the_profile``.

An event is a dict as in the trace file's ``traceEvents``: ``name``, ``cat`` (``cpu_op``, ``cuda_runtime``,
``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``python_function``...), ``ph`` (``"X"``: a complete event), ``ts`` and
``dur`` in microseconds, ``pid``/``tid`` (a thread on the host, a stream on the GPU) and ``args``. The generated
traces also give every host event the source line that issued it, ``args["line"]`` (``"train.py:57"``), which the
real profiler gives through its ``python_function`` events when run with ``with_stack=True``.
"""
from __future__ import annotations

import collections
import json
import random

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def load(path: str) -> list:
    """The complete events (``ph == "X"``) of a Chrome trace file."""
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def gpu_events(events) -> list:
    return [e for e in events if e.get("cat") in GPU_CATS]


def kernel_table(events) -> list:
    """[(name, total µs, calls)] of the GPU kernels, by total time, largest first: the profiler's key_averages
    sorted by device time, from the trace."""
    total, calls = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") == "kernel":
            total[e["name"]] += float(e["dur"])
            calls[e["name"]] += 1
    return sorted(((n, total[n], calls[n]) for n in total), key=lambda t: -t[1])


def merge(intervals) -> list:
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def gpu_idle_share(events) -> float:
    """The share of the GPU's window (first GPU event's start to the last one's end) in which nothing ran on it:
    kernels, copies and memsets on every stream, overlaps counted once."""
    iv = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in gpu_events(events)]
    if not iv:
        return 0.0
    start, end = min(s for s, _ in iv), max(e for _, e in iv)
    busy = sum(e - s for s, e in merge(iv))
    return 1.0 - busy / (end - start) if end > start else 0.0


def sync_lines(events) -> list:
    """[(line, calls, µs waited)] of the host calls that wait for the GPU (cuda*Synchronize), most time first."""
    waited, calls = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") == "cuda_runtime" and e.get("name") in SYNC_CALLS:
            line = (e.get("args") or {}).get("line", "?")
            waited[line] += float(e["dur"])
            calls[line] += 1
    return sorted(((ln, calls[ln], waited[ln]) for ln in waited), key=lambda t: -t[2])


def waiting_ops(events, names=("aten::item",)) -> list:
    """The host operators named in ``names`` inside which the host waited for the GPU: a cuda*Synchronize call
    that starts and ends within the operator, on the same host thread. ``.item()`` on a GPU tensor copies the value
    back and waits (the sync is inside it); on a tensor that lives on the host it reads memory and waits for
    nothing."""
    syncs = [e for e in events if e.get("cat") == "cuda_runtime" and e.get("name") in SYNC_CALLS]
    out = []
    for op in events:
        if op.get("cat") != "cpu_op" or op.get("name") not in names:
            continue
        start, end = float(op["ts"]), float(op["ts"]) + float(op["dur"])
        if any(s.get("tid") == op.get("tid") and start <= float(s["ts"]) and
               float(s["ts"]) + float(s["dur"]) <= end for s in syncs):
            out.append(op)
    return out


def api_table(events) -> list:
    """[(name, total µs, calls)] of the host's CUDA API calls (runtime and driver), by total time, largest first:
    the flat profile of what the host asked the driver for (launches, copies, synchronizations, allocations)."""
    total, calls = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            total[e["name"]] += float(e["dur"])
            calls[e["name"]] += 1
    return sorted(((n, total[n], calls[n]) for n in total), key=lambda t: -t[1])


def per_call(events, calls: int) -> dict:
    """What ``calls`` calls of one function ran on the GPU, per call: ``us`` (the kernels', copies' and memsets'
    durations summed, divided by ``calls``), ``ops`` (how many of them a call runs) and ``by_name``
    ({name: {"us": ..., "n": ...}}, per call, largest first). Time where two GPU events overlap counts twice: this
    is work done, not the window's busy time (:func:`gpu_idle_share` gives that)."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    total, count = collections.Counter(), collections.Counter()
    for e in gpu_events(events):
        total[e["name"]] += float(e["dur"])
        count[e["name"]] += 1
    by_name = {n: {"us": total[n] / calls, "n": count[n] / calls}
               for n in sorted(total, key=lambda n: -total[n])}
    return {"us": sum(total.values()) / calls, "ops": sum(count.values()) / calls, "by_name": by_name}


def answers(events) -> dict:
    """The three answers ``read_the_profile`` asks for: top kernel by GPU time, GPU idle share, the syncing line."""
    table, syncs = kernel_table(events), sync_lines(events)
    return {"top_kernel": table[0][0] if table else None, "idle_share": gpu_idle_share(events),
            "sync_line": syncs[0][0] if syncs else None}


# ---------------------------------------------------------------------------------------------------------------------
# A training step's trace, generated.

_KERNELS = {  # (kernel name, typical µs): what a small transformer step launches
    "elementwise": ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float>>", 6.0),
    "add": ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", 8.0),
    "gemm": ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", 55.0),
    "gemm2": ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", 40.0),
    "softmax": ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float>", 14.0),
    "layernorm": ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>", 11.0),
    "reduce": ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t>>",
               9.0),
    "attention": ("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>", 70.0),
    "adam": ("void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float, 4>>", 30.0),
    "gather": ("void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel>", 12.0),
}
_OPS = {"elementwise": "aten::gelu", "add": "aten::add", "gemm": "aten::mm", "gemm2": "aten::addmm",
        "softmax": "aten::_softmax", "layernorm": "aten::native_layer_norm", "reduce": "aten::sum",
        "attention": "aten::_scaled_dot_product_flash_attention", "adam": "Optimizer.step#AdamW.step",
        "gather": "aten::index"}


def generate(seed: int, iters: int = 5, loader_us: tuple = (150.0, 600.0), prefetch: bool = True,
             copy_us: tuple = (30.0, 80.0)) -> dict:
    """A trace of ``iters`` training steps with a hidden bottleneck, from ``seed``. Returns ``{"events": [...],
    "answers": {...}}``. Each step: the host waits for the next batch (the data loader: the GPU idles), copies it to
    the GPU (``cudaMemcpyAsync``; with ``prefetch`` the next batch's, on a second stream, overlapping this step's
    kernels), launches the
    forward and backward kernels (many short elementwise kernels, a few long ones; one kind, rarely launched, is the
    largest by time), then one line reads the loss on the host and waits for the GPU (a cuda*Synchronize)."""
    rng = random.Random(seed)
    kinds = list(_KERNELS)
    rng.shuffle(kinds)
    heavy, many = kinds[0], kinds[1]  # the top kernel by time (launched once a step), the most launched one
    others = kinds[2:6]
    heavy_us = rng.uniform(180.0, 320.0)
    many_us = rng.uniform(4.0, 7.0)
    many_calls = rng.randint(14, 22)
    base = rng.randint(30, 90)
    line = {k: f"train.py:{base + i * rng.randint(2, 5)}" for i, k in
            enumerate(("loader", "copy", "forward", "loss", "backward", "step", "sync"))}
    model_lines = {k: f"model.py:{rng.randint(20, 200)}" for k in kinds}
    sync_call = rng.choice(SYNC_CALLS)
    sync_op = {"cudaStreamSynchronize": "aten::item", "cudaDeviceSynchronize": "torch.cuda.synchronize",
               "cudaEventSynchronize": "Event.synchronize"}[sync_call]
    events: list = []
    host_t, gpu_t, copy_t = 0.0, 0.0, 0.0

    def host(name, cat, dur, where):
        nonlocal host_t
        events.append({"ph": "X", "cat": cat, "name": name, "ts": round(host_t, 3), "dur": round(dur, 3),
                       "pid": 1, "tid": 1, "args": {"line": where}})
        host_t += dur

    def launch(kind, where, us):
        nonlocal gpu_t
        name, _ = _KERNELS[kind]
        t0 = host_t
        host(_OPS[kind], "cpu_op", rng.uniform(8.0, 20.0), where)
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": round(t0 + 3.0, 3),
                       "dur": round(rng.uniform(3.0, 6.0), 3), "pid": 1, "tid": 1, "args": {"line": where}})
        start = max(gpu_t, t0 + 8.0)
        events.append({"ph": "X", "cat": "kernel", "name": name, "ts": round(start, 3), "dur": round(us, 3),
                       "pid": 0, "tid": "stream 7", "args": {"stream": 7}})
        gpu_t = start + us

    def copy_batch(stream):
        nonlocal gpu_t, copy_t
        t0 = host_t
        host("aten::copy_", "cpu_op", 12.0, line["copy"])
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": round(t0 + 2.0, 3),
                       "dur": 6.0, "pid": 1, "tid": 1, "args": {"line": line["copy"]}})
        us = rng.uniform(*copy_us)
        if stream == 20:  # a copy stream: runs beside the kernels still running on stream 7
            start = max(copy_t, t0 + 6.0)
            copy_t = start + us
        else:
            start = max(gpu_t, t0 + 6.0)
            gpu_t = start + us
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",
                       "ts": round(start, 3), "dur": round(us, 3), "pid": 0, "tid": f"stream {stream}",
                       "args": {"stream": stream}})

    for step in range(iters):
        host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "cpu_op",
             rng.uniform(*loader_us), line["loader"])
        if not prefetch:
            copy_batch(7)
        elif step == 0:
            copy_batch(20)
        if prefetch:
            gpu_t = max(gpu_t, copy_t)  # the step's first kernel waits for its batch (an event wait)
        plan = [(many, many_us)] * many_calls + [(k, _KERNELS[k][1] * rng.uniform(0.7, 1.3)) for k in others] + \
            [(heavy, heavy_us)]
        rng.shuffle(plan)
        half = len(plan) // 2
        for i, (kind, us) in enumerate(plan):
            launch(kind, model_lines[kind] if i < half else line["backward"], us)
            if prefetch and i == 2 and step + 1 < iters:  # the next batch's copy, while this step computes
                copy_batch(20)
        host("aten::mse_loss", "cpu_op", 15.0, line["loss"])
        t0 = host_t
        wait = max(gpu_t - host_t, 0.0) + rng.uniform(5.0, 12.0)
        host(sync_op, "cpu_op", wait + 4.0, line["sync"])
        events.append({"ph": "X", "cat": "cuda_runtime", "name": sync_call, "ts": round(t0 + 2.0, 3),
                       "dur": round(wait, 3), "pid": 1, "tid": 1, "args": {"line": line["sync"]}})
        host_t = max(host_t, gpu_t + 3.0)
    events.sort(key=lambda e: (e["ts"], e["cat"]))
    return {"events": events, "answers": answers(events), "lines": line, "heavy": _KERNELS[heavy][0],
            "many": _KERNELS[many][0]}
