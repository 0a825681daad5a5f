"""Lesson 04's second CUDA exercise (Gugger & de Zahr's case): the sums of thousands of tensors in one launch."""
from __future__ import annotations

from gpucourse import device
from gpucourse.grading.exercise import Case, Exercise, Perf

from .block_sum import ATOMIC_ORDER_TOLERANCE

STATEMENT = """\
Write `sum_many(tensors)` that returns a 1-D float32 tensor `out` with `out[i] = tensors[i].sum()`, for a list of
1-D float32 CUDA tensors of different lengths (0 to millions; thousands of tensors), using ONE kernel launch per
call: a kernel of yours that gets a table of pointers and lengths on the GPU (one block per tensor, or a persistent
grid). Copies (the pointer table to the GPU) and fills (`torch.zeros`) are not counted as launches; every other
kernel is, so a Python loop of `t.sum()` or of your own kernel fails. Build with `gpucourse.cuda_build.build(...)`
called inside `sum_many` (cached), kernels in the torch-free `kernels` string; in CPU mode the checker compiles them
and reports that running them needs a GPU. An empty list returns an empty tensor; an empty tensor sums to 0.
The tensors are contiguous, but some are views that do not start on a 16-byte boundary (`t[1:]` of a fresh tensor
starts 4 bytes past one), mixed with aligned ones: `float4` loads need the first 0-3 elements handled one at a time.
Your kernel must compute the answer: a torch compute op (arithmetic, a reduction...) on the inputs or on anything
derived from them (a copy, a view, a tensor your extension returned) fails the check, which names it; allocating,
viewing, copying, casting and filling tensors is fine.
"""


def make_inputs(params: dict, gen) -> tuple:
    import torch

    count, lo, hi = params["count"], params["min_len"], params["max_len"]
    lengths = torch.randint(lo, hi + 1, (count,), generator=gen).tolist()
    lengths[:len(params.get("force", ()))] = list(params.get("force", ()))
    # Positive mean, as in block_sum: the relative tolerance is then scaled by sum(|x|) of each tensor.
    # "offsets": tensor k is a view starting k % 4 floats past an aligned start (aligned and misaligned mixed); the
    # checker keeps that on the device (keep_alignment below).
    offs = [k % 4 if params.get("offsets") else 0 for k in range(count)]
    return ([(torch.rand(n + o, generator=gen, dtype=torch.float32) - 0.25)[o:] for n, o in zip(lengths, offs)],)


def reference(tensors):
    import torch

    return torch.tensor([float(t.to(torch.float64).sum()) for t in tensors], dtype=torch.float32)


def read_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


EDGE_LENGTHS = (0, 1, 31, 32, 33, 1023, 1024, 1025, 4097)

EXERCISE = Exercise(
    id="sum_many",
    function="sum_many",
    signature="sum_many(tensors: list[Tensor]) -> Tensor",
    statement=STATEMENT,
    kind="cuda",
    # the workbook's SUM_MANY_CPP and functions
    cuda_binding=("torch::Tensor sum_many_cuda(std::vector<torch::Tensor> tensors);", ("sum_many_cuda",)),
    make_inputs=make_inputs,
    reference=reference,
    cases=(
        Case("one tensor", {"count": 1, "min_len": 1000, "max_len": 1000}),
        Case("edge lengths 0, 1, 31, 32, 33, 1023..1025, 4097",
             {"count": len(EDGE_LENGTHS), "min_len": 0, "max_len": 0, "force": EDGE_LENGTHS}),
        Case("2000 small tensors (~1k floats)", {"count": 2000, "min_len": 500, "max_len": 1500}),
        Case("thousands, 0 to 20k floats", {"count": device.size(cpu=300, gpu=3000), "min_len": 0,
                                            "max_len": 20_000}),
        Case("a few with millions", {"count": 5, "min_len": 1, "max_len": device.size(cpu=70_001, gpu=3_000_001),
                                     "force": (device.size(cpu=65_537, gpu=2**21 + 5),)}),
        Case("views at 0-3 floats past a 16-byte boundary, mixed", {"count": 40, "min_len": 0, "max_len": 70_000,
                                                                     "force": (1, 3, 5, 65_537), "offsets": True}),
    ),
    keep_alignment=True,  # the "offsets" case's views stay misaligned on the GPU
    tolerance={"float32": ATOMIC_ORDER_TOLERANCE},  # block_sum's: partials added with atomics, in any order
    determinism="tolerance",  # a persistent grid adds block partials with atomics: the order varies between runs
    reference_ops=("aten.sum",),
    max_launches=1,
    gpu_only=True,
    # The seed's case: 2000 tensors of 1k-200k floats (about 800 MB). The reference loops on the CPU, so the yardstick
    # is the copy ceiling; the benchmark (cuda04_sum_many) compares with one torch.sum over the concatenation.
    perf=Perf(baseline="copy", target=0.75, params={"count": 2000, "min_len": 1000, "max_len": 200_000},
              bytes=read_bytes),
)
