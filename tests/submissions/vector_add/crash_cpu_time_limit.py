"""Crashed: lowers its own CPU-time limit (RLIMIT_CPU) below what it will use and spins: the kernel kills it with
SIGXCPU. The message names the signal and what it means."""
import resource


def vector_add(x, y):
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 60))
    while True:
        pass
