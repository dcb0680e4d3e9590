"""A worker's default build (the apps' versions, else a hash of what it serves), and
whether a tool's schemas still fit the build before."""

from __future__ import annotations

import msgspec
import pytest

from tether import App, StepContext
from tether.deploys.compat import input_changes, output_changes
from tether.deploys.naming import default_build, validate_build
from tether.errors import DefinitionError


class Query(msgspec.Struct):
    query: str


class Wider(msgspec.Struct):
    query: str
    limit: int


async def search(ctx: StepContext, q: Query) -> str:
    return "hit"


async def search_wider(ctx: StepContext, q: Wider) -> str:
    return "hit"


def _app(tool: object, version: str | None = None) -> App:
    app = App("search", version=version)
    app.tool(name="search")(tool)  # type: ignore[call-overload]
    return app


def test_the_same_tools_make_the_same_build_and_a_changed_schema_another() -> None:
    first = default_build([None], _app(search).tools.values())
    assert first == default_build([None], _app(search).tools.values())
    assert first.startswith("h") and len(first) == 12
    assert default_build([None], _app(search_wider).tools.values()) != first


def test_versions_name_the_build_and_a_bad_name_is_refused() -> None:
    assert default_build(["2.1", "7"], _app(search).tools.values()) == "2.1_7"
    assert default_build(["2.1", None], _app(search).tools.values()).startswith("h")
    with pytest.raises(DefinitionError, match="not a build name"):
        validate_build("v2 beta")


def test_a_new_required_input_field_or_a_changed_type_does_not_fit_the_build_before() -> None:
    query = msgspec.json.schema(Query)
    assert input_changes(query, msgspec.json.schema(Wider)) == [
        "input field 'limit' is required now"
    ]
    retyped = {"type": "object", "properties": {"query": {"type": "integer"}}}
    assert input_changes(query, retyped) == ["input field 'query' was string, is integer now"]
    optional = {"type": "object", "properties": {"query": {"type": "string"}, "n": {}}}
    assert input_changes(query, optional) == []  # a new optional field fits
    assert input_changes({}, query) == []  # nothing said before: nothing to compare


def test_an_output_field_removed_or_retyped_does_not_fit_the_readers_of_the_build_before() -> None:
    report = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "score": {"type": "number"}},
    }
    fewer = {"type": "object", "properties": {"score": {"type": "string"}}}
    assert output_changes(report, fewer) == [
        "output field 'title' is gone",
        "output field 'score' was number, is string now",
    ]
    assert output_changes(None, fewer) == []
