"""Hostile: hands in a classmate's answer from the same batch. It looks for the other submissions beside its own file,
in the folders that /proc/self/mountinfo names as the sources of its mounts, and in other workers' temporary
directories; in the sandbox it sees only its own file."""
import glob
import os
import runpy


def _others():
    me = os.path.realpath(__file__)
    dirs = {os.path.dirname(me), "/tmp"}
    try:
        for line in open("/proc/self/mountinfo"):
            root = line.split()[3]
            dirs.add(os.path.dirname(root))  # e.g. the host folder the submission was bound from
    except OSError:
        pass
    found = []
    for d in sorted(dirs):
        found += [p for p in glob.glob(os.path.join(d, "*.py")) + glob.glob(os.path.join(d, "gpucourse-grade-*", "*"))
                  if os.path.realpath(p) != me and "vector_add" in open(p, errors="replace").read()]
    return found


def vector_add(x, y):
    others = _others()
    if not others:
        raise FileNotFoundError("found no other submission to copy")
    return runpy.run_path(others[0])["vector_add"](x, y)
