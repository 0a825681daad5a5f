"""What `gpucourse grade` must say of each known submission of quantize_per_channel."""
EXPECTED = {
    # Lesson 07's own helpers compute the answer: an error naming the course's code, not a pass with a flag.
    "cheat_course_helpers.py": {"status": "error", "message": "quantize_per_channel used the course's own code: it "
                                                              "imports the course's lessons",
                                "flags": ["imports the course's lessons"]},
    "right_torch.py": {"status": "passed", "message": "all 6 cases passed"},
    "wrong_per_tensor_scale.py": {"status": "failed", "message": "one scale for the whole tensor",
                                  "fails": ["int8, 64x256", "int8, one outlier per row"]},
    "wrong_truncates.py": {"status": "failed", "message": "round to the nearest level", "fails": ["int8, 64x256"]},
    "wrong_zero_row_nan.py": {"status": "failed", "message": "give them scale 1.0",
                              "fails": ["int8, rows of zeros"], "passes": ["int8, 64x256"]},
}
GPU_ONLY = False
