"""What `gpucourse grade` must say of each known submission of flash_attention.

Each wrong one has one bug of the kind the lesson warns about. The two that materialise the S×S scores fail two
ways: the one that computes them with torch calls a forbidden op (both modes); the one that writes them from a
Triton kernel into torch.empty fails the memory bound of the long case (both modes: on a GPU the allocator's peak,
in CPU mode what torch.empty handed out).
"""
_BODY = "may only use Triton (tl.*) operations, not torch or NumPy (on a GPU this kernel would not compile)"
# torch/NumPy inside a @triton.jit body: stopped in CPU mode as a GPU's compiler refuses it (grading/interpreter.py).
# The same status in both modes; on a GPU the message is the compiler's (an H100 run, results/h100-known-submissions).
_GPU_REFUSES = {"status": "error", "message": "raised"}
EXPECTED = {
    "right_forward.py": {"status": "passed", "message": "all 11 cases passed"},
    "wrong_no_rescale_of_accumulator.py": {"status": "failed", "message": "elements differ",
                                           "fails": ["several key blocks, ragged S, D=128"],
                                           "passes": ["S=1, D=64"]},
    "wrong_max_not_subtracted.py": {"status": "failed", "message": "non-finite output where the reference is finite",
                                    "fails": ["large scores (q, k x10), S=48, D=64"],
                                    "passes": ["S=64, D=64 (whole blocks)"]},
    "wrong_causal_mask_off_by_one.py": {"status": "failed", "message": "non-finite output",
                                        "fails": ["causal, S=64, D=64"], "passes": ["S=64, D=64 (whole blocks)"]},
    "wrong_ragged_s_not_masked.py": {"status": "failed", "message": ("non-finite output", "elements differ"),
                                     "fails": ["ragged S, D=64, B=2, H=2"]},
    # Issue 35: no mask on its loads nor its store. Told to mask its stores (the overrun leads), and now that the
    # loads need masks too: S is ragged and the last row, whose keys reach the partial block, is NaN.
    "wrong_loads_not_masked.py": {"status": "failed",
                                  "message": "mask the stores; hint: S=1 is not a multiple of your block size, and "
                                             "the last row of the output, whose keys reach into the last, partial "
                                             "block, holds NaN or Inf: loads without a mask read past the end of k "
                                             "and v",
                                  "fails": ["S=1, D=64", "ragged S, D=64, B=2, H=2"],
                                  "passes": ["S=64, D=64 (whole blocks)", "causal, S=64, D=64"]},
    "wrong_scores_materialised_with_torch.py": {"status": "failed",
                                                "message": "this exercise asks for your own kernel to compute the "
                                                           "answer, not this torch op",
                                                "flags": ["calls aten."]},
    "wrong_scores_materialised_in_triton.py": {"status": "failed",
                                               "message": "beyond its inputs during the call",
                                               "passes": ["S=64, D=64 (whole blocks)"]},
    "cheat_sdpa_behind_dummy_kernel.py": {"status": "failed",
                                          "message": "calls aten._scaled_dot_product",
                                          "flags": ["calls aten._scaled_dot_product"]},
    # Attention computed with torch inside the body, softmax reached by getattr on a string: refused.
    "cheat_torch_in_jit.py": {"status": "error", "message": _BODY, "gpu": _GPU_REFUSES},
    # tl.dot on bf16 blocks without an upcast: computed as on a GPU, not on the raw bits (issue 39).
    "right_bf16_dot.py": {"status": "passed", "message": "all 11 cases passed"},
}
GPU_ONLY = False
