"""What `gpucourse grade` must say of each known submission of matmul."""
EXPECTED = {
    # Issue 17: the answer must come from the learner's kernel; torch ops on the inputs fail, naming them.
    "cheat_mm_behind_dummy_kernel.py": {"status": "failed", "message": "derived from them: aten.mm",
                                        "flags": ["calls aten.mm"]},
    "right_matmul.py": {"status": "passed", "message": "all 8 cases passed",
                        "passes": ["fp16 ragged, K just above a power of two (K tail)"]},
    # The large case's K is odd in both modes (drawn afresh each run): the unmasked tail reads the grader's NaN
    # canaries there too.
    "wrong_unmasked_k_tail.py": {
        "status": "failed", "message": "non-finite output",
        "fails": ["fp16 ragged, K just above a power of two (K tail)",
                  "fp32 ragged, K just above a power of two (TF32 allowed)", "fp16 large, not multiples of any block"],
        "passes": ["fp16 64x64x64 (whole blocks)"]},
}
GPU_ONLY = False
