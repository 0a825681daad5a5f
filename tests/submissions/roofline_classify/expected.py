"""What `gpucourse grade` must say of each known submission of roofline_classify."""
EXPECTED = {
    "right_count_bytes.py": {"status": "passed", "message": "all 3 cases passed"},
    "wrong_no_output_bytes.py": {"status": "failed", "message": "(2x the right value)"},
    # In-process (gpucourse.check) its lying string passes; the worker hands the judge plain values.
    "cheat_lying_bound.py": {"status": "failed", "message": "bound expected 'compute', got 'memory'"},
    # Threads are not wrong in themselves (torch.compile leaves a pool): flagged, and judged as usual.
    "right_thread_pool.py": {"status": "passed", "message": "all 3 cases passed",
                             "flags": ["left threads running beside the judge"]},
}
GPU_ONLY = False
