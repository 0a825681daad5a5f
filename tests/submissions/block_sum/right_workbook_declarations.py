"""Right, written as the workbook asks: BLOCK_SUM_CPP as the workbook gives it (block_sum_cuda), so its build links
the grader's binding object (cuda_build.prepare_binding) and compiles only its own kernels and binding."""
from gpucourse import cuda_build

BLOCK_SUM_CPP = "torch::Tensor block_sum_cuda(torch::Tensor x);"

BLOCK_SUM_KERNELS = r"""
__global__ void tree_sum(const float* x, long long n, float* out) {
    __shared__ float s[256];
    long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
"""
BLOCK_SUM_BINDING = r"""
torch::Tensor block_sum_cuda(torch::Tensor x) {
    auto out = torch::zeros({}, x.options());
    long long n = x.numel();
    long long blocks = n > 0 ? (n + 255) / 256 : 1;
    tree_sum<<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""


def block_sum(x):
    module = cuda_build.build("block_sum", BLOCK_SUM_KERNELS, BLOCK_SUM_BINDING, BLOCK_SUM_CPP, ["block_sum_cuda"])
    return module.block_sum_cuda(x.contiguous())
