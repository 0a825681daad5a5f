"""What `gpucourse grade` must say of each known submission of time_gpu."""
EXPECTED = {  # both pass gpucourse.check in-process
    "cheat_fake_queue.py": {"status": "failed", "message": "one call takes"},
    "cheat_lying_float.py": {"status": "failed", "message": "returned 0.001 ms; one call takes"},
}
GPU_ONLY = False
