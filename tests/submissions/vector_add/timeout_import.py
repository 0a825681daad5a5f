"""Timeout: the import itself never finishes."""
import time

time.sleep(10**6)


def vector_add(x, y):
    return x + y
