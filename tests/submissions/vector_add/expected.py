"""What `gpucourse grade` must say of each known submission of vector_add."""
EXPECTED = {
    # Issue 17: the answer must come from the learner's kernel. Torch ops on the inputs fail, naming them; an answer
    # that is right with every launch skipped (NumPy, which torch never sees) fails; empty memory is always poisoned.
    "cheat_negated_add_empty_kernel.py": {"status": "failed",
                                          "message": "derived from them: aten.neg, aten.sub"},
    # On a GPU the inputs must first be copied to the host, which is itself named (H100: h100-grade-vector_add-checks).
    "cheat_numpy_behind_dummy_kernel.py": {"status": "failed",
                                           "message": "the output does not come from your kernels: with every "
                                                      "Triton launch skipped",
                                           "gpu": {"message": "aten._to_copy (to another device)"}},
    "cheat_do_nothing_returns_empty.py": {"status": "failed", "message": "elements never written"},
    "cheat_do_nothing_returns_empty_like.py": {"status": "failed", "message": "elements never written"},
    # Sizes are drawn per run: a kernel right only on the sizes the spec once listed fails the drawn cases (a draw
    # may hit an old size, 1023 among 2**k - d say, so which ones fail varies; with fixed sizes all would pass).
    "wrong_right_on_spec_sizes_only.py": {"status": "failed", "message": "cases failed", "passes": ["n=1"]},
    "right_basic.py": {"status": "passed", "message": "all 6 cases passed"},
    "right_autotuned.py": {"status": "passed", "message": "all 6 cases passed"},
    "right_strided_kernel.py": {"status": "passed", "message": "all 6 cases passed"},
    "right_noisy_prints.py": {"status": "passed", "message": "all 6 cases passed", "flags": ["MB of output"]},
    # A line continuing a string format with % is code (it used to be read as a magic: "syntax error").
    "right_notebook_percent_continuation.ipynb": {"status": "passed", "message": "all 6 cases passed"},
    "right_notebook_magics_plot.ipynb": {"status": "passed", "message": "all 6 cases passed"},
    "wrong_unwritten_tail.py": {"status": "failed", "message": "elements never written"},
    "wrong_unmasked_empty_like.py": {"status": "failed", "message": "past the end of a 1-element output it allocated",
                                     "fails": ["strided x[::step]"]},
    "wrong_returns_input.py": {"status": "failed", "message": "your output is your input: the tensor returned is "
                                                          "argument 1 itself"},
    "cheat_reused_output.py": {"status": "failed", "message": "both calls returned the same memory"},
    "wrong_hardcoded_size.py": {"status": "failed", "message": "past the end of a 1-element output"},
    "wrong_torch_not_triton.py": {"status": "failed", "message": "no Triton kernel was launched",
                                  "flags": ["calls aten.add"]},
    "wrong_dtype.py": {"status": "failed", "message": "wrong dtype: expected float32, got float16"},
    "wrong_nan.py": {"status": "failed", "message": "NaN"},
    # Issue 35: a kernel that ignores its inputs' strides reads between x[::step]'s elements (the guard's NaN); the
    # message says the inputs of that case are not contiguous and the kernel must use the strides.
    "wrong_ignores_strides.py": {"status": "failed", "fails": ["strided x[::step]"],
                                 "passes": ["n=1", "n not a power of two", "large"],
                                 "message": "NaN, 0 Inf; hint: the inputs of this case are not contiguous, so your "
                                            "kernel must use their strides (argument 1 has shape ("},
    "wrong_oob_write.py": {"status": "failed", "message": "out-of-bounds write"},
    "wrong_inplace_input.py": {"status": "failed", "message": "modified its input"},
    "wrong_nondeterministic.py": {"status": "failed", "message": "nondeterministic"},
    "wrong_shape.py": {"status": "failed", "message": "wrong shape"},
    "wrong_sparse_output.py": {"status": "failed", "message": "layout sparse_coo"},
    "error_syntax.py": {"status": "error", "message": "syntax error"},
    "error_raises.py": {"status": "error", "message": "raised IndexError"},
    "error_missing_function.py": {"status": "error", "message": "does not define `vector_add`"},
    "error_not_implemented.py": {"status": "error", "message": "not implemented yet"},
    # Issue 35: a timeout names the case in progress (the grader's own record) and where the submission was at the
    # limit (the worker's stack, written just before it: file, line, function, the code from the grader's copy). In
    # CPU mode the message also says an interpreted kernel of tiny blocks is slow (issue 39), and still ends so.
    "hang_infinite_loop.py": {
        "status": "timeout", "fails": ["n=1"],
        "message": "over the time limit of 10 s while running case 'n=1', at hang_infinite_loop.py, line 5 in "
                   "vector_add: `while True: pass  # noqa: E701` (a hang, an endless loop, or a slow import?; in CPU "
                   "mode Triton's interpreter runs every program in Python, so a kernel of very small blocks is slow "
                   "too)",
        "gpu": {"message": "over the time limit of 10 s while running case 'n=1', at hang_infinite_loop.py, line 5 "
                           "in vector_add: `while True: pass  # noqa: E701` (a hang, an endless loop, or a slow "
                           "import?)"}},
    "timeout_import.py": {"status": "timeout", "fails": ["load"],
                          "message": "over the time limit of 10 s while loading the submission (its top-level code), "
                                     "at timeout_import.py, line 4 in <module>: `time.sleep(10**6)` (a hang"},
    "crash_segfault.py": {"status": "crashed", "message": "SIGSEGV", "flags": ["ctypes"]},
    "crash_abort.py": {"status": "crashed", "message": "SIGABRT"},
    # The reason found before the crash (its likelier cause) is in the message, not only in the JSON's checks.
    "crash_after_a_failed_case.py": {"status": "crashed", "fails": ["n=1"],
                                     "message": "killed by SIGABRT after case 'n=1' failed: 1 of 1 elements differ"},
    "crash_os_exit.py": {"status": "crashed", "message": "exited (code 0)", "flags": ["exits or signals"]},
    # Killed by a signal or exited: the worker's supervisor tells them apart (bwrap's exit status is 128 + n for
    # both). Faked deaths read as exits; without the supervisor's report, the message gives both readings.
    "crash_cpu_time_limit.py": {"status": "crashed", "message": "killed by SIGXCPU (over its CPU-time limit)"},
    "crash_kills_itself_sigkill.py": {"status": "crashed", "message": "the process died: killed by SIGKILL"},
    "cheat_exit_137_fakes_sigkill.py": {"status": "crashed", "message": "the process exited (code 137)",
                                        "flags": ["exits or signals"]},
    "cheat_exit_139_fakes_segfault.py": {"status": "crashed", "message": "the process exited (code 139)"},
    "cheat_kill_supervisor_then_exit_137.py": {
        "status": "crashed", "flags": ["exits or signals"],
        "message": ("the process exited (code 137)",
                    "the process ended without saying how: its supervisor was killed by SIGKILL")},
    "error_sys_exit_137.py": {"status": "error", "message": "vector_add raised SystemExit: 137"},
    # bwrap's own error line and exit status 1, printed by the submission: not the grader's failure.
    "cheat_fake_bwrap_failure.py": {"status": "crashed", "message": "the process exited (code 1)"},
    "cheat_monkeypatch_allclose.py": {"status": "failed", "message": "elements differ",
                                      "flags": ["monkeypatches torch", "reaches into the grader"]},
    # The cached answer is wrong on the next case, and on the first one it comes back with every launch skipped.
    "cheat_cached_outputs.py": {"status": "failed", "message": ("elements differ", "does not come from your kernels")},
    "cheat_gc_walk.py": {"status": "failed", "message": "elements differ", "flags": ["garbage collector"]},
    "cheat_fake_print.py": {"status": "failed", "message": "elements differ"},
    "cheat_sys_exit.py": {"status": "error", "message": "exit(0)"},
    # The documented limitation: code in the worker can forge what the worker reports about itself (launches).
    # The values are right, so it is not caught as wrong; it must be flagged for a human instead.
    "cheat_forge_launch_count.py": {"status": None, "message": None,
                                    "flags": ["reaches into the grader", "calls aten.add"]},
}
GPU_ONLY = False
# Graded in a second call with a short --timeout (they hang on purpose), so the limit for the rest can be generous.
HANGS = ("hang_infinite_loop.py", "timeout_import.py")
