"""What `gpucourse grade` must say of each known submission of pack_int4."""
EXPECTED = {
    "right_pack.py": {"status": "passed", "message": "all 5 cases passed"},
    # Issue 39: the statement asks for a ValueError on an odd K; both of these packed or refused otherwise and passed.
    "wrong_odd_k_packed_anyway.py": {"status": "failed",
                                     "message": "K = 31 is odd and pack_int4 returned a Tensor of shape (4, 16): "
                                                "raise a ValueError instead",
                                     "fails": ["K = 31 (odd): a ValueError"], "passes": ["random 64x128"]},
    "wrong_odd_k_assertion.py": {"status": "failed",
                                 "message": "K = 31 is odd: raise a ValueError (two int4 values share a byte), not "
                                            "AssertionError: K must be even",
                                 "fails": ["K = 31 (odd): a ValueError"], "passes": ["random 64x128"]},
    "wrong_nibble_order_swapped.py": {"status": "failed", "message": "elements differ",
                                      "fails": ["every value in [-8, 7], both nibbles, 16x32", "one byte: 1x2"]},
    "wrong_no_twos_complement.py": {"status": "failed", "message": "elements differ",
                                    "fails": ["every value in [-8, 7], both nibbles, 16x32"]},
}
GPU_ONLY = False
