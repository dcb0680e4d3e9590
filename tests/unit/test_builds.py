"""A worker's default build: the apps' versions, else a hash of what it serves."""

from __future__ import annotations

import msgspec
import pytest

from tether import App, StepContext
from tether.errors import DefinitionError
from tether.worker.builds import default_build, validate_build


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
    assert default_build(["2.1", "7"], _app(search).tools.values()) == "2.1+7"
    assert default_build(["2.1", None], _app(search).tools.values()).startswith("h")
    with pytest.raises(DefinitionError, match="not a build name"):
        validate_build("v2 beta")
