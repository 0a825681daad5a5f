"""Length-prefixed messages between the grader and its worker, over dedicated pipes (never stdout).

A message is a dict of plain values and tensors, serialised with ``torch.save`` and read back with
``torch.load(weights_only=True)``, which refuses arbitrary pickled objects: a hostile worker can send wrong data, but
cannot run code in the grader. Reads and writes honour a deadline so a hung worker cannot block the grader, and so
does decoding: torch's weights-only unpickler is written in Python, so a message made of millions of tiny objects
would take minutes to read. Before decoding, the archive's directory is checked (every record stored, not
compressed; at most MAX_RECORDS records; a pickle of at most MAX_PICKLE bytes, the tensors' bytes being separate
records), which bounds the decoding time to a second or two; a message decoded after the deadline is a timeout.
"""
from __future__ import annotations

import io
import os
import select
import struct
import time
import zipfile

import torch

HEADER = struct.Struct("<Q")
MAX_MESSAGE = 2 << 30  # bytes; a larger length prefix is treated as a broken or hostile worker
MAX_PICKLE = 1 << 20  # bytes of a message's pickle (its tensors' data are separate records, not counted)
MAX_RECORDS = 16384  # records in a message's archive (one per tensor: sum_many sends thousands)


class Timeout(Exception):
    """The deadline passed while waiting for the other side."""


class Closed(Exception):
    """The other side closed the pipe (the worker died or exited)."""


class Malformed(Exception):
    """The bytes received are not a message this protocol sends."""


def encode(msg: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(msg, buf)
    data = buf.getvalue()
    return HEADER.pack(len(data)) + data


def check_archive(data: bytes) -> None:
    """Raise Malformed unless ``data`` is a torch.save archive whose decoding is cheap: every record stored
    uncompressed, at most MAX_RECORDS of them, a pickle of at most MAX_PICKLE bytes."""
    try:
        records = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise Malformed(f"not a torch.save archive ({type(exc).__name__})") from None
    if len(records) > MAX_RECORDS:
        raise Malformed(f"{len(records)} records in one message (at most {MAX_RECORDS})")
    for r in records:
        if r.compress_type != zipfile.ZIP_STORED:
            raise Malformed(f"compressed record {r.filename[:60]!r}")
        if r.filename.endswith(".pkl") and r.file_size > MAX_PICKLE:
            raise Malformed(f"a pickle of {r.file_size} bytes (at most {MAX_PICKLE})")


def decode(data: bytes, deadline: float | None = None) -> dict:
    """The message in ``data``; Malformed if it is not one this protocol sends, Timeout if decoding ended after
    ``deadline`` (check_archive bounds decoding to a second or two, so it cannot run on for long)."""
    check_archive(data)
    try:
        msg = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:
        raise Malformed(f"unreadable message ({type(exc).__name__})") from None
    if deadline is not None and time.monotonic() > deadline:
        raise Timeout()
    if not isinstance(msg, dict):
        raise Malformed("message is not a dict")
    return msg


def _wait(fd: int, for_write: bool, deadline: float | None) -> None:
    remaining = None if deadline is None else deadline - time.monotonic()
    if remaining is not None and remaining <= 0:
        raise Timeout()
    r, w, _ = select.select([] if for_write else [fd], [fd] if for_write else [], [], remaining)
    if not (r or w):
        raise Timeout()


def send(fd: int, msg: dict, deadline: float | None = None) -> None:
    """Write one message; with a deadline the fd must be non-blocking (see :func:`nonblocking`)."""
    view = memoryview(encode(msg))
    while view:
        if deadline is not None:
            _wait(fd, True, deadline)
        try:
            n = os.write(fd, view[: 1 << 20])
        except BlockingIOError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            raise Closed() from None
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            _wait(fd, False, deadline)
        try:
            chunk = os.read(fd, min(n - got, 1 << 20))
        except BlockingIOError:
            continue
        if not chunk:
            raise Closed()
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd: int, deadline: float | None = None) -> dict:
    (n,) = HEADER.unpack(_read_exact(fd, HEADER.size, deadline))
    if n > MAX_MESSAGE:
        raise Malformed(f"message of {n} bytes announced")
    return decode(_read_exact(fd, n, deadline), deadline)


def nonblocking(fd: int) -> int:
    os.set_blocking(fd, False)
    return fd
