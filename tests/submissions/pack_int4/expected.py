"""What `gpucourse grade` must say of each known submission of pack_int4."""
EXPECTED = {
    "right_pack.py": {"status": "passed", "message": "all 4 cases passed"},
    "wrong_nibble_order_swapped.py": {"status": "failed", "message": "elements differ",
                                      "fails": ["every value in [-8, 7], both nibbles, 16x32", "one byte: 1x2"]},
    "wrong_no_twos_complement.py": {"status": "failed", "message": "elements differ",
                                    "fails": ["every value in [-8, 7], both nibbles, 16x32"]},
}
GPU_ONLY = False
