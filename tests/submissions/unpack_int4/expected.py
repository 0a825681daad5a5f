"""What `gpucourse grade` must say of each known submission of unpack_int4."""
_BODY = "may only use Triton (tl.*) operations, not torch or NumPy (on a GPU this kernel would not compile)"
# torch/NumPy inside a @triton.jit body: stopped in CPU mode as a GPU's compiler refuses it (grading/interpreter.py).
# The same status in both modes; on a GPU the message is the compiler's (an H100 run, results/h100-known-submissions).
_GPU_REFUSES = {"status": "error", "message": "raised"}
EXPECTED = {
    "right_unpack.py": {"status": "passed", "message": "all 4 cases passed"},
    "wrong_sign_lost.py": {"status": "failed", "message": "expected -8 got 8",
                           "fails": ["every byte 0..255 (16x16)", "random, ragged"]},
    "wrong_nibble_order_swapped.py": {"status": "failed", "message": "elements differ",
                                      "fails": ["every byte 0..255 (16x16)", "random, ragged"]},
    # NumPy on the interpreter's array behind a loaded tl tensor (`.handle.data`): refused before the body runs.
    "cheat_numpy_in_jit.py": {"status": "error", "message": _BODY, "gpu": _GPU_REFUSES},
}
GPU_ONLY = False
