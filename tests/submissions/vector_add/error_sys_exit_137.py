"""Error: sys.exit(137) inside the call. SystemExit is an exception the worker catches: the submission raised, it
was not killed."""
import sys


def vector_add(x, y):
    sys.exit(137)
