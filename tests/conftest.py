"""Shared test set-up: `gpu`-marked tests are skipped, with the reason shown, when there is no CUDA GPU."""
import pytest

import gpucourse


def pytest_collection_modifyitems(config, items):
    if gpucourse.on_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (CPU mode)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Known-wrong submissions are inputs to the grader tests, not tests or notebooks to collect (nbval would run them).
collect_ignore_glob = ["submissions/*"]
