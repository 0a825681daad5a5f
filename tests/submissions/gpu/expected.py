"""What `gpucourse grade` must say of each known submission of gpu (graded as vector_add)."""
EXERCISE = "vector_add"  # the folder holds submissions that only a GPU can grade
EXPECTED = {
    # A wild store (an illegal memory access): the worker raises (the message is the exception's own line, e.g.
    # "CUDA error: an illegal memory access was encountered") or dies; tests/test_grader_gpu.py checks that the next
    # submission is still graded.
    "crash_cuda_fault.py": {"status": ("crashed", "error"),
                            "message": ("illegal memory access", "the process died", "CUDA fault")},
}
GPU_ONLY = True
