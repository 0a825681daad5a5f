"""What `gpucourse grade` must say of each known submission of sum_many."""
# CUDA C++ kernels: `gpucourse grade` needs a GPU. "cpu" is what gpucourse.check says in CPU mode instead, where it
# compile-checks the kernels with nvcc (tests/lessons/test_l04_cuda_reduction.py holds it to that).
EXPECTED = {
    "right_block_stride.py": {"status": "passed", "message": "all 5 cases passed",
                              "cpu": {"status": "needs gpu", "message": "many"}},
    # Reading past the end usually returns garbage (failed) but may fault (error): both are caught, never a pass.
    # A fault's message is the exception's own line (grader.exception_line), not torch's trailing advice.
    "wrong_unchecked_tail.py": {"status": ("failed", "error"),
                                "message": ("differ", "NaN", "illegal memory access", "cudaErrorIllegalAddress"),
                                "cpu": {"status": "needs gpu", "message": "many"}},
    "wrong_launch_per_tensor.py": {"status": "failed", "message": "at most 1 allowed",
                                   "cpu": {"status": "needs gpu", "message": "one_sum"}},
}
GPU_ONLY = True
