"""`watch` shows each step's text whole under the line that started it, whatever order
the two feeds deliver events and chunks in."""

from __future__ import annotations

import io
import itertools
from datetime import UTC, datetime

from rich.console import Console

from tether.cli.event_views import PlainLines
from tether.cli.transcript import Piece, Shown, TextEnd, Transcript
from tether.schemas.events import (
    AnyStatusEvent,
    Completed,
    StepCompleted,
    StepRetrying,
    StepStarted,
)
from tether.schemas.records import ErrorInfo, TaskStatus
from tether.schemas.work import TokenChunk

NOW = datetime(2026, 12, 2, tzinfo=UTC)
RUNNING = TaskStatus.RUNNING


def _started(step: int, attempt: int = 1, branch: int | None = None) -> StepStarted:
    return StepStarted(
        task_id="t", status=RUNNING, step=step, attempt=attempt, branch=branch, time=NOW
    )


def _completed(step: int, attempt: int = 1, branch: int | None = None) -> StepCompleted:
    return StepCompleted(
        task_id="t", status=RUNNING, step=step, attempt=attempt, branch=branch, time=NOW
    )


def _chunks(step: int, text: str, attempt: int = 1, done: bool = True) -> list[TokenChunk]:
    words = text.split(" ")
    chunks = [
        TokenChunk(task_id="t", step=step, attempt=attempt, seq=n, delta=w + " ")
        for n, w in enumerate(words)
    ]
    if done:
        chunks.append(
            TokenChunk(task_id="t", step=step, attempt=attempt, seq=len(words), done=True)
        )
    return chunks


def _render(outputs: list[object]) -> str:
    """What a plain view prints: event lines, text pieces, a newline after each text."""
    lines = []
    for out in outputs:
        if isinstance(out, Shown):
            lines.append(f"<{out.event.kind} {out.event.step}>\n")
        elif isinstance(out, Piece):
            lines.append(out.text)
        elif isinstance(out, TextEnd):
            lines.append(" [cut off]\n" if out.cut_off else "\n")
    return "".join(lines)


def _play(items: list[AnyStatusEvent | TokenChunk]) -> str:
    transcript = Transcript()
    outputs: list[object] = []
    for item in items:
        if isinstance(item, TokenChunk):
            outputs += transcript.chunk(item)
        else:
            outputs += transcript.event(item)
    return _render(outputs + transcript.close())


EVENTS: list[AnyStatusEvent] = [
    _started(0),
    _completed(0),
    _started(1),
    _completed(1),
    Completed(task_id="t", status=TaskStatus.COMPLETED, time=NOW),
]
EXPECTED = (
    "<step_started 0>\nfirst turn \n<step_completed 0>\n"
    "<step_started 1>\nthe answer \n<step_completed 1>\n<completed None>\n"
)


def test_every_order_of_the_two_feeds_gives_one_transcript() -> None:
    """Any interleaving that keeps each feed's own order, and in which each step's text
    is read before the event that ends it (the follower waits for that), prints alike."""
    tokens = _chunks(0, "first turn") + _chunks(1, "the answer")
    seen = set()
    for slots in itertools.combinations(range(len(EVENTS) + len(tokens)), len(tokens)):
        merged: list[AnyStatusEvent | TokenChunk] = []
        events, chunks = iter(EVENTS), iter(tokens)
        for i in range(len(EVENTS) + len(tokens)):
            merged.append(next(chunks) if i in slots else next(events))
        if _ends_before_its_text(merged):
            continue
        seen.add(_play(merged))
    assert seen == {EXPECTED}


def _ends_before_its_text(merged: list[AnyStatusEvent | TokenChunk]) -> bool:
    done_at = {c.step: i for i, c in enumerate(merged) if isinstance(c, TokenChunk) and c.done}
    return any(
        isinstance(e, StepCompleted) and e.step is not None and i < done_at[e.step]
        for i, e in enumerate(merged)
    )


def test_a_cut_off_attempt_ends_its_text_and_the_next_attempt_starts_on_a_new_line() -> None:
    cut = _chunks(0, "half an", done=False)
    items: list[AnyStatusEvent | TokenChunk] = [_started(0), *cut, _started(0, attempt=2)]
    items += [*_chunks(0, "whole answer", attempt=2), _completed(0, attempt=2)]
    assert _play(items) == (
        "<step_started 0>\nhalf an  [cut off]\n"
        "<step_started 0>\nwhole answer \n<step_completed 0>\n"
    )


def test_a_late_chunk_of_a_replaced_attempt_is_dropped() -> None:
    items: list[AnyStatusEvent | TokenChunk] = [_started(0, attempt=2), *_chunks(0, "new", 2)]
    items += [*_chunks(0, "old", 1), _completed(0, attempt=2)]
    assert _play(items) == "<step_started 0>\nnew \n<step_completed 0>\n"


def test_a_branchs_text_is_shown_whole_before_its_last_event() -> None:
    items: list[AnyStatusEvent | TokenChunk] = [_started(1, branch=0), _started(1, branch=1)]
    for word in ("a", "b"):  # the two branches' chunks interleave
        for branch in (0, 1):
            chunk = TokenChunk(task_id="t", step=1, branch=branch, attempt=1, seq=0, delta=word)
            items.append(chunk)
    items += [_completed(1, branch=1), _completed(1, branch=0)]
    assert _play(items) == (
        "<step_started 1>\n<step_started 1>\nab [cut off]\n<step_completed 1>\n"
        "ab [cut off]\n<step_completed 1>\n"
    )


def test_a_late_event_of_an_earlier_attempt_leaves_the_next_attempts_text_alone() -> None:
    """The worker that lost NATS retries; the new attempt's text may be read before the
    old attempt's `step_retrying` is."""
    retrying = StepRetrying(task_id="t", status=RUNNING, step=0, attempt=1, time=NOW)
    items: list[AnyStatusEvent | TokenChunk] = [_started(0), *_chunks(0, "half", done=False)]
    items += [*_chunks(0, "whole answer", attempt=2)[:1], retrying, _started(0, attempt=2)]
    items += [*_chunks(0, "whole answer", attempt=2)[1:], _completed(0, attempt=2)]
    assert _play(items) == (
        "<step_started 0>\nhalf  [cut off]\n<step_retrying 0>\n"
        "<step_started 0>\nwhole answer \n<step_completed 0>\n"
    )


def test_when_an_earlier_attempt_wins_its_whole_text_is_shown_again_under_its_event() -> None:
    """Two attempts ran at once (a redelivery after a server restart); the later one was
    stopped when the earlier one had its result."""
    items: list[AnyStatusEvent | TokenChunk] = [_started(0), *_chunks(0, "one two", done=False)]
    items += [_started(0, attempt=2), *_chunks(0, "one", attempt=2, done=False)]
    items += [*_chunks(0, "one two three")[2:], _completed(0, attempt=1)]
    assert _play(items) == (
        "<step_started 0>\none two  [cut off]\n<step_started 0>\none  [cut off]\n"
        "one two three \n<step_completed 0>\n"
    )


def test_a_retry_with_the_error_said_before_is_counted_not_said_again() -> None:
    """`watch` and `submit --wait` say a model that cannot be reached once a step, then
    count its retries (issue 50, item 6)."""
    refused = ErrorInfo(type="ModelUnreachable", message="could not connect to http://x/v1")

    def retried(attempt: int, step: int = 0) -> StepRetrying:
        return StepRetrying(
            task_id="t",
            status=RUNNING,
            step=step,
            attempt=attempt,
            time=NOW,
            error=refused,
            retry_in_ms=2000,
        )

    out = io.StringIO()
    view = PlainLines(Console(file=out, width=200))
    view.show([Shown(retried(1)), Shown(retried(2)), Shown(retried(1, step=2))])

    lines = out.getvalue().splitlines()
    assert "could not connect" in lines[0] and "(attempt 2 in 2.0s)" in lines[0]
    assert "could not connect" not in lines[1] and "the same error  (attempt 3 in" in lines[1]
    assert "could not connect" in lines[2]  # another step: said again
