"""What `gpucourse grade` must say of each known submission of int4_gemv."""
_CANCEL = "M=2, cancelling halves, K=4096, group 128"
_BODY = "may only use Triton (tl.*) operations, not torch or NumPy (on a GPU this kernel would not compile)"
# torch/NumPy inside a @triton.jit body: stopped in CPU mode as a GPU's compiler refuses it (grading/interpreter.py).
# The same status in both modes; on a GPU the message is the compiler's (an H100 run, results/h100-known-submissions).
_GPU_REFUSES = {"status": "error", "message": "raised"}
EXPECTED = {
    "right_group_steps.py": {"status": "passed", "message": "all 7 cases passed"},
    "wrong_accumulate_bf16.py": {"status": "failed", "message": "cases failed", "fails": [_CANCEL]},
    "wrong_nibble_order_swapped.py": {"status": "failed", "message": "7 of 7 cases failed",
                                      "fails": ["M=1, 256x512, group 128"]},
    "wrong_sign_lost.py": {"status": "failed", "message": "7 of 7 cases failed",
                           "fails": ["M=1, 256x512, group 128"]},
    "wrong_torch_dequant_matmul.py": {"status": "failed",
                                      "message": "no Triton kernel was launched",
                                      "flags": ["calls aten.mm"]},
    # Tensor methods on the tensors passed as tl.constexpr, inside the body: caught as the body runs.
    "cheat_torch_in_jit.py": {"status": "error", "message": _BODY, "gpu": _GPU_REFUSES},
}
GPU_ONLY = False
