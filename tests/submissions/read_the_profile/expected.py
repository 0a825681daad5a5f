"""What `gpucourse grade` must say of each known submission of read_the_profile."""
_ALL = ["4 steps, batch copies on a second stream", "6 steps, copies on the compute stream",
        "3 steps, a slow data loader, large batches", "8 steps, a fast data loader"]
EXPECTED = {
    "right_reads_the_trace.py": {"status": "passed", "message": "all 4 cases passed"},
    # The course's reader is trapped while the submission runs.
    "cheat_course_reader.py": {"status": "error", "message": "is the course's own solution to this exercise",
                               "flags": ["source imports the course's lessons"]},
    "wrong_top_kernel_by_count.py": {"status": "failed", "message": "is the most launched kernel", "fails": _ALL},
    "wrong_idle_share_from_cpu_events.py": {"status": "failed", "message": "idle_share:", "fails": _ALL},
    # Overlapping copies counted twice: wrong wherever a copy stream runs beside the kernels, right where it does not.
    "wrong_idle_share_sums_streams.py": {"status": "failed", "message": "count overlapping time once",
                                         "fails": [_ALL[0], _ALL[2], _ALL[3]], "passes": [_ALL[1]]},
    "wrong_sync_line_of_the_copy.py": {"status": "failed", "message": "issues the host-to-device copy",
                                       "fails": _ALL},
}
GPU_ONLY = False
