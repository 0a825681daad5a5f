"""Wrong: float4 loads that assume every tensor starts on a 16-byte boundary. Right on fresh tensors; a view such as
t[1:] makes the first float4 load misaligned and the GPU stops the kernel with cudaErrorMisalignedAddress."""
import torch

from gpucourse import cuda_build

KERNELS = r"""
__global__ void many4(const long long* table, int count, float* out) {
    __shared__ float warp_total[8];
    for (int t = blockIdx.x; t < count; t += gridDim.x) {
        const float* x = (const float*)table[t];
        long long n = table[count + t], n4 = n / 4;
        const float4* x4 = reinterpret_cast<const float4*>(x);  // missing: x may not be 16-byte aligned
        float acc = 0.0f;
        for (long long i = threadIdx.x; i < n4; i += 256) {
            float4 q = x4[i];
            acc += (q.x + q.y) + (q.z + q.w);
        }
        if (threadIdx.x < n - 4 * n4) acc += x[4 * n4 + threadIdx.x];
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
        if (threadIdx.x % 32 == 0) warp_total[threadIdx.x / 32] = acc;
        __syncthreads();
        if (threadIdx.x == 0) {
            float s = 0.0f;
            for (int w = 0; w < 8; ++w) s += warp_total[w];
            out[t] = s;
        }
        __syncthreads();  // warp_total is reused by the next tensor
    }
}
"""
BINDING = r"""
torch::Tensor many_cuda(torch::Tensor table, int64_t count) {
    auto out = torch::empty({count}, table.options().dtype(torch::kFloat32));
    many4<<<264, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        (const long long*)table.data_ptr<int64_t>(), (int)count, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
CPP = "torch::Tensor many_cuda(torch::Tensor table, int64_t count);"


def sum_many(tensors):
    ext = cuda_build.build("sub_float4_aligned_many", KERNELS, BINDING, CPP, ["many_cuda"])
    table = torch.tensor([t.data_ptr() for t in tensors] + [t.numel() for t in tensors], dtype=torch.int64)
    return ext.many_cuda(table.to(tensors[0].device), len(tensors))
