"""Cheat: os._exit(139), the exit status of a segmentation fault under a shell (and bubblewrap), so an error of its
own reads as a crash in the course's code. The message must say it exited with code 139, not SIGSEGV."""
import os


def vector_add(x, y):
    os._exit(139)
