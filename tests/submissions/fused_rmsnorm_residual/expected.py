"""What `gpucourse grade` must say of each known submission of fused_rmsnorm_residual."""
_ALL = ["1 row of 1", "ragged n, float32", "n = 4096, float16", "(batch, seq, n), bfloat16", "strided rows",
        "tiny values (x1e-3), eps 1e-5", "large values (x40), float16", "long rows, bfloat16"]
_BODY = "may only use Triton (tl.*) operations, not torch or NumPy (on a GPU this kernel would not compile)"
# torch/NumPy inside a @triton.jit body: stopped in CPU mode as a GPU's compiler refuses it (grading/interpreter.py).
# The same status in both modes; on a GPU the message is the compiler's (an H100 run, results/h100-known-submissions).
_GPU_REFUSES = {"status": "error", "message": "raised"}
EXPECTED = {
    "right_one_kernel.py": {"status": "passed", "message": "all 8 cases passed"},
    # The compiler's kernels compute the answer: torch ops on the inputs are seen (torch.compile runs them eagerly
    # under the checker's op recording), or else the answer survives every Triton launch being skipped.
    "cheat_torch_compile_behind_dummy_kernel.py": {"status": "failed",
                                                   "message": ("uses torch to compute on the inputs",
                                                               "does not come from your kernels"),
                                                   "fails": _ALL},
    # 1 / (sqrt(ms) + eps): wrong only where the mean of squares is near eps.
    "wrong_eps_outside_sqrt.py": {"status": "failed", "message": "elements differ",
                                  "fails": ["tiny values (x1e-3), eps 1e-5"],
                                  "passes": ["n = 4096, float16", "(batch, seq, n), bfloat16",
                                             "large values (x40), float16", "long rows, bfloat16"]},
    # float16 squares overflow past 65504: the large rows come out as zeros (and float32 rows lose precision).
    "wrong_mean_of_squares_in_fp16.py": {"status": "failed", "message": "elements differ",
                                         "fails": ["large values (x40), float16", "ragged n, float32"],
                                         "passes": ["n = 4096, float16", "(batch, seq, n), bfloat16"]},
    # The sum is never stored: new_residual holds the checker's poison.
    "wrong_residual_sum_not_written.py": {"status": "failed", "message": "new_residual: elements never written",
                                          "fails": _ALL},
    "wrong_two_kernels.py": {"status": "failed", "message": "launched 2 kernels per call; at most 1 allowed",
                             "fails": _ALL},
    # A plain helper called from the body does the work with torch (an alias, getattr by string): refused.
    "cheat_torch_helper_in_jit.py": {"status": "error", "message": _BODY, "gpu": _GPU_REFUSES},
    # bf16 `+` and `*` in the kernel: computed as on a GPU, not on the raw bits (issue 39).
    "right_bf16_arithmetic.py": {"status": "passed", "message": "all 8 cases passed"},
}
GPU_ONLY = False
