"""Crashed: aborts the process (SIGABRT), like a failed C++ assertion."""
import os


def vector_add(x, y):
    os.abort()
