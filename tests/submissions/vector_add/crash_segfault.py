"""Crashed: dereferences a wild pointer through ctypes (SIGSEGV)."""
import ctypes


def vector_add(x, y):
    return ctypes.c_int64.from_address(8).value
