"""What `gpucourse grade` must say of each known submission of gpu (graded as vector_add)."""
EXERCISE = "vector_add"  # the folder holds submissions that only a GPU can grade
EXPECTED = {
    # A wild store (an illegal memory access): the worker raises (seen on the H100: the message is the last line of
    # torch's CUDA error, "Compile with `TORCH_USE_CUDA_DSA` ...") or dies; tests/test_grader_gpu.py checks that the
    # next submission is still graded.
    "crash_cuda_fault.py": {"status": ("crashed", "error"),
                            "message": ("TORCH_USE_CUDA_DSA", "illegal memory access", "the process died",
                                        "CUDA fault")},
}
GPU_ONLY = True
