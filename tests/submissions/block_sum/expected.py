"""What `gpucourse grade` must say of each known submission of block_sum."""
# CUDA C++ kernels: `gpucourse grade` needs a GPU. "cpu" is what gpucourse.check says in CPU mode instead, where it
# compile-checks the kernels with nvcc (tests/lessons/test_l04_cuda_reduction.py holds it to that).
EXPECTED = {
    # Issue 17: a torch op on what a binding returned (derived from the input), or the input copied to the host to
    # compute there, fails naming it.
    "cheat_copy_kernel_then_torch_sum.py": {"status": "failed", "message": "derived from them: aten.sum",
                                            "cpu": {"status": "needs gpu", "message": "copy_kernel"}},
    "cheat_host_numpy_sum.py": {"status": "failed", "message": "no CUDA kernel was launched",
                                "cpu": {"status": "failed", "message": "returned without building a CUDA kernel"}},
    "right_atomic_per_block.py": {"status": "passed", "message": "all 13 cases passed",
                                  "cpu": {"status": "needs gpu", "message": "tree_sum"}},
    # The workbook's declarations: its build links the grader's binding object (the throughput benchmark's template).
    "right_workbook_declarations.py": {"status": "passed", "message": "all 13 cases passed",
                                       "cpu": {"status": "needs gpu", "message": "tree_sum"}},
    # A race compiles: only a GPU finds it, as wrong values or as two runs that disagree.
    "wrong_missing_syncthreads.py": {"status": "failed", "message": ("differ", "nondeterministic"),
                                     "cpu": {"status": "needs gpu", "message": "tree_sum"}},
    "wrong_unchecked_tail.py": {"status": "failed", "message": "NaN",
                                "cpu": {"status": "needs gpu", "message": "tree_sum"}},
    "error_compile.py": {"status": "error", "message": '"total" is undefined',
                         "cpu": {"status": "error", "message": '"total" is undefined'}},
    # Issue N11: float4 loads that assume a 16-byte-aligned start pass every fresh tensor; the views that start 4-12
    # bytes past a boundary fault (cudaErrorMisalignedAddress, sticky: it kills the worker's CUDA context, so the
    # grader reports the raise and ends that submission's worker; the grader's own process and the other workers go on).
    # In CPU mode nvcc compiles it fine: only the GPU run can find it.
    "wrong_float4_assumes_alignment.py": {"status": "error", "message": "misaligned address",
                                           "cpu": {"status": "needs gpu", "message": "sum4_aligned"}},
}
GPU_ONLY = True
