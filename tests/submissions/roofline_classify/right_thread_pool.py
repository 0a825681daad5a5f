"""Right, computed on a thread pool that is never shut down (as torch.compile leaves one): threads are flagged for a
human look, but do not change the verdict unless they change what the judge relies on while it decides."""
from concurrent.futures import ThreadPoolExecutor

BYTES_PER_ELEMENT = {"float32": 4, "float16": 2, "bfloat16": 2}
_pool = ThreadPoolExecutor(max_workers=2)


def _one(d, ridge):
    s = BYTES_PER_ELEMENT[d["dtype"]]
    if d["kind"] == "elementwise":
        flops, nbytes = d["flops_per_element"] * d["n"], (d["inputs"] + 1) * d["n"] * s
    elif d["kind"] == "reduction":
        flops, nbytes = d["rows"] * d["cols"], (d["rows"] * d["cols"] + d["rows"]) * s
    elif d["kind"] == "gemv":
        flops, nbytes = 2 * d["M"] * d["K"], (d["M"] * d["K"] + d["K"] + d["M"]) * s
    else:
        flops, nbytes = 2 * d["M"] * d["N"] * d["K"], (d["M"] * d["K"] + d["K"] * d["N"] + d["M"] * d["N"]) * s
    return flops / nbytes, "memory" if flops / nbytes < ridge[d["unit"]] else "compute"


def roofline_classify(ops, ceilings):
    bw = ceilings["gbps"] * 1e9
    ridge = {"tensor cores": ceilings["tensor_tflops"] * 1e12 / bw, "CUDA cores": ceilings["cuda_tflops"] * 1e12 / bw}
    futures = {name: _pool.submit(_one, d, ridge) for name, d in ops.items()}
    return {name: f.result() for name, f in futures.items()}
