"""Wrong: one ops:byte ratio for every op, the CUDA cores' (the "real" fp32 rate, taken for the whole GPU). A skinny
bf16 GEMM on the tensor cores, between the two ridges, is called compute-bound; it is memory-bound on its unit."""
BYTES_PER_ELEMENT = {"float32": 4, "float16": 2, "bfloat16": 2}


def roofline_classify(ops, ceilings):
    ratio = ceilings["cuda_tflops"] * 1e12 / (ceilings["gbps"] * 1e9)
    out = {}
    for name, d in ops.items():
        s = BYTES_PER_ELEMENT[d["dtype"]]
        if d["kind"] == "elementwise":
            flops, nbytes = d["flops_per_element"] * d["n"], (d["inputs"] + 1) * d["n"] * s
        elif d["kind"] == "reduction":
            flops, nbytes = d["rows"] * d["cols"], (d["rows"] * d["cols"] + d["rows"]) * s
        elif d["kind"] == "gemv":
            flops, nbytes = 2 * d["M"] * d["K"], (d["M"] * d["K"] + d["K"] + d["M"]) * s
        else:
            m, n, k = d["M"], d["N"], d["K"]
            flops, nbytes = 2 * m * n * k, (m * k + k * n + m * n) * s
        intensity = flops / nbytes
        out[name] = (intensity, "memory" if intensity < ratio else "compute")
    return out
