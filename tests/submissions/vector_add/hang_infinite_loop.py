"""Timeout: loops forever inside the function (on one line, so the line its stack shows at the limit is known)."""


def vector_add(x, y):
    while True: pass  # noqa: E701
