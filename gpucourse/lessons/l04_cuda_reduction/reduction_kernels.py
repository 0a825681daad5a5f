"""Lesson 04's reduction ladder: four CUDA kernels that sum a float32 vector, each one step faster than the last.

The lesson shows and measures them, the benchmark (``bench.py``) times them: they live here so both use
the same source. (The exercises' reference solutions live in solutions/04_cuda_reduction.ipynb instead.)

``KERNELS`` is torch-free CUDA C++ (``gpucourse.cuda_build.compile_check`` compiles it with nvcc alone, in CPU
mode too); ``BINDING`` is the host side that launches one step on torch's current stream.
"""
from __future__ import annotations

THREADS = 256  # threads per block in every step

KERNELS = r"""
#define THREADS 256

// Step 1: every thread adds its element straight into the result. Correct, and every add is serialised on one
// memory address.
__global__ void sum_atomic(const float* __restrict__ x, long long n, float* out) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(out, x[i]);
}

// Step 2: each block first sums its THREADS elements in shared memory, halving the active threads each round;
// one atomic per block instead of one per element.
__global__ void sum_shared_tree(const float* __restrict__ x, long long n, float* out) {
    __shared__ float part[THREADS];
    long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();  // every add of this round must land before the next round reads it
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

// A warp's 32 values summed in registers: each round a lane adds the value of the lane `offset` above it.
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;  // lane 0 holds the warp's total
}

// The block's total, in thread 0: warps reduce in registers, one partial per warp goes through shared memory.
__device__ __forceinline__ float block_sum_to_thread0(float v) {
    __shared__ float warp_part[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? warp_part[lane] : 0.0f;
    if (warp == 0) v = warp_sum(v);
    return v;
}

// Step 3: same one-element-per-thread layout, but the tree runs on warp shuffles: 5 shuffle rounds and a single
// __syncthreads instead of 8 shared-memory rounds with a barrier each.
__global__ void sum_warp_shuffle(const float* __restrict__ x, long long n, float* out) {
    long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    float v = block_sum_to_thread0(i < n ? x[i] : 0.0f);
    if (threadIdx.x == 0) atomicAdd(out, v);
}

// Step 4: a fixed grid (as many blocks as fit on the GPU at once) strides over the whole vector; each thread adds
// its elements into a register, 4 bytes per load, and the block reduces once at the end: one atomic per block for
// the whole vector (about a thousand on an H100) instead of one per 256 elements (a million for 1 GiB).
__global__ void sum_grid_stride(const float* __restrict__ x, long long n, float* out) {
    float acc = 0.0f;
    long long stride = (long long)gridDim.x * THREADS;
#pragma unroll 4  // four independent loads in flight per thread
    for (long long i = (long long)blockIdx.x * THREADS + threadIdx.x; i < n; i += stride) acc += x[i];
    acc = block_sum_to_thread0(acc);
    if (threadIdx.x == 0) atomicAdd(out, acc);
}

// Step 5: step 4 with 16-byte loads (float4): a quarter of the load instructions for the same bytes.
// A float4 load needs an address that is a multiple of 16. torch's allocator hands out blocks aligned far beyond
// that, but a view need not start at the beginning of its block: x[1:] starts 4 bytes in, a slice of a bigger
// tensor anywhere. So the first `head` elements (0 to 3) are added one at a time, until the address is a multiple
// of 16, then the float4 loop runs, then the last (n - head) % 4 elements one at a time.
__global__ void sum_grid_stride_vec4(const float* __restrict__ x, long long n, float* out) {
    long long tid = (long long)blockIdx.x * THREADS + threadIdx.x;
    long long head = (long long)((16 - (reinterpret_cast<unsigned long long>(x) & 15)) & 15) / 4;
    if (head > n) head = n;
    float acc = tid < head ? x[tid] : 0.0f;
    const float4* x4 = reinterpret_cast<const float4*>(x + head);  // 16-byte aligned now
    long long n4 = (n - head) / 4;
    long long stride = (long long)gridDim.x * THREADS;
#pragma unroll 4  // four independent 16-byte loads in flight per thread: enough bytes moving to cover latency
    for (long long i = tid; i < n4; i += stride) {
        float4 q = x4[i];
        acc += (q.x + q.y) + (q.z + q.w);
    }
    long long tail = head + 4 * n4 + tid;  // the last (n - head) % 4 elements
    if (tail < n) acc += x[tail];
    acc = block_sum_to_thread0(acc);
    if (threadIdx.x == 0) atomicAdd(out, acc);
}
"""

BINDING = r"""
// Blocks of `kernel` (THREADS threads) that can be resident on one SM at once, from the occupancy API.
static int blocks_that_fit(const void* kernel) {
    int fit = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, THREADS, 0));
    return std::max(1, fit);
}

static const void* kernel_of_step(int64_t step) {
    switch (step) {
        case 1: return (const void*)sum_atomic;
        case 2: return (const void*)sum_shared_tree;
        case 3: return (const void*)sum_warp_shuffle;
        case 4: return (const void*)sum_grid_stride;
        case 5: return (const void*)sum_grid_stride_vec4;
    }
    TORCH_CHECK(false, "ladder_sum: step must be 1, 2, 3, 4 or 5, not ", step);
    return nullptr;
}

torch::Tensor ladder_sum(torch::Tensor x, int64_t step, int64_t blocks_per_sm) {
    TORCH_CHECK(x.is_cuda() && x.dtype() == torch::kFloat32 && x.dim() == 1 && x.is_contiguous(),
                "ladder_sum: x must be a contiguous 1-D float32 CUDA tensor");
    // Any float32 view is 4-byte aligned (its storage offset counts whole floats); step 5 handles views that are
    // not 16-byte aligned (x[1:]). Only a float32 view reinterpreted from bytes at an odd offset could fail this.
    TORCH_CHECK(reinterpret_cast<uintptr_t>(x.data_ptr()) % 4 == 0,
                "ladder_sum: x's data starts at an address that is not a multiple of 4 bytes; float loads need it");
    c10::cuda::CUDAGuard guard(x.device());
    auto out = torch::zeros({}, x.options());
    long long n = x.numel();
    if (n == 0) return out;
    auto stream = c10::cuda::getCurrentCUDAStream();
    long long blocks = (n + THREADS - 1) / THREADS;
    const float* px = x.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const void* kernel = kernel_of_step(step);
    if (step == 1) sum_atomic<<<blocks, THREADS, 0, stream>>>(px, n, po);
    else if (step == 2) sum_shared_tree<<<blocks, THREADS, 0, stream>>>(px, n, po);
    else if (step == 3) sum_warp_shuffle<<<blocks, THREADS, 0, stream>>>(px, n, po);
    else {
        int sms = 0;
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
        // As many blocks as can be resident at once (one wave, no half-empty second wave), unless told otherwise;
        // never more than one element (step 4) or one float4 (step 5) per thread.
        long long per_sm = blocks_per_sm > 0 ? blocks_per_sm : blocks_that_fit(kernel);
        long long need = step == 4 ? blocks : (n / 4 + THREADS - 1) / THREADS;
        long long grid = std::max(1LL, std::min((long long)sms * per_sm, need));
        if (step == 4) sum_grid_stride<<<grid, THREADS, 0, stream>>>(px, n, po);
        else sum_grid_stride_vec4<<<grid, THREADS, 0, stream>>>(px, n, po);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

// What the occupancy API says for one step's kernel: blocks of THREADS threads resident per SM.
int64_t ladder_blocks_per_sm(int64_t step) {
    return blocks_that_fit(kernel_of_step(step));
}
"""

CPP = ("torch::Tensor ladder_sum(torch::Tensor x, int64_t step, int64_t blocks_per_sm);\n"
       "int64_t ladder_blocks_per_sm(int64_t step);")

STEPS = {1: "naive atomics", 2: "shared-memory tree", 3: "warp shuffles", 4: "grid-stride, 4-byte loads",
         5: "grid-stride, float4 loads"}
KERNEL_OF_STEP = {1: "sum_atomic", 2: "sum_shared_tree", 3: "sum_warp_shuffle", 4: "sum_grid_stride",
                  5: "sum_grid_stride_vec4"}


def build(verbose: bool = False):
    """The ladder's extension (GPU mode); NeedsGPU in CPU mode after compile-checking the kernels."""
    from gpucourse import cuda_build

    return cuda_build.build("reduction_ladder", KERNELS, BINDING, CPP, ["ladder_sum", "ladder_blocks_per_sm"],
                            verbose=verbose)


def ladder_sum(x, step: int, blocks_per_sm: int = 0):
    """Sum ``x`` (contiguous 1-D float32 on the GPU, any alignment) with the kernel of ``step`` (1 to 5); a 0-d
    tensor.

    ``blocks_per_sm`` (steps 4 and 5): blocks per SM in the grid; 0 asks the occupancy API how many fit at once.
    A larger grid means more blocks, each adding its partial with one atomic (``measure.atomics_sweep``)."""
    return build().ladder_sum(x, int(step), int(blocks_per_sm))


def blocks_per_sm(step: int) -> int:
    """Blocks of THREADS threads of ``step``'s kernel that the occupancy API says fit on one SM at once (GPU)."""
    return int(build().ladder_blocks_per_sm(int(step)))


# Per-SM limits of compute capability 9.0 (the CUDA C++ Programming Guide's table of compute capabilities; the
# occupancy calculator's register allocation unit of 256 per warp): what residency is computed from below.
SM90_LIMITS = {"registers": 65536, "threads": 2048, "blocks": 32, "register_unit_per_warp": 256}


def residency(registers: int, threads_per_block: int = THREADS, limits: dict = SM90_LIMITS) -> dict:
    """Blocks (and threads) of a kernel resident on one SM, as limited by registers and by the thread and block
    caps (shared memory is not a limit for the ladder's kernels: at most 1 KiB per block).

    Registers are allocated per warp, rounded up to ``register_unit_per_warp``, and residency is per *block*: a
    block is resident with all of its warps or not at all, so the register limit is rounded down to whole blocks."""
    unit = limits["register_unit_per_warp"]
    per_warp = -(-registers * 32 // unit) * unit
    warps_per_block = -(-threads_per_block // 32)
    by_registers = limits["registers"] // (per_warp * warps_per_block)
    by_threads = limits["threads"] // threads_per_block
    blocks = min(by_registers, by_threads, limits["blocks"])
    limit = "registers" if blocks == by_registers and by_registers < by_threads else "threads per SM"
    return {"registers_per_warp": per_warp, "blocks": blocks, "threads": blocks * threads_per_block,
            "by_registers": by_registers, "by_threads": by_threads, "limited_by": limit}


# ---------------------------------------------------------------------------------------------------------------------
# Correctness traps: kernels that compile cleanly and are wrong, and the compute-sanitizer runs that find them.

TRAPS = r"""
#define THREADS 256

// Trap 1, the race: the tree of step 2 without its barriers. A thread may read part[t + half] before the warp that
// owns that slot has written it; the answer is sometimes right, which is what makes races dangerous.
__global__ void sum_tree_no_sync(const float* __restrict__ x, long long n, float* out) {
    __shared__ float part[THREADS];
    long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0.0f;
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

// Trap 2, the unchecked tail: the last block reads past the end of x whenever n is not a multiple of THREADS.
__global__ void sum_tree_unchecked_tail(const float* __restrict__ x, long long n, float* out) {
    __shared__ float part[THREADS];
    long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    part[threadIdx.x] = x[i];
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
"""

# Each demo: (kernels, launch statement, the compute-sanitizer tool that finds the bug). Trap 3 is a launch that
# fails (2048 threads per block: the limit is 1024) and leaves the output untouched unless someone checks the error.
DEMOS = {
    "race": (TRAPS, "sum_tree_no_sync<<<(n + 255) / 256, 256>>>(x, n, out);", "racecheck"),
    "unchecked tail": (TRAPS, "sum_tree_unchecked_tail<<<(n + 255) / 256, 256>>>(x, n, out);", "memcheck"),
    "unchecked launch": (KERNELS, "sum_shared_tree<<<(n + 2047) / 2048, 2048>>>(x, n, out);", "memcheck"),
}

PROGRAM = r"""
#include <cstdio>
#include <vector>
%(kernels)s
int main() {
    const long long n = %(n)d;
    std::vector<float> host(n, 1.0f);  // all ones: the right answer is n
    float *x = nullptr, *out = nullptr;
    cudaMalloc(&x, n * sizeof(float));  // exactly n floats: one past the end is outside the allocation
    cudaMalloc(&out, sizeof(float));
    cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemset(out, 0, sizeof(float));
    %(launch)s
    cudaError_t launch = cudaGetLastError();      // errors in the launch itself (bad configuration)
    cudaError_t run = cudaDeviceSynchronize();    // errors while the kernel ran (illegal addresses)
    float result = -1.0f;
    cudaMemcpy(&result, out, sizeof(float), cudaMemcpyDeviceToHost);
    printf("launch: %%s; run: %%s; sum = %%.1f (expected %%lld)\n", cudaGetErrorString(launch),
           cudaGetErrorString(run), result, n);
    return 0;
}
"""


def sanitizer_program(demo: str, n: int = 100_003) -> str:
    """A standalone CUDA program (no torch) that runs one demo's launch on ``n`` ones and prints what happened."""
    kernels, launch, _ = DEMOS[demo]
    return PROGRAM % {"kernels": kernels, "launch": launch, "n": n}


def build_demo(demo: str, work: str, n: int = 100_003, arch: str | None = None) -> str:
    """Compile one demo program into ``work`` with nvcc (no GPU needed); returns the executable's path."""
    import os
    import subprocess

    from gpucourse import cuda_build

    nvcc = cuda_build.require_tools(ninja=False)
    src, exe = os.path.join(work, "demo.cu"), os.path.join(work, "demo")
    with open(src, "w") as f:
        f.write(sanitizer_program(demo, n))
    build = subprocess.run([nvcc, src, "-o", exe, f"-arch={arch or cuda_build.device_arch()}", "-lineinfo", "-O2"],
                           capture_output=True, text=True)
    if build.returncode != 0:
        raise cuda_build.CudaCompileError(build.stderr)
    return exe


def run_demo(demo: str, sanitize: bool = True, n: int = 100_003, timeout: float = 300) -> str:
    """Compile and run one demo program, under ``compute-sanitizer --tool <tool>`` when ``sanitize``; its output.

    GPU only (GPURequiredError otherwise); ToolMissing when nvcc or compute-sanitizer is absent.
    """
    import os
    import shutil
    import subprocess
    import tempfile

    from gpucourse import cuda_build, device

    device.require_gpu(f"Running the {demo!r} demo")
    work = tempfile.mkdtemp(prefix="gpucourse-demo-", dir=cuda_build.cache_dir())
    try:
        exe = build_demo(demo, work, n)
        cmd = ["./demo"]
        if sanitize:
            sanitizer = cuda_build.tool("compute-sanitizer")
            if sanitizer is None:
                raise cuda_build.ToolMissing("compute-sanitizer was not found (it ships with the CUDA toolkit)")
            cmd = [sanitizer, "--tool", DEMOS[demo][2], "--print-limit", "4", exe]
        run = subprocess.run(cmd if sanitize else [exe], capture_output=True, text=True, timeout=timeout, cwd=work)
        text = (run.stdout + run.stderr).replace(work + os.sep, "")
        shown = ["compute-sanitizer", "--tool", DEMOS[demo][2], "--print-limit", "4", "./demo"] if sanitize else cmd
        return f"$ {' '.join(shown)}\n{text.strip()}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
