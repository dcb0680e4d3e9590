"""What the retention sweep removes: pure decisions, no I/O.

A finished task is kept for a retention period (its record, checkpoints and events),
then removed. A blob is removed once nothing kept refers to it, and only when it is
older than a grace period: a task may be about to write its first reference to a blob
it just stored (or found stored), and the sweep must not see that as garbage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime, timedelta

from tether.nats.blobs import BLOB_GRACE as BLOB_GRACE  # the blob store's rule
from tether.schemas.records import TaskRecord

DEFAULT_RETENTION = timedelta(days=7)
"""As long as the status stream keeps a task's events."""

_REF = re.compile(rb'"\$blob":\s*"sha256:([0-9a-f]{64})"')


def expired(record: TaskRecord, now: datetime, retention: timedelta) -> bool:
    """Whether a task finished more than `retention` ago."""
    return record.status.is_terminal and now - record.updated_at > retention


def referenced_blobs(data: bytes) -> set[str]:
    """The hex digests of every blob reference in encoded JSON, at any depth."""
    return {match.decode() for match in _REF.findall(data)}


def garbage(
    blobs: Iterable[tuple[str, datetime]],
    referenced: set[str],
    now: datetime,
    grace: timedelta = BLOB_GRACE,
) -> list[str]:
    """The digests among `blobs` (digest, stored at) that nothing refers to and that
    are past the grace period."""
    return [
        digest
        for digest, stored_at in blobs
        if digest not in referenced and now - stored_at > grace
    ]
