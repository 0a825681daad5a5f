"""What `gpucourse grade` must say of each known submission of unpack_int4."""
EXPECTED = {
    "right_unpack.py": {"status": "passed", "message": "all 4 cases passed"},
    "wrong_sign_lost.py": {"status": "failed", "message": "expected -8 got 8",
                           "fails": ["every byte 0..255 (16x16)", "random, ragged"]},
    "wrong_nibble_order_swapped.py": {"status": "failed", "message": "elements differ",
                                      "fails": ["every byte 0..255 (16x16)", "random, ragged"]},
}
GPU_ONLY = False
