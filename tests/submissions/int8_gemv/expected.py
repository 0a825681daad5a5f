"""What `gpucourse grade` must say of each known submission of int8_gemv."""
_CANCEL = "M=2, cancelling halves, K=4096"
EXPECTED = {
    "right_rows.py": {"status": "passed", "message": "all 7 cases passed"},
    # bf16 partial sums: the cancelling case is built to fail it; random K-long sums fail too, though not always.
    "wrong_accumulate_bf16.py": {"status": "failed", "message": "cases failed", "fails": [_CANCEL],
                                 "passes": ["M=1, 256x512"]},
    # Dequantized weights rounded to bf16 show only where large products cancel; the torch matmul is flagged.
    "wrong_dequant_bf16_torch_matmul.py": {"status": "failed", "message": "1 of 7 cases failed",
                                           "fails": [_CANCEL], "passes": ["M=1, 256x512"],
                                           "flags": ["calls aten.mm"]},
    "wrong_torch_dequant_matmul.py": {"status": "failed", "message": "no Triton kernel was launched",
                                      "flags": ["calls aten.mm"]},
    "wrong_unmasked_n.py": {"status": "failed", "message": "past the end", "fails": ["M=5, N=77 (ragged against the block), K=33"],
                            "passes": ["M=1, 256x512"]},
}
GPU_ONLY = False
