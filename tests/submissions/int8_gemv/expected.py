"""What `gpucourse grade` must say of each known submission of int8_gemv."""
_CANCEL = "M=2, cancelling halves, K=4096"
EXPECTED = {
    # The instructor's kernel imported from the course package answers for it: an error naming the course's code
    # (issue 39; it used to fail with "no Triton kernel was launched").
    "cheat_course_kernel.py": {"status": "error", "message": "int8_gemv used the course's own code: it imports the "
                                                             "course's lessons",
                               "flags": ["imports the course's lessons"]},
    # The same kernel imported from the kit package it lives in (gpucourse.quant): the same error and flag.
    "cheat_kit_kernel.py": {"status": "error", "message": "int8_gemv used the course's own code: it imports the "
                                                          "course's lessons",
                            "flags": ["imports the course's lessons"]},
    # The same kernel through a module name built at run time: no import to see, its launches are the course's.
    "cheat_course_kernel_by_name.py": {"status": "failed", "message": "used the course's own code: launched the "
                                                                     "course's kernel w8a16_kernel"},
    # torch's matmul, then a raise on shapes it was not written for: the forbidden call is each case's verdict
    # (the raise told beside it) and the other cases still run (on the GPU, fp8_matmul's torch._scaled_mm cheat
    # raised on a 48x40 case and was reported only as an error).
    "cheat_mm_then_raises.py": {"status": "failed",
                                "message": "7 of 7 cases failed; first: M=1, 256x512: calls aten.mm.default: this "
                                           "exercise asks for your own kernel to compute the answer, not this torch "
                                           "op (a kernel launched beside it does not count); it then raised "
                                           "ValueError: K=512: this path wants K a multiple of 1024",
                                "flags": ["calls aten.mm"]},
    "right_rows.py": {"status": "passed", "message": "all 7 cases passed"},
    # bf16 partial sums: the cancelling case is built to fail it; random K-long sums fail too, though not always
    # (even the smallest case, M=1 256x512, failed once in CI by one element: no case is expected to pass).
    "wrong_accumulate_bf16.py": {"status": "failed", "message": "cases failed", "fails": [_CANCEL]},
    # A Triton kernel dequantizes, torch multiplies: a torch op on what the kernel derived from the inputs fails
    # every case (the bf16 rounding alone would show only where large products cancel); the matmul is flagged too.
    "wrong_dequant_bf16_torch_matmul.py": {"status": "failed",
                                           "message": "7 of 7 cases failed; first: M=1, 256x512: calls "
                                                      "aten.mm.default: this exercise asks for your own kernel",
                                           "flags": ["calls aten.mm"]},
    "wrong_torch_dequant_matmul.py": {"status": "failed", "message": "no Triton kernel was launched",
                                      "flags": ["calls aten.mm"]},
    # torch's mm on copies made through NumPy (no "use" of the inputs), a kernel copying its result: a matmul op
    # is forbidden however it is reached (issue 39; it passed with a flag).
    "wrong_torch_mm_on_laundered_copies.py": {"status": "failed", "message": "7 of 7 cases failed; first: M=1, "
                                                                            "256x512: calls aten.mm.default",
                                              "flags": ["calls aten.mm"]},
    # An unmasked store whose padding lanes (zeros) land in the next row: the out-of-bounds write leads, not "never
    # written into a zero-initialised output?" (the output came from torch.empty; issue 39).
    "wrong_unmasked_store_spills_zeros.py": {"status": "failed", "message": "past the end of a",
                                             "fails": ["M=5, N ragged against the block, K just above a power of "
                                                       "two"], "passes": ["M=1, 256x512"]},
    # torch computing the answer in host code that Triton calls back: an autotune Config's pre_hook, and the grid
    # function (called inside the launch: it went unseen until issue 39's GPU check; same verdict in both modes).
    "wrong_torch_mm_in_autotune_pre_hook.py": {"status": "failed", "message": "7 of 7 cases failed; first: M=1, "
                                                                             "256x512: calls aten.mm.default",
                                               "flags": ["calls aten.mm"]},
    "wrong_torch_mm_in_grid_lambda.py": {"status": "failed", "message": "7 of 7 cases failed; first: M=1, 256x512: "
                                                                       "calls aten.mm.default",
                                         "flags": ["calls aten.mm"]},
    "wrong_unmasked_n.py": {"status": "failed", "message": "past the end",
                            "fails": ["M=5, N ragged against the block, K just above a power of two"],
                            "passes": ["M=1, 256x512"]},
}
GPU_ONLY = False
