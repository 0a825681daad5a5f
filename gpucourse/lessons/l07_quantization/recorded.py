"""What lesson 07 shows from a recorded H100 run of its tensor-core int4 path (the "Going further" section), in both
modes: the curated file ``benchmarks/results/recorded/h100-l07_quantization.json``, read by stable keys
(:func:`gpucourse.recorded.load`).

``python -m gpucourse.lessons.l07_quantization.recorded promote`` writes that file from the lab's runs (``lab/``,
logged in ``lab/README.md``): :func:`promote` is the one place that knows their configuration labels.
"""
from __future__ import annotations

import os
import sys

from gpucourse import recorded as curated

LESSON = "l07_quantization"

KEYS = {
    "tc_m1": "M = 1, int4 groups of 128, µs with L2 flushed by a read: per shape (n, k) bf16 cuBLAS, the rows path "
             "and the tc path (w4a16_gemv's default), one run",
    "tc_error_equals_rows": "whether the tc path's largest error against the float64 product equalled the rows "
                            "path's on every checked shape at M = 1",
    "tc_error_checked_shapes": "the (M, N, K) shapes of that check at M = 1",
    "int4_read_floor_us": "8192 x 8192: reading the int4 words alone in the rows GEMV's order, no arithmetic (µs, "
                          "the rows kernel's block shape)",
    "int4_read_floor_fastest_us": "the same read, the fastest block shape tried (µs)",
    "int4_read_floor_bf16_us": "bf16 F.linear on 8192 x 8192 in the read floor's run (µs)",
    "tile_major_m1": "M = 1: per shape (n, k) bf16 cuBLAS, the tc path on pack_int4's row layout and on tile-major "
                     "weights (the shipped configuration), the fastest tile-major configuration tried and its µs, "
                     "and the largest difference from the rows kernel relative to its largest value; one run",
    "tile_major_shipped": "the tile-major configuration the lesson ships: TB (rows a block), BLOCK_N, NSTAGE, "
                          "CTAS_PER_SM",
    "tile_major_configs_tried": "how many tile-major configurations that run timed",
}


def load():
    return curated.load(LESSON)


def tc_rounds() -> dict:
    """The recorded run of the tensor-core int4 path beside the rows path and bf16 cuBLAS on the lesson's three
    shapes, whether its error matched the rows path's, and the read floor of 8192 x 8192 against bf16 in its run."""
    rec = load()
    shapes = [{"shape": (r["n"], r["k"]), "bf16": r["bf16_us"], "rows": r["rows_us"], "tc": r["tc_us"]}
              for r in rec["tc_m1"]]
    return {"label": rec.label(), "shapes": shapes, "same_error_as_rows": rec["tc_error_equals_rows"],
            "checked_shapes": [tuple(s) for s in rec["tc_error_checked_shapes"]],
            "read_only": rec["int4_read_floor_us"], "read_fastest": rec["int4_read_floor_fastest_us"],
            "read_bf16": rec["int4_read_floor_bf16_us"]}


def show_tc() -> dict:
    """Print :func:`tc_rounds` as a table (and return it)."""
    r = tc_rounds()
    print(f"{r['label']}; M = 1, int4 groups of 128, µs with L2 flushed by a read, one run")
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


def tile_major_rounds() -> dict:
    """The recorded M = 1 run of the tc kernel on tile-major weights: per shape, bf16 cuBLAS, the row layout, the
    shipped tile-major configuration and the fastest one tried."""
    rec = load()
    shapes = [{"shape": (r["n"], r["k"]), "bf16": r["bf16_us"], "rows_layout": r["row_layout_us"],
               "tiled": r["tile_major_us"], "best": r["fastest_config"], "best_us": r["fastest_us"],
               "worst_rel_diff": r["worst_rel_diff_vs_rows"]} for r in rec["tile_major_m1"]]
    return {"label": rec.label(), "shapes": shapes, "tried": rec["tile_major_configs_tried"],
            "shipped": dict(rec["tile_major_shipped"])}


def show_tile_major() -> dict:
    """Print :func:`tile_major_rounds` as a table (and return it)."""
    r = tile_major_rounds()
    print(f"{r['label']}; M = 1, int4 groups of 128, µs with L2 flushed by a read, one run; {r['tried']} tile-major "
          f"configurations tried")
    print(f"{'N x K':>13} {'bf16 cuBLAS':>12} {'row layout':>18} {'tile-major':>18}   fastest tried")
    for s in r["shapes"]:
        n, k = s["shape"]
        print(f"{n:>6} x {k:<5} {s['bf16']:9.1f} µs {s['rows_layout']:8.1f} µs {s['bf16'] / s['rows_layout']:5.2f}x "
              f"{s['tiled']:8.1f} µs {s['bf16'] / s['tiled']:5.2f}x   {s['best']} ({s['best_us']:.1f} µs)")
    print(f"largest difference from the rows kernel's output, relative to its largest value: "
          f"{max(s['worst_rel_diff'] for s in r['shapes']):.1e}")
    return r


# --- promote: the lab's runs -> the curated file (the only place their labels appear) --------------------------------

TC_RUN = "lab/results/h100-explore-quant-tc3.json"  # lab/explore_quant_tc.py --set lesson
ACCESS_RUN = "lab/results/h100-explore-quant-access.json"  # lab/explore_quant_access.py
BATCH_RUN = "lab/results/h100-explore-quant-batch.json"  # lab/explore_quant_batch.py
SHIPPED = "tiled TB128 BN128 ns3 T4"  # block_sizes.CONFIGS["w4_tc"] on 128-row tile-major blocks


def promote(root: str | None = None) -> str:
    """Read the lab's runs, map their labels to :data:`KEYS`, and write the curated file. Returns its path."""
    import json

    from gpucourse.workbooks import ROOT

    root = root or ROOT

    def read(rel):
        with open(os.path.join(root, rel)) as f:
            return json.load(f)

    tc, acc, batch = read(TC_RUN), read(ACCESS_RUN), read(BATCH_RUN)
    env = {"gpu": tc["device"], "torch": tc["torch"], "triton": tc["triton"]}
    for doc in (acc, batch):
        if {"gpu": doc["device"], "torch": doc["torch"], "triton": doc["triton"]} != env:
            raise ValueError(f"the runs differ in their environment: {env} against {doc['device']}, "
                             f"{doc['torch']}, {doc['triton']}")
    tc_m1 = [{"n": r["shape"][0], "k": r["shape"][1], "bf16_us": r["us"]["bf16 cuBLAS"],
              "rows_us": r["us"]["rows (kernels.py)"], "tc_us": r["us"]["kernels.py tc (w4a16_gemv default)"]}
             for r in tc["rows"]]
    m1 = [c for c in tc["checks"] if c["shape"][0] == 1]
    reads = [v for name, v in acc["us"].items() if name.startswith("rows BN") and "scalar" not in name]
    tiles = []
    for row in batch["m1"]:
        us = row["us"]
        tiled = {k: v for k, v in us.items() if k.startswith("tiled")}
        best = min(tiled, key=tiled.get)
        tiles.append({"n": row["shape"][0], "k": row["shape"][1], "bf16_us": us["bf16 cuBLAS"],
                      "row_layout_us": us["tc rows-layout (default)"], "tile_major_us": us[SHIPPED],
                      "fastest_config": best, "fastest_us": tiled[best],
                      "worst_rel_diff_vs_rows": max(row["rel_diff_vs_rows"].values())})
    tb, bn, ns, t = SHIPPED.split()[1:]
    values = {
        "tc_m1": tc_m1,
        "tc_error_equals_rows": all(c["kernels.py default"] == c["rows"] for c in m1),
        "tc_error_checked_shapes": [list(c["shape"]) for c in m1],
        "int4_read_floor_us": acc["us"]["rows BN4 BW256 w2"],
        "int4_read_floor_fastest_us": min(reads),
        "int4_read_floor_bf16_us": acc["us"]["bf16 F.linear"],
        "tile_major_m1": tiles,
        "tile_major_shipped": {"TB": int(tb[2:]), "BLOCK_N": int(bn[2:]), "NSTAGE": int(ns[2:]),
                               "CTAS_PER_SM": int(t[1:])},
        "tile_major_configs_tried": len([k for k in batch["m1"][0]["us"] if k.startswith("tiled")]),
    }
    sources = [curated.source(rel, root) for rel in (TC_RUN, ACCESS_RUN, BATCH_RUN)]
    return curated.promote(LESSON, values, KEYS, sources, env)


if __name__ == "__main__":
    if sys.argv[1:] != ["promote"]:
        sys.exit("usage: python -m gpucourse.lessons.l07_quantization.recorded promote")
    print(promote())
