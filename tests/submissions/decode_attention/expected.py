"""What `gpucourse grade` must say of each known submission of decode_attention.

Each wrong one has one bug of the kind the lesson warns about: the splits combined without the rescale to their
common maximum, the lengths ignored (NaN rows past them read), the KV head of a query head taken as h % Hkv, the last
partial split dropped. The cheats hand the attention to torch (SDPA; softmax and matmul) and launch a copy kernel.
"""
_WHOLE = "length 64 = S_max (whole blocks), D=64, Hq=Hkv=4"
_ONES = "every length 1, B=2, GQA 4, D=64"
_RAGGED = "ragged lengths 1..S_max, B=4, GQA 4, D=64"
_GQA1 = "ragged lengths, B=3, GQA 1, D=128, bfloat16"
_PAST_POW2 = "lengths one past a power of two (17, 33, 65...), B=4, GQA 4, D=64"
_NAN = "non-finite output where the reference is finite"
_READ_PAST = "the cache rows at or past each sequence's length hold NaN in this check"
# On a T4 (no bf16) the bf16 cases run in float16 and are named so: the GPU expectations name no bf16 case.
EXPECTED = {
    "right_split_kv.py": {"status": "passed", "message": "all 9 cases passed"},
    "right_per_query_head_split_100.py": {"status": "passed", "message": "all 9 cases passed"},
    "wrong_no_rescale_in_combine.py": {"status": "failed", "message": "elements differ",
                                       "fails": [_RAGGED, _PAST_POW2], "passes": [_WHOLE, _ONES]},
    "wrong_reads_to_s_max.py": {"status": "failed", "message": f"{_NAN}: 1024 NaN, 0 Inf; hint: {_READ_PAST}",
                                "fails": [_ONES, _RAGGED], "passes": [_WHOLE]},
    "wrong_gqa_head_mapping.py": {"status": "failed", "message": "elements differ",
                                  "fails": [_ONES, _RAGGED], "passes": [_WHOLE, _GQA1],
                                  "gpu": {"passes": [_WHOLE]}},
    "wrong_whole_splits_only.py": {"status": "failed", "message": _NAN, "fails": [_ONES, _RAGGED, _PAST_POW2],
                                   "passes": [_WHOLE]},
    # SDPA with a mask: on the CPU its flash kernel for CPU; on a GPU the backend it picks for a masked GQA call.
    "cheat_sdpa_behind_copy_kernel.py": {"status": "failed", "message": "calls aten._scaled_dot_product",
                                         "flags": ["calls aten._scaled_dot_product"],
                                         "gpu": {"message": "calls aten.", "flags": ["calls aten."]}},
    "cheat_torch_softmax_matmul.py": {"status": "failed", "message": "this exercise asks for your own kernel to "
                                                                    "compute the answer, not this torch op",
                                      "flags": ["calls aten."]},
    "error_wrong_signature.py": {"status": "error",
                                 "message": "decode_attention() takes 3 positional arguments but 4 were given"},
}
GPU_ONLY = False
