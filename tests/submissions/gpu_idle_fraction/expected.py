"""What `gpucourse grade` must say of each known submission of gpu_idle_fraction (lesson 02's profiling exercise: the
GPU's idle share of a window, from a trace's kernels). Each wrong one fails exactly the cases drawn to catch its
mistake, with the hint naming it."""
EXPECTED = {
    "right_merge.py": {"status": "passed", "message": "all 8 cases passed"},
    # Overlapping kernels (two streams, nested ones) are counted twice; one stream, the window's edges, the empty
    # list and touching kernels have no overlap, so they pass.
    "wrong_sums_lengths.py": {"status": "failed", "message": "that is what adding up every kernel's length gives",
                              "fails": ["two streams overlapping", "short kernels nested in long ones",
                                        "unsorted, as a trace lists them",
                                        "a whole trace: all of the above, unsorted"],
                              "passes": ["one stream, sorted, inside the window",
                                         "kernels across the window's edges and outside it", "no kernel at all",
                                         "touching and zero-length kernels"]},
    # No clipping: only the traces with kernels across or beyond the window's edges fail.
    "wrong_ignores_window.py": {"status": "failed", "message": "the kernels' union gives without clipping it",
                                "fails": ["kernels across the window's edges and outside it",
                                          "touching and zero-length kernels",
                                          "a whole trace: all of the above, unsorted"],
                                "passes": ["one stream, sorted, inside the window", "two streams overlapping",
                                           "short kernels nested in long ones", "unsorted, as a trace lists them",
                                           "no kernel at all"]},
    # Merging in the order given: right on every sorted trace, wrong on the two unsorted ones.
    "wrong_assumes_sorted.py": {"status": "failed", "message": "merging the kernels in the order given",
                                "fails": ["unsorted, as a trace lists them",
                                          "a whole trace: all of the above, unsorted"],
                                "passes": ["one stream, sorted, inside the window", "two streams overlapping",
                                           "short kernels nested in long ones",
                                           "kernels across the window's edges and outside it",
                                           "touching and zero-length kernels"]},
    # An empty list (the GPU ran nothing) raises: an error, naming the case and the exception.
    "wrong_empty_crashes.py": {"status": "error", "message": "IndexError: list index out of range"},
}
GPU_ONLY = False
