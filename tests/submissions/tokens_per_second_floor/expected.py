"""What `gpucourse grade` must say of each known submission of tokens_per_second_floor.

The wrong ones make the slips the judge names: the KV cache left out, its heads counted as n_heads, bits for bytes;
and one number learned by heart for the lesson's model, which the first case (the lesson's own shape) passes and the
freshly drawn shapes of every other case fail.
"""
_LESSON = "Config.small() at context 512 and 3.0 TB/s (the lesson's floor)"
_SMALL = "Config.small() at contexts up to 131,072, T4 to H200 bandwidths"
_GQA = "grouped-query attention: 4 or 8 query heads per KV head"
_MHA = "multi-head attention: n_kv_heads = n_heads"
_LONG = "long contexts (32,768 to 131,072): the KV cache outweighs much of the model"
EXPECTED = {
    "right_weights_plus_cache.py": {"status": "passed", "message": "all 6 cases passed"},
    "right_counts_parameters_itself.py": {"status": "passed", "message": "all 6 cases passed"},
    "wrong_no_kv_cache.py": {"status": "failed", "message": "got 1,213.77 (1.007x the floor); that is the weights "
                                                           "alone: each token also reads the KV cache",
                             "fails": [_LESSON, _SMALL, _GQA, _MHA, _LONG]},
    "wrong_query_heads_in_cache.py": {"status": "failed", "message": "that counts n_heads heads in the KV cache",
                                      "fails": [_LESSON, _SMALL, _GQA], "passes": [_MHA]},
    "wrong_bits_not_bytes.py": {"status": "failed", "message": "8x too low: bits in place of bytes",
                                "fails": [_LESSON, _GQA, _MHA]},
    "wrong_hard_coded_small.py": {"status": "failed", "message": "tokens/s, got 1,205.59",
                                  "fails": [_SMALL, _GQA, _MHA, _LONG], "passes": [_LESSON]},
    # Issue 17's rule: the course's own solution raises while the learner's function runs.
    "cheat_course_floor.py": {"status": "error", "message": "floor.tokens_per_second_floor is the course's own "
                                                            "solution", "flags": ["imports the course's lessons"]},
}
GPU_ONLY = False
