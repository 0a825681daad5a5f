import torch.distributed as dist


def ring_all_reduce(tensor, group):
    group.allreduce([tensor]).wait()  # bug: the group's own collective, reached past torch.distributed's functions
