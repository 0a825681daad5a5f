#!/usr/bin/env python3
"""Lesson 03 exploration on a GPU (issue #18): one run that measures what the lesson's fixes rest on, and times each
of the lesson's measurements, to find what made the notebook run for minutes and die.

- the working-set sweep three ways: a Triton copy kernel captured in a CUDA graph (what the lesson now times), torch's
  eager ``copy_``, and ``copy_`` captured in a graph (a memcpy node: the old sweep);
- the access patterns with the write counted in the model, stride 16 added;
- the ceilings by the interleaved protocol: copy, bf16 matmul, fp32 FMA chain, sin chain (slots per sin);
- shared-memory bandwidth and pointer-chase latencies;
- the roofline points and the explorer's measurement, in-process;
- the explorer cell in a real Jupyter kernel (nbclient, widgets on), with a per-cell time limit and a stack dump
  every 20 s, in case it hangs there;
- last (it may crash the process): the fusion measurement with torch.compile.

Writes $OUT/h100-explore-memory03.json after every stage (seconds, GPU memory reserved, host RSS per stage).
"""
from __future__ import annotations

import json
import os
import resource
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.environ.get("OUT", ".")
PATH = os.path.join(OUT, "h100-explore-memory03.json")
res = {"stage_seconds": {}, "memory": {}}


def save():
    with open(PATH, "w") as f:
        json.dump(res, f, indent=1, default=str)


def stage(name, fn):
    import torch

    t = time.perf_counter()
    print(f"--- {name}", flush=True)
    try:
        r = fn()
    except Exception as e:  # keep going: the other stages' figures still count
        r = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
        print(r["traceback"], flush=True)
    dt = time.perf_counter() - t
    res[name] = r
    res["stage_seconds"][name] = round(dt, 2)
    res["memory"][name] = {"gpu_reserved_gib": torch.cuda.memory_reserved() / 2**30,
                           "gpu_max_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
                           "host_maxrss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}
    print(f"    {dt:.1f} s  {res['memory'][name]}", flush=True)
    save()
    return r


def explorer_in_kernel():
    """The lesson's explorer cell in a Jupyter kernel (widgets available), 60 s per cell."""
    import nbformat
    from nbclient import NotebookClient

    cells = ["import faulthandler, os\nfaulthandler.dump_traceback_later(20, repeat=True, "
             "file=open(os.path.join(os.environ['OUT'], 'faulthandler.txt'), 'w'))",
             "import time\nt0 = time.perf_counter()\nimport gpucourse\ngpucourse.setup()\n"
             "from gpucourse import roofline as R\n"
             "from gpucourse.lessons.l03_memory_hierarchy import explorer, measure\n"
             "CEIL = R.Ceilings(gbps=3000.0, tflops=650.0, source='fixed for this test')\n"
             "print('import', time.perf_counter() - t0)",
             "t0 = time.perf_counter()\n"
             "explorer.roofline_explorer(CEIL, measure=measure.measure_op)\n"
             "print('explorer cell', time.perf_counter() - t0, 'widgets', explorer.widgets_available())"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": ROOT}})
    t = time.perf_counter()
    err = None
    try:
        client.execute()
    except Exception as e:
        err = f"{type(e).__name__}: {str(e)[-500:]}"
    outs = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            if "text" in o:
                outs.append(o["text"][-800:])
        outs.append(str(c.get("metadata", {}).get("execution", {})))
    return {"seconds": time.perf_counter() - t, "error": err, "outputs": outs}


def main():
    import torch

    import gpucourse
    from gpucourse.lessons.l03_memory_hierarchy import measure

    gpucourse.setup()
    res["device"] = torch.cuda.get_device_name()
    res["torch"], res["date"] = torch.__version__, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ceil = {}

    def ceilings():
        c, d = measure.ceilings()
        ceil["c"], ceil["d"] = c, d
        return {"gbps": c.gbps, "tflops": c.tflops, "fp32_tflops": c.fp32_tflops, **d}

    stage("ceilings", ceilings)
    stage("working_set", lambda: measure.working_set(graph_memcpy=True, bench_kw={"rep_ms": 50}))
    stage("access", measure.access_patterns)
    stage("onchip", measure.onchip)

    def roofline():
        c, d = ceil["c"], ceil["d"]
        pts = measure.roofline_points(c, measure.default_ops("gpu", d["sin_slots"]))
        return measure.roofline_result(c, pts, d)

    stage("roofline", roofline)

    def explorer_measure():
        from gpucourse import roofline as R

        t = time.perf_counter()
        secs = measure.measure_op(R.gemm(8192, 128, 8192, "bfloat16"))
        return {"seconds_measured": secs, "wall": time.perf_counter() - t}

    stage("explorer_measure_op", explorer_measure)
    torch.cuda.empty_cache()
    stage("explorer_in_kernel", explorer_in_kernel)
    stage("fusion", lambda: measure.fusion(bench_kw={"flush_l2": "read"}))
    print(json.dumps(res["stage_seconds"]), flush=True)


if __name__ == "__main__":
    main()
