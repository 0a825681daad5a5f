"""The course's quantized GEMV kit, shared by lesson 07 (which teaches it) and lesson 11 (whose decode loop runs it):
symmetric quantization (:mod:`.symmetric`), int4 packing (:mod:`.packing`), the W8A16/W4A16 Triton kernels
(:mod:`.kernels`, with the Hopper tensor-core path in :mod:`.tensorcore` and launch parameters in
:mod:`.block_sizes`), PyTorch's tinygemm fed the same int4 weights (:mod:`.tinygemm`), and a layer that applies an
int4 weight with either (:class:`Int4Linear`, :mod:`.linear`)."""
from .linear import BACKENDS, Int4Linear, int4_unavailable  # noqa: F401
