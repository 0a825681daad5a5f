"""What `gpucourse grade` must say of each known submission of sum_many."""
# CUDA C++ kernels: `gpucourse grade` needs a GPU. "cpu" is what gpucourse.check says in CPU mode instead, where it
# compile-checks the kernels with nvcc (tests/lessons/test_l04_cuda_reduction.py holds it to that).
EXPECTED = {
    "right_block_stride.py": {"status": "passed", "message": "all 6 cases passed",
                              "cpu": {"status": "needs gpu", "message": "many"}},
    # Reading past the end usually returns garbage (failed) but may fault (error): both are caught, never a pass.
    # A fault's message is the exception's own line (grader.exception_line), not torch's trailing advice.
    "wrong_unchecked_tail.py": {"status": ("failed", "error"),
                                "message": ("differ", "NaN", "illegal memory access", "cudaErrorIllegalAddress"),
                                "cpu": {"status": "needs gpu", "message": "many"}},
    "wrong_launch_per_tensor.py": {"status": "failed", "message": "at most 1 allowed",
                                   "cpu": {"status": "needs gpu", "message": "one_sum"}},
    # Issue N11: float4 loads that assume a 16-byte-aligned start pass every fresh tensor; the views that start 4-12
    # bytes past a boundary fault (cudaErrorMisalignedAddress, sticky: it kills the worker's CUDA context, so the
    # grader reports the raise and ends that submission's worker; the grader's own process and the other workers go on).
    # In CPU mode nvcc compiles it fine: only the GPU run can find it.
    "wrong_float4_assumes_alignment.py": {"status": "error", "message": "misaligned address",
                                           "cpu": {"status": "needs gpu", "message": "many4"}},
}
GPU_ONLY = True
