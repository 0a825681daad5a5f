"""What `gpucourse grade` must say of each known submission of matmul."""
EXPECTED = {
    "right_matmul.py": {"status": "passed", "message": "all 8 cases passed", "passes": ["fp16 100x70, K=33 (K tail)"]},
    # The large case's K is a multiple of the submission's BK=32 in CPU mode (256) but not on a GPU (2049), where
    # the unmasked tail reads the grader's NaN canaries (seen on the H100): it must pass here, fail there.
    "wrong_unmasked_k_tail.py": {
        "status": "failed", "message": "non-finite output",
        "fails": ["fp16 100x70, K=33 (K tail)", "fp32 65x33, K=129 (TF32 allowed)"],
        "passes": ["fp16 64x64x64 (whole blocks)", "fp16 large, not multiples of any block"],
        "gpu": {"fails": ["fp16 100x70, K=33 (K tail)", "fp32 65x33, K=129 (TF32 allowed)",
                          "fp16 large, not multiples of any block"],
                "passes": ["fp16 64x64x64 (whole blocks)"]}},
}
GPU_ONLY = False
