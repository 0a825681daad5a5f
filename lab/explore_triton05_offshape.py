#!/usr/bin/env python3
"""Exploration behind issue #18 §1 and §4 (lesson 05): the workbook's solution kernels off the benchmark shape, the
candidate kernels that could replace them, and the fused matmul epilogue against what a practitioner writes.

Softmax (memory-bound, 11-25 µs kernels): timed with ``gpucourse.timing.bench(flush_l2="read")`` (L2 evicted by a read
of 256 MB before each repeat, so no dirty lines are written back inside the timed kernel); torch.softmax and the copy
of the same bytes timed the same way, in turns. The shapes of issue #18: 65536x128 bf16, 32768x1000 fp16,
1x100000 fp32. Candidates: several rows per program (a 2-D block of ROWS x BLOCK) and, for one huge row, a split
path (each program reduces a chunk to a max and a sum of exponentials; a second kernel combines the partials and
writes its chunk).

Matmul (bf16 1000^3 and 16x8192x8192): the workbook kernel autotuned as it is, each candidate tile config launched
directly (no autotuner), and cuBLAS (torch.matmul), in turns with a read flush; the host time per call of the
autotuned wrapper and of torch.matmul; the GPU time of 20 calls replayed from a CUDA graph (no launch gaps).

Fused epilogue silu(a @ b + bias), bf16, three shapes: the workbook kernel and the Hopper kernel fused, torch's
unfused chain, F.silu(torch.addmm(bias, a, b)) (cuBLASLt adds the bias in its epilogue), torch.compile of the
unfused code (default mode), and the plain matmuls (cuBLAS and ours), after settle(), 3 interleaved rounds.

  python3 lab/explore_triton05_offshape.py     (writes $OUT/explore_triton05_offshape.json)
"""
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import gpucourse  # noqa: F401
from gpucourse.timing import bench, event_times, graph_repeat, interleaved, settle

T0 = time.perf_counter()
OUT = {}


def log(*a):
    print(f"[{time.perf_counter() - T0:6.1f} s]", *a, flush=True)


def save():
    path = os.path.join(os.environ.get("OUT", "/tmp"), "explore_triton05_offshape.json")
    with open(path, "w") as f:
        json.dump(OUT, f, indent=1, default=str)


# ----------------------------------------------------------------------------------------------------- candidates
@triton.jit
def softmax_rows_kernel(out_ptr, x_ptr, n_rows, n_cols, x_row_stride, x_col_stride, out_row_stride,
                        BLOCK: tl.constexpr, ROWS: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    safe = tl.minimum(rows, n_rows - 1)  # rows past the end re-read the last row (never stored): no all -inf row
    x = tl.load(x_ptr + safe[:, None] * x_row_stride + cols[None, :] * x_col_stride,
                mask=cols[None, :] < n_cols, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=1)[:, None])
    y = num / tl.sum(num, axis=1)[:, None]
    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], y.to(out_ptr.dtype.element_ty),
             mask=(rows[:, None] < n_rows) & (cols[None, :] < n_cols))


@triton.jit
def softmax_partial_kernel(m_ptr, s_ptr, x_ptr, n_cols, x_row_stride, x_col_stride, n_chunks, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * x_row_stride + cols * x_col_stride, mask=cols < n_cols,
                other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    tl.store(m_ptr + row * n_chunks + chunk, m)
    tl.store(s_ptr + row * n_chunks + chunk, tl.sum(tl.exp(x - m), axis=0))


@triton.jit
def softmax_finish_kernel(out_ptr, x_ptr, m_ptr, s_ptr, n_cols, x_row_stride, x_col_stride, out_row_stride,
                          n_chunks, CHUNK: tl.constexpr, CHUNKS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    j = tl.arange(0, CHUNKS)
    m_part = tl.load(m_ptr + row * n_chunks + j, mask=j < n_chunks, other=-float("inf"))
    s_part = tl.load(s_ptr + row * n_chunks + j, mask=j < n_chunks, other=0.0)
    m = tl.max(m_part, axis=0)
    s = tl.sum(s_part * tl.exp(m_part - m), axis=0)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * x_row_stride + cols * x_col_stride, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_row_stride + cols, (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty),
             mask=cols < n_cols)


def softmax_rows(x, rows, warps):
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    softmax_rows_kernel[(triton.cdiv(n_rows, rows),)](out, x, n_rows, n_cols, x.stride(0), x.stride(1),
                                                        out.stride(0), BLOCK=triton.next_power_of_2(n_cols),
                                                        ROWS=rows, num_warps=warps)
    return out


def softmax_split(x, chunk, warps):
    n_rows, n_cols = x.shape
    n_chunks = triton.cdiv(n_cols, chunk)
    out = torch.empty_like(x)
    m = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x.device)
    s = torch.empty_like(m)
    softmax_partial_kernel[(n_rows, n_chunks)](m, s, x, n_cols, x.stride(0), x.stride(1), n_chunks, CHUNK=chunk,
                                               num_warps=warps)
    softmax_finish_kernel[(n_rows, n_chunks)](out, x, m, s, n_cols, x.stride(0), x.stride(1), out.stride(0),
                                              n_chunks, CHUNK=chunk, CHUNKS=triton.next_power_of_2(n_chunks),
                                              num_warps=warps)
    return out


def copy_fn(x):
    dst = torch.empty_like(x)
    return lambda: dst.copy_(x)


# ------------------------------------------------------------------------------------------------------- softmax
def explore_softmax(sol):
    res = {}
    shapes = [((65536, 128), torch.bfloat16, [(8, 4), (16, 4), (32, 4), (32, 8), (64, 8)]),
              ((32768, 1000), torch.float16, [(1, 4), (2, 4), (4, 4), (4, 8), (8, 8)]),
              ((1, 100000), torch.float32, [])]
    for (r, c), dtype, row_cands in shapes:
        x = torch.randn(r, c, device="cuda", dtype=dtype)
        want = torch.softmax(x.float(), dim=-1).to(dtype)
        nbytes = 2 * x.numel() * x.element_size()
        fns = {"torch": lambda: torch.softmax(x, dim=-1), "copy": copy_fn(x), "solution": lambda: sol["softmax"](x)}
        for rows, warps in row_cands:
            fns[f"rows{rows} w{warps}"] = lambda rows=rows, warps=warps: softmax_rows(x, rows, warps)
        if r == 1:
            for chunk, warps in [(1024, 4), (2048, 4), (2048, 8), (4096, 8), (8192, 8)]:
                fns[f"split{chunk} w{warps}"] = lambda chunk=chunk, warps=warps: softmax_split(x, chunk, warps)
        errs = {}
        for name, fn in fns.items():
            if name in ("torch", "copy"):
                continue
            try:
                torch.testing.assert_close(fn(), want, rtol=2e-2 if dtype != torch.float32 else 1e-4, atol=1e-5)
            except Exception as e:  # noqa: BLE001
                errs[name] = str(e)[:300]
        fns = {k: v for k, v in fns.items() if k not in errs}
        t = interleaved(fns, rounds=3, bytes=nbytes, flush_l2="read", rep_ms=40)
        us = {k: v.median_ms * 1e3 for k, v in t.items()}
        # the same through do_bench's default (a write flush), for the protocol's effect
        dob = {k: bench(fns[k], flush_l2=True, rep_ms=40).median_ms * 1e3 for k in ("torch", "copy", "solution")}
        key = f"{r}x{c} {str(dtype).replace('torch.', '')}"
        res[key] = {"us_read_flush": us, "us_do_bench_write_flush": dob, "errors": errs,
                    "vs_torch": {k: us["torch"] / v for k, v in us.items()},
                    "vs_copy": {k: us["copy"] / v for k, v in us.items()}}
        log("softmax", key, {k: round(v, 1) for k, v in us.items()}, "dob", {k: round(v, 1) for k, v in dob.items()},
            errs or "")
        del x
    # where rows-per-program stops mattering: width sweep at 4096 rows... (fp16, 16384 rows), rows kernel vs solution
    sweep = {}
    for c in (64, 256, 512, 2048, 4096):
        x = torch.randn(16384, c, device="cuda", dtype=torch.float16)
        nbytes = 2 * x.numel() * x.element_size()
        blk = triton.next_power_of_2(c)
        rows = max(1, 4096 // blk)
        fns = {"torch": lambda: torch.softmax(x, dim=-1), "copy": copy_fn(x), "solution": lambda: sol["softmax"](x),
               f"rows{rows} w4": lambda: softmax_rows(x, rows, 4), f"rows{rows} w8": lambda: softmax_rows(x, rows, 8)}
        t = interleaved(fns, rounds=2, bytes=nbytes, flush_l2="read", rep_ms=30)
        sweep[c] = {k: v.median_ms * 1e3 for k, v in t.items()}
        log("softmax sweep 16384 x", c, {k: round(v, 1) for k, v in sweep[c].items()})
    res["sweep_16384_rows_fp16_us"] = sweep
    # one huge row: split vs torch as the row grows, and few rows
    huge = {}
    for r, c in ((1, 16384), (1, 1_000_000), (8, 100000), (64, 100000)):
        x = torch.randn(r, c, device="cuda", dtype=torch.float32)
        nbytes = 2 * x.numel() * 4
        fns = {"torch": lambda: torch.softmax(x, dim=-1), "copy": copy_fn(x),
               "split2048 w4": lambda: softmax_split(x, 2048, 4), "split4096 w8": lambda: softmax_split(x, 4096, 8)}
        if c <= 16384:
            fns["solution"] = lambda: sol["softmax"](x)
        t = interleaved(fns, rounds=2, bytes=nbytes, flush_l2="read", rep_ms=30)
        huge[f"{r}x{c}"] = {k: v.median_ms * 1e3 for k, v in t.items()}
        log("softmax huge", r, c, {k: round(v, 1) for k, v in huge[f"{r}x{c}"].items()})
    res["huge_rows_fp32_us"] = huge
    OUT["softmax"] = res
    save()


# -------------------------------------------------------------------------------------------------------- matmul
def explore_matmul(sol):
    kern = sol["matmul_kernel"].fn.fn  # the JIT function under @autotune and @heuristics

    def direct(a, b, bm, bn, bk, stages, warps, group=8):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        kern[grid](a, b, c, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                   BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, ACTIVATION="none", INTERPRETED=False,
                   EVEN_K=K % bk == 0, num_stages=stages, num_warps=warps)
        return c

    res = {}
    cands = {
        (1000, 1000, 1000): [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                             (64, 64, 64, 4, 4), (64, 128, 128, 3, 4), (64, 64, 128, 3, 4), (128, 128, 128, 3, 8)],
        (16, 8192, 8192): [(128, 256, 64, 3, 8), (16, 64, 256, 3, 4), (16, 64, 128, 4, 4), (16, 128, 128, 4, 4),
                           (16, 32, 256, 4, 4), (32, 64, 128, 4, 4), (16, 64, 256, 4, 4), (16, 128, 256, 3, 4)],
    }
    for (m, n, k), cfgs in cands.items():
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        want = torch.matmul(a, b)
        fns = {"cuBLAS": lambda: torch.matmul(a, b), "solution": lambda: sol["matmul"](a, b)}
        for cfg in cfgs:
            fns["%dx%dx%d s%d w%d" % cfg] = lambda cfg=cfg: direct(a, b, *cfg)
        errs = {}
        for name, fn in fns.items():
            try:
                torch.testing.assert_close(fn(), want, rtol=2e-2, atol=1.0)
            except Exception as e:  # noqa: BLE001
                errs[name] = str(e)[:300]
        fns = {kk: v for kk, v in fns.items() if kk not in errs}
        flops = 2 * m * n * k
        t = interleaved(fns, rounds=3, flops=flops, dtype=torch.bfloat16, flush_l2="read", rep_ms=40)
        us = {kk: v.median_ms * 1e3 for kk, v in t.items()}
        dob = {kk: bench(fns[kk], flush_l2=True, rep_ms=40).median_ms * 1e3 for kk in ("cuBLAS", "solution")}
        # host cost per call: enqueue 200 calls back to back (the GPU is not waited for in between)
        host = {}
        for kk in ("cuBLAS", "solution"):
            fn = fns[kk]
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            host[kk] = (time.perf_counter() - t0) / 200 * 1e6
            torch.cuda.synchronize()
        graph = {}
        for kk in ("cuBLAS", "solution"):
            g = graph_repeat(fns[kk], 20)
            graph[kk] = statistics.median(event_times(g, reps=20, warmup=2)) / 20 * 1e3
        key = f"{m}x{n}x{k} bf16"
        best = sol["matmul_kernel"].best_config if hasattr(sol["matmul_kernel"], "best_config") else None
        res[key] = {"us_read_flush": us, "us_do_bench_write_flush": dob, "host_us_per_call": host,
                    "graph_us_per_call": graph, "errors": errs, "autotune_choice": str(best),
                    "vs_cuBLAS": {kk: us["cuBLAS"] / v for kk, v in us.items()}}
        log("matmul", key, {kk: round(v, 1) for kk, v in us.items()}, "dob", dob, "host", host, "graph", graph,
            errs or "")
        OUT["matmul"] = res
        save()


# ----------------------------------------------------------------------------------------------- fused epilogue
def explore_fused(sol):
    from gpucourse.lessons.l05_triton import hopper_matmul

    mm = sol["matmul"]
    unfused = lambda a, b, bias: F.silu(torch.matmul(a, b) + bias)  # noqa: E731
    t0 = time.perf_counter()
    compiled = torch.compile(unfused, dynamic=False)
    res = {"compile_mode": "default", "shapes": {}}
    for m, n, k in ((8192, 8192, 8192), (8192, 8192, 2048), (4096, 4096, 1024)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        want = unfused(a, b, bias)
        fns = {"workbook fused": lambda: mm(a, b, bias, "silu"),
               "hopper fused": lambda: hopper_matmul.matmul(a, b, bias, "silu"),
               "torch unfused": lambda: unfused(a, b, bias),
               "addmm + silu": lambda: F.silu(torch.addmm(bias, a, b)),
               "torch.compile": lambda: compiled(a, b, bias),
               "cuBLAS matmul only": lambda: torch.matmul(a, b),
               "workbook matmul only": lambda: mm(a, b)}
        tc = time.perf_counter()
        for name, fn in fns.items():
            torch.testing.assert_close(fn(), want if "only" not in name else fn(), rtol=2e-2, atol=1.0)
        res.setdefault("first_calls_s", {})[f"{m}x{n}x{k}"] = time.perf_counter() - tc
        settle(lambda: torch.matmul(a, b), seconds=1.0)
        t = interleaved(fns, rounds=3, rep_ms=100, flops=2 * m * n * k, dtype=torch.bfloat16)
        ms = {kk: v.median_ms for kk, v in t.items()}
        res["shapes"][f"{m}x{n}x{k}"] = {"ms": ms, "speedup_of_workbook_fused": {
            kk: v / ms["workbook fused"] for kk, v in ms.items()}, "speedup_of_hopper_fused": {
            kk: v / ms["hopper fused"] for kk, v in ms.items()}}
        log("fused", m, n, k, {kk: round(v, 4) for kk, v in ms.items()})
        OUT["fused"] = res
        save()
    res["compile_and_autotune_total_s"] = time.perf_counter() - t0


def main():
    from gpucourse.solutions import load_solutions

    OUT["device"] = torch.cuda.get_device_name()
    OUT["versions"] = {"torch": torch.__version__, "triton": triton.__version__}
    OUT["protocol"] = ("softmax and matmul off-shape: gpucourse.timing.bench(flush_l2='read') in interleaved rounds "
                       "(median of round medians, µs); 'us_do_bench_write_flush': the same with do_bench's write "
                       "flush; fused: settle 1 s, 3 interleaved rounds of 100 ms with do_bench's write flush (ms)")
    sol = load_solutions("05_triton")
    log("solutions loaded")
    for part in (explore_softmax, explore_matmul, explore_fused):
        try:
            part(sol)
        except Exception as e:  # noqa: BLE001
            import traceback

            OUT.setdefault("failed", {})[part.__name__] = traceback.format_exc()[-2000:]
            log("FAILED", part.__name__, e)
        save()
    OUT["seconds"] = time.perf_counter() - T0
    save()
    log("done")


if __name__ == "__main__":
    main()
