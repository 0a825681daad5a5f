"""What `gpucourse grade` must say of each known submission of softmax."""
EXPECTED = {
    # Issue 17: the answer must come from the learner's kernel; torch ops on the inputs fail, naming them.
    "cheat_softmax_behind_dummy_kernel.py": {"status": "failed", "message": "derived from them: aten._softmax"},
    # What a kernel was given (its output buffer) is derived from the inputs: torch ops on it fail too.
    "cheat_torch_on_kernel_copy.py": {"status": "failed",
                                      "message": "derived from them: aten.amax, aten.div, aten.exp"},
    "right_softmax.py": {"status": "passed", "message": "all 11 cases passed",
                         "passes": ["width 16384", "large magnitudes (x1e4)"]},
    # A grid capped at 64 programs: only the "many rows" case (over 1024 rows in CPU mode) has more rows than that.
    "wrong_grid_capped_at_64_rows.py": {"status": "failed", "message": "many rows: elements never written",
                                        "fails": ["many rows"],
                                        "passes": ["width just below a power of two", "width 16384"]},
    "wrong_no_max_subtraction.py": {"status": "failed", "message": "NaN",
                                    "fails": ["large magnitudes (x1e4)", "large magnitudes (x1e4), fp16"],
                                    "passes": ["width just below a power of two", "width 16384",
                                               "strided rows: big[:, :w]"]},
    "wrong_fixed_block_width.py": {"status": "failed", "message": "elements never written",
                                   "fails": ["width just above a power of two", "width 16384", "width 16384, fp16",
                                             "width not a power of two, fp16"],
                                   "passes": ["width 1", "width just below a power of two",
                                              "large magnitudes (x1e4)"]},
    "wrong_contiguous_only.py": {"status": "failed", "message": "cases failed",
                                 "fails": ["strided rows: big[:, :w]", "strided rows: big[::2], fp16"],
                                 "passes": ["width just above a power of two", "width 16384",
                                            "large magnitudes (x1e4)"]},
    # Not "compute in float32" (its errors near 1e-3 on a width of 1023 look like rounding): one factor per row.
    "wrong_padding_loaded_as_zero.py": {"status": "failed",
                                        "message": "each row's sum is too large. Loading a block wider than the "
                                                   "row? Its masked-off lanes must load -inf (exp(-inf) = 0), not 0",
                                        "fails": ["width just below a power of two",
                                                  "width just above a power of two", "strided rows: big[:, :w]"],
                                        "passes": ["width 1", "width 16384", "large magnitudes (x1e4)"]},
}
GPU_ONLY = False
