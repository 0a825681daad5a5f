"""The GPU spec table: every required chip present, sourced, plausible; device names map to the right entry."""
import pytest

from gpucourse import specs

REQUIRED = ["T4", "L4", "A10G", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "RTX3090", "RTX4090",
            "RTX5090"]


def test_table_has_every_required_gpu_with_a_source():
    for key in REQUIRED:
        s = specs.SPECS[key]
        assert s.source and len(s.source) > 10, key
        assert 100 <= s.bandwidth_gbs <= 10_000, key
        assert s.tflops["fp32"] > 1, key
        assert s.tflops["fp16"] >= s.tflops["fp32"], key  # tensor cores beat CUDA cores


def test_dtype_support_matches_the_architecture():
    assert specs.SPECS["T4"].peak_tflops("bf16") is None  # Turing: no bf16 tensor cores
    assert specs.SPECS["A100-80GB"].peak_tflops("fp8") is None  # Ampere: no fp8
    assert specs.SPECS["H100-SXM"].peak_tflops("torch.bfloat16") == pytest.approx(989.4)
    assert specs.SPECS["H100-SXM"].peak_tflops("float8_e4m3fn") == pytest.approx(1978.9)


@pytest.mark.parametrize("name, key", [
    ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA A10G", "A10G"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
    ("NVIDIA H200", "H200"), ("NVIDIA GeForce RTX 3090", "RTX3090"), ("NVIDIA GeForce RTX 4090", "RTX4090"),
    ("NVIDIA GeForce RTX 5090", "RTX5090"),
])
def test_lookup_by_torch_device_name(name, key):
    assert specs.lookup(name).key == key


def test_unknown_gpu_is_none():
    assert specs.lookup("NVIDIA Quadro K420") is None


def test_slug_names_results_files_after_the_spec_else_the_device(monkeypatch):
    """specs.slug: the results files' prefix (h100.json) from the spec table, and for a GPU not in it the device's
    own name made file-safe (the GPU suite and explore_cuda_binding both name their files with it)."""
    from gpucourse import device

    for name, want in (("NVIDIA H100 80GB HBM3", "h100"), ("Tesla T4", "t4"),
                       ("Some Future GPU (64 GB)", "some-future-gpu-64-gb")):
        monkeypatch.setattr(device, "hardware_props", lambda index=None, n=name: device.DeviceProps(n, 9, 0, 1, 1, 1))
        assert specs.slug() == want
