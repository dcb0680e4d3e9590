"""Moving a layout 2 installation to layout 3 without losing a queued step or a timer.

Layout 2 kept schedules in the work stream, which therefore took rollups; a stream's
schedules cannot be turned off (nats-server: "message schedules can not be disabled"),
so `provision` makes the work stream anew. `set_aside` copies every message of the old
one (queued and held steps, schedules, fired timers) into a stream of its own, then
deletes the old one; `bring_back` publishes each where layout 3 keeps it, then deletes
that stream. The old stream goes only once its copy is whole, so a provision cut off
anywhere is finished by the next one: a copy cut off is made again from the start, and a
step brought back twice is a duplicate (its `Nats-Msg-Id`), a timer set twice replaced.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from tether.nats.headers import MSG_ID, PRIOR_ATTEMPTS, SCHEDULE, SCHEDULE_TARGET, WAKE
from tether.nats.schedules import schedule_headers
from tether.schemas.names import Names

SUBJECT = "Tether-Moved-Subject"
HEADERS = "Tether-Moved-Headers"
"""A set-aside message's own subject, and its headers as JSON (a schedule's would make
the server treat the copy as one)."""
_KEPT = (MSG_ID, PRIOR_ATTEMPTS)
"""The headers of a step that go with it to the new work stream."""


async def set_aside(js: JetStreamContext, names: Names) -> None:
    """Copy a layout 2 work stream's messages aside and delete it; nothing to do for a
    work stream that takes no schedules (or none at all)."""
    try:
        info = await js.stream_info(names.work_stream)
    except NotFoundError:
        return
    if not info.config.allow_msg_schedules:
        return
    try:
        await js.delete_stream(names.moving_stream)  # a copy cut off: made again
    except NotFoundError:
        pass
    await js.add_stream(
        StreamConfig(
            name=names.moving_stream,
            subjects=[f"{names.prefix}.moving.>"],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=info.config.num_replicas,
        )
    )
    copied = 0
    async for seq, subject, sent, data in _messages(js, names.work_stream):
        moved = {SUBJECT: subject, HEADERS: json.dumps(sent)}
        await js.publish(f"{names.prefix}.moving.{seq}", data, headers=moved)
        copied += 1
    if copied != (await js.stream_info(names.work_stream)).state.messages:
        raise RuntimeError(
            f"{names.work_stream} changed while it was copied aside: stop every Tether "
            "process of this installation, then run 'tether provision' again"
        )
    await js.delete_stream(names.work_stream)


async def bring_back(js: JetStreamContext, names: Names) -> None:
    """Publish what `set_aside` kept where layout 3 keeps it, then drop the copy: steps
    onto their work subjects, schedules into the timers stream, fired timers onto the
    subject the dispatchers take them from."""
    try:
        await js.stream_info(names.moving_stream)
    except NotFoundError:
        return
    async for seq, _, moved, data in _messages(js, names.moving_stream):
        subject, sent = moved[SUBJECT], json.loads(moved[HEADERS])
        if subject.startswith(names.timer_subject("")):
            await _schedule(js, names, subject, sent, data)
        elif subject == names.timers_work_subject:
            await js.publish(names.fired_subject(f"moved.{seq}"), data)
        else:
            kept = {name: value for name, value in sent.items() if name in _KEPT}
            await js.publish(subject, data, headers=kept)
    await js.delete_stream(names.moving_stream)


async def _schedule(
    js: JetStreamContext, names: Names, subject: str, sent: dict[str, str], data: bytes
) -> None:
    """A layout 2 schedule (onto a tool's work subject, or the old fired timers'), as a
    layout 3 one; a time already past fires at once."""
    timer_id = subject[len(names.timer_subject("")) :]
    target = sent.get(SCHEDULE_TARGET, "")
    at = sent.get(SCHEDULE, "").removeprefix("@at ")
    headers = schedule_headers(at, names.fired_subject(timer_id))
    if target != names.timers_work_subject:
        headers[WAKE] = target
    await js.publish(names.timer_subject(timer_id), data, headers=headers)


async def _messages(
    js: JetStreamContext, stream: str
) -> AsyncIterator[tuple[int, str, dict[str, str], bytes]]:
    """Every message of `stream` in order: (sequence, subject, headers, data)."""
    seq = 0
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq + 1, next=True)
        except NotFoundError:
            return
        seq = msg.seq or seq + 1
        yield seq, msg.subject or "", dict(msg.headers or {}), msg.data or b""
