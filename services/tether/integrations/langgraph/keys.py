"""Every key of a saver's bucket, built and read in one place (pure: no I/O).

A key is `<thread>.<kind>.<rest>`: the thread first, so one subject filter covers all of
a thread (`delete_thread` is one purge); a one-letter kind second, so no id can be
mistaken for another kind. Every id in a key is one token escaped by `escape`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ALL_SAFE = re.compile("[A-Za-z0-9_-]+")
_ASCII_ESCAPES = {code: f"={code:02X}" for code in range(128) if chr(code) not in _SAFE}
EMPTY = "="
"""The token of an empty id (the root namespace `""`): `=` is otherwise always
followed by two hex digits, so it stands for nothing else."""

LATEST = "l"
CHECKPOINT = "c"
VALUE = "v"
WRITE = "w"
RUN = "r"
BLOB = "b"


def escape(text: str) -> str:
    """`text` as one key token that any NATS client accepts: letters, digits, `_` and `-`
    stay; every other byte of its UTF-8 is `=XX` (upper-case hex); empty is `=`.
    `child:1` -> `child=3A1`; `1.0` -> `1=2E0`."""
    if not text:
        return EMPTY
    if _ALL_SAFE.fullmatch(text):
        return text
    if text.isascii():  # versions (`<n>.<random>`): a listing escapes thousands
        return text.translate(_ASCII_ESCAPES)
    return "".join(ch if ch in _SAFE else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    return "".join(f"={byte:02X}" for byte in ch.encode())


def unescape(token: str) -> str:
    """The id `escape` made `token` from."""
    if token == EMPTY:
        return ""
    if "=" not in token:
        return token
    out = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "=":
            out.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            out += token[i].encode()
            i += 1
    return out.decode()


def version_token(version: str | int | float) -> str:
    return escape(str(version))


class Place(NamedTuple):
    """Where a checkpoint is: its thread, namespace and id."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str


def thread_keys(thread_id: str) -> str:
    """The filter of every key of a thread."""
    return f"{escape(thread_id)}.>"


def latest(thread_id: str, ns: str) -> str:
    """`<thread>.l.<ns>`: the id of the namespace's newest checkpoint."""
    return f"{escape(thread_id)}.{LATEST}.{escape(ns)}"


def checkpoint(thread_id: str, ns: str, checkpoint_id: str) -> str:
    """`<thread>.c.<ns>.<checkpoint_id>`: the checkpoint without its channel values."""
    return f"{escape(thread_id)}.{CHECKPOINT}.{escape(ns)}.{escape(checkpoint_id)}"


def checkpoints(thread_id: str | None, ns: str | None) -> str:
    """The filter of the checkpoint keys of a thread's namespace (None: any)."""
    thread = "*" if thread_id is None else escape(thread_id)
    return f"{thread}.{CHECKPOINT}.{'*' if ns is None else escape(ns)}.*"


def value(thread_id: str, ns: str, channel: str, version: str | int | float) -> str:
    """`<thread>.v.<ns>.<channel>.<version>`: one version of a channel's value, shared by
    every checkpoint of the namespace that has that version."""
    return f"{escape(thread_id)}.{VALUE}.{escape(ns)}.{escape(channel)}.{version_token(version)}"


def values(thread_id: str) -> str:
    return f"{escape(thread_id)}.{VALUE}.*.*.*"


def write(thread_id: str, ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    """`<thread>.w.<ns>.<checkpoint_id>.<task_id>.<idx>`: a pending write (idx < 0 for
    the special channels: error, interrupt, resume, scheduled)."""
    return f"{checkpoint_writes(thread_id, ns, checkpoint_id)}.{escape(task_id)}.{idx}"


def checkpoint_writes(thread_id: str, ns: str, checkpoint_id: str) -> str:
    """`<thread>.w.<ns>.<checkpoint_id>`: what the keys of a checkpoint's pending writes
    begin with."""
    return f"{escape(thread_id)}.{WRITE}.{escape(ns)}.{escape(checkpoint_id)}"


def writes_of(thread_id: str, ns: str, checkpoint_id: str) -> str:
    """The filter of one checkpoint's pending writes."""
    return f"{checkpoint_writes(thread_id, ns, checkpoint_id)}.*.*"


def writes(thread_id: str) -> str:
    return f"{escape(thread_id)}.{WRITE}.*.*.*.*"


def run(thread_id: str, ns: str, run_id: str, checkpoint_id: str) -> str:
    """`<thread>.r.<ns>.<run_id>.<checkpoint_id>`: the run that made a checkpoint, so
    `delete_for_runs` finds its checkpoints with one subject filter."""
    return f"{escape(thread_id)}.{RUN}.{escape(ns)}.{escape(run_id)}.{escape(checkpoint_id)}"


def runs_of(thread_id: str, ns: str, checkpoint_id: str) -> str:
    return f"{escape(thread_id)}.{RUN}.{escape(ns)}.*.{escape(checkpoint_id)}"


def run_keys(run_id: str) -> str:
    """The filter of the checkpoints a run made, in every thread."""
    return f"*.{RUN}.*.{escape(run_id)}.*"


def blob(thread_id: str, digest: str) -> str:
    """`<thread>.b.<sha256 hex>`: a blob of this thread's in the object store."""
    return f"{escape(thread_id)}.{BLOB}.{digest}"


def blobs(thread_id: str) -> str:
    return f"{escape(thread_id)}.{BLOB}.*"


def place(key: str) -> Place:
    """The place a checkpoint key (`checkpoint`) or run key (`run`) names."""
    parts = key.split(".")
    return Place(unescape(parts[0]), unescape(parts[2]), unescape(parts[-1]))


def retarget(key: str, source: str, target: str) -> str:
    """A key of thread `source` as the same key of thread `target`."""
    return escape(target) + key[len(escape(source)) :]
