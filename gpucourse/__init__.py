"""gpucourse: the helper package behind the course's notebooks.

``import gpucourse`` first, before triton: it selects GPU or CPU mode (CPU mode runs Triton in its interpreter, which
must be switched on before Triton creates a kernel). Then ``gpucourse.setup()`` prints the mode line.
"""
from .device import select_mode as _select_mode

_select_mode()  # must happen before anything imports triton; raises ImportOrderError with the fix otherwise

from .device import (  # noqa: E402
    GPURequiredError,
    ImportOrderError,
    capabilities,
    torch_device,
    has_bf16,
    has_fp8,
    has_tf32,
    in_colab,
    mode,
    on_gpu,
    props,
    require_gpu,
    size,
    skip_unless_gpu,
    sm_number,
)
from .env import setup  # noqa: E402
from . import specs  # noqa: E402,F401  (gpucourse.specs: the GPU spec table, public)
from .timing import bench, compare, sweep  # noqa: E402
from .grading.checker import check  # noqa: E402
from .asyncqueue import synchronize  # noqa: E402
from . import benchmarks  # noqa: E402,F401  (gpucourse.benchmarks: public)

__version__ = "0.1.0"
__all__ = ["setup", "mode", "on_gpu", "torch_device", "size", "props", "capabilities", "has_bf16", "has_tf32", "has_fp8",
           "sm_number", "in_colab", "require_gpu", "skip_unless_gpu", "bench", "compare", "sweep", "check",
           "ImportOrderError", "GPURequiredError", "synchronize"]
