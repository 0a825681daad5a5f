"""CPU mode for CUDA exercises (kind "cuda"): compile the learner's kernels, say that running them needs a GPU.

Convention (stated in each CUDA exercise): the learner's function calls ``gpucourse.cuda_build.build(...)``, which in
CPU mode compiles the torch-free ``kernels`` string with nvcc and raises ``NeedsGPU`` carrying the compiler's report.
So the checker calls the function once on the first case's (CPU) inputs and reads the outcome:

* ``NeedsGPU``: the kernels compile; status "needs gpu", with registers/shared memory/spills per kernel;
* ``CudaCompileError``: status "error" with the compiler's message;
* ``ToolMissing`` (no nvcc): status "needs gpu", saying the compile check was skipped and why;
* ``NotImplementedError``: "not implemented";
* any other exception: "error" with the learner's traceback;
* a normal return: "failed", because no CUDA kernel was built (a torch op on the CPU is not a CUDA kernel).
"""
from __future__ import annotations

from .. import cuda_build
from .checker import NOT_IMPLEMENTED


def cpu_check(ex, fn, first_args: list, learner_traceback) -> tuple:
    """(status, message) for a CUDA exercise in CPU mode, from one call of ``fn`` on ``first_args``."""
    try:
        fn(*first_args)
    except cuda_build.NeedsGPU as exc:
        lines = [f"{ex.function}: your CUDA kernels compile with nvcc ({exc.report.arch}); running and checking "
                 f"them needs a CUDA GPU, so correctness is not checked in CPU mode.",
                 "ptxas report (per kernel):", exc.report.table()] if exc.report is not None else [str(exc)]
        return "needs gpu", "\n".join(lines)
    except cuda_build.CudaCompileError as exc:
        return "error", f"{ex.function}: your CUDA source does not compile.\n{exc}"
    except cuda_build.ToolMissing as exc:
        return "needs gpu", (f"{ex.function}: the compile check was skipped ({exc}); running it needs a CUDA GPU, "
                             f"so nothing was checked in CPU mode.")
    except NotImplementedError:
        return "not implemented", f"{ex.function} {NOT_IMPLEMENTED}, then run this cell again."
    except Exception as exc:  # noqa: BLE001 - the learner's code raised
        return "error", f"{ex.function} raised before building its kernels:\n{learner_traceback(exc)}"
    return "failed", (f"{ex.function} returned without building a CUDA kernel with gpucourse.cuda_build.build: this "
                      f"exercise asks for your own CUDA kernel (a torch operation does not count).")
