"""Mode selection, the import-order guard, capability gating on mocked devices, the size helper."""
import os
import subprocess
import sys
import textwrap

import pytest

import gpucourse
from gpucourse import device
from gpucourse.device import DeviceProps

T4 = DeviceProps("Tesla T4", 7, 5, 40, 15 * 2**30, 4 * 2**20)
A100 = DeviceProps("NVIDIA A100-SXM4-80GB", 8, 0, 108, 80 * 2**30, 40 * 2**20)
H100 = DeviceProps("NVIDIA H100 80GB HBM3", 9, 0, 132, 80 * 2**30, 50 * 2**20)
L4 = DeviceProps("NVIDIA L4", 8, 9, 58, 22 * 2**30, 48 * 2**20)


def run_python(code: str, **env_overrides) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "GPUCOURSE_MODE")}
    env.update(env_overrides)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=120)


def test_import_selects_cpu_mode_and_turns_on_the_interpreter():
    r = run_python("""
        import os, gpucourse
        print(gpucourse.mode(), os.environ.get("TRITON_INTERPRET"))
    """, GPUCOURSE_MODE="cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["cpu", "1"]


def test_triton_imported_first_fails_loudly_with_the_fix():
    r = run_python("""
        import triton
        import gpucourse
    """, GPUCOURSE_MODE="cpu")
    assert r.returncode != 0
    assert "ImportOrderError" in r.stderr
    assert "import gpucourse" in r.stderr and "before `import triton`" in r.stderr


def test_triton_first_is_fine_when_interpreter_already_on():
    r = run_python("import triton, gpucourse; print(gpucourse.mode())", GPUCOURSE_MODE="cpu", TRITON_INTERPRET="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cpu"


def test_kernels_run_in_the_interpreter_after_import_gpucourse():
    r = run_python("""
        import gpucourse
        import torch, triton, triton.language as tl
        @triton.jit
        def double(x, o, n, B: tl.constexpr):
            offs = tl.program_id(0) * B + tl.arange(0, B)
            tl.store(o + offs, 2 * tl.load(x + offs, mask=offs < n), mask=offs < n)
        x = torch.arange(5, dtype=torch.float32); o = torch.empty_like(x)
        double[(1,)](x, o, 5, B=8)
        print(o.tolist())
    """, GPUCOURSE_MODE="cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[0.0, 2.0, 4.0, 6.0, 8.0]"


BF16_KERNEL = """
    import torch, triton, triton.language as tl
    @triton.jit
    def k(X, Y, Z, W, N: tl.constexpr):
        o = tl.arange(0, N)
        x = tl.load(X + o)
        tl.store(Z + o, x * tl.load(Y + o) + x)  # bf16 arithmetic
        tl.store(W + o, (x.to(tl.float32) * 1.00390625).to(tl.bfloat16))  # a cast that must round to nearest
    x = torch.tensor([1.5, 2.0, -3.0, 0.1], dtype=torch.bfloat16)
    y = torch.tensor([2.0, 0.5, 1.0, 10.0], dtype=torch.bfloat16)
    z, w = torch.empty_like(x), torch.empty_like(x)
    k[(1,)](x, y, z, w, N=4)
    print(torch.equal(z, x * y + x), torch.equal(w, (x.float() * 1.00390625).bfloat16()))
"""


def test_cpu_mode_computes_bf16_in_the_interpreter_as_a_gpu_does():
    """Triton's interpreter computes bf16 on raw 16-bit patterns (x * y + x gave garbage) and truncates casts; in
    CPU mode ``import gpucourse`` installs the checker's fix, so a learner's own call of a bf16 kernel computes what
    torch (and a GPU, and the checker) computes. Without it, both comparisons are False."""
    r = run_python("import gpucourse\n" + textwrap.dedent(BF16_KERNEL), GPUCOURSE_MODE="cpu")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "True"]
    raw = run_python(textwrap.dedent(BF16_KERNEL), TRITON_INTERPRET="1")  # the interpreter as Triton ships it
    if raw.returncode == 0 and raw.stdout.split() == ["True", "True"]:
        pytest.skip("this Triton's interpreter computes bf16 right by itself")
    assert raw.returncode == 0 and raw.stdout.split() != ["True", "True"], raw.stderr


def test_bad_mode_value_is_rejected():
    r = run_python("import gpucourse", GPUCOURSE_MODE="tpu")
    assert r.returncode != 0 and "GPUCOURSE_MODE='tpu'" in r.stderr


def test_gpu_mode_without_a_gpu_says_why():
    if gpucourse.on_gpu():
        pytest.skip("this machine has a GPU")
    with pytest.raises(gpucourse.GPURequiredError, match="no CUDA device"):
        device.select_mode("gpu")


def test_setup_prints_the_mode_line(capsys):
    assert gpucourse.setup() == gpucourse.mode()
    out = capsys.readouterr().out
    assert ("CPU mode" in out) != ("GPU mode" in out)
    assert "torch" in out and "triton" in out


def test_size_and_skip_follow_the_mode(capsys):
    expected = 2**26 if gpucourse.on_gpu() else 2**12
    assert gpucourse.size(cpu=2**12, gpu=2**26) == expected
    skipped = gpucourse.skip_unless_gpu("Timing")
    assert skipped == (not gpucourse.on_gpu())
    if skipped:
        assert "Timing needs a CUDA GPU: skipped in CPU mode." in capsys.readouterr().out


@pytest.mark.parametrize("props, tf32, bf16, fp8, sm", [
    (T4, False, False, False, 75),
    (A100, True, True, False, 80),
    (L4, True, True, True, 89),
    (H100, True, True, True, 90),
])
def test_capabilities_of_mocked_devices(props, tf32, bf16, fp8, sm):
    assert device.has_tf32(props) is tf32
    assert device.has_bf16(props) is bf16
    assert device.has_fp8(props) is fp8
    assert device.sm_number(props) == sm
    caps = device.capabilities(props)
    assert caps.tensor_cores and caps.wgmma is (sm == 90)


def test_capabilities_are_none_in_cpu_mode():
    if gpucourse.on_gpu():
        pytest.skip("this machine has a GPU")
    assert device.props() is None and device.capabilities() is None and not device.has_bf16()


@pytest.mark.gpu
def test_real_device_properties_are_sane():
    p = device.props()
    assert p.sm_count > 0 and p.total_memory > 2**30 and p.l2_bytes > 2**20
    assert gpucourse.torch_device().type == "cuda"


@pytest.mark.parametrize("value, want", [("T4", (7, 5)), ("a100", (8, 0)), ("8.6", (8, 6)), ("", None)])
def test_capability_limit_reads_names_and_numbers(monkeypatch, value, want):
    monkeypatch.setenv(device.CAPABILITY_ENV, value)
    assert device.capability_limit() == want


def test_a_capability_limit_that_is_neither_a_name_nor_a_number_says_what_is_accepted(monkeypatch):
    monkeypatch.setenv(device.CAPABILITY_ENV, "T5")
    with pytest.raises(ValueError, match=r"GPUCOURSE_CAPABILITY='T5': expected .*7\.5.*T4, V100, A100"):
        device.capability_limit()


def test_a_capability_limit_lowers_what_lessons_see_but_not_what_compilers_target(monkeypatch, capsys):
    """$GPUCOURSE_CAPABILITY=T4 on an H100 (faked here): props() says sm_75 and names the limit, so the dtype gates
    fall back to fp16 and skip FP8 with a sentence naming sm_75; hardware_props(), which cuda_build's nvcc arch and
    the spec table read, stays the H100's. A limit above the device changes nothing."""
    from gpucourse import cuda_build, dtypes, specs

    monkeypatch.setattr(device, "hardware_props", lambda index=None: H100)
    monkeypatch.setenv(device.CAPABILITY_ENV, "T4")
    p = device.props()
    assert (p.major, p.minor, p.sm_count, p.total_memory) == (7, 5, H100.sm_count, H100.total_memory)
    assert p.name == f"{H100.name} as sm_75 (GPUCOURSE_CAPABILITY)"
    assert not device.has_bf16() and not device.has_fp8() and not device.has_tf32()
    choice = dtypes.for_device("bf16")
    assert choice.dtype == "float16" and "sm_75" in choice.note and choice.note in capsys.readouterr().out
    assert dtypes.for_device("float8", say=False).skip
    monkeypatch.delenv(cuda_build.ARCH_ENV, raising=False)
    assert cuda_build.device_arch() == "sm_90"
    if specs.lookup(H100.name) is not None:
        assert specs.current() == specs.lookup(H100.name)
    monkeypatch.setenv(device.CAPABILITY_ENV, "9.0")
    assert device.props() == H100
    monkeypatch.setenv(device.CAPABILITY_ENV, "10.0")  # never raised above the hardware
    assert device.props() == H100
