"""The grading conversation with one worker, over its channel (protocol.py): load the submission, then per case
either send the inputs drawn here and compare the outputs with the reference here (compared exercises), or send the
case's parameters and read the judge's problems (judged exercises: the judge runs beside the call, in the worker);
then the verdict, and the timing of a submission that passed. Every reply is checked as untrusted (its nonce, its
case, its fields): a forged one is protocol.Malformed, the submission's doing (docs/grading.md)."""
from __future__ import annotations

import contextlib

from .. import device as _device
from . import checker, gpulock, launches, protocol
from .outcome import Outcome, meta_problem
from .progress import trace
from .report import Result, where_field


def checked_reply(msg: dict, nonce: str, kinds: tuple) -> dict:
    """``msg`` when it is one of ``kinds`` carrying this worker's nonce; else protocol.Malformed. Types are checked
    before values are compared: a forged field may be a tensor, whose ``==`` is not a bool."""
    kind, their_nonce = msg.get("type"), msg.get("nonce")
    if type(their_nonce) is not str or their_nonce != nonce or type(kind) is not str or kind not in kinds:
        shown = kind[:40] if type(kind) is str else type(kind).__name__
        raise protocol.Malformed(f"expected {'/'.join(kinds)}, got {shown!r}")
    return msg


def _check_index(msg: dict, index: int) -> None:
    """A case's reply must name that case by its number (a plain int): else protocol.Malformed (a forged reply)."""
    their = msg.get("index")
    if type(their) is not int or their != index:
        shown = their if type(their) is int else type(their).__name__
        raise protocol.Malformed(f"a reply for case {shown!r} while case {index} ran")


def _error_field(msg: dict):
    """A perf step's "error" field: None or a string; anything else is protocol.Malformed."""
    error = msg.get("error")
    if error is not None and type(error) is not str:
        raise protocol.Malformed(f"perf error is a {type(error).__name__}")
    return error


class _Conversation:
    """The channel to one worker and what the conversation keeps: the deadline (moved by waits for the GPU lock),
    the steps asked of the worker (``doing``: what a timeout interrupted) and whether it ever replied."""

    def __init__(self, ex, result: Result, nonce: str, to_w: int, from_r: int, deadline: float, lock, replied: list,
                 doing: list, margin: float):
        self.ex, self.result, self.nonce, self.to_w, self.from_r = ex, result, nonce, to_w, from_r
        self.deadline, self.lock, self.replied, self.doing, self.margin = deadline, lock, replied, doing, margin

    def send(self, msg: dict, step: tuple | None = None) -> None:
        """Send ``msg`` with the time the worker writes its stack (``margin`` seconds before the deadline); ``step``:
        (kind, name) of what it asks, recorded in ``doing``."""
        if step is not None:
            self.doing.append(step)
        protocol.send(self.to_w, dict(msg, stack_at=float(self.deadline - self.margin)), self.deadline)

    def expect(self, *kinds) -> dict:
        msg = protocol.recv(self.from_r, self.deadline)
        self.replied.append(True)
        return checked_reply(msg, self.nonce, kinds)

    @contextlib.contextmanager
    def gpu_held(self, exclusive: bool = False):
        """The GPU lock held shared (a case) or exclusive (a timing); the wait for it is added to the deadline."""
        who = self.result.submission
        if self.lock is None:  # CPU mode: no lock to wait for (traced all the same: the case's time is its hold)
            trace(who, "waited", exclusive=exclusive, seconds=0.0)
            yield
            trace(who, "released", exclusive=exclusive)
            return
        with (self.lock.exclusive() if exclusive else self.lock.shared()) as waited:
            self.deadline += waited
            trace(who, "waited", exclusive=exclusive, seconds=round(waited, 4),
                  **({"round": self.lock.rounds, "gpu": self.lock.gpu} if exclusive else {}))
            yield
        trace(who, "released", exclusive=exclusive)


def converse(ex, path, result: Result, seed: int, nonce: str, to_w: int, from_r: int, deadline: float,
              lock: gpulock.GpuLock | None = None, replied: list | None = None, doing: list | None = None,
              margin: float = 1.0) -> None:
    """The grading conversation with one worker (``path``: the submission as the worker sees it); fills ``result``.
    Load the submission, run every case (:func:`_judged_case` or :func:`_compared_case`), give the verdict
    (:func:`_verdict`), time a submission that passed (:func:`_timing`), say goodbye.
    On a GPU, ``lock`` is held shared around each case and exclusive around the timing; the time spent waiting for
    it is added to the deadline. ``doing`` gets (kind, name) of each step asked of the worker ("case" and the case's
    name, "perf", "end"): what a timeout interrupted. Every message tells the worker when to write its stack
    (``stack_at``: ``margin`` seconds before the deadline, see worker._stack_alarm). Raises
    protocol.Timeout/Closed/Malformed."""
    talk = _Conversation(ex, result, nonce, to_w, from_r, deadline, lock, replied if replied is not None else [],
                         doing if doing is not None else [], margin)
    talk.send({"type": "hello", "nonce": nonce, "exercise": ex.id, "submission": path}, ("load", ""))
    msg = talk.expect("loading", "ready", "load_error")  # "loading": about to read the submission
    if msg["type"] == "loading":
        msg = talk.expect("ready", "load_error")
    trace(result.submission, "ready")
    if msg["type"] == "load_error":
        result.status, result.score = "error", 0.0
        result.message = str(msg.get("message", "could not be loaded"))[:500]
        result.checks.append({"name": "load", "passed": False, "detail": str(msg.get("traceback", ""))[-5000:]})
        return
    all_ops: dict = {}
    patched: list = []
    threads: list = []
    # From the first case to the timing's last shared hold, this job is in its cases: a timing of another job waits
    # for that (gpulock's rounds), so its timing stalls no case; this job's own timing waits for the others'.
    with contextlib.ExitStack() as casework:
        if lock is not None:
            casework.enter_context(lock.casework())
        for index, case in enumerate(ex.cases):
            ended = (_judged_case(talk, index, case, seed, patched, threads) if ex.judge is not None else
                     _compared_case(talk, index, case, seed, all_ops))
            if ended:
                return
        _flag_patched(result, patched, threads)
        calls = launches.reference_calls(all_ops, ex.reference_ops)
        if calls:
            result.flags.append(f"calls {', '.join(calls)}: the torch op this exercise asks to implement")
        _verdict(result)
        if result.status == "passed" and ex.perf is not None and _device.on_gpu():
            _timing(talk, casework)
    talk.send({"type": "bye", "nonce": nonce}, ("end", "the worker's exit, after every case (a thread or a finalizer "
                                                       "of the submission?)"))
    talk.expect("done")


def _judged_case(talk: _Conversation, index: int, case, seed: int, patched: list, threads: list) -> bool:
    """A judged case: the judge runs in the worker (it must watch the call); only its list of problems comes back.
    True when the conversation ends here (the submission raised, or the judge's deadline passed)."""
    ex, result = talk.ex, talk.result
    with talk.gpu_held():
        talk.send({"type": "judge", "index": index, "params": case.params, "seed": checker.case_seed(seed, index),
                   "nonce": talk.nonce}, ("case", case.name))
        msg = talk.expect("judged", "raised")
    _check_index(msg, index)
    _note_patched(patched, msg.get("patched"))
    _note_patched(threads, msg.get("threads"))
    if msg["type"] == "raised":
        _raised(ex, case, msg, result, patched, threads)
        return True
    problems = msg.get("problems")
    if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
        raise protocol.Malformed("problems are not a list of strings")
    result.checks.append({"name": case.name, "passed": not problems,
                          "detail": "ok" if not problems else "\n".join(p[:2000] for p in problems[:50])})
    if msg.get("timed_out") is True and problems:  # the judge's deadline passed: the call hung
        result.status, result.score = "timeout", 0.0
        result.message = f"{case.name}: {problems[0][:500]}"
        return True
    return False


def _compared_case(talk: _Conversation, index: int, case, seed: int, all_ops: dict) -> bool:
    """A compared case: sizes and inputs drawn here, the worker's outputs compared here with the reference
    (:class:`Outcome`, ``checker.evaluate``). True when the conversation ends here (the submission raised)."""
    ex, result = talk.ex, talk.result
    case = checker.drawn_case(case, seed, index)  # sizes drawn here: the worker sees only the tensors
    args, expected = checker.make_case(ex, case, seed, index)
    trace(result.submission, "drawn", case=index)
    with talk.gpu_held():
        talk.send({"type": "case", "index": index, "args": args, "nonce": talk.nonce}, ("case", case.name))
        msg = talk.expect("result", "raised")
    _check_index(msg, index)
    if msg["type"] == "raised":
        forbidden = _forbidden_field(ex, msg)
        if not forbidden:
            _raised(ex, case, msg, result)
            return True
        # A forbidden op called before the raise: the cheat is the verdict (a failed case, as on the shapes the op
        # takes), and the next cases run.
        exc_type = msg.get("exc_type") if type(msg.get("exc_type")) is str else ""
        raised = checker.exception_line(str(msg.get("traceback", "")), exc_type)[:300] or exc_type[:60]
        result.checks.append({"name": case.name, "passed": False,
                              "detail": checker.raised_after_forbidden(forbidden, raised)})
        return False
    outcome = Outcome.from_message(msg, len(args))
    for op, n in outcome.ops.items():
        all_ops[op] = all_ops.get(op, 0) + n
    verdict = checker.evaluate(ex, case, args, expected, outcome, "cuda" if _device.on_gpu() else "cpu")
    not_output = meta_problem(outcome.out)
    problems = not_output or verdict.problems
    passed = verdict.passed and not not_output
    if not passed and checker.drawn_note(ex, case):
        problems = problems + [checker.drawn_note(ex, case)]
    check = {"name": case.name, "passed": passed,
             "detail": "ok" if passed else "\n".join(problems + [f"hint: {h}" for h in verdict.hints])}
    if not passed and verdict.where is not None:  # where the output is wrong, for its feedback page to draw
        check["where"] = where_field(verdict.where)
    result.checks.append(check)
    return False


def _verdict(result: Result) -> None:
    """Status, score and message from the cases' checks: passed when every case passed, else failed, naming the
    first failed case, its first problem and the checker's hint."""
    n_pass = sum(c["passed"] for c in result.checks)
    result.score = n_pass / len(result.checks) if result.checks else 0.0
    if n_pass == len(result.checks):
        result.status, result.message = "passed", f"all {n_pass} cases passed"
        return
    first = next(c for c in result.checks if not c["passed"])
    what = checker.first_problem(first["detail"])
    hint = next((ln.strip() for ln in first["detail"].splitlines() if ln.startswith("hint: ")), "")
    if hint and hint not in what:  # the likely cause, where the checker could name one
        what = f"{what}; {hint[:600]}"
    result.status = "failed"
    result.message = (f"{len(result.checks) - n_pass} of {len(result.checks)} cases failed; first: "
                      f"{first['name']}: {what}")


def _timing(talk: _Conversation, casework: contextlib.ExitStack) -> None:
    """Time a submission that passed (GPU, an exercise with a speed target). Inputs drawn on the CPU holding no
    lock, moved and the first call made beside other jobs' cases: only the timing holds the GPU alone, in a round
    with the other timings waiting then (gpulock). ``casework`` is closed once its cases are over."""
    result, lock, nonce = talk.result, talk.lock, talk.nonce
    talk.send({"type": "perf_draw", "nonce": nonce}, ("perf", "the speed measurement"))
    prep_error = _error_field(talk.expect("perf_drawn"))
    trace(result.submission, "perf_drawn")
    if not prep_error:
        with talk.gpu_held():
            talk.send({"type": "perf_prepare", "nonce": nonce})
            prep_error = _error_field(talk.expect("perf_prepared"))
    casework.close()  # its cases are over: its timing waits for the other jobs' cases
    if prep_error:
        perf = {"error": str(prep_error)}
    else:
        with talk.gpu_held(exclusive=True):
            talk.send({"type": "perf", "nonce": nonce})
            perf = talk.expect("perf").get("perf", {})
    if lock is None or lock.problem:
        result.timing = f"beside other jobs ({lock.problem if lock else 'no GPU lock'})"
    else:
        result.timing = f"alone on GPU {lock.gpu} (no other grading job ran a case or a timing on it meanwhile)"
    if not isinstance(perf, dict):
        raise protocol.Malformed("perf is not a dict")
    if "error" in perf:
        result.flags.append(f"speed could not be measured: {str(perf['error'])[:200]}")
    elif perf:
        result.perf = _perf_fields(perf, talk.ex.perf.baseline)
        result.message += f"; speed (self-reported by the worker): {str(perf.get('text'))[:300]}"
        if perf.get("suspicious"):
            result.flags.append("speed above the device's physical limit: " + "; ".join(
                str(w) for w in perf.get("warnings", []))[:300])
        elif not perf.get("met"):
            result.flags.append(f"below the speed target: {str(perf.get('text'))[:200]}")


PERF_NUMBERS = ("ratio", "target", "ms", "q25_ms", "q75_ms", "pct_of_peak")


def _perf_fields(perf: dict, baseline: str) -> dict:
    """The worker's timing as plain values for the report and the leaderboard: the numbers of PERF_NUMBERS it sent
    (finite floats; others left out: a worker may send anything), ``met`` and ``suspicious`` as booleans, the text
    capped, and ``baseline`` from the exercise here ("copy": a torch copy of the same bytes; else the reference)."""
    out = {"baseline": "a torch copy" if baseline == "copy" else "the reference"}
    for key in PERF_NUMBERS:
        try:
            x = float(perf.get(key))
        except (TypeError, ValueError, OverflowError):
            continue
        if x == x and abs(x) != float("inf"):
            out[key] = x
    out["met"] = perf.get("met") is True
    out["suspicious"] = perf.get("suspicious") is True
    out["text"] = str(perf.get("text"))[:300]
    return out


def _forbidden_field(ex, msg: dict) -> list:
    """The forbidden ops a "raised" message says were called before the raise; only names the exercise forbids
    count (a forged list can only add the exercise's own forbidden names, which makes its verdict worse)."""
    names = msg.get("forbidden")
    if not isinstance(names, list) or not all(type(n) is str for n in names):
        return []
    return launches.reference_calls({n[:200]: 1 for n in names[:20]}, ex.forbidden_ops)


def _raised(ex, case, msg: dict, result: Result, patched: tuple = (), threads: tuple = ()) -> None:
    """The submission raised on ``case`` (or, judged, tampered with what the judge relies on): status error."""
    result.status, result.score = "error", 0.0
    exc_type = msg.get("exc_type") if type(msg.get("exc_type")) is str else ""  # a forged one may be a tensor
    last = checker.exception_line(str(msg.get("traceback", "")), exc_type)[:200]
    if msg.get("tampered") is True and ex.judge is not None:  # the worker's isinstance(exc, judging.Tampered)
        what = f"tampered with the judge ({last.split(': ', 1)[-1]})"
        result.flags.append("tampered with the judge")
    elif msg.get("not_implemented") is True:
        what = checker.NOT_IMPLEMENTED
    else:
        what = f"raised {last or exc_type[:60]}"
    result.message = f"{ex.function} {what} (case {case.name!r})"
    result.checks.append({"name": case.name, "passed": False, "detail": str(msg.get("traceback", ""))[-5000:]})
    _flag_patched(result, patched, threads)


def _note_patched(patched: list, reported) -> None:
    """Collect what the worker had to restore before judging (a list of strings; anything else is ignored)."""
    if isinstance(reported, list):
        for item in reported[:50]:
            if isinstance(item, str) and item[:200] not in patched:
                patched.append(item[:200])


def _flag_patched(result: Result, patched, threads) -> None:
    if patched:
        more = f" and {len(patched) - 8} more" if len(patched) > 8 else ""
        result.flags.append(f"changed what the judge relies on (undone before judging, as reported by the worker): "
                            f"{', '.join(patched[:8])}{more}")
    if threads:
        result.flags.append(f"left threads running beside the judge (as reported by the worker): "
                            f"{', '.join(threads[:5])}")
