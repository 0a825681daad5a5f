"""Lesson 10's second exercise: all-reduce (sum) in place, built from point-to-point sends as a ring.

Judged (``JudgedExercise``): the judge starts N processes itself (forked, so they run the learner's function object
as it is; gloo on the CPU, in every mode), each calls the function on its own tensors, and the judge compares every
rank's result with the sum it computed before. In its own child processes it also watches the call: every
torch.distributed collective (the functions of ``torch.distributed`` and of ``distributed_c10d``, their ``_tensor``,
``_coalesced`` and private ``_base`` forms) is replaced by one that fails the case, and a dispatch mode sees every
c10d operation that reaches the process group (a collective called on the group object itself included): only
``send`` and ``recv`` may. It counts the elements each rank sends, so a function that ships whole tensors instead of
chunks is told it is not a ring. A deadlock (every rank waiting in ``recv``) ends at the judge's deadline.

The deadline covers the learner's calls alone. Starting the ranks (fork, joining the group, the first operation under
the dispatch mode, which imports ``torch._dynamo``) has a budget of its own, ``STARTUP_S``: on a busy 2-core machine
it took 2.7-6.2 s per case, which once made a right ring miss a 10 s deadline that counted it. Each rank says "ready"
once it is set up, and the deadline starts when the last one has.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.utils._python_dispatch import TorchDispatchMode

from gpucourse.grading.exercise import Case, JudgedExercise, JudgeTimeout
from gpucourse.grading.traps import trapped

from .. import ring

STATEMENT = """\
Write `ring_all_reduce(tensor, group)`: when every rank of the process group `group` calls it on its own tensor
(same shape and dtype on every rank), each tensor holds, in place, the element-wise sum over all ranks. Use only
`dist.send`/`dist.recv`, their async forms `dist.isend`/`dist.irecv`, or `dist.batch_isend_irecv` (pass
`group=group`; peers are global ranks, `dist.get_process_group_ranks(group)` lists them); calling any collective
(`dist.all_reduce`, `reduce_scatter`, `all_gather`, `broadcast`, `reduce`, their `_tensor`/`_coalesced` forms, or
the group's own methods) fails the check.
Build the ring: split the flattened tensor into N chunks (N = `dist.get_world_size(group)`; N need not divide the
size, and the size may be smaller than N), then N - 1 reduce-scatter steps (send one chunk to the right neighbour, add
the chunk received from the left one) and N - 1 all-gather steps (pass the finished chunks around). Each rank then
sends about 2 (N - 1) / N of the tensor; the check fails a function that sends much more than a ring does.
The check runs your function in 2, 3 and 4 processes (gloo, on the CPU) with a deadline: if every rank first waits in
a blocking `recv` (or in a `send` its neighbour is not yet receiving), they wait for each other forever. (On NCCL,
post each step's send and receive together with `dist.batch_isend_irecv`: one after the other they queue in order.)
"""

DEADLINE_S = 10.0  # the learner's calls on every rank, from the moment the last rank is ready
STARTUP_S = 120.0  # forking and setting up every rank: generous, since a busy machine must not fail a right answer
COLLECTIVES = ("all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "reduce_scatter", "reduce_scatter_tensor",
               "_reduce_scatter_base", "all_gather", "all_gather_into_tensor", "_all_gather_base",
               "all_gather_coalesced",
               "all_gather_object", "all_to_all", "all_to_all_single", "broadcast_object_list", "scatter", "gather",
               "gather_object", "scatter_object_list", "all_reduce_tensor", "all_gather_tensor",
               "reduce_scatter_tensor_coalesced", "all_gather_into_tensor_coalesced", "barrier")
P2P_OPS = ("send", "recv_", "recv_any_source_")


class CollectiveCalled(RuntimeError):
    pass


class _Watch(TorchDispatchMode):
    """Sees every c10d operation and counts the elements sent."""

    def __init__(self):
        super().__init__()
        self.collectives, self.sent = [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns = func.namespace
        if ns in ("c10d", "_c10d_functional", "_c10d_functional_autograd", "c10d_functional"):
            base = func._opname
            if base == "send":
                self.sent += sum(t.numel() for t in args[0])
            elif base not in P2P_OPS:
                self.collectives.append(f"{ns}.{base}")
        return func(*args, **(kwargs or {}))


def _forbid(module, name: str, calls: list) -> None:
    if not hasattr(module, name):
        return

    def collective(*args, **kwargs):
        calls.append(f"{module.__name__}.{name}")
        raise CollectiveCalled(f"{module.__name__}.{name}")

    setattr(module, name, collective)


def _child(fn, rank: int, world: int, store_path: str, tensors: list, conn, log_path: str, go=None) -> None:
    """One rank: join the group, call ``fn`` on each tensor under the watch, send back the results (as NumPy arrays:
    a tensor sent through a pipe would live in shared memory that dies with this process)."""
    try:
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)  # what the rank prints, gloo's abort message included, goes to the judge's message
        if sys.platform.startswith("linux"):
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
        store = dist.FileStore(store_path, world)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=DEADLINE_S * 3))
        group = dist.group.WORLD
        calls: list = []
        for name in COLLECTIVES:
            for module in (dist, c10d):
                _forbid(module, name, calls)
        watch = _Watch()
        with watch:  # the first operation under a dispatch mode imports torch._dynamo: done before the clock starts
            torch.zeros(1).add_(1)
        watch.sent, watch.collectives = 0, []
        conn.send(("ready", rank))
        if go is not None and not go.wait(STARTUP_S):  # the judge notes the store's size, then lets every rank go
            return
        results = []
        for t in tensors:
            mine = t.clone()
            try:
                with watch:
                    fn(mine, group)
            except CollectiveCalled:
                conn.send(("collective", rank, calls + watch.collectives, watch.sent))
                return
            results.append(mine.numpy())
        conn.send(("ok", rank, results, calls + watch.collectives, watch.sent))
    except BaseException as exc:  # noqa: BLE001 - the learner's exception, sent to the judge to raise there
        conn.send(("raised", rank, f"{type(exc).__name__}: {exc}", traceback.format_exc()[-3000:]))
    finally:
        conn.close()
        os._exit(0)  # no atexit handlers of the parent (a Jupyter kernel, a grader worker) run in the child


def make_inputs(params: dict, seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, params.get("dtype", "float32"))
    return [[(torch.randn(shape, generator=gen, dtype=torch.float64) * 4).round().to(dtype) / 4
             if params.get("exact") else torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
             for shape in params["shapes"]] for _ in range(params["world"])]


def ring_limit(n: int, world: int) -> int:
    """Elements a rank sends in a ring all-reduce of n elements, at most (chunks differ by one element at most)."""
    return 2 * (world - 1) * math.ceil(n / world)


def _warm_up() -> None:
    """What every forked rank would otherwise import on its first operation under the watch, done once here (the
    children inherit it)."""
    with _Watch():
        torch.zeros(1).add_(1)


def run_ranks(fn, world: int, inputs: list, deadline_s: float = DEADLINE_S, startup_s: float = STARTUP_S) -> dict:
    """Run ``fn`` on ``world`` forked gloo ranks; returns {"status": "ok"|"timeout"|"slow_start"|"died"|"raised"|
    "collective", ...}. ``startup_s`` bounds the ranks' set-up, ``deadline_s`` the calls after the last rank is
    ready."""
    _warm_up()
    ctx = multiprocessing.get_context("fork")
    tmp = tempfile.mkdtemp(prefix="ring_judge_")
    store = os.path.join(tmp, "store")
    procs, pipes = [], []
    go = ctx.Event()
    store_size = None
    try:
        for r in range(world):
            recv_end, send_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, args=(fn, r, world, store, inputs[r], send_end,
                                                 os.path.join(tmp, f"rank{r}.log"), go), daemon=True)
            p.start()
            send_end.close()
            procs.append(p)
            pipes.append(recv_end)
        ready, replies = set(), {}
        t_start = time.monotonic()
        end = t_start + startup_s
        while len(replies) < world and time.monotonic() < end:
            for r, pipe in enumerate(pipes):
                if r not in replies and pipe.poll(0.02):
                    try:
                        msg = pipe.recv()
                    except EOFError:
                        procs[r].join(5)
                        return {"status": "died", "rank": r, "exitcode": procs[r].exitcode,
                                "log": _tail(os.path.join(tmp, f"rank{r}.log"))}
                    if not isinstance(msg, tuple) or not msg:
                        return {"status": "died", "rank": r, "exitcode": None, "log": "a malformed message"}
                    if msg[0] == "ready":
                        ready.add(r)
                        if len(ready) == world:  # the learner's clock starts now
                            store_size = _size(store)
                            go.set()
                            end = time.monotonic() + deadline_s
                        continue
                    replies[r] = msg
                    if msg[0] in ("raised", "collective"):
                        return _first_bad(msg)
        if len(replies) < world:
            if len(ready) < world:
                return {"status": "slow_start", "waiting": sorted(set(range(world)) - ready),
                        "seconds": time.monotonic() - t_start}
            return {"status": "timeout", "waiting": sorted(set(range(world)) - set(replies))}
        return {"status": "ok", "results": [[torch.from_numpy(a) for a in replies[r][2]] for r in range(world)],
                "collectives": [replies[r][3] for r in range(world)], "sent": [replies[r][4] for r in range(world)],
                "store_written": _size(store) != store_size}
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(5)
        for pipe in pipes:
            pipe.close()
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def ring_floor(n: int, world: int) -> int:
    """Elements a rank sends in any ring all-reduce of n elements (one ring, or two over halves), at least."""
    return 2 * (world - 1) * max(0, n // world - 1)


def _tail(path: str, lines: int = 3) -> str:
    try:
        with open(path, errors="replace") as f:
            return " | ".join(line.strip() for line in f.read().strip().splitlines()[-lines:])[-600:]
    except OSError:
        return ""


def _first_bad(reply) -> dict:
    if reply[0] == "collective":
        return {"status": "collective", "rank": reply[1], "calls": reply[2]}
    return {"status": "raised", "rank": reply[1], "error": reply[2], "traceback": reply[3]}


def judge(fn, params: dict, seed: int) -> list:
    world = params["world"]
    inputs = make_inputs(params, seed)
    expected = [sum(inputs[r][i].double() for r in range(world)) for i in range(len(params["shapes"]))]
    with trapped(ring.ring_all_reduce):
        got = run_ranks(fn, world, inputs)
    if got["status"] == "timeout":  # the verdict is "timeout", with this message
        raise JudgeTimeout(f"timed out: {DEADLINE_S:.0f} s after all {world} ranks had started, ranks {got['waiting']} "
                           f"had not returned, for tensors of a few thousand elements that a ring sums in "
                           f"milliseconds. The send/recv order may deadlock: if every rank first waits in a "
                           f"blocking recv (or in a send that its neighbour is not receiving yet), each waits for the "
                           f"other forever. Post the send with dist.isend before the recv (and wait for it after), or "
                           f"order them by rank parity")
    if got["status"] == "slow_start":  # not the submission's doing: nothing of it has run yet
        raise RuntimeError(f"the machine is too busy: ranks {got['waiting']} of {world} were not set up after "
                           f"{got['seconds']:.0f} s, before your function was called. Grade again on a quieter "
                           f"machine (or with fewer --jobs)")
    if got["status"] == "died":
        return [f"rank {got['rank']} of {world} died (exit code {got['exitcode']}) inside your function: "
                f"{got['log'] or 'no message'}. Gloo aborts a process whose receive does not match the message "
                f"sent (a different size: do both sides agree on every chunk's bounds?)"]
    if got["status"] == "collective":
        return [f"rank {got['rank']} called a collective ({', '.join(sorted(set(got['calls'])))}): build the sum "
                f"from dist.send/dist.recv (or isend/irecv) only"]
    if got["status"] == "raised":
        raise RuntimeError(f"on rank {got['rank']} of {world}: {got['error']}\n{got['traceback']}")
    problems = []
    for r in range(world):
        if got["collectives"][r]:
            problems.append(f"rank {r} called a collective ({', '.join(sorted(set(got['collectives'][r])))}): "
                            f"build the sum from dist.send/dist.recv (or isend/irecv) only")
    for i, shape in enumerate(params["shapes"]):
        want = expected[i]
        for r in range(world):
            have = got["results"][r][i]
            if have.shape != want.shape or have.dtype != inputs[r][i].dtype:
                problems.append(f"tensor {i} {tuple(shape)} on rank {r}: shape/dtype {tuple(have.shape)} "
                                f"{have.dtype}, expected {tuple(want.shape)} {inputs[r][i].dtype}")
                continue
            err = (have.double() - want).abs().reshape(-1)
            tol = 1e-5 * (1 + want.abs().reshape(-1)) if have.dtype == torch.float32 else 1e-12 * (
                1 + want.abs().reshape(-1))
            bad = (err > tol) | torch.isnan(err)
            if bool(bad.any()):
                idx = bad.nonzero().reshape(-1)
                n = want.numel()
                bounds = ring.chunk_bounds(n, world)
                chunks = sorted({next(c for c in range(world) if bounds[c] <= int(j) < bounds[c + 1]) for j in idx})
                problems.append(f"tensor {i} ({n} elements, {world} ranks) on rank {r}: {len(idx)} of {n} elements "
                                f"wrong, first at flat index {int(idx[0])} (got {float(have.reshape(-1)[idx[0]]):.6g}, "
                                f"expected the sum {float(want.reshape(-1)[idx[0]]):.6g}); wrong elements in chunk(s) "
                                f"{chunks[:8]} of a split into {world} chunks {bounds}")
                break
    sizes = [math.prod(s) for s in params["shapes"]]
    if got.get("store_written"):
        problems.append("the ranks wrote to the process group's store during your function: exchange the tensors "
                        "with dist.send/dist.recv (or isend/irecv), not through the store")
    floor = sum(ring_floor(n, world) for n in sizes)
    for r in range(world):
        if got["sent"][r] < floor:
            problems.append(f"rank {r} sent {got['sent'][r]} elements with send/isend for tensors of {sizes} "
                            f"elements; a ring sends at least 2 (N - 1) (n // N - 1) per tensor ({floor} in all): "
                            f"the sums did not come through send/recv")
            break
    limit = sum(ring_limit(n, world) for n in sizes)
    for r in range(world):
        if got["sent"][r] > limit:
            problems.append(f"rank {r} sent {got['sent'][r]} elements for tensors of {sizes} elements; a ring "
                            f"sends at most 2 (N - 1) ceil(n / N) per tensor ({limit} in all): send chunks, not whole "
                            f"tensors")
            break
    return problems


EXERCISE = JudgedExercise(
    id="ring_all_reduce",
    function="ring_all_reduce",
    signature="ring_all_reduce(tensor: Tensor, group: ProcessGroup) -> None",
    statement=STATEMENT,
    kind="none",
    cases=(
        Case("2 ranks: 1000, 1001 and 1 elements", {"world": 2, "shapes": [(1000,), (1001,), (1,)]}),
        Case("3 ranks: 1000, 2 and 7x13 elements (3 divides none)", {"world": 3, "shapes": [(1000,), (2,), (7, 13)]}),
        Case("4 ranks: 4099, 3 and 4096 elements, float64", {"world": 4, "shapes": [(4099,), (3,), (4096,)],
                                                              "dtype": "float64"}),
    ),
    judge=judge,
)
