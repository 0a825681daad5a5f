"""What `gpucourse grade` must say of each known submission of online_softmax.

The judge hands the function a read-counting tensor: a second pass over x, a block used as a view by two operations,
and one operation over whole rows each fail on the reads, whatever the answer; the numerical bugs fail on values.
"""
EXPECTED = {
    "right_one_pass.py": {"status": "passed", "message": "all 9 cases passed"},
    "wrong_two_passes.py": {"status": "failed", "message": "element(s) of x read more than once"},
    "wrong_block_not_copied.py": {"status": "failed", "message": "element(s) of x read more than once"},
    "cheat_torch_softmax_whole_rows.py": {"status": "failed", "message": "read 64 columns of x at once; block=16",
                                          "passes": ["2x20, block 64 (one block wider than the row)"]},
    # Issue 39: the reads are legal (each block once), the softmax is not online: done on kept copies.
    "cheat_softmax_of_kept_blocks.py": {"status": "failed", "message": "elements computed from x along one dimension",
                                        "passes": ["2x20, block 64 (one block wider than the row)",
                                                   "6x1, block 8 (width 1)"]},
    "cheat_two_passes_over_kept_copies.py": {"status": "failed", "message": "is a second pass",
                                             "passes": ["2x20, block 64 (one block wider than the row)",
                                                        "6x1, block 8 (width 1)"]},
    # Issue 35: its own hint (a running max that rises must rescale the sum so far), not the Triton softmax
    # exercise's about masked lanes loading -inf.
    "wrong_running_sum_not_rescaled.py": {"status": "failed",
                                          "message": "each row's sum is too large. A running maximum that changes "
                                                     "must rescale what was summed so far",
                                          "fails": ["4x96, block 16, maximum rising to the right"]},
    "wrong_max_not_subtracted.py": {"status": "failed", "message": "non-finite output where the reference is finite",
                                    "fails": ["large magnitudes (x1e4), 4x50, block 16"],
                                    "passes": ["4x64, block 16 (whole blocks)"]},
}
GPU_ONLY = False
