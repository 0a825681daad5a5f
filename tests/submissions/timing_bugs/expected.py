"""What `gpucourse grade` must say of each known submission of timing_bugs."""
EXPECTED = {
    "right_reasoned.py": {"status": "passed", "message": "all 3 cases passed"},
    # Review N7: snippet C queues a GPU sleep ahead, so its events time the adds, not the launches; the launch-bound
    # reading is told where the 12 MB live.
    "wrong_c_launch_bound.py": {"status": "failed",
                                "message": "'no_sync' is not the main bug of snippet C; hint: the sleep hides the "
                                           "launches",
                                "fails": ["snippet C"], "passes": ["snippet A", "snippet B"]},
    # Review N22: clocks are a distractor; snippet A's clock stops before the GPU has run the products.
    "wrong_a_clocks.py": {"status": "failed",
                          "message": "'clock_rampup' is not the main bug of snippet A; hint: the loop is warmed up",
                          "fails": ["snippet A"], "passes": ["snippet B", "snippet C"]},
}
GPU_ONLY = False
