"""Timeout: loops forever inside the function."""


def vector_add(x, y):
    while True:
        pass
