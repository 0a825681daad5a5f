"""What `gpucourse grade` must say of each known submission of memory_budget (each figure judged against a measured
training step, within 10%)."""
_BF16 = ["bf16 autocast", "bf16 autocast, MLPs checkpointed"]
EXPECTED = {
    "right_on_paper.py": {"status": "passed", "message": "all 5 cases passed"},
    "wrong_adamw_one_state.py": {"status": "failed", "message": "optimizer: you said"},
    # Only the bf16 cases: the gradients are half the measured bytes there.
    "wrong_bf16_gradients.py": {"status": "failed", "message": "gradients: you said", "fails": _BF16,
                                "passes": ["fp32"]},
    "wrong_activations_per_sequence.py": {"status": "failed", "message": "activations: you said"},
    # Checkpointed blocks keep no weight copies: only the cases that keep linear layers' inputs under autocast fail.
    "wrong_no_weight_copies.py": {"status": "failed", "message": "activations: you said", "fails": _BF16,
                                  "passes": ["fp32"]},
    # Issue 39: the cases' sizes are drawn from a secret seed each run, so a table of answers for fixed configs fails.
    "cheat_lookup_table.py": {"status": "failed", "message": "parameters: you said 0 bytes"},
    "cheat_course_solution.py": {"status": "error", "message": "budget.predict is the course's own solution"},
}
GPU_ONLY = False
