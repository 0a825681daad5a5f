"""Shared test set-up: `gpu`-marked tests are skipped, with the reason shown, when there is no CUDA GPU; the known
submissions of a folder in tests/submissions/ are graded once per test run (``known_grades``)."""
import json
import os

import pytest
from filelock import FileLock

import gpucourse
from submissions_util import grade_folder


def pytest_collection_modifyitems(config, items):
    if gpucourse.on_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (CPU mode)")
    for item in items:
        if item.get_closest_marker("gpu"):  # the marker, not any keyword ("gpu" is also a test id)
            item.add_marker(skip)


# Known submissions and their expected.py are inputs to the grader tests, not tests or notebooks to collect (nbval
# would run them).
collect_ignore_glob = ["submissions/*"]

# Seconds per submission. The files that hang on purpose (expected.py's HANGS) are graded in a second call with a
# short limit, so the limit for everything else can be generous: a loaded 2-core CI machine must not turn a slow,
# correct submission into a timeout. On a GPU each worker also initialises CUDA and compiles into its own caches.
GRADE_TIMEOUT = 180 if gpucourse.on_gpu() else 120


@pytest.fixture(scope="session")
def known_grades(tmp_path_factory):
    """``known_grades(folder)``: submissions_util.grade_folder's result for tests/submissions/<folder>/, graded once
    per test run: under pytest-xdist the first worker to ask grades and the others read its result (test files
    are spread over the workers, and several read the same grades, e.g. vector_add's)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    root = tmp_path_factory.getbasetemp()
    shared = root.parent if worker else root  # the run's own folder, above every worker's
    done = {}

    def get(folder: str) -> dict:
        if folder not in done:
            out = shared / f"known-{folder}"
            with FileLock(str(out) + ".lock"):
                result = out / "graded.json"
                if not result.exists():
                    out.mkdir(exist_ok=True)
                    graded = grade_folder(folder, str(out), GRADE_TIMEOUT)
                    result.write_text(json.dumps(graded))
                done[folder] = json.loads(result.read_text())
        return done[folder]

    return get
