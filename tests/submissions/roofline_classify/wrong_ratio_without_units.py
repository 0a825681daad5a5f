"""Wrong: each ops:byte ratio is rate / gbps, leaving out the units (1e12 flop/s over 1e9 B/s), so it is 1000x too
small and ops that are memory-bound are called compute-bound. The intensities are right."""
BYTES_PER_ELEMENT = {"float32": 4, "float16": 2, "bfloat16": 2}


def roofline_classify(ops, ceilings):
    # TFLOP/s over GB/s: 1e12 / 1e9 = 1000x too small
    ridge = {"tensor cores": ceilings["tensor_tflops"] / ceilings["gbps"],
             "CUDA cores": ceilings["cuda_tflops"] / ceilings["gbps"]}
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
        out[name] = (intensity, "memory" if intensity < ridge[d["unit"]] else "compute")
    return out
