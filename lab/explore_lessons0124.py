#!/usr/bin/env python3
"""Exploration for lessons 01, 02 and 04 (issue #18, section 4): the sum_many reference solution before and after its
rewrite (one block per tensor, sorted largest first, vs equal chunks of SM_CHUNK floats with a deterministic combine),
at several chunk sizes, on the lesson's cases; the host's time per call; misaligned views. H100, one run.

Usage (on the GPU machine): python lab/explore_lessons0124.py --out PATH.json
The kernels are built first, in parallel child processes (each build is ~35 s of host compiling), which also leaves
them in the build cache for the notebooks run after it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The reference solution of solutions/04_cuda_reduction.ipynb before this rewrite (commit fea1f56), verbatim.
OLD_KERNELS = r"""
#define SM_THREADS 512

__device__ __forceinline__ float sm_warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float sm_block_sum(float v) {
    __shared__ float partial[32];
    v = sm_warp_sum(v);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    return threadIdx.x < 32 ? sm_warp_sum(v) : 0.0f;
}

// One block per tensor. table[0..count) are the data pointers, table[count..2*count) the lengths, and
// table[2*count..3*count) where each sum goes (the host lists the largest tensors first, see the binding).
__global__ void sum_many_kernel(const long long* __restrict__ table, int count, float* __restrict__ out) {
    const float* x = reinterpret_cast<const float*>(table[blockIdx.x]);
    long long n = table[count + blockIdx.x];
    long long slot = table[2 * count + blockIdx.x];
    long long scalar_from = 0;
    float acc = 0.0f;
    if ((reinterpret_cast<unsigned long long>(x) & 15) == 0) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        long long n4 = n / 4;
#pragma unroll 4
        for (long long i = threadIdx.x; i < n4; i += blockDim.x) {  // consecutive threads, consecutive 16 bytes
            float4 q = x4[i];
            acc += (q.x + q.y) + (q.z + q.w);
        }
        scalar_from = 4 * n4;
    }
    for (long long i = scalar_from + threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    acc = sm_block_sum(acc);
    if (threadIdx.x == 0) out[slot] = acc;  // every block writes its own slot: no atomics, deterministic
}
"""
OLD_BINDING = r"""
torch::Tensor sum_many_cuda(std::vector<torch::Tensor> tensors) {
    int64_t count = (int64_t)tensors.size();
    if (count == 0) return torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat32).device(torch::kCUDA));
    auto dev = tensors[0].device();
    c10::cuda::CUDAGuard guard(dev);
    // This host code runs on every call, once per tensor: keep it lean (one pass over the tensors, then plain
    // arrays). Blocks start roughly in index order, so the largest tensors go first: the small ones fill the gaps at
    // the end instead of one big tensor running alone while the rest of the GPU idles.
    struct Entry { int64_t n, ptr, index; };
    std::vector<Entry> entries(count);
    for (int64_t i = 0; i < count; ++i) {
        const torch::Tensor& t = tensors[i];
        TORCH_CHECK(t.is_cuda() && t.device() == dev && t.scalar_type() == torch::kFloat32 && t.dim() == 1 &&
                    t.is_contiguous(), "sum_many: tensor ", i, " must be a contiguous 1-D float32 tensor on ", dev);
        entries[i] = {t.numel(), reinterpret_cast<int64_t>(t.data_ptr()), i};
    }
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.n > b.n; });
    auto host = torch::empty({3 * count}, torch::TensorOptions().dtype(torch::kInt64).pinned_memory(true));
    int64_t* h = host.data_ptr<int64_t>();
    for (int64_t k = 0; k < count; ++k) {
        h[k] = entries[k].ptr;
        h[count + k] = entries[k].n;
        h[2 * count + k] = entries[k].index;
    }
    auto table = host.to(dev, /*non_blocking=*/true);  // the pinned buffer is kept alive until the copy is done
    auto out = torch::empty({count}, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    sum_many_kernel<<<(unsigned)count, SM_THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const long long*>(table.data_ptr<int64_t>()), (int)count, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
CPP = "torch::Tensor sum_many_cuda(std::vector<torch::Tensor> tensors);"
CHUNKS = (8192, 131072)  # besides the solution's own SM_CHUNK


def variants() -> dict:
    """name -> (kernels, binding, flags) of every sum_many built here."""
    from gpucourse.solutions import load_solutions

    ns = load_solutions("04_cuda_reduction")
    new = (ns["SUM_MANY_KERNELS"], ns["SUM_MANY_BINDING"])
    out = {"one block per tensor, sorted (before)": (OLD_KERNELS, OLD_BINDING, ())}
    out["chunks of 32768 (solution)"] = (*new, ())
    for c in CHUNKS:
        out[f"chunks of {c}"] = (*new, (f"-DSM_CHUNK={c}",))
    return out


def build_one(which: str) -> None:
    from gpucourse import cuda_build

    if which == "ladder":
        from gpucourse.lessons.l04_cuda_reduction import reduction_kernels

        reduction_kernels.build()
    elif which == "block_sum":
        from gpucourse.solutions import load_solutions

        ns = load_solutions("04_cuda_reduction")
        cuda_build.build("block_sum", ns["BLOCK_SUM_KERNELS"], ns["BLOCK_SUM_BINDING"], ns["BLOCK_SUM_CPP"],
                         ["block_sum_cuda"])
    else:
        k, b, flags = variants()[which]
        cuda_build.build("sum_many", k, b, CPP, ["sum_many_cuda"], flags=flags)


def prebuild() -> dict:
    names = ["ladder", "block_sum", *variants()]
    t0 = time.perf_counter()
    procs = {n: subprocess.Popen([sys.executable, __file__, "--build", n], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True) for n in names}
    failed = {}
    for n, p in procs.items():
        out, _ = p.communicate()
        if p.returncode:
            failed[n] = out[-2000:]
    return {"seconds": round(time.perf_counter() - t0, 1), "failed": failed}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "lab", "results", "h100-explore-lessons0124.json"))
    ap.add_argument("--build")
    args = ap.parse_args()
    if args.build:
        build_one(args.build)
        return 0
    import torch

    import gpucourse
    from gpucourse import cuda_build, env
    from gpucourse.lessons.l04_cuda_reduction import measure
    from gpucourse.timing import bench

    gpucourse.setup()
    doc = {"environment": env.versions(), "prebuild": prebuild()}
    print("prebuild", doc["prebuild"], flush=True)
    mods = {name: cuda_build.build("sum_many", k, b, CPP, ["sum_many_cuda"], flags=f)
            for name, (k, b, f) in variants().items()}
    sol = measure.solutions()["sum_many"]
    ns = measure.solutions()
    # What the Python side of a call costs: build()'s cache lookup (hashing the sources) against a kept module.
    k, b = ns["SUM_MANY_KERNELS"], ns["SUM_MANY_BINDING"]
    t0 = time.perf_counter()
    for _ in range(1000):
        cuda_build.build("sum_many", k, b, CPP, ["sum_many_cuda"])
    doc["build_lookup_us"] = (time.perf_counter() - t0) * 1e3
    cases = {}
    for key, case in measure.CASES.items():
        ts = measure.make_tensors(case)
        want = torch.stack([t.double().sum() for t in ts]).float()
        nbytes = 4 * sum(t.numel() for t in ts)
        flat = torch.cat(ts)
        row = {"bytes": nbytes, "torch.sum over the concatenation ms": bench(torch.sum, flat, bytes=nbytes).median_ms}
        for name, mod in list(mods.items()) + [("solution as the lesson calls it", None)]:
            fn = (lambda xs, m=mod: m.sum_many_cuda(xs)) if mod is not None else sol
            got = fn(ts)
            err = float(((got - want).abs() / (1 + torch.stack([t.abs().sum() for t in ts]))).max())
            r = bench(fn, ts, bytes=nbytes)
            row[name] = {"ms": r.median_ms, "gbps": r.gbps, "host_ms": measure.host_call_ms(fn, ts),
                         "max_rel_error": err, "vs_torch_sum": row["torch.sum over the concatenation ms"] / r.median_ms}
            print(key, name, row[name], flush=True)
        cases[key] = row
    doc["cases"] = cases
    # Views that are not 16-byte aligned (t[1:], t[2:], t[3:]) and deterministic results (two runs, same bits).
    ts = measure.make_tensors(measure.RANDOM_CASE)
    views = [t[i % 4:] for i, t in enumerate(ts)]
    want = torch.stack([v.double().sum() for v in views]).float()
    a, b2 = sol(views), sol(views)
    doc["views"] = {"max_abs_error": float((a - want).abs().max()), "same_bits_twice": bool(torch.equal(a, b2))}
    doc["ladder_misaligned"] = measure.misaligned_check()
    print(json.dumps({k: doc[k] for k in ("views", "ladder_misaligned", "build_lookup_us")}), flush=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1, default=str)
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
