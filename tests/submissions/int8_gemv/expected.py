"""What `gpucourse grade` must say of each known submission of int8_gemv."""
_CANCEL = "M=2, cancelling halves, K=4096"
EXPECTED = {
    # The instructor's kernel imported from the course package is not the learner's: its launches are not counted.
    "cheat_course_kernel.py": {"status": "failed", "message": "no Triton kernel was launched",
                               "flags": ["imports the course's lessons"]},
    "right_rows.py": {"status": "passed", "message": "all 7 cases passed"},
    # bf16 partial sums: the cancelling case is built to fail it; random K-long sums fail too, though not always
    # (even the smallest case, M=1 256x512, failed once in CI by one element: no case is expected to pass).
    "wrong_accumulate_bf16.py": {"status": "failed", "message": "cases failed", "fails": [_CANCEL]},
    # A Triton kernel dequantizes, torch multiplies: a torch op on what the kernel derived from the inputs fails
    # every case (the bf16 rounding alone would show only where large products cancel); the matmul is flagged too.
    "wrong_dequant_bf16_torch_matmul.py": {"status": "failed",
                                           "message": "7 of 7 cases failed; first: M=1, 256x512: uses torch to "
                                                      "compute on the inputs or on what was derived from them: aten.mm",
                                           "flags": ["calls aten.mm"]},
    "wrong_torch_dequant_matmul.py": {"status": "failed", "message": "no Triton kernel was launched",
                                      "flags": ["calls aten.mm"]},
    "wrong_unmasked_n.py": {"status": "failed", "message": "past the end",
                            "fails": ["M=5, N ragged against the block, K just above a power of two"],
                            "passes": ["M=1, 256x512"]},
}
GPU_ONLY = False
