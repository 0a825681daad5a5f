"""Mode selection (GPU or CPU), device properties, capability queries, sizes, Colab detection.

The one rule that matters: in CPU mode Triton must run through its interpreter, and the variable that turns the
interpreter on (``TRITON_INTERPRET=1``) must be set *before* Triton creates a kernel. ``import gpucourse`` selects
the mode and sets the variable as its very first action, so putting ``import gpucourse`` first in a notebook is all a
learner has to do. If Triton was imported earlier, :func:`select_mode` raises :class:`ImportOrderError` with the fix.
"""
from __future__ import annotations

import dataclasses
import os
import sys

MODES = ("gpu", "cpu")
_mode: str | None = None  # set once by select_mode()


class ImportOrderError(RuntimeError):
    """Triton was imported before gpucourse chose CPU mode, so its kernels would not run in the interpreter."""


class GPURequiredError(RuntimeError):
    """A cell or function that only makes sense on a CUDA GPU was called in CPU mode."""


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # torch missing is reported by the doctor; the mode is simply CPU
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken driver install raises here on some systems
        return False


def _requested_mode() -> str | None:
    value = os.environ.get("GPUCOURSE_MODE", "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in MODES:
        raise ValueError(f"GPUCOURSE_MODE={value!r} is not one of 'gpu', 'cpu' or 'auto'.")
    return value


def _autotune_in_interpreter() -> None:
    """CPU mode: make ``@triton.autotune`` usable in Triton's interpreter, where its benchmarking has no GPU driver
    and fails ("0 active drivers"). An autotuned kernel then runs with its first config, untimed, and says so once.
    Called after TRITON_INTERPRET is set; does nothing where Triton is not installed."""
    try:
        from triton.runtime import autotuner
    except Exception:  # no Triton (macOS, Windows), or one too old to have the autotuner here
        return
    cls = autotuner.Autotuner
    if getattr(cls, "_gpucourse_first_config", False):
        return
    original = cls.run

    def run(self, *args, **kwargs):
        configs = self.configs
        if len(configs) <= 1:
            return original(self, *args, **kwargs)
        if not getattr(self, "_gpucourse_noted", False):
            self._gpucourse_noted = True
            name = getattr(getattr(self, "fn", None), "__name__", "kernel")
            print(f"[gpucourse] CPU mode: @triton.autotune on {name} used the first of its {len(configs)} configs "
                  f"({configs[0]}) without timing them: timing configs needs a GPU.")
        self.configs = configs[:1]
        try:
            return original(self, *args, **kwargs)
        finally:
            self.configs = configs

    cls.run = run
    cls._gpucourse_first_config = True


def _bf16_in_interpreter() -> None:
    """CPU mode: Triton's interpreter computes bfloat16 on the raw 16-bit patterns (``x * y + x`` gives garbage) and
    truncates float32 -> bf16 casts; make it compute bf16 in float32 and round to nearest even, as a GPU does
    (:mod:`gpucourse.interpreter_bf16`, which the checker installs too). Does nothing without Triton or with
    an interpreter laid out otherwise."""
    try:
        from triton.runtime import interpreter as interp

        from . import interpreter_bf16
        interpreter_bf16.install(interp, interpreter_bf16.MARK)
    except Exception:  # noqa: BLE001 - no Triton, or another interpreter: bf16 stays as that Triton computes it
        return


def select_mode(mode: str | None = None) -> str:
    """Choose GPU or CPU mode and prepare Triton for it. Returns the mode.

    ``mode`` (or the environment variable ``GPUCOURSE_MODE``) forces ``"gpu"`` or ``"cpu"``; otherwise the mode is GPU
    exactly when torch sees a CUDA device. Selecting CPU mode after Triton was imported raises ImportOrderError,
    because kernels decorated before the switch would silently try to compile for a GPU that is not there.
    """
    global _mode
    mode = (mode or _requested_mode() or ("gpu" if _cuda_available() else "cpu")).lower()
    if mode not in MODES:
        raise ValueError(f"mode must be 'gpu' or 'cpu', not {mode!r}.")
    if mode == "gpu" and not _cuda_available():
        raise GPURequiredError(
            "GPU mode was requested but torch sees no CUDA device. Run `gpucourse doctor` to see why "
            "(a CPU-only torch build, or a driver older than torch's CUDA), or use mode='cpu'."
        )
    if mode == "cpu":
        already_interpreting = os.environ.get("TRITON_INTERPRET") == "1"
        if "triton" in sys.modules and not already_interpreting:
            raise ImportOrderError(
                "Triton was imported before gpucourse selected CPU mode, so its kernels would not run in the "
                "interpreter.\nFix: restart the kernel (or the Python process) and make `import gpucourse` the "
                "first import, before `import triton`; or set TRITON_INTERPRET=1 in the environment before "
                "starting Python."
            )
        os.environ["TRITON_INTERPRET"] = "1"
        _autotune_in_interpreter()
        _bf16_in_interpreter()
    elif _mode == "cpu" and "triton" in sys.modules:
        raise ImportOrderError(
            "CPU mode was already selected and Triton is loaded in interpreter mode; restart the kernel to switch "
            "to GPU mode."
        )
    _mode = mode
    return mode


def mode() -> str:
    """The current mode, ``"gpu"`` or ``"cpu"`` (selected on first use if nothing selected it yet)."""
    return _mode or select_mode()


def on_gpu() -> bool:
    return mode() == "gpu"


def torch_device():
    """The torch device lessons should allocate on: ``cuda`` in GPU mode, ``cpu`` otherwise."""
    import torch

    return torch.device("cuda" if on_gpu() else "cpu")


def require_gpu(what: str = "This cell") -> None:
    """Raise GPURequiredError with a clear reason in CPU mode (use :func:`skip_unless_gpu` in notebooks)."""
    if not on_gpu():
        raise GPURequiredError(f"{what} needs a CUDA GPU; this session runs in CPU mode.")


def skip_unless_gpu(what: str = "This cell") -> bool:
    """For notebook cells: print why the cell is skipped and return True in CPU mode, else return False.

    Usage: ``if not gpucourse.skip_unless_gpu("Timing the copy"): ...``
    """
    if on_gpu():
        return False
    print(f"{what} needs a CUDA GPU: skipped in CPU mode.")
    return True


def size(cpu: int, gpu: int) -> int:
    """Pick a problem size: small enough for the CPU (and the Triton interpreter), large enough to fill a GPU."""
    return gpu if on_gpu() else cpu


def in_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


# ---------------------------------------------------------------------------------------------------------------------
# Device properties and capabilities. Everything below takes a DeviceProps so tests can pass a mocked T4, A100 or H100.


@dataclasses.dataclass(frozen=True)
class DeviceProps:
    name: str
    major: int
    minor: int
    sm_count: int
    total_memory: int  # bytes
    l2_bytes: int

    @property
    def sm(self) -> int:
        """Compute capability as one number, e.g. 90 for an H100, 75 for a T4."""
        return self.major * 10 + self.minor


# $GPUCOURSE_CAPABILITY limits the compute capability the course sees (never raises it): "7.5" or "T4" makes every
# lesson choose what a T4 has (fp16, no bf16/TF32/FP8) while its kernels run on the GPU that is there. It is how a
# whole lesson is run as a T4 or an A100 would run it on a newer GPU (benchmarks/gpu_suite.py --capability T4); the
# SM count, memory and cache stay the real device's, and the name says that the capability is limited.
CAPABILITY_ENV = "GPUCOURSE_CAPABILITY"
CAPABILITY_NAMES = {"T4": (7, 5), "V100": (7, 0), "A100": (8, 0), "A10": (8, 6), "L4": (8, 9), "H100": (9, 0)}


def capability_limit() -> tuple | None:
    """(major, minor) from $GPUCOURSE_CAPABILITY ("T4", "A100", "8.0"...), or None when unset. A value that is neither
    raises ValueError naming the accepted forms."""
    value = os.environ.get(CAPABILITY_ENV, "").strip()
    if not value:
        return None
    if value.upper() in CAPABILITY_NAMES:
        return CAPABILITY_NAMES[value.upper()]
    parts = value.split(".")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1])
    raise ValueError(f"{CAPABILITY_ENV}={value!r}: expected a compute capability such as 7.5 or one of "
                     f"{', '.join(CAPABILITY_NAMES)}")


def limited(p: DeviceProps, limit: tuple | None) -> DeviceProps:
    """``p`` with its compute capability lowered to ``limit`` (when that is lower) and its name saying so."""
    if limit is None or (p.major, p.minor) <= tuple(limit):
        return p
    major, minor = limit
    return dataclasses.replace(p, name=f"{p.name} as sm_{major}{minor} ({CAPABILITY_ENV})", major=major, minor=minor)


def hardware_props(index: int | None = None) -> DeviceProps | None:
    """Properties of the current CUDA device as the hardware has them (what compilers must target), or None in CPU
    mode. Lessons ask :func:`props`, which honours $GPUCOURSE_CAPABILITY."""
    if not on_gpu():
        return None
    import torch

    p = torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
    return DeviceProps(
        name=p.name,
        major=p.major,
        minor=p.minor,
        sm_count=p.multi_processor_count,
        total_memory=p.total_memory,
        l2_bytes=int(getattr(p, "L2_cache_size", 0) or 0),
    )


def props(index: int | None = None) -> DeviceProps | None:
    """Properties of the current CUDA device, or None in CPU mode; its compute capability lowered where
    $GPUCOURSE_CAPABILITY asks (see :data:`CAPABILITY_ENV`)."""
    p = hardware_props(index)
    return None if p is None else limited(p, capability_limit())


@dataclasses.dataclass(frozen=True)
class Capabilities:
    sm: int
    tensor_cores: bool  # fp16 tensor cores (Volta, sm70, and later)
    tf32: bool  # TF32 tensor cores (Ampere, sm80, and later)
    bf16: bool  # bf16 tensor cores (Ampere, sm80, and later); a T4 emulates bf16 slowly
    fp8: bool  # fp8 tensor cores (Ada sm89, Hopper sm90 and later)
    wgmma: bool  # Hopper warp-group MMA (sm90 family only)


def capabilities(p: DeviceProps | None = None) -> Capabilities | None:
    """What the tensor cores of ``p`` (default: the current device) support; None in CPU mode."""
    p = p if p is not None else props()
    if p is None:
        return None
    sm = p.sm
    return Capabilities(sm=sm, tensor_cores=sm >= 70, tf32=sm >= 80, bf16=sm >= 80, fp8=sm >= 89,
                        wgmma=p.major == 9)


def has_bf16(p: DeviceProps | None = None) -> bool:
    c = capabilities(p)
    return bool(c and c.bf16)


def has_tf32(p: DeviceProps | None = None) -> bool:
    c = capabilities(p)
    return bool(c and c.tf32)


def has_fp8(p: DeviceProps | None = None) -> bool:
    c = capabilities(p)
    return bool(c and c.fp8)


def sm_number(p: DeviceProps | None = None) -> int | None:
    p = p if p is not None else props()
    return p.sm if p else None
