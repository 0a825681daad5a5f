"""What `gpucourse grade` must say of each known submission of fp8_matmul.

The cheat (torch._scaled_mm behind a dummy Triton launch) gives right answers; it fails because the exercise forbids
torch's matmul ops (``Exercise.forbidden_ops``), and the call is flagged for a human as well.
"""
EXPECTED = {
    "right_basic.py": {"status": "passed", "message": "all 7 cases passed"},
    # Issue 39: b came only row-major before, so a kernel that ignored b's strides passed.
    "wrong_ignores_b_strides.py": {"status": "failed", "message": "elements differ",
                                   "fails": ["48x40, K=64, b column-major (strides (1, 64), as torch._scaled_mm takes "
                                             "it)"],
                                   "passes": ["64x64x64", "48x32, K=80 (K tail)"]},
    "wrong_no_ceil_division.py": {"status": "failed", "message": "elements never written",
                                  "fails": ["16x16x16 (one tile, smaller than the block)"]},
    "wrong_scales_twice.py": {"status": "failed", "message": "elements differ"},
    "wrong_scales_not_applied.py": {"status": "failed", "message": "elements differ"},
    "wrong_unmasked_k_tail.py": {"status": "failed", "message": "elements differ",
                                 "fails": ["48x32, K=80 (K tail)"], "passes": ["64x64x64"]},
    "wrong_fp8_accumulator.py": {"status": "failed", "message": "elements differ", "fails": ["64x64x64"]},
    "wrong_float32_output.py": {"status": "failed", "message": "wrong dtype: expected bfloat16, got float32"},
    "wrong_torch_not_triton.py": {"status": "failed", "message": "no Triton kernel was launched",
                                  "flags": ["calls aten.mm"]},
    # On FP8 operands the cheat calls torch._scaled_mm; on float16 stand-ins (a Triton interpreter or GPU without
    # FP8, as on one CI machine) it falls back to `@`: either way the case names the matmul op it called.
    "cheat_scaled_mm_behind_dummy_kernel.py": {"status": "failed",
                                               "message": ["calls aten._scaled_mm.default: this exercise asks for "
                                                           "your own kernel",
                                                           "calls aten.mm.default: this exercise asks for your own "
                                                           "kernel"],
                                               "flags": ["the torch op this exercise asks to implement"]},
}
GPU_ONLY = False
