"""Crashed: sends itself SIGKILL. It really was killed by SIGKILL, and the message says so (under bubblewrap too,
where the exit status alone, 137, could also be exit(137))."""
import os
import signal


def vector_add(x, y):
    os.kill(os.getpid(), signal.SIGKILL)
