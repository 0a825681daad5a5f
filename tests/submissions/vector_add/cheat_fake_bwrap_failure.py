"""Cheat: prints bubblewrap's own kind of error line and exits with status 1 while loading, as bwrap does when the
sandbox cannot start, hoping to be reported as the grader's failure ("INTERNAL GRADER ERROR (not the submission's
fault)") instead of its own. Its worker had started (its supervisor said so), so it is the submission's exit."""
import os
import sys

sys.stderr.write("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n")
sys.stderr.flush()
os._exit(1)
