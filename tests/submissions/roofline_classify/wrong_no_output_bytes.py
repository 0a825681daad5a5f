"""Wrong: counts the bytes read but not the output written, so every intensity is too high."""
BYTES_PER_ELEMENT = {"float32": 4, "float16": 2, "bfloat16": 2}


def roofline_classify(ops, ceilings):
    bw = ceilings["gbps"] * 1e9
    ridge = {"tensor cores": ceilings["tensor_tflops"] * 1e12 / bw, "CUDA cores": ceilings["cuda_tflops"] * 1e12 / bw}
    out = {}
    for name, d in ops.items():
        s = BYTES_PER_ELEMENT[d["dtype"]]
        if d["kind"] == "elementwise":
            flops, nbytes = d["flops_per_element"] * d["n"], d["inputs"] * d["n"] * s
        elif d["kind"] == "reduction":
            flops, nbytes = d["rows"] * d["cols"], d["rows"] * d["cols"] * s
        elif d["kind"] == "gemv":
            flops, nbytes = 2 * d["M"] * d["K"], (d["M"] * d["K"] + d["K"]) * s
        else:
            m, n, k = d["M"], d["N"], d["K"]
            flops, nbytes = 2 * m * n * k, (m * k + k * n) * s
        intensity = flops / nbytes
        out[name] = (intensity, "memory" if intensity < ridge[d["unit"]] else "compute")
    return out
