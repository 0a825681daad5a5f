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
                                     "message": "your intensities are right, but every bound is 'compute', what "
                                                "ops:byte ratios 1/1000 of the device's"},
    "wrong_intensity_per_kilobyte.py": {"status": "failed",
                                        "message": "every intensity is 1000x the right value (all 8 ops): intensity "
                                                   "is flops per byte"},
    # Review N8: the single ops:byte ratio the lesson retracts fails on the fp32 GEMM drawn between the two ridges.
    "wrong_single_ridge.py": {"status": "failed",
                              "message": "every bound is what the tensor cores' ridge"},
    # The other single ratio (the CUDA cores') fails on the skinny bf16 GEMM between the ridges.
    "wrong_cuda_ridge_everywhere.py": {"status": "failed",
                                       "message": "every bound is what the CUDA cores' ridge"},
}
GPU_ONLY = False
