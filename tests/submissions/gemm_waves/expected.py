"""What `gpucourse grade` must say of each known submission of gemm_waves."""
EXPECTED = {
    # Issue 17: the course's own solution raises while the learner's function runs.
    "cheat_course_solution.py": {"status": "error", "message": "waves.gemm_waves is the course's own solution",
                                 "flags": ["imports the course's lessons"]},
    "right_math_ceil.py": {"status": "passed", "message": "all 6 cases passed"},
    "right_integer_ceil.py": {"status": "passed", "message": "all 6 cases passed"},
    "wrong_no_ceil_division.py": {"status": "failed", "message": "'tiles' expected",
                                  "fails": ["M and N not multiples of the tile (ceil division)",
                                            "1×1 output, one row, one column"]},
    "wrong_occupancy_zero_when_full.py": {"status": "failed", "message": "'last_wave_occupancy' expected 1",
                                          "fails": ["tiles fill the last wave exactly (occupancy 1.0)"],
                                          "passes": ["fewer tiles than SMs (less than one wave)"]},
    "wrong_whole_waves.py": {"status": "failed", "message": "'waves' expected",
                             "fails": ["H100 N sweep: M=8192, 128×256 tiles, 132 SMs"]},
}
GPU_ONLY = False
