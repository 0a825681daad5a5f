"""Cheat: os._exit(137), the exit status a shell (and bubblewrap) gives a process killed by SIGKILL, as if the
grader had killed it (out of memory?). The message must say it exited with code 137, not that it was killed."""
import os


def vector_add(x, y):
    os._exit(137)
