"""The benchmark registry: discovery, targets, CPU-mode skipping, the JSON document."""
import json
import subprocess
import sys

import pytest

import gpucourse
from gpucourse import benchmarks


def test_registry_finds_the_foundation_benchmarks():
    reg = benchmarks.registry()
    assert {"timing_agreement", "ceilings"} <= set(reg)
    assert all(e["lesson"] for e in reg.values())


def test_target_compares_in_the_stated_direction():
    assert benchmarks.target("ratio", 0.96, 0.95)["met"]
    assert not benchmarks.target("ratio", 0.94, 0.95)["met"]
    assert benchmarks.target("cv", 0.01, 0.02, "<=")["met"]
    assert not benchmarks.target("cv", 0.03, 0.02, "<=")["met"]


def test_duplicate_names_are_refused():
    benchmarks.register("_probe", lesson="99", gpu_only=False)(lambda: {})
    with pytest.raises(ValueError, match="registered twice"):
        benchmarks.register("_probe", lesson="99")(lambda: {})
    benchmarks._REGISTRY.pop("_probe")


def test_command_writes_json_with_environment(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "gpucourse.cli", "bench", "ceilings", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert {"date", "environment", "results"} <= set(doc)
    assert doc["environment"]["torch"] and doc["environment"]["mode"] in ("gpu", "cpu")
    res = doc["results"]["ceilings"]
    if gpucourse.on_gpu():
        assert res["copy_gbps"] > 0 and res["matmul_tflops"] > 0
    else:
        assert res == {"skipped": "needs a GPU"}


def test_unknown_benchmark_is_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "gpucourse.cli", "bench", "no_such_thing"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "unknown benchmark" in r.stderr
