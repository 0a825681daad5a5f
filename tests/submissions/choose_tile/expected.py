"""What `gpucourse grade` must say of each known submission of choose_tile."""
EXPECTED = {
    "right_via_waves.py": {"status": "passed", "message": "all 5 cases passed"},
    # A learner's whole lesson 06 workbook, the stubs filled in: passes (its shipped cells raise no flag: issue 39,
    # tests/test_grader.py checks it has none).
    "right_whole_workbook.ipynb": {"status": "passed", "message": "all 5 cases passed"},
    "right_sorted_candidates.py": {"status": "passed", "message": "all 5 cases passed"},
    "wrong_fastest_per_sm.py": {"status": "failed", "message": "expected",
                                "fails": ["H100, skinny outputs (N from 16 to 512)"]},
    "wrong_fractional_waves.py": {"status": "failed", "message": "expected",
                                  "fails": ["H100, skinny outputs (N from 16 to 512)"]},
    "wrong_returns_list.py": {"status": "failed", "message": "expected a tuple"},
}
GPU_ONLY = False
