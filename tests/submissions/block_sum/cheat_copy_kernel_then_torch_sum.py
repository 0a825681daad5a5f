"""Cheat (issue 17): a CUDA kernel of its own copies x into a new tensor (a real launch), then torch sums the copy.
What a CUDA binding hands back counts as derived from the inputs (the checker cannot see a binding's kernel
arguments): the torch sum on it fails, naming aten.sum."""
from gpucourse import cuda_build

KERNELS = r"""
__global__ void copy_kernel(const float* x, long long n, float* out) {
    long long i = (long long)blockIdx.x * 256 + threadIdx.x;
    if (i < n) out[i] = x[i];
}
"""

BINDING = r"""
torch::Tensor copy_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    long long n = x.numel();
    long long blocks = n > 0 ? (n + 255) / 256 : 1;
    copy_kernel<<<blocks, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), n, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""
CPP = "torch::Tensor copy_cuda(torch::Tensor x);"


def block_sum(x):
    copy = cuda_build.build("sub_copy_then_sum", KERNELS, BINDING, CPP, ["copy_cuda"]).copy_cuda(x.contiguous())
    return copy.sum()
