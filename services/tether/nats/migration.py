"""Moving a layout 2 installation to layout 3 without losing a queued step or a timer.

Layout 2 kept schedules in the work stream, which therefore took rollups; a stream's
schedules cannot be turned off (nats-server: "message schedules can not be disabled"),
so `provision` makes the work stream anew. `set_aside` copies every message of the old
one (queued and held steps, schedules, fired timers) into a stream of its own, then
deletes the old one; `bring_back` publishes each where layout 3 keeps it, then deletes
that stream. The old stream goes only once its copy is whole, so a provision cut off
anywhere is finished by the next one: a copy cut off is completed (a message copied
already is refused a second time), a step brought back twice is a duplicate (its
`Nats-Msg-Id`), a timer set twice replaced.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NotFoundError

from tether.nats.codes import MAX_MESSAGES_PER_SUBJECT
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
    work stream that takes no schedules (or none at all). Two provisions at once (the
    services of `tether dev` starting) copy the same messages once."""
    try:
        info = await js.stream_info(names.work_stream)
    except NotFoundError:
        return
    if not info.config.allow_msg_schedules:
        return
    try:
        await _copy_aside(js, names, info.config)
        if await _layout_2(js, names):  # (not one another provision just made anew)
            await js.delete_stream(names.work_stream)
    except (NotFoundError, _MovedMeanwhile):  # another provision moved it meanwhile
        return


class _MovedMeanwhile(Exception):
    """The work stream is not layout 2's any more: another provision moved it."""


async def _layout_2(js: JetStreamContext, names: Names) -> bool:
    return bool((await js.stream_info(names.work_stream)).config.allow_msg_schedules)


async def _copy_aside(js: JetStreamContext, names: Names, work: StreamConfig) -> None:
    """Copy every message of the work stream to `Names.moving_stream`, whose subjects
    (one per sequence) each take one message: a copy again adds nothing."""
    moving = StreamConfig(
        name=names.moving_stream,
        subjects=[f"{names.prefix}.moving.>"],
        retention=RetentionPolicy.LIMITS,
        max_msgs_per_subject=1,
        discard=DiscardPolicy.NEW,
        discard_new_per_subject=True,
        storage=StorageType.FILE,
        num_replicas=work.num_replicas,
    )
    await js.add_stream(moving)  # (the same config again: the stream as it is)
    # Sealed first, so that nothing changes it while it is copied: no step published, no
    # schedule fired (a process still running is refused its writes and retries them).
    await _seal(js, names.work_stream)
    async for seq, subject, sent, data in _messages(js, names.work_stream):
        moved = {SUBJECT: subject, HEADERS: json.dumps(sent)}
        try:
            await js.publish(f"{names.prefix}.moving.{seq}", data, headers=moved)
        except APIError as exc:
            if exc.err_code != MAX_MESSAGES_PER_SUBJECT:  # else: copied already
                raise
    held = (await js.stream_info(names.work_stream)).state.messages
    copied = (await js.stream_info(names.moving_stream)).state.messages
    if copied != held:  # never delete what was not copied
        raise RuntimeError(
            f"copied {copied} of the {held} messages of {names.work_stream} aside: run "
            "'tether provision' again (the stream is kept, sealed, until they are all copied)"
        )


async def _seal(js: JetStreamContext, stream: str) -> None:
    """Seal layout 2's work stream, unless another provision just did."""
    config = (await js.stream_info(stream)).config
    if not config.allow_msg_schedules:
        raise _MovedMeanwhile
    if config.sealed:
        return
    config.sealed = True
    try:
        await js.update_stream(config)
    except APIError:
        if not (await js.stream_info(stream)).config.sealed:
            raise


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
    with contextlib.suppress(NotFoundError):  # another provision's, at the same time
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
            msg = await js.get_msg(stream, seq=seq + 1, subject=">", next=True)
        except NotFoundError:
            return
        seq = msg.seq or seq + 1
        yield seq, msg.subject or "", dict(msg.headers or {}), msg.data or b""
