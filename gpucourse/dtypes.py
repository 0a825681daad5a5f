"""The one table of dtype names: what each name a learner or a datasheet uses means, and how many bytes it takes.

``name(torch.bfloat16)``, ``name("bf16")`` and ``name("torch.bfloat16")`` all give ``"bfloat16"`` (both FP8 formats
give ``"float8"``); ``short()`` gives the datasheets' key (``"bf16"``, the key of ``gpucourse.specs``); ``nbytes()``
the size of one element; ``torch_name()`` a torch dtype without its ``torch.`` prefix (``"float8_e4m3fn"``).
"""
from __future__ import annotations

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
