"""The sync detector: every synchronizing op is found with its source line; sync-free code gives an empty log."""
from __future__ import annotations

import inspect

import pytest
import torch

import gpucourse
from gpucourse import syncs

DEV = gpucourse.torch_device()


def _x():
    return torch.randn(64, device=DEV)


SYNCING = {  # name -> (code that synchronizes once, the op the detector must name)
    "item": (lambda x: x.sum().item(), "Tensor.item"),
    "tolist": (lambda x: x.tolist(), "Tensor.tolist"),
    "numpy": (lambda x: x.cpu().numpy() if DEV.type == "cuda" else x.numpy(),
              "Tensor.cpu" if DEV.type == "cuda" else "Tensor.numpy"),
    "cpu": (lambda x: x.cpu(), "Tensor.cpu"),
    "to cpu": (lambda x: x.to("cpu"), "Tensor.to"),
    "bool": (lambda x: bool(x.sum() > 0), "Tensor.__bool__"),
    "if": (lambda x: 1 if torch.isnan(x.sum()) else 0, "Tensor.__bool__"),
    "float": (lambda x: float(x.sum()), "Tensor.__float__"),
    "int": (lambda x: int(x.argmax()), "Tensor.__int__"),
    "print": (lambda x: print(x[:3]), "Tensor.__repr__"),
    "f-string": (lambda x: f"{x.sum():.3f}", "Tensor.__format__"),
    "nonzero": (lambda x: torch.nonzero(x > 0), "torch.nonzero"),
    "Tensor.nonzero": (lambda x: (x > 0).nonzero(), "Tensor.nonzero"),
    "bool mask": (lambda x: x[x > 0], "Tensor.__getitem__"),
    "masked_select": (lambda x: torch.masked_select(x, x > 0), "torch.masked_select"),
    "unique": (lambda x: torch.unique(x.round()), "torch.unique"),
    "where one arg": (lambda x: torch.where(x > 0), "torch.where"),
}


@pytest.mark.parametrize("name", list(SYNCING))
def test_each_syncing_op_is_found_with_its_line(name):
    fn, op = SYNCING[name]
    x = _x()
    with syncs.detect() as log:
        fn(x)
    assert len(log) >= 1, f"{name}: not detected"
    if op is not None:
        assert op in log.ops(), log.report()
    src_line = inspect.getsourcelines(fn)[1]
    assert log[0].filename == __file__ and log[0].lineno == src_line, str(log[0])
    assert log[0].line.strip().startswith(f'"{name}"'), log[0].line


def test_pageable_host_to_device_copy_is_a_sync_and_non_blocking_is_not():
    host = torch.randn(256)
    with syncs.detect() as log:
        host.to(DEV)
    assert log.ops() == ["Tensor.to"] and "copy" in log[0].why
    if DEV.type == "cuda":  # pageable + non_blocking still stalls; pinned + non_blocking does not
        with syncs.detect() as log:
            host.to(DEV, non_blocking=True)
        assert log.ops() == ["Tensor.to"] and "pinned" in log[0].why
        host = host.pin_memory()
    with syncs.detect() as log:
        host.to(DEV, non_blocking=True)
    assert len(log) == 0, log.report()


def test_non_blocking_is_read_from_its_own_position_in_each_to_overload():
    """``to(device, dtype, non_blocking, copy)``: a positional ``copy=True`` is not ``non_blocking``."""
    host = torch.randn(256)
    with syncs.detect() as log:
        host.to(DEV, torch.half, False, True)  # blocking, copy=True
    assert log.ops() == ["Tensor.to"] and "copy" in log[0].why, log.report()
    if DEV.type == "cuda":
        host = host.pin_memory()
    with syncs.detect() as log:
        host.to(DEV, torch.half, True)  # non_blocking=True, third positional
        host.to(DEV, None, True, True)
        host.to(DEV, dtype=torch.half, non_blocking=True)
    assert len(log) == 0, log.report()
    assert not syncs._non_blocking("to", (host, torch.half, False, True), {})  # to(dtype, non_blocking, copy)
    assert syncs._non_blocking("to", (host, torch.half, True), {})
    assert syncs._non_blocking("to", (host, host, True), {})  # to(other, non_blocking, copy)
    assert not syncs._non_blocking("to", (host, host, False, True), {})
    assert syncs._non_blocking("cuda", (host, 0, True), {})  # cuda(device, non_blocking)


def test_sync_free_code_has_no_syncs():
    x, w = _x(), torch.randn(64, 64, device=DEV, requires_grad=True)
    acc = torch.zeros((), device=DEV)
    flag = torch.zeros((), dtype=torch.bool, device=DEV)
    with syncs.detect() as log:
        y = torch.relu(x @ w).sum()
        y.backward()
        acc += y.detach()
        flag |= torch.isnan(y)
        z = torch.where(x > 0, x, 0.0)
        x[x > 10] = 0.0  # masked assignment keeps the size: no sync
        n = x.shape[0] + x.numel() + len(x)
        z = z.to(torch.float64)  # a dtype change is not a copy between host and device
    assert len(log) == 0, log.report()
    assert n == 192


def test_detector_is_removed_after_the_block_and_records_in_order():
    x = _x()
    with syncs.detect() as log:
        x.sum().item()
        x.cpu()
    x.sum().item()  # outside: not recorded
    assert log.ops() == ["Tensor.item", "Tensor.cpu"]
    assert "2 synchronizations" in log.report()
    assert syncs.SyncLog().report() == "no synchronizations"


def test_grouped_counts_repeats_per_line():
    x = _x()
    with syncs.detect() as log:
        for _ in range(3):
            x.sum().item()
    assert len(log) == 3 and len(log.grouped()) == 1 and log.grouped()[0].endswith("(x3)")


def test_find_syncs_returns_result_and_log():
    out, log = syncs.find_syncs(lambda x: x.sum().item() * 2, _x())
    assert isinstance(out, float) and log.ops() == ["Tensor.item"]


def test_real_mode_ignores_host_tensors():
    """With emulation off (as on a GPU), ops on host tensors are not syncs."""
    x = torch.randn(16)
    with syncs.detect(emulate=False, cuda_debug=False) as log:
        x.sum().item()
        x[x > 0]
        x.to("cpu")
    assert len(log) == 0, log.report()


def test_explicit_waits_are_wrapped_only_inside_detect_and_recorded():
    originals = [getattr(o, a) for o, a, _ in syncs._explicit_waits()]
    class_dicts = {cls: dict(vars(cls)) for cls in (torch.cuda.Stream, torch.cuda.Event)}
    with syncs.detect() as log:
        assert torch.cuda.synchronize is not originals[0]
        if not torch.cuda.is_available():
            with pytest.raises(Exception):  # a CPU-only build cannot wait, but the call is still recorded
                torch.cuda.synchronize()
        else:
            torch.cuda.synchronize()
    assert [getattr(o, a) for o, a, _ in syncs._explicit_waits()] == originals
    assert {cls: dict(vars(cls)) for cls in class_dicts} == class_dicts, "an inherited method must not stay shadowed"
    assert log.ops() == ["torch.cuda.synchronize"], log.report()
    assert log[0].filename == __file__ and "torch.cuda.synchronize()" in log[0].line


def test_gpucourse_synchronize_is_recorded_once_at_the_callers_line():
    """``gpucourse.synchronize()`` (in CPU mode: waiting for the stand-in queue; on a GPU: torch.cuda.synchronize
    inside, not counted again) is an explicit wait, under its package name and its module's."""
    from gpucourse import asyncqueue

    originals = (gpucourse.synchronize, asyncqueue.synchronize)
    with syncs.detect() as log:
        gpucourse.synchronize()
        asyncqueue.synchronize()
    assert (gpucourse.synchronize, asyncqueue.synchronize) == originals
    assert log.ops() == ["gpucourse.synchronize", "gpucourse.synchronize"], log.report()
    assert [s.filename for s in log] == [__file__, __file__]
    assert "gpucourse.synchronize()" in log[0].line and "asyncqueue.synchronize()" in log[1].line


@pytest.mark.gpu
def test_gpu_explicit_stream_and_event_waits_are_recorded():
    x = torch.ones(1024, device="cuda")
    with syncs.detect() as log:
        y = x * 2
        ev = torch.cuda.Event()
        ev.record()
        ev.synchronize()
        torch.cuda.current_stream().synchronize()
        torch.cuda.synchronize()
    assert log.ops() == ["Event.synchronize", "Stream.synchronize", "torch.cuda.synchronize"], log.report()
    assert y.sum().item() == 2048


@pytest.mark.gpu
def test_gpu_sync_debug_mode_reports_syncs_the_op_classifier_cannot_see_and_restores_mode():
    """With torch functions disabled, the TorchFunctionMode sees nothing; torch's own debug mode still warns."""
    x = torch.ones(16, device="cuda")
    before = torch.cuda.get_sync_debug_mode()
    with syncs.detect() as log:
        with torch._C.DisableTorchFunction():
            x.sum().item()
    assert torch.cuda.get_sync_debug_mode() == before
    assert any(s.op == "CUDA synchronization" for s in log), log.report()


@pytest.mark.gpu
def test_gpu_sync_free_code_reports_nothing():
    x = torch.ones(1 << 16, device="cuda")
    with syncs.detect() as log:
        for _ in range(5):
            x = torch.relu(x * 1.5 - 0.5)
        total = x.sum()
    assert len(log) == 0, log.report()
    assert total.item() > 0


def test_torchs_note_on_switching_sync_debug_mode_on_is_neither_printed_nor_a_sync():
    """On a GPU, detect() switches torch's sync debug mode on, and torch says it is 'a prototype feature': that note
    showed in lesson 02 on stderr. It is dropped; a real synchronization report is still recorded."""
    from gpucourse import syncs

    d = syncs.detect()
    d._showwarning("Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
                   "operations", UserWarning, "x.py", 1)
    assert len(d.log) == 0
    d._showwarning("called a synchronizing CUDA operation", UserWarning, "x.py", 1)
    assert len(d.log) == 1 and d.log[0].op == "CUDA synchronization"


@pytest.mark.parametrize("make_opt", [lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                                      lambda ps: torch.optim.Adam(ps), lambda ps: torch.optim.AdamW(ps, foreach=False)],
                         ids=["SGD", "Adam", "AdamW-for-loop"])
def test_optimizer_step_is_not_a_synchronization(make_opt):
    """optimizer.step() queues kernels and returns: no synchronization, in either mode. In CPU mode the emulation
    would otherwise count Adam's .item() on its step counter (a CPU tensor on a GPU too) and clip_grad_norm_'s
    .to(device) of norms already there; the learner's own .item() in the same block is still found."""
    model = torch.nn.Linear(8, 4).to(gpucourse.torch_device())
    opt = make_opt(model.parameters())
    for _ in range(2):  # the second step runs with the optimizer's state (Adam's step counter) in place
        loss = model(torch.randn(16, 8, device=gpucourse.torch_device())).square().mean()
        opt.zero_grad()
        loss.backward()
        with syncs.detect() as log:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        assert len(log) == 0, log.report()
    with syncs.detect() as log:
        opt.step()
        loss.item()
    assert log.ops() == ["Tensor.item"], log.report()
