#!/usr/bin/env python3
"""Scratch (issue #4, round 2): can a Hopper-style kernel (tensor descriptors, i.e. TMA loads/stores, and a
persistent grid) lift the fused matmul + bias + silu past 1.1x torch's unfused version at bf16 8192^3?

Round 1 (explore_matmul.py) showed the workbook kernel at ~0.95x cuBLAS; fused/unfused then depends on clock drift.
Here, timed interleaved after settle() with 500 ms windows:
  workbook   the solution notebook's kernel (pointer loads, one program per tile)
  tma        descriptor loads/stores, one program per tile
  tma_p      descriptor loads/stores, persistent (one program per SM walking tiles; next tile's loads overlap
             this tile's epilogue)
and the unfused pieces separately (matmul, + bias, silu) to see what the epilogue costs torch.
Prints one JSON line per row and writes $OUT/explore_matmul_tma.json as it goes.
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gpucourse  # noqa: E402,F401
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gpucourse.timing import bench, settle  # noqa: E402

ROWS = []


def save(rec):
    print(json.dumps(rec), flush=True)
    ROWS.append(rec)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "explore_matmul_tma.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": ROWS}, f, indent=1)


def tma_configs():
    out = []
    for bm, bn, bk, s, w, sub in [(128, 256, 64, 3, 8, False), (128, 256, 64, 4, 8, False),
                                  (128, 256, 64, 3, 8, True), (128, 256, 64, 4, 8, True),
                                  (128, 128, 64, 4, 8, False), (128, 128, 128, 3, 8, False),
                                  (256, 128, 64, 3, 8, False)]:
        out.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "SUBTILE": sub},
                                 num_stages=s, num_warps=w))
    return out


@triton.jit
def _tile_of(tile, num_m, num_n, GROUP_M: tl.constexpr):
    per_group = GROUP_M * num_n
    first_m = (tile // per_group) * GROUP_M
    rows = min(num_m - first_m, GROUP_M)
    return first_m + (tile % per_group) % rows, (tile % per_group) // rows


@triton.jit
def _epilogue_store(c_desc, acc, bias_ptr, off_m, off_n, N, BLOCK_N: tl.constexpr, ACTIVATION: tl.constexpr,
                    SUBTILE: tl.constexpr):
    if ACTIVATION != "none":
        rn = off_n + tl.arange(0, BLOCK_N)
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        if ACTIVATION == "silu":
            acc = acc * tl.sigmoid(acc)
    dtype = c_desc.dtype
    if SUBTILE:  # two half-width stores: less shared memory for the store buffer
        halves = tl.permute(tl.reshape(acc, (acc.shape[0], 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([off_m, off_n], left.to(dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(dtype))
    else:
        c_desc.store([off_m, off_n], acc.to(dtype))


@triton.autotune(configs=tma_configs(), key=["M", "N", "K", "ACTIVATION"])
@triton.jit
def tma_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SUBTILE: tl.constexpr, ACTIVATION: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BLOCK_M, BLOCK_N // 2 if SUBTILE else BLOCK_N])
    pid_m, pid_n = _tile_of(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    off_m, off_n = pid_m * BLOCK_M, pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        acc = tl.dot(a_desc.load([off_m, k * BLOCK_K]), b_desc.load([k * BLOCK_K, off_n]), acc)
    _epilogue_store(c_desc, acc, bias_ptr, off_m, off_n, N, BLOCK_N, ACTIVATION, SUBTILE)


@triton.autotune(configs=tma_configs(), key=["M", "N", "K", "ACTIVATION"])
@triton.jit
def tma_persistent_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SUBTILE: tl.constexpr,
                          ACTIVATION: tl.constexpr, NUM_SMS: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BLOCK_M, BLOCK_N // 2 if SUBTILE else BLOCK_N])
    num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    # A second counter for the epilogue's tile keeps the pipeliner from tying the prologue to the epilogue.
    tile_out = tl.program_id(0) - NUM_SMS
    for tile in tl.range(tl.program_id(0), num_m * num_n, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_of(tile, num_m, num_n, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(k_steps):
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k * BLOCK_K]), b_desc.load([k * BLOCK_K, pid_n * BLOCK_N]),
                         acc)
        tile_out += NUM_SMS
        pid_m, pid_n = _tile_of(tile_out, num_m, num_n, GROUP_M)
        _epilogue_store(c_desc, acc, bias_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N, N, BLOCK_N, ACTIVATION, SUBTILE)


def _alloc(size, alignment, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


def tma_matmul(persistent):
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def matmul(a, b, bias=None, activation="none"):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        act = activation if bias is not None else "none"
        bias_arg = bias if bias is not None else c
        if persistent:
            grid = lambda meta: (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)  # noqa
            tma_persistent_kernel[grid](a, b, c, bias_arg, M, N, K, ACTIVATION=act, NUM_SMS=sms)
        else:
            grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa
            tma_kernel[grid](a, b, c, bias_arg, M, N, K, ACTIVATION=act)
        return c
    matmul.kernel = tma_persistent_kernel if persistent else tma_kernel
    return matmul


def interleaved(fns, rounds=5, **decl):
    runs = {n: [] for n in fns}
    for _ in range(rounds):
        for n, f in fns.items():
            runs[n].append(bench(f, rep_ms=300, **decl).median_ms)
    return {n: statistics.median(v) for n, v in runs.items()}, {n: (min(v), max(v)) for n, v in runs.items()}


def main():
    triton.set_allocator(_alloc)
    from gpucourse.solutions import load_solutions
    variants = {"workbook": load_solutions("05_triton")["matmul"], "tma": tma_matmul(False),
                "tma_p": tma_matmul(True)}
    for k in (8192, 2048):
        m = n = 8192
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        ref = F.silu(torch.matmul(a, b) + bias)
        mm = torch.matmul(a, b)
        settle(lambda: torch.matmul(a, b))
        t, spread = interleaved({"cublas": lambda: torch.matmul(a, b), "add": lambda: mm + bias,
                                 "silu": lambda: F.silu(mm), "unfused": lambda: F.silu(torch.matmul(a, b) + bias),
                                 "addmm_silu": lambda: F.silu(torch.addmm(bias, a, b))})
        save({"K": k, "what": "torch pieces", **{f"{x}_ms": round(y, 4) for x, y in t.items()},
              "spread": spread})
        for name, fn in variants.items():
            t0 = time.perf_counter()
            try:
                got = fn(a, b, bias, "silu")
                torch.testing.assert_close(got, ref, rtol=2e-2, atol=0.5)
                torch.testing.assert_close(fn(a, b), mm, rtol=2e-2, atol=0.5)
            except Exception as e:  # a variant that fails to build or is wrong: record and go on
                save({"K": k, "variant": name, "error": f"{type(e).__name__}: {str(e)[:600]}"})
                continue
            tune_s = time.perf_counter() - t0
            settle(lambda: torch.matmul(a, b), seconds=1.0)
            t, spread = interleaved({"plain": lambda: fn(a, b), "fused": lambda: fn(a, b, bias, "silu"),
                                     "cublas": lambda: torch.matmul(a, b),
                                     "unfused": lambda: F.silu(torch.matmul(a, b) + bias)})
            rec = {"K": k, "variant": name, "first_call_s": round(tune_s, 1),
                   **{f"{x}_ms": round(y, 4) for x, y in t.items()},
                   "plain_vs_cublas": round(t["cublas"] / t["plain"], 3),
                   "fused_speedup": round(t["unfused"] / t["fused"], 3), "spread": spread}
            kern = getattr(fn, "kernel", None)
            if kern is not None and getattr(kern, "best_config", None) is not None:
                rec["best_config"] = str(kern.best_config)
            save(rec)
        del a, b, ref, mm
    # a ragged shape through the descriptor kernels: TMA zero-fills loads and clips stores past the edges
    for name in ("tma", "tma_p"):
        x = torch.randn(1000, 1000, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(1000, 1048, device="cuda", dtype=torch.bfloat16)
        bb = torch.randn(1048, device="cuda", dtype=torch.bfloat16)
        try:
            torch.testing.assert_close(variants[name](x, y, bb, "silu"), F.silu(x @ y + bb), rtol=2e-2, atol=0.5)
            save({"variant": name, "ragged_1000x1000x1048": "ok"})
        except Exception as e:
            save({"variant": name, "ragged_1000x1000x1048": f"{type(e).__name__}: {str(e)[:400]}"})


if __name__ == "__main__":
    main()
