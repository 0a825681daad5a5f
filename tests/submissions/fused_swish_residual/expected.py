"""What `gpucourse grade` must say of each known submission of fused_swish_residual."""
EXPECTED = {
    # Issue 17: the answer must come from the learner's kernel; torch ops on the inputs fail, naming them.
    "cheat_torch_chain_behind_dummy_kernel.py": {"status": "failed",
                                                 "message": "derived from them: aten.add, aten.mul, aten.sigmoid",
                                                 "flags": ["aten.sigmoid.default: the torch op"]},
    # Right values, but two kernels per call: every case fails the launch count.
    "wrong_two_kernels.py": {"status": "failed", "message": "launched 2 kernels per call; at most 1 allowed",
                             "fails": ["n=1", "n just above a power of two", "n not a power of two",
                                       "2-D, ragged", "strided x[..., ::2]", "large magnitudes (x30)",
                                       "float16, n just above a power of two", "large"]},
}
GPU_ONLY = False
