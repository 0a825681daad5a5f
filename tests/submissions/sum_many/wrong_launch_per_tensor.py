"""Wrong: right sums, but one kernel launch per tensor (the starved-GPU pattern the exercise is about)."""
import torch

from gpucourse import cuda_build

KERNELS = r"""
__global__ void one_sum(const float* x, long long n, float* out) {
    __shared__ float warp_total[8];
    float acc = 0.0f;
    for (long long i = threadIdx.x; i < n; i += 256) acc += x[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
    if (threadIdx.x % 32 == 0) warp_total[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < 8; ++w) s += warp_total[w];
        *out = s;
    }
}
"""
BINDING = r"""
torch::Tensor sums_cuda(std::vector<torch::Tensor> tensors) {
    auto out = torch::empty({(int64_t)tensors.size()}, tensors[0].options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    for (size_t t = 0; t < tensors.size(); ++t) {
        one_sum<<<1, 256, 0, stream>>>(tensors[t].data_ptr<float>(), tensors[t].numel(), out.data_ptr<float>() + t);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""
CPP = "torch::Tensor sums_cuda(std::vector<torch::Tensor> tensors);"


def sum_many(tensors):
    return cuda_build.build("sub_per_tensor", KERNELS, BINDING, CPP, ["sums_cuda"]).sums_cuda(list(tensors))
