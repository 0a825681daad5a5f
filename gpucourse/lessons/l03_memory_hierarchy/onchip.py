"""Inside the SM: shared memory's bandwidth, and the latency of a load from shared memory, L1, L2 and device memory.

Triton decides shared memory for you, so these microbenchmarks are small CUDA C++ kernels compiled at run time with
NVRTC (``torch.cuda._compile_kernel``: no nvcc needed, GPU only).

*Latency* is measured by a **pointer chase**: one thread follows a chain ``i = next[i]`` through a random cyclic
permutation, so each load's address depends on the previous load's value and no two loads overlap. The chain's
footprint decides where it lives: a few KiB stay in L1 (or in shared memory, for the shared-memory chase), a few MiB
in L2, hundreds of MiB in device memory. ``clock64()`` around the chase gives cycles per load (SM clock).
*Bandwidth* of shared memory is measured by every thread of many blocks reading 16-byte vectors from a shared array,
laid out so that no two threads of a quarter-warp hit the same bank.
"""
from __future__ import annotations

import functools

SMEM_WORDS = 8192  # the shared-memory chase's array: 32 KiB of uint32

_SOURCE = r"""
extern "C" __global__ void chase_global(const unsigned int* next, int steps, unsigned int* out,
                                        long long* cycles) {
    unsigned int i = 0;
    for (int s = 0; s < 64; ++s) i = next[i];          // warm the path (TLB, caches) before timing
    long long t0 = clock64();
    for (int s = 0; s < steps; ++s) i = next[i];
    long long t1 = clock64();
    out[0] = i;
    cycles[0] = t1 - t0;
}

extern "C" __global__ void chase_shared(const unsigned int* next_g, int steps, unsigned int* out,
                                        long long* cycles) {
    __shared__ unsigned int next[8192];
    for (int k = threadIdx.x; k < 8192; k += blockDim.x) next[k] = next_g[k];
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int i = 0;
        for (int s = 0; s < 64; ++s) i = next[i];
        long long t0 = clock64();
        for (int s = 0; s < steps; ++s) i = next[i];
        long long t1 = clock64();
        out[0] = i;
        cycles[0] = t1 - t0;
    }
}

extern "C" __global__ void smem_read(float* out, int iters) {
    __shared__ float4 buf[2048];                       // 32 KiB
    for (int k = threadIdx.x; k < 2048; k += blockDim.x) buf[k] = make_float4(k, k + 1, k + 2, k + 3);
    __syncthreads();
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    unsigned int idx = threadIdx.x;
    for (int it = 0; it < iters; ++it) {
        #pragma unroll
        for (int k = 0; k < 8; ++k) {                  // neighbouring threads read neighbouring 16-byte vectors
            float4 v = buf[(idx + k * 256) & 2047];
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
        idx += 1;
    }
    if (acc.x + acc.y + acc.z + acc.w == -1.0f) out[blockIdx.x] = acc.x;  // never true: keeps the loads alive
}
"""


@functools.lru_cache(maxsize=None)
def kernel(name: str):
    """The compiled kernel ``name`` (``chase_global``, ``chase_shared`` or ``smem_read``). GPU only."""
    import torch

    return torch.cuda._compile_kernel(_SOURCE, name)


def chain(footprint_bytes: int, stride_bytes: int = 128, seed: int = 0, device: str = "cpu"):
    """An int32 array of ``footprint_bytes`` holding a random cycle through ``footprint / stride`` nodes, one per
    ``stride_bytes`` (so each load touches its own line): ``next[node] = the next node's index``."""
    import torch

    step = stride_bytes // 4
    nodes = max(2, footprint_bytes // stride_bytes)
    g = torch.Generator(device=device).manual_seed(seed)
    order = torch.randperm(nodes, generator=g, device=device)
    nxt = torch.zeros(nodes * step, dtype=torch.int32, device=device)
    nxt[order * step] = (torch.roll(order, -1) * step).to(torch.int32)
    return nxt


def chase(footprint_bytes: int, steps: int = 4096, shared: bool = False, cold: bool = False) -> dict:
    """Cycles and ns per dependent load, chasing a random chain of ``footprint_bytes`` (in shared memory if
    ``shared``: then the footprint is the 32 KiB array, one node per 4-byte word; otherwise through global memory,
    one node per 128-byte line). The ns come from CUDA events around the whole launch, so they also hold the launch
    itself, the untimed warm-up loads and (shared memory) filling the array: a bound, not the latency alone (lesson
    03's prose works it out).

    Each launch walks the same ``steps + 64`` nodes from node 0, so after the first launch they sit in L2 whatever
    the footprint (a first try measured the same 283 cycles at 4 MiB and 256 MiB). ``cold``: evict L2 before each
    timed launch (by reading a buffer twice its size), so the walk comes from device memory."""
    import torch

    from gpucourse.timing import _l2_flush_buffer

    if shared:
        nxt = chain(SMEM_WORDS * 4, stride_bytes=4, device="cuda")
        k = kernel("chase_shared")
        block = 256
    else:
        nxt = chain(footprint_bytes, device="cuda")
        k = kernel("chase_global")
        block = 1
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    cycles = torch.zeros(1, dtype=torch.int64, device="cuda")
    k(grid=(1, 1, 1), block=(block, 1, 1), args=[nxt, steps, out, cycles])  # compile, warm
    torch.cuda.synchronize()
    flush = _l2_flush_buffer() if cold else None
    ms = []
    for _ in range(3):
        if flush is not None:
            flush.sum(dtype=torch.int32)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        k(grid=(1, 1, 1), block=(block, 1, 1), args=[nxt, steps, out, cycles])
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    return {"footprint_bytes": SMEM_WORDS * 4 if shared else footprint_bytes, "where": "shared" if shared else
            "global", "steps": steps, "cold": cold, "cycles_per_load": cycles.item() / steps,
            "ns_per_load": min(ms) * 1e6 / steps}


def smem_bandwidth(iters: int = 1024, blocks_per_sm: int = 2, threads: int = 1024, bench_kw=None) -> dict:
    """Shared-memory read bandwidth over the whole GPU: bytes read from shared arrays per second (TB/s)."""
    import torch

    from gpucourse import device
    from gpucourse.timing import bench

    sms = device.props().sm_count
    grid = sms * blocks_per_sm
    out = torch.zeros(grid, device="cuda")
    k = kernel("smem_read")
    nbytes = grid * threads * iters * 8 * 16
    r = bench(lambda: k(grid=(grid, 1, 1), block=(threads, 1, 1), args=[out, iters]), bytes=nbytes,
              flush_l2=False, name="shared-memory read", **dict(bench_kw or {}))
    return {"tbps": nbytes / (r.median_ms * 1e-3) / 1e12, "ms": r.median_ms, "bytes": nbytes, "blocks": grid,
            "threads": threads}
