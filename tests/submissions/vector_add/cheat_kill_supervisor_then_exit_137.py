"""Cheat: kills the worker's supervisor (its parent, which reports to the grader how the worker ended), then
os._exit(137). With no report, the grader must not pick one reading of the status: under bubblewrap the message
gives both (128+9: killed by SIGKILL, or exit(137)); at the process level it says the supervisor was killed."""
import os
import signal


def vector_add(x, y):
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(137)
