"""What `gpucourse grade` must say of each known submission of roofline_classify."""
EXPECTED = {
    # Issue 17: the course's own solution raises while the learner's function runs.
    "cheat_course_solution.py": {"status": "error", "message": "gpucourse.roofline.classify is the course's own "
                                                               "solution"},
    "right_count_bytes.py": {"status": "passed", "message": "all 3 cases passed"},
    "wrong_no_output_bytes.py": {"status": "failed", "message": "(2x the right value)"},
    # In-process (gpucourse.check) its lying string passes; the worker hands the judge plain values.
    "cheat_lying_bound.py": {"status": "failed", "message": "bound expected 'compute', got 'memory'"},
    # Threads are not wrong in themselves (torch.compile leaves a pool): flagged, and judged as usual.
    "right_thread_pool.py": {"status": "passed", "message": "all 3 cases passed",
                             "flags": ["left threads running beside the judge"]},
    # A units slip is one line, not one per op (14 "bound expected 'memory', got 'compute'" lines before).
    "wrong_ratio_without_units.py": {"status": "failed",
                                     "message": "your intensities are right, but every bound is what an ops:byte ratio "
                                                "1/1000 of the device's gives"},
    "wrong_intensity_per_kilobyte.py": {"status": "failed",
                                        "message": "every intensity is 1000x the right value (all 7 ops): intensity "
                                                   "is flops per byte"},
}
GPU_ONLY = False
