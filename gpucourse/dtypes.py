"""The one table of dtype names: what each name a learner or a datasheet uses means, and how many bytes it takes.

``name(torch.bfloat16)``, ``name("bf16")`` and ``name("torch.bfloat16")`` all give ``"bfloat16"`` (both FP8 formats
give ``"float8"``); ``short()`` gives the datasheets' key (``"bf16"``, the key of ``gpucourse.specs``); ``nbytes()``
the size of one element; ``torch_name()`` a torch dtype without its ``torch.`` prefix (``"float8_e4m3fn"``).
"""
from __future__ import annotations

import dataclasses

# canonical name -> (datasheet key, bytes per element)
TABLE = {
    "float64": ("fp64", 8),
    "float32": ("fp32", 4),
    "float16": ("fp16", 2),
    "bfloat16": ("bf16", 2),
    "float8": ("fp8", 1),
    "int8": ("int8", 1),
}
ALIASES = {"double": "float64", "float": "float32", "half": "float16",
           "float8_e4m3fn": "float8", "float8_e5m2": "float8", "float8_e4m3fnuz": "float8", "float8_e5m2fnuz": "float8",
           **{short: canonical for canonical, (short, _) in TABLE.items()}}
# Not a storage dtype: fp32 inputs multiplied on tensor cores with 10-bit mantissas (a datasheet rate of its own).
TF32 = "tf32"


def torch_name(dtype) -> str:
    """``torch.float8_e4m3fn`` -> ``"float8_e4m3fn"``; strings pass through without a ``torch.`` prefix."""
    return str(dtype).replace("torch.", "")


def name(dtype) -> str:
    """The canonical name of ``dtype`` (a torch dtype or any alias); ValueError naming the known ones otherwise."""
    s = torch_name(dtype).lower()
    s = ALIASES.get(s, s)
    if s not in TABLE:
        raise ValueError(f"unknown dtype {dtype!r}; known: {sorted(TABLE)} and aliases {sorted(ALIASES)}")
    return s


def short(dtype) -> str:
    """The datasheet key of ``dtype`` (``"bf16"``); ``"tf32"``/``"tensorfloat32"`` give ``"tf32"``."""
    if torch_name(dtype).lower() in (TF32, "tensorfloat32"):
        return TF32
    return TABLE[name(dtype)][0]


def nbytes(dtype) -> int:
    """Bytes per element of ``dtype``."""
    return TABLE[name(dtype)][1]


# ---------------------------------------------------------------------------------------------------------------------
# What the device can run. A free Colab T4 (sm_75) has fp16 tensor cores but no bf16, TF32 or FP8 ones: a cell that
# wants one of those asks here and gets the dtype to use, or None (skip), with the sentence that says why.

_TORCH_NAMES = {"float8": "float8_e4m3fn"}


@dataclasses.dataclass(frozen=True)
class Choice:
    """What a cell runs in on this device. ``dtype``: the canonical name to use, or None when the cell must skip;
    ``note``: one sentence saying why it differs from ``want`` ("" when the device has what was asked)."""

    want: str
    dtype: str | None
    note: str = ""

    @property
    def skip(self) -> bool:
        return self.dtype is None

    @property
    def torch(self):
        """The torch dtype (``torch.bfloat16``; ``torch.float8_e4m3fn`` for float8)."""
        import torch

        if self.dtype is None:
            raise ValueError(f"no dtype to run in: {self.note}")
        return getattr(torch, _TORCH_NAMES.get(self.dtype, self.dtype))

    @property
    def short(self) -> str:
        """The datasheet key (``"bf16"``, ``"fp16"``), for labels: an H100's label stays "bf16", a T4's says fp16."""
        return short(self.dtype) if self.dtype else short(self.want)


def for_device(want="bfloat16", props=None, say: bool = True) -> Choice:
    """The dtype a cell that wants ``want`` runs in on ``props`` (default: this session's GPU; CPU mode: ``want``,
    CPU torch and Triton's interpreter run every dtype).

    bfloat16 without bf16 tensor cores (before Ampere, sm_80: a T4 is sm_75) falls back to float16, the 16-bit type
    Volta's and Turing's tensor cores have; float8 without fp8 tensor cores (before Ada sm_89 / Hopper sm_90) skips.
    ``say``: print the sentence when the choice differs from ``want`` (so a gated cell's output says why)."""
    from . import device

    want = name(want)
    p = props if props is not None else device.props()
    if p is None:
        return Choice(want, want)
    caps = device.capabilities(p)
    where = f"{p.name} (sm_{p.sm})"
    if want == "bfloat16" and not caps.bf16:
        how = "which its tensor cores run" if caps.tensor_cores else "on its CUDA cores (it has no tensor cores)"
        c = Choice(want, "float16", f"{where} has no bf16 tensor cores (they start with Ampere, sm_80): this runs "
                                    f"in float16 instead, {how}.")
    elif want == "float8" and not caps.fp8:
        c = Choice(want, None, f"{where} has no fp8 tensor cores (they start with Ada, sm_89, and Hopper, sm_90): "
                               f"skipped.")
    else:
        c = Choice(want, want)
    if say and c.note:
        print(c.note)
    return c


def tensor_core_16bit(props=None, say: bool = True) -> Choice:
    """The 16-bit type of a lesson's tensor-core work (matmuls, autocast): bfloat16, or float16 on a GPU without bf16
    tensor cores (a T4, sm_75), printing the sentence that says so. Each lesson names it for its own cells
    (``matmul_dtype``, ``low_dtype``); this is the one definition."""
    return for_device("bfloat16", props, say=say)
