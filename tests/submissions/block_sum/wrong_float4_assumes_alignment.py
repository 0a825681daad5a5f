"""Wrong: float4 loads that assume x starts on a 16-byte boundary. Right on a fresh tensor; on x[1:] (4 bytes past
one) the first float4 load is misaligned and the GPU stops the kernel with cudaErrorMisalignedAddress."""
from gpucourse import cuda_build

KERNELS = r"""
__global__ void sum4_aligned(const float* x, long long n, float* out) {
    __shared__ float s[256];
    const float4* x4 = reinterpret_cast<const float4*>(x);  // missing: x may not be 16-byte aligned
    long long n4 = n / 4, stride = (long long)gridDim.x * 256;
    float acc = 0.0f;
    for (long long i = (long long)blockIdx.x * 256 + threadIdx.x; i < n4; i += stride) {
        float4 q = x4[i];
        acc += (q.x + q.y) + (q.z + q.w);
    }
    if (blockIdx.x == 0 && threadIdx.x < n - 4 * n4) acc += x[4 * n4 + threadIdx.x];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int h = 128; h > 0; h >>= 1) {
        if (threadIdx.x < h) s[threadIdx.x] += s[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, s[0]);
}
"""
BINDING = r"""
torch::Tensor sum_cuda(torch::Tensor x) {
    auto out = torch::zeros({}, x.options());
    long long n = x.numel();
    sum4_aligned<<<264, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
CPP = "torch::Tensor sum_cuda(torch::Tensor x);"


def block_sum(x):
    return cuda_build.build("sub_float4_aligned", KERNELS, BINDING, CPP, ["sum_cuda"]).sum_cuda(x)
