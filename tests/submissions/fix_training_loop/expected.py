"""What `gpucourse grade` must say of each known submission of fix_training_loop."""
# A cheat that would pass in-process must fail here for the right reason, or (the documented limitation: forging
# from inside the call) at least be flagged.
EXPECTED = {
    # Issue 17: the course's own solution raises while the learner's function runs; a log emptied during the call
    # is told apart from the judge's own record.
    "cheat_course_solution.py": {"status": "error", "message": "trainloop.train_fixed is the course's own solution",
                                 "flags": ["imports the course's lessons"]},
    "cheat_clear_sync_log.py": {"status": "failed", "message": "the sync detector's log was changed during the call",
                                "flags": ["hooks into or switches off torch's dispatch"]},
    "right_device_metrics.py": {"status": "passed", "message": "all 2 cases passed"},
    "wrong_item_in_loop.py": {"status": "failed", "message": "Tensor.item at wrong_item_in_loop.py:19"},
    # An explicit wait is a synchronization too, reported at the learner's line (the results are right: only the wait
    # fails it).
    "wrong_explicit_synchronize.py": {"status": "failed",
                                      "message": "gpucourse.synchronize at wrong_explicit_synchronize.py:24"},
    "wrong_results.py": {"status": "failed", "message": "'losses' differs from the reference loop"},
    "cheat_patch_detector.py": {"status": "failed", "message": "synchronization(s) inside train_fast", "flags": [
        "gpucourse.syncs.detect", "the contents of gpucourse.syncs.READS", "the code of gpucourse.syncs.classify",
        "SyncLog.__len__ (added)", "a TorchFunctionMode left on torch's stack"]},
    "cheat_patch_comparisons.py": {"status": "failed", "message": "'losses' differs from the reference loop", "flags": [
        "torch.allclose", "gpucourse.lessons.l02_async_pipeline.exercises.fix_training_loop.RTOL",
        "_global_forward_hooks", "torch's dispatch"]},
    "cheat_patch_in_call.py": {"status": "failed", "message": "synchronization(s) inside train_fast",
                               "flags": ["gpucourse.syncs.SyncLog.__bool__ (added)", "torch.equal"]},
    "cheat_background_thread.py": {"status": "error", "message": "tampered with the judge",
                                   "flags": ["tampered with the judge", "threads"]},
    "cheat_print_and_exit.py": {"status": "error", "message": "raised SystemExit: 0"},
    # Hooks switched off inside the call blind the detector in CPU mode: the judge notices that it saw too few torch
    # calls for the steps taken, and the source is flagged. A GPU's sync debug mode still sees the syncs (the H100
    # run in benchmarks/results/h100-grade-fix_training_loop.json: "27 synchronization(s) inside train_fast").
    "cheat_disable_hooks_in_call.py": {"status": "failed", "message": "the sync detector saw only",
                                       "flags": ["switches off torch's dispatch"],
                                       "gpu": {"message": "synchronization(s) inside train_fast"}},
}
GPU_ONLY = False
