"""What `gpucourse grade` must say of each known submission of fused_swish_residual."""
EXPECTED = {
    # Right values, but two kernels per call: every case fails the launch count.
    "wrong_two_kernels.py": {"status": "failed", "message": "launched 2 kernels per call; at most 1 allowed",
                             "fails": ["n=1", "n=1025", "n=3001 (not a power of two)", "2-D 37x129",
                                       "strided x[..., ::2], 9x300", "large magnitudes (x30)", "float16, n=4097",
                                       "large"]},
}
GPU_ONLY = False
