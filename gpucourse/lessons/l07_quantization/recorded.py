"""What Nsight Compute recorded for the M = 1 GEMVs on the course's H100 (``benchmarks/explore_quant_words.py`` and
``benchmarks/profile_quant07.py``, committed as ``benchmarks/results/h100-explore-quant-words.json``): the lesson
shows it, labelled, in both modes (profiling needs the GPU and permission to read its counters)."""
from __future__ import annotations


from gpucourse import benchmarks

FILE = "h100-explore-quant-words.json"


def profile() -> dict:
    """The recorded run: ncu figures per kernel (the int8 kernel, and a byte-wise int4 kernel: ``w4a16``), instruction
    counts, and the best speed-ups of the word-wise variants against that byte-wise kernel in the same runs
    (``lesson_i4_range``: it was the lesson's int4 kernel when these rounds ran)."""
    doc = benchmarks.recorded(FILE)
    ncu = doc["ncu_8192x8192"]
    best, lesson = [], []
    for key in ("round5_words_3d", "round6_wide_steps"):
        run = doc[key]
        best += [t[0][0] for t in (r["top_min_speedup_over_shapes"] for r in run["rows"] if r.get("best") == "i4")]
        lesson += [r["lesson_i4_speedup"] for r in run["rows"] if "lesson_i4_speedup" in r]
    return {"device": doc[key]["device"], "torch": doc[key]["torch"], "triton": doc[key]["triton"], "ncu": ncu,
            "words_best_i4": max(best), "lesson_i4_range": (min(lesson), max(lesson))}


def show_profile() -> dict:
    """Print the recorded profile of the int8 and int4 kernels at 8192 x 8192 (and return it)."""
    p = profile()
    ncu = p["ncu"]
    print(f"recorded on an {p['device']} (torch {p['torch']}, triton {p['triton']}) with Nsight Compute, not "
          f"measured here; 8192 x 8192, M = 1")
    print(f"{'kernel':>14} {'µs':>6} {'DRAM % of peak':>15} {'busiest memory unit %':>22} {'issue slots used %':>19}")
    for name, label in (("w8a16", "int8, lesson"), ("w4a16", "int4, bytes")):
        k = ncu[name]
        print(f"{label:>14} {float(k['Duration'][0]):6.1f} {float(k['DRAM Throughput'][0]):15.0f} "
              f"{float(k['Mem Busy'][0]):22.0f} {100 * float(k['Issued Warp Per Scheduler'][0]):19.0f}")
    ins = ncu["w4a16_instructions"]
    print(f"int4: {ins['executed_warp_instructions'] / 1e6:.1f} M warp instructions for {ins['weights'] / 1e6:.0f} M "
          f"weights = {ins['thread_instructions_per_weight']:.1f} instructions per weight")
    print("ncu: " + "; ".join(ins["ncu_notes"][:2]))
    print(f"a variant with 3 instructions per weight in its source (explore_quant_words.py): best "
          f"{p['words_best_i4']:.2f}x bf16, against {p['lesson_i4_range'][0]:.2f}-{p['lesson_i4_range'][1]:.2f}x for "
          f"the byte-wise kernel in the same runs")
    return p


ACCESS = "h100-explore-quant-access.json"  # benchmarks/explore_quant_access.py
NCU_PLANES = "h100-ncu-quant07-planes.txt"  # ncu on benchmarks/profile_quant07.py i8 i4 (the command: its docstring)
PLANES = "h100-explore-quant-planes2.json"  # benchmarks/explore_quant_planes.py, second run


def rounds() -> dict:
    """What the later rounds recorded on 8192 x 8192 at M = 1 (µs, L2 flushed by a read): reading the int4 bytes
    alone in the GEMV's order, the int4 kernels before and after x moved into planes, and bf16 cuBLAS."""
    acc, pl = benchmarks.recorded(ACCESS), benchmarks.recorded(PLANES)
    row = next(r for r in pl["rows"] if r["shape"] == [8192, 8192])
    alone = {k: v for k, v in row["us"].items() if k.startswith("planes GEMV alone")}
    both = {k: v for k, v in row["us"].items() if k.startswith("planes + GEMV")}
    return {"device": acc["device"], "torch": acc["torch"], "triton": acc["triton"],
            "read_only": acc["us"]["rows BN4 BW256 w2"], "words_split": acc["us"]["int4 BN4 BW256 w2"],
            "bytes_pairs": row["us"]["int4 workbook (before)"], "planes_alone": min(alone.values()),
            "planes_both": min(both.values()), "reorder": row["us"]["x planes alone"],
            "bf16": row["us"]["bf16 cuBLAS"]}


def ncu_planes() -> dict:
    """The committed Nsight Compute text of the lesson's kernels (int8 bytes kernel, x_planes, int4 rows kernel) on
    8192 x 8192: per kernel its µs, DRAM % of peak, registers, achieved occupancy %, warp instructions issued."""
    import os
    import re

    with open(os.path.join(benchmarks.results_dir(), NCU_PLANES)) as f:
        text = f.read()
    out = {}
    for block in re.split(r"\n  (?=\w+_kernel \()", text)[1:]:
        name = block.split()[0]

        def num(label):
            m = re.search(re.escape(label) + r"\s+[\w/%]*\s+([\d,.]+)", block)
            return float(m.group(1).replace(",", ""))

        out[name] = {"us": num("Duration"), "dram_pct": num("DRAM Throughput"),
                     "registers": num("Registers Per Thread"), "occupancy_pct": num("Achieved Occupancy"),
                     "warp_instructions": num("smsp__inst_executed.sum")}
    return out


def show_rounds() -> dict:
    """Print :func:`rounds` as a table (and return it)."""
    r = rounds()
    print(f"recorded on an {r['device']} (torch {r['torch']}, triton {r['triton']}), not measured here; "
          f"8192 x 8192, M = 1, µs with L2 flushed by a read (best configuration of each)")
    lines = (("read the int4 words only, in the GEMV's order (no arithmetic)", r["read_only"]),
             ("int4 GEMV: bytes, x pairs split in registers", r["bytes_pairs"]),
             ("int4 GEMV: words, x split in registers", r["words_split"]),
             ("int4 GEMV: words, x already in planes", r["planes_alone"]),
             ("reorder x into planes (a small kernel of its own)", r["reorder"]),
             ("reorder + int4 GEMV (what a caller pays)", r["planes_both"]),
             ("bf16 F.linear (cuBLAS)", r["bf16"]))
    for label, us in lines:
        print(f"  {label:64s} {us:6.1f}")
    k = ncu_planes()["w4a16_rows_kernel"]
    print(f"Nsight Compute on the int4 kernel with x in planes: {k['us']:.1f} µs (clocks not locked), DRAM "
          f"{k['dram_pct']:.0f}% busy, {k['registers']:.0f} registers a thread, {k['occupancy_pct']:.0f}% occupancy, "
          f"{k['warp_instructions'] * 32 / (8192 * 8192):.1f} instructions per weight")
    r["ncu"] = k
    return r


TC = "h100-explore-quant-tc3.json"  # benchmarks/explore_quant_tc.py --set lesson: w4a16_tc_kernel via w4a16_gemv
TC_NAME = "kernels.py tc (w4a16_gemv default)"
ROWS_NAME = "rows (kernels.py)"


def tc_rounds() -> dict:
    """The recorded H100 run of the tensor-core int4 path (w4a16_tc_kernel, through w4a16_gemv) beside the rows
    path and bf16 cuBLAS, µs with L2 flushed by a read, on the lesson's three shapes; whether its error matched the
    rows path's on every checked shape; and the read floor of 8192 x 8192 (reading the int4 words alone, in the GEMV's
    order, no arithmetic; :func:`rounds`' file) against bf16 in that run."""
    doc, acc = benchmarks.recorded(TC), benchmarks.recorded(ACCESS)
    shapes = []
    for row in doc["rows"]:
        us = row["us"]
        shapes.append({"shape": tuple(row["shape"]), "bf16": us["bf16 cuBLAS"], "rows": us[ROWS_NAME],
                       "tc": us[TC_NAME]})
    m1 = [c for c in doc["checks"] if c["shape"][0] == 1]  # M = 1: where the default is the tc path
    same_error = all(c["kernels.py default"] == c["rows"] for c in m1)
    reads = [v for name, v in acc["us"].items() if name.startswith("rows BN") and "scalar" not in name]
    return {"device": doc["device"], "torch": doc["torch"], "triton": doc["triton"], "shapes": shapes,
            "same_error_as_rows": same_error, "checked_shapes": [tuple(c["shape"]) for c in m1],
            "read_only": acc["us"]["rows BN4 BW256 w2"], "read_fastest": min(reads),
            "read_bf16": acc["us"]["bf16 F.linear"]}


def show_tc() -> dict:
    """Print :func:`tc_rounds` as a table (and return it)."""
    r = tc_rounds()
    print(f"recorded on an {r['device']} (torch {r['torch']}, triton {r['triton']}), not measured here; M = 1, int4 "
          f"groups of 128, µs with L2 flushed by a read, one run")
    print(f"{'N x K':>13} {'bf16 cuBLAS':>12} {'rows path':>18} {'tc path':>18}")
    for s in r["shapes"]:
        n, k = s["shape"]
        print(f"{n:>6} x {k:<5} {s['bf16']:9.1f} µs {s['rows']:8.1f} µs {s['bf16'] / s['rows']:5.2f}x "
              f"{s['tc']:8.1f} µs {s['bf16'] / s['tc']:5.2f}x")
    print(f"largest error against the float64 product, the tc path's equal to the rows path's on the "
          f"{len(r['checked_shapes'])} checked shapes at M = 1: {r['same_error_as_rows']}")
    sq = next(s for s in r["shapes"] if s["shape"] == (8192, 8192))
    print(f"read floor, 8192 x 8192, row layout (the int4 words read in the GEMV's order, no arithmetic; one run "
          f"of its own): "
          f"{r['read_only']:.1f} µs ({r['read_fastest']:.1f} µs the fastest block shape) against bf16's "
          f"{r['read_bf16']:.1f} µs = {r['read_bf16'] / r['read_only']:.2f}x "
          f"({r['read_bf16'] / r['read_fastest']:.2f}x)")
    print(f"the tc path at 8192 x 8192 takes {sq['tc'] / r['read_only']:.2f} times the read floor's time")
    return r


BATCH_FILE = "h100-explore-quant-batch.json"
TILED = "tiled TB128 BN128 ns3 T4"  # the configuration the lesson ships (kernels.CONFIGS["w4_tc"])


def tile_major_rounds() -> dict:
    """``benchmarks/explore_quant_batch.py``'s M = 1 rounds: per shape, bf16 cuBLAS, the tc kernel on
    ``pack_int4``'s row layout and on tile-major weights (the shipped configuration, and the fastest one tried)."""
    doc = benchmarks.recorded(BATCH_FILE)
    shapes = []
    for row in doc["m1"]:
        us = row["us"]
        tiled = {k: v for k, v in us.items() if k.startswith("tiled")}
        best = min(tiled, key=tiled.get)
        shapes.append({"shape": tuple(row["shape"]), "bf16": us["bf16 cuBLAS"], "rows_layout":
                       us["tc rows-layout (default)"], "tiled": us[TILED], "best": best, "best_us": tiled[best],
                       "worst_rel_diff": max(row["rel_diff_vs_rows"].values())})
    return {"device": doc["device"], "torch": doc["torch"], "triton": doc["triton"], "shapes": shapes,
            "tried": len([k for k in doc["m1"][0]["us"] if k.startswith("tiled")])}


def show_tile_major() -> dict:
    """Print :func:`tile_major_rounds` as a table (and return it)."""
    r = tile_major_rounds()
    print(f"recorded on an {r['device']} (torch {r['torch']}, triton {r['triton']}), not measured here; M = 1, int4 "
          f"groups of 128, µs with L2 flushed by a read, one run; {r['tried']} tile-major configurations tried")
    print(f"{'N x K':>13} {'bf16 cuBLAS':>12} {'row layout':>18} {'tile-major':>18}   fastest tried")
    for s in r["shapes"]:
        n, k = s["shape"]
        print(f"{n:>6} x {k:<5} {s['bf16']:9.1f} µs {s['rows_layout']:8.1f} µs {s['bf16'] / s['rows_layout']:5.2f}x "
              f"{s['tiled']:8.1f} µs {s['bf16'] / s['tiled']:5.2f}x   {s['best']} ({s['best_us']:.1f} µs)")
    print(f"largest difference from the rows kernel's output, relative to its largest value: "
          f"{max(s['worst_rel_diff'] for s in r['shapes']):.1e}")
    return r
