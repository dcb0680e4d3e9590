"""Retry policy arithmetic and the tool registry (`App`, `Tool`)."""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from tether import StepContext
from tether.errors import DefinitionError
from tether.schemas.ids import InvalidNameError
from tether.schemas.plans import RetryOverride
from tether.tools.app import App
from tether.tools.retry import RetryPolicy
from tether.tools.tool import Tool
from tether.worker import Liveness

# -- RetryPolicy --------------------------------------------------------------


def _no_jitter(**changes: Any) -> RetryPolicy:
    return RetryPolicy(jitter=0.0, **changes)


def test_retry_policy_defaults() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 3
    assert policy.initial_backoff == timedelta(seconds=1)
    assert policy.max_backoff == timedelta(seconds=60)
    assert policy.backoff_coefficient == 2.0
    assert policy.jitter == 0.2


def test_backoff_grows_exponentially() -> None:
    policy = _no_jitter(initial_backoff=timedelta(milliseconds=100))
    delays = [policy.backoff(attempt) for attempt in range(1, 6)]
    assert delays == [timedelta(milliseconds=ms) for ms in (100, 200, 400, 800, 1600)]


def test_backoff_uses_the_coefficient() -> None:
    policy = _no_jitter(initial_backoff=timedelta(seconds=1), backoff_coefficient=3.0)
    assert policy.backoff(1) == timedelta(seconds=1)
    assert policy.backoff(2) == timedelta(seconds=3)
    assert policy.backoff(3) == timedelta(seconds=9)


def test_backoff_coefficient_one_is_constant() -> None:
    policy = _no_jitter(initial_backoff=timedelta(seconds=2), backoff_coefficient=1.0)
    assert {policy.backoff(a) for a in range(1, 10)} == {timedelta(seconds=2)}


def test_backoff_is_capped_by_max_backoff() -> None:
    policy = _no_jitter(initial_backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=10))
    assert policy.backoff(4) == timedelta(seconds=8)
    assert policy.backoff(5) == timedelta(seconds=10)
    assert policy.backoff(30) == timedelta(seconds=10)


@pytest.mark.parametrize("attempt", [100, 1025, 5000])
def test_backoff_is_capped_for_very_late_attempts(attempt: int) -> None:
    """A policy that retries (almost) forever must not overflow on a late attempt."""
    policy = RetryPolicy(max_attempts=10_000, max_backoff=timedelta(seconds=30))
    delay = policy.backoff(attempt, random.Random(1))
    assert timedelta(seconds=30 * 0.8) <= delay <= timedelta(seconds=30)


@pytest.mark.parametrize("attempt", [1, 2, 3, 4])
def test_jitter_stays_within_its_fraction(attempt: int) -> None:
    policy = RetryPolicy(
        initial_backoff=timedelta(seconds=1), max_backoff=timedelta(hours=1), jitter=0.2
    )
    base = 2.0 ** (attempt - 1)
    rng = random.Random(1234)
    samples = [policy.backoff(attempt, rng).total_seconds() for _ in range(500)]
    assert all(base * 0.8 - 1e-6 <= s <= base * 1.2 + 1e-6 for s in samples)
    # the jitter really spreads the delays on both sides of the base
    assert min(samples) < base * 0.9
    assert max(samples) > base * 1.1


def test_jitter_never_exceeds_the_cap() -> None:
    policy = RetryPolicy(
        initial_backoff=timedelta(seconds=1), max_backoff=timedelta(seconds=4), jitter=0.5
    )
    rng = random.Random(7)
    samples = [policy.backoff(10, rng) for _ in range(200)]
    assert all(timedelta(seconds=2) <= s <= timedelta(seconds=4) for s in samples)


def test_jitter_is_reproducible_with_a_seeded_rng() -> None:
    policy = RetryPolicy()
    first = [policy.backoff(a, random.Random(42)) for a in range(1, 5)]
    second = [policy.backoff(a, random.Random(42)) for a in range(1, 5)]
    assert first == second
    other = [policy.backoff(a, random.Random(43)) for a in range(1, 5)]
    assert first != other


def test_backoff_is_never_negative() -> None:
    policy = RetryPolicy(initial_backoff=timedelta(0), jitter=0.9)
    assert policy.backoff(1, random.Random(0)) == timedelta(0)


@pytest.mark.parametrize(
    ("max_attempts", "attempt", "expected"),
    [(3, 1, True), (3, 2, True), (3, 3, False), (3, 4, False), (1, 1, False), (2, 1, True)],
)
def test_can_retry(max_attempts: int, attempt: int, expected: bool) -> None:
    assert RetryPolicy(max_attempts=max_attempts).can_retry(attempt) is expected


def test_invalid_policies_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_attempts must be at least 1"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="backoff_coefficient must be at least 1"):
        RetryPolicy(backoff_coefficient=0.5)


def test_overridden_without_override_is_the_same_policy() -> None:
    policy = RetryPolicy(max_attempts=4)
    assert policy.overridden(None) is policy
    assert policy.overridden(RetryOverride()) == policy


def test_overridden_replaces_only_the_set_fields() -> None:
    policy = RetryPolicy(max_attempts=4, backoff_coefficient=3.0, jitter=0.1)
    changed = policy.overridden(
        RetryOverride(max_attempts=7, initial_backoff_ms=250, max_backoff_ms=5000)
    )
    assert changed.max_attempts == 7
    assert changed.initial_backoff == timedelta(milliseconds=250)
    assert changed.max_backoff == timedelta(seconds=5)
    assert changed.backoff_coefficient == 3.0
    assert changed.jitter == 0.1
    assert policy.max_attempts == 4  # the original is untouched

    partial = policy.overridden(RetryOverride(initial_backoff_ms=10))
    assert partial.initial_backoff == timedelta(milliseconds=10)
    assert partial.max_attempts == 4
    assert partial.max_backoff == policy.max_backoff


def test_a_step_takes_its_override_in_the_jsons_shape_too() -> None:
    from tether import RetryOverride as Exported
    from tether import Step
    from tether.tasks.plans import validate_steps

    step = Step(tool="t", retry={"max_attempts": 3}, parallel=None)
    group = Step(parallel=[{"tool": "a", "retry": {"max_backoff_ms": 5}}, Step(tool="b")])

    validate_steps([step, group], "task")
    assert step.retry == Exported(max_attempts=3)
    assert group.parallel is not None and group.parallel[0].retry == RetryOverride(max_backoff_ms=5)
    with pytest.raises(TypeError, match="no field 'max_attemps': use max_attempts"):
        Step(tool="t", retry={"max_attemps": 3})


def test_override_is_still_validated() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy().overridden(RetryOverride(max_attempts=0))


# -- App and Tool -------------------------------------------------------------


class Query(msgspec.Struct):
    query: str
    limit: int = 10


def test_bare_decorator_registers_with_defaults() -> None:
    app = App("research")

    @app.tool
    async def search(ctx: Any, data: Query) -> list[str]:
        """Search the web."""
        return []

    tool = app.tools["search"]
    assert isinstance(tool, Tool)
    assert tool.name == "search"
    assert tool.function is search
    assert tool.input_type is Query
    assert tool.takes_input is True
    assert tool.description == "Search the web."
    assert tool.retry == RetryPolicy()
    assert tool.timeout is None
    assert tool.max_concurrency is None
    assert tool.heartbeat == timedelta(seconds=1)
    assert Liveness().ack_wait(tool.heartbeat) == timedelta(seconds=1.5)


def test_decorator_with_options() -> None:
    app = App("research")
    policy = RetryPolicy(max_attempts=5)

    @app.tool(
        name="web-search",
        description="Custom description",
        retry=policy,
        timeout=2.5,
        max_concurrency=4,
        heartbeat=3,
    )
    async def search(ctx: Any, data: Query) -> None:
        """Docstring that the description overrides."""

    assert list(app.tools) == ["web-search"]
    tool = app.tools["web-search"]
    assert tool.function is search  # the decorator returns the function unchanged
    assert tool.description == "Custom description"
    assert tool.retry is policy
    assert tool.timeout == timedelta(seconds=2.5)
    assert tool.max_concurrency == 4
    assert tool.heartbeat == timedelta(seconds=3)
    assert Liveness().ack_wait(tool.heartbeat) == timedelta(seconds=2.5)


def test_timedelta_options_are_kept() -> None:
    app = App()

    @app.tool(timeout=timedelta(minutes=1), heartbeat=timedelta(milliseconds=200))
    async def slow(ctx: Any) -> None: ...

    tool = app.tools["slow"]
    assert tool.timeout == timedelta(minutes=1)
    assert tool.heartbeat == timedelta(milliseconds=200)
    assert Liveness().ack_wait(tool.heartbeat) == timedelta(seconds=1.1)


def test_tool_without_data_takes_no_input() -> None:
    app = App()

    @app.tool
    async def tick(ctx: Any) -> int:
        return 1

    tool = app.tools["tick"]
    assert tool.takes_input is False
    assert tool.input_schema() == {}
    assert tool.description == ""


def test_unannotated_data_accepts_anything() -> None:
    app = App()

    @app.tool
    async def echo(ctx, data):  # type: ignore[no-untyped-def]
        return data

    tool = app.tools["echo"]
    assert tool.input_type is Any
    payload = {"anything": [1, "two"]}
    assert tool.convert_input(payload) is payload
    assert tool.input_schema() == {}


async def test_a_plain_def_tool_runs_in_a_thread() -> None:
    app = App()
    loop_thread = threading.get_ident()

    @app.tool
    def sync_tool(ctx: Any, data: int) -> tuple[int, bool]:
        return data * 2, threading.get_ident() != loop_thread

    tool = app.tools["sync_tool"]
    assert tool.input_type is int and tool.takes_input
    assert await tool.function(None, 21) == (42, True)


def test_a_tool_it_cannot_take_is_refused_naming_its_file_and_line() -> None:
    app = App()

    async def search(ctx: StepContext, *queries: Query) -> list[str]: ...

    line = search.__code__.co_firstlineno
    with pytest.raises(DefinitionError) as refused:
        app.tool(search)
    message = str(refused.value)
    assert message.startswith(f"tests/unit/test_retry_and_app.py:{line}: tool 'search'")
    assert "write `def search(ctx: StepContext, queries: list[Query])`" in message
    assert app.tools == {}


def test_async_generator_is_rejected() -> None:
    app = App()

    async def stream(ctx: Any) -> Any:
        yield 1

    with pytest.raises(DefinitionError, match="yields: a tool returns its result"):
        app.tool(stream)


def test_a_context_that_is_not_first_is_rejected() -> None:
    app = App()

    async def late(data: Any, ctx: StepContext) -> None: ...

    with pytest.raises(TypeError, match=r"takes its StepContext as 'ctx', not first"):
        app.tool(late)


def test_duplicate_name_is_rejected() -> None:
    app = App("research")

    @app.tool
    async def search(ctx: Any) -> None: ...

    async def other(ctx: Any) -> None: ...

    with pytest.raises(ValueError, match="tool 'search' is registered twice in app 'research'"):
        app.tool(other, name="search")
    assert app.tools["search"].function is search


@pytest.mark.parametrize("name", ["_private", "-dash", "a.b", "has space", "x" * 65])
def test_bad_tool_name_is_rejected(name: str) -> None:
    app = App()

    async def fn(ctx: Any) -> None: ...

    with pytest.raises(InvalidNameError, match="starting with a letter or digit"):
        app.tool(fn, name=name)
    assert app.tools == {}


def test_bad_function_name_is_rejected_when_no_name_is_given() -> None:
    app = App()

    async def _helper(ctx: Any) -> None: ...

    with pytest.raises(InvalidNameError, match="'_helper'"):
        app.tool(_helper)


@pytest.mark.parametrize("value", [0, -1])
def test_bad_max_concurrency_is_rejected(value: int) -> None:
    app = App()

    async def fn(ctx: Any) -> None: ...

    with pytest.raises(ValueError, match="max_concurrency must be at least 1"):
        app.tool(fn, max_concurrency=value)


def test_apps_do_not_share_tools() -> None:
    one, two = App("one"), App("two")

    @one.tool
    async def search(ctx: Any) -> None: ...

    assert "search" in one.tools
    assert two.tools == {}
    two.tool(search)  # the same function may serve in another app
    assert two.tools["search"].function is search


def test_add_tool_directly() -> None:
    app = App()

    async def fn(ctx: Any) -> None: ...

    app.add_tool(Tool(name="direct", function=fn, takes_input=False))
    assert app.tools["direct"].name == "direct"
    with pytest.raises(ValueError, match="registered twice"):
        app.add_tool(Tool(name="direct", function=fn))


def _search_tool() -> Tool:
    app = App()

    @app.tool
    async def search(ctx: Any, data: Query) -> None: ...

    return app.tools["search"]


def test_convert_input_builds_the_struct() -> None:
    tool = _search_tool()
    assert tool.convert_input({"query": "AI"}) == Query(query="AI", limit=10)
    assert tool.convert_input({"query": "AI", "limit": 3}) == Query(query="AI", limit=3)


def test_convert_input_is_lax_about_json_strings() -> None:
    assert _search_tool().convert_input({"query": "AI", "limit": "5"}) == Query(query="AI", limit=5)


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"query": 5}, "$.query"),
        ({"query": "a", "limit": "many"}, "$.limit"),
        ({"limit": 3}, "missing required field `query`"),
        ("just a string", "Expected `object`"),
    ],
)
def test_convert_input_names_the_bad_field(data: Any, fragment: str) -> None:
    with pytest.raises(msgspec.ValidationError) as info:
        _search_tool().convert_input(data)
    assert fragment in str(info.value)


def test_convert_input_with_builtin_types() -> None:
    app = App()

    @app.tool
    async def total(ctx: Any, data: list[int]) -> int:
        return sum(data)

    tool = app.tools["total"]
    assert tool.convert_input([1, "2"]) == [1, 2]
    with pytest.raises(msgspec.ValidationError, match=r"\$\[1\]"):
        tool.convert_input([1, "x"])
    assert tool.input_schema() == {"type": "array", "items": {"type": "integer"}}


def test_input_schema_is_a_json_schema_of_the_struct() -> None:
    schema = _search_tool().input_schema()
    assert schema["$ref"] == "#/$defs/Query"
    query = schema["$defs"]["Query"]
    assert query["type"] == "object"
    assert query["properties"]["query"] == {"type": "string"}
    assert query["properties"]["limit"] == {"type": "integer", "default": 10}
    assert query["required"] == ["query"]


def test_a_liveness_whose_beats_are_slower_than_the_wait_for_them_is_refused() -> None:
    assert Liveness().dead_after / Liveness().beat_every == 4  # today's values by default
    with pytest.raises(ValueError, match="must be above 0 and below dead_after"):
        Liveness(beat_every=3.0, dead_after=2.0)
    with pytest.raises(ValueError, match="step_slack"):
        Liveness(step_slack=0)


def test_a_late_beat_is_asked_about_a_fifth_of_a_beat_late_and_well_before_dead_after() -> None:
    assert Liveness().ask_after == pytest.approx(0.6)  # 0.5 s beats
    assert Liveness().ask_within == 0.5  # a quarter of dead_after: asked again 4 times
    slow = Liveness(beat_every=1.8, dead_after=2.0)
    assert slow.ask_after == pytest.approx(1.9)  # half-way to dead_after, past a beat
