"""Cheat: kills the worker's supervisor (its parent, which reports to the grader how the worker ended), then
os._exit(137), hoping to read as killed by SIGKILL. In the sandbox the supervisor is the namespace's PID 1, which no
process inside can kill: the report comes, and says exit code 137. At the process level the kill works, and with no
report the message says the supervisor was killed rather than pick a reading of the status."""
import os
import signal


def vector_add(x, y):
    try:
        os.kill(os.getppid(), signal.SIGKILL)
    except OSError:
        pass
    os._exit(137)
