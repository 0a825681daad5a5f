"""What `gpucourse grade` must say of each known submission of quantize_per_channel."""
EXPECTED = {
    "right_torch.py": {"status": "passed", "message": "all 6 cases passed"},
    "wrong_per_tensor_scale.py": {"status": "failed", "message": "one scale for the whole tensor",
                                  "fails": ["int8, 64x256", "int8, one outlier per row"]},
    "wrong_truncates.py": {"status": "failed", "message": "round to the nearest level", "fails": ["int8, 64x256"]},
    "wrong_zero_row_nan.py": {"status": "failed", "message": "give them scale 1.0",
                              "fails": ["int8, rows of zeros"], "passes": ["int8, 64x256"]},
}
GPU_ONLY = False
