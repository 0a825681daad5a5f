"""What `gpucourse grade` must say of each known submission of ring_all_reduce (2, 3 and 4 gloo ranks per case)."""
EXPECTED = {
    "right_ring.py": {"status": "passed", "message": "all 3 cases passed"},
    # Reduce-scatter receives into the chunk it just sent: with chunks of unequal sizes gloo aborts the receiving
    # rank (the 2-rank case: 500 and 501 elements), with equal ones the sums are wrong.
    "wrong_off_by_one_chunk.py": {"status": "failed", "message": ("elements wrong", "died (exit code"), "fails": [
        "2 ranks: 1000, 1001 and 1 elements", "3 ranks: 1000, 2 and 7x13 elements (3 divides none)"]},
    # Chunks of n // N: the tail is never summed; 4 ranks on 4096 alone would pass, 4099 does not.
    "wrong_size_not_divisible.py": {"status": "failed", "message": "elements wrong", "fails": [
        "2 ranks: 1000, 1001 and 1 elements", "3 ranks: 1000, 2 and 7x13 elements (3 divides none)",
        "4 ranks: 4099, 3 and 4096 elements, float64"]},
    "wrong_recv_before_send.py": {"status": "timeout", "message": "send/recv order may deadlock"},
    "wrong_calls_all_reduce.py": {"status": "failed", "message": "called a collective (torch.distributed.all_reduce"},
    "wrong_process_group_allreduce.py": {"status": "failed", "message": "called a collective (c10d.allreduce_)"},
    "wrong_sends_whole_tensor.py": {"status": "failed", "message": "send chunks, not whole tensors",
                                    "passes": ["2 ranks: 1000, 1001 and 1 elements"]},
    # Issue 39: the sums came through the process group's store, not through send/recv.
    "cheat_through_the_store.py": {"status": "failed", "message": "wrote to the process group's store"},
    "cheat_course_solution.py": {"status": "error", "message": "ring_all_reduce is the course's own solution"},
}
GPU_ONLY = False
