"""Model tokens summed (pure): a step's into its task's, branches' into their group's,
and an attempt's that did not finish (it failed, was retried or cancelled) into its
task's, since spend that was not kept is spend all the same."""

from __future__ import annotations

import msgspec

from tether.schemas.records import TaskRecord, Usage


def add_usage(total: Usage | None, more: Usage | None) -> Usage | None:
    if more is None:
        return total
    return more if total is None else total + more


def with_spent(record: TaskRecord, generation: int, spent: Usage | None) -> TaskRecord | None:
    """The record with an unkept attempt's usage added; None (no write) when the attempt
    spent nothing or belongs to another run of the task (a retry started a new one).
    A task that ended meanwhile (cancelled while the step ran) takes it too: its status
    stays, only its account grows."""
    if spent is None or record.generation != generation:
        return None
    return msgspec.structs.replace(record, usage=add_usage(record.usage, spent))
