"""The doctor: its report runs here, known-bad combinations are warned about, lesson limits follow the device."""
import subprocess
import sys

from gpucourse import doctor

HEALTHY_GPU = {"mode": "gpu", "nvidia_smi": True, "torch": "2.11.0+cu130", "torch_cuda": "13.0",
               "cuda_available": True, "driver_cuda": "13.0", "triton": "3.6.0", "torch_wants_triton": "3.6.0",
               "numpy": "2.1.0", "spec": "H100-SXM", "gpu": "NVIDIA H100 80GB HBM3", "nvcc": "13.0",
               "ninja": "1.11.1", "triton_interpret": None,
               "capabilities": {"tf32": True, "bf16": True, "fp8": True}}
CPU_LAPTOP = {"mode": "cpu", "nvidia_smi": False, "torch": "2.13.0+cpu", "torch_cuda": None,
              "cuda_available": False, "triton": "3.9.0", "numpy": "2.4.0", "nvcc": None, "ninja": "1.11.1",
              "capabilities": None}


def test_healthy_machines_have_no_warnings():
    assert doctor.warnings(HEALTHY_GPU) == []
    assert doctor.warnings(CPU_LAPTOP) == []


def _one_warning(**changes):
    f = dict(HEALTHY_GPU, **changes)
    ws = doctor.warnings(f)
    assert len(ws) == 1, ws
    assert "Fix:" in ws[0]
    return ws[0]


def test_cpu_torch_on_a_gpu_machine():
    assert "CPU-only build" in _one_warning(torch_cuda=None, cuda_available=False, mode="cpu", spec=None)


def test_driver_older_than_torchs_cuda():
    w = _one_warning(cuda_available=False, mode="cpu", driver_cuda="12.2", spec=None)
    assert "built for CUDA 13.0" in w and "supports only CUDA 12.2" in w


def test_triton_not_the_one_torch_was_built_with():
    assert "pip install triton==3.6.0" in _one_warning(triton="3.9.0")


def test_old_triton_and_old_torch_and_numpy2():
    assert "too old" in _one_warning(triton="2.3.1", torch_wants_triton=None)
    ws = doctor.warnings(dict(HEALTHY_GPU, torch="2.1.0+cu121", torch_wants_triton=None))
    assert any("older than the course supports" in w for w in ws) and any("numpy 2" in w for w in ws)


def test_interpreter_left_on_with_a_gpu():
    assert "TRITON_INTERPRET=1" in _one_warning(triton_interpret="1")


def test_lesson_limits_follow_the_device():
    full = {lid: status for lid, _, status, _ in doctor.limits(HEALTHY_GPU)}
    assert set(full.values()) == {"full"}
    t4 = dict(HEALTHY_GPU, capabilities={"tf32": False, "bf16": False, "fp8": False})
    rows = {lid: (status, reasons) for lid, _, status, reasons in doctor.limits(t4)}
    assert rows["06"][0] == "limited" and any("bf16" in r for r in rows["06"][1])
    assert rows["01"][0] == "full"
    cpu = {lid: (status, reasons) for lid, _, status, reasons in doctor.limits(CPU_LAPTOP)}
    assert cpu["00"][0] == "full" and cpu["05"][0] == "limited"
    assert any("nvcc" in r for r in cpu["04"][1])


def test_doctor_command_prints_the_report():
    r = subprocess.run([sys.executable, "-m", "gpucourse.cli", "doctor", "--measure"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for field in ("mode:", "torch:", "triton:", "driver:", "python:", "nvcc:", "ninja:", "colab:", "isolation:",
                  "bytecode:", "lessons:", "measured ceilings:", "warnings"):
        assert field in r.stdout, field
    if "mode:        CPU" in r.stdout:
        assert "skipped: measuring ceilings needs a CUDA GPU" in r.stdout
    else:
        assert "copy bandwidth:" in r.stdout and "TFLOP/s" in r.stdout


def test_cli_usage():
    r = subprocess.run([sys.executable, "-m", "gpucourse.cli"], capture_output=True, text=True)
    assert r.returncode == 2 and "gpucourse doctor" in r.stdout
    r = subprocess.run([sys.executable, "-m", "gpucourse.cli", "nonsense"], capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_doctor_finds_nvcc_where_the_cuda_lesson_does(monkeypatch, tmp_path):
    """Off PATH (e.g. only under CUDA_HOME) the lesson still finds nvcc; the doctor must report the same."""
    from gpucourse import cuda_build

    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.99'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(cuda_build, "nvcc_path", lambda: str(fake))
    assert doctor.facts()["nvcc"] == "12.4"
    monkeypatch.setattr(cuda_build, "nvcc_path", lambda: None)
    monkeypatch.setattr(doctor.shutil, "which", lambda name: None)
    assert doctor.facts()["nvcc"] is None


def test_doctor_says_how_submissions_are_isolated_and_how_to_get_the_sandbox(tmp_path):
    """With bwrap: the sandbox; without it on PATH: the process level, with the command that installs it."""
    import os

    from gpucourse.grading import sandbox

    r = subprocess.run([sys.executable, "-m", "gpucourse.cli", "doctor"], capture_output=True, text=True, timeout=300)
    line = next(x for x in r.stdout.splitlines() if x.startswith("isolation:"))
    level = sandbox.detect().level
    assert ("bubblewrap sandbox per grading worker" in line) == (level == "bubblewrap"), line
    env = dict(os.environ, PATH=str(tmp_path))
    env.pop(sandbox.ENV_VAR, None)
    r = subprocess.run([sys.executable, "-m", "gpucourse.cli", "doctor"], capture_output=True, text=True,
                       timeout=300, env=env)
    line = next(x for x in r.stdout.splitlines() if x.startswith("isolation:"))
    assert "process level" in line and "apt-get install bubblewrap" in line, line


def test_doctor_says_whether_the_workers_imports_have_bytecode(monkeypatch):
    """Grading workers import torch afresh; without bytecode (the H100 image's torch has none) each import compiled
    it again. The doctor's line says which case this machine is, and what the grader and the instructor can do."""
    from gpucourse.grading import pycache

    missing = doctor._bytecode_missing()
    assert missing is not None and 0.0 <= missing <= 1.0
    assert "are compiled" in doctor._bytecode_line(0.0)
    line = doctor._bytecode_line(0.77)
    assert line.startswith("77% of torch's modules have no compiled bytecode") and "compileall" in line
    assert doctor._bytecode_line(None) == "could not be checked"
    monkeypatch.setattr(pycache, "missing_fraction", lambda files: 0.5)
    assert doctor.facts()["bytecode_missing"] == 0.5
    assert "bytecode:    50% of torch's modules" in doctor.report()
