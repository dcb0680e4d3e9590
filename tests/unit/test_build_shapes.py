"""One shape per (build, tool): how a worker's tools differ from their shapes in its build,
which tools it adds to the build, and the build read back from its keys (pure)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from tether import App, StepContext
from tether.deploys.announcing import refusal
from tether.deploys.shapes import new_tools, shape_differences
from tether.schemas.builds import BuildInfo, BuildTool

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)


class Sum(msgspec.Struct):
    sum: int


class Total(msgspec.Struct):
    total: int


async def report_v1(ctx: StepContext, s: Sum) -> str:
    return "v1"


async def report_v2(ctx: StepContext, t: Total) -> str:
    return "v2"


def _app(report: Callable[[StepContext, Any], Awaitable[str]], **policy: Any) -> App:
    app = App("reports", **policy)
    app.tool(name="report")(report)
    app.tool(name="first")(report_v1)
    return app


def _sidecar(name: str) -> App:
    app = App(name)
    app.tool(name=name)(report_v1)
    return app


def _stored(keys: list[BuildTool]) -> BuildInfo:
    """The build as it reads back: each key through JSON, then put together."""
    back = [msgspec.json.decode(msgspec.json.encode(key), type=BuildTool) for key in keys]
    info = BuildInfo.of(back)
    assert info is not None
    return info


def test_the_same_tools_or_fewer_do_not_differ_after_the_keys_are_read_back() -> None:
    tools = list(_app(report_v1).tools.values())
    announced = _stored(new_tools("v1", tools, [], NOW))
    assert sorted(announced.tools) == ["first", "report"] and announced.first_seen == NOW
    assert shape_differences(announced, tools) == {}
    assert shape_differences(announced, tools[:1]) == {}


def test_other_schemas_or_a_policy_differ_and_say_how_and_a_tool_the_build_lacks_does_not() -> None:
    announced = _stored(new_tools("v1", _app(report_v1).tools.values(), [], NOW))
    lying = shape_differences(announced, _app(report_v2).tools.values())
    assert lying == {
        "report": [
            "input field 'total' is new",
            "input field 'sum' is gone",
            "input field 'total' is required now",
        ]
    }
    pinned = shape_differences(announced, _app(report_v1, versioning="pinned").tools.values())
    assert pinned == {"report": ["versioning 'pinned', not 'moving'"], "first": pinned["first"]}

    wider = _app(report_v1)
    wider.tool(name="audit")(report_v1)
    assert shape_differences(announced, wider.tools.values()) == {}  # audit is added
    line = refusal("v1", lying)
    assert "\n" not in line
    assert line.startswith("build 'v1' was announced with other shapes of tools")
    assert "tool 'report': input field 'total' is new" in line and "--build" in line


def test_a_sidecar_of_a_build_adds_only_its_tools_and_the_build_keeps_its_before() -> None:
    v1 = _stored(
        new_tools("v1", [*_sidecar("a").tools.values(), *_sidecar("b").tools.values()], [], NOW)
    )
    unrelated = _stored(new_tools("other", _sidecar("z").tools.values(), [v1], NOW))
    first = new_tools("v2", _sidecar("a").tools.values(), [v1, unrelated], LATER)
    assert [(key.tool, key.before) for key in first] == [("a", "v1")]  # z is not its app
    v2 = _stored(first)
    both = [*_sidecar("a").tools.values(), *_sidecar("b").tools.values()]
    later = new_tools("v2", both, [v1, unrelated, v2], LATER + timedelta(seconds=3))
    assert [(key.tool, key.before) for key in later] == [("b", "v1")]
    whole = _stored([*first, *later])
    assert sorted(whole.tools) == ["a", "b"]
    assert whole.first_seen == LATER and whole.before == "v1" and whole.changes == {}


def test_a_new_build_says_how_each_tool_does_not_fit_the_build_before() -> None:
    v1 = _stored(new_tools("v1", _app(report_v1).tools.values(), [], NOW))
    v2 = _stored(new_tools("v2", _app(report_v2).tools.values(), [v1], LATER))
    assert v2.before == "v1"
    assert v2.changes == {"report": ["input field 'total' is required now"]}
    assert BuildInfo.of([]) is None
