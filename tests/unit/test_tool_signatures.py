"""How a tool's signature becomes its input and its call (issue 40 item 6), with no
server: context or none, the whole input or one field per parameter, descriptions from
the docstring, Pydantic models wherever msgspec types go, and one-line refusals."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any, TypedDict

import msgspec
import pytest
from pydantic import BaseModel, Field

from tether import App, StepContext
from tether.agents.output import WrongAnswer, output_type
from tether.errors import DefinitionError
from tether.schemas import types
from tether.schemas.tool_schema import arguments_schema
from tether.tools.docstrings import split_docstring
from tether.tools.results import NextSteps, Sleep, stored
from tether.tools.spelling import did_you_mean, misspelled_calls
from tether.tools.tool import Tool


class Point(msgspec.Struct):
    x: int
    y: int


@dataclasses.dataclass
class Box:
    width: int


class Span(TypedDict):
    start: int


class Query(BaseModel):
    text: str
    limit: int = Field(default=3, ge=1)


def _tool(fn: Any) -> Tool:
    app = App()
    app.tool(fn)
    return app.tools[fn.__name__]


async def _run(tool: Tool, data: Any = None) -> Any:
    if not tool.takes_input:
        return await tool.function("the ctx")
    return await tool.function("the ctx", tool.convert_input(data))


# -- what the signature takes ------------------------------------------------------


async def test_a_plain_function_takes_each_parameter_as_a_described_field() -> None:
    def get_weather(city: str, unit: str = "C") -> str:
        """Get the weather.

        Args:
            city (str): The city,
                as people write it.
            unit: "C" or "F".

        Returns:
            A sentence.
        """
        return f"{city}:{unit}:{threading.current_thread() is threading.main_thread()}"

    tool = _tool(get_weather)

    assert tool.description == "Get the weather.\n\nReturns:\n    A sentence."
    schema, wrapped = arguments_schema(tool.input_schema())
    assert not wrapped and schema["required"] == ["city"]
    assert schema["properties"] == {
        "city": {"type": "string", "description": "The city, as people write it."},
        "unit": {"type": "string", "default": "C", "description": '"C" or "F".'},
    }
    assert await _run(tool, {"city": "Oslo"}) == "Oslo:C:False"  # a plain def: a thread


@pytest.mark.parametrize("kind", [Point, Box, Span, Query])
async def test_one_object_parameter_without_ctx_is_the_whole_input(kind: type) -> None:
    async def take(data: Any) -> Any:
        return data

    take.__annotations__ = {"data": kind}  # resolved, as at a module's top level
    tool = _tool(take)

    assert tool.input_type is kind and tool.takes_input
    assert "data" not in str(tool.input_schema())


async def test_one_scalar_parameter_without_ctx_is_a_field() -> None:
    async def shout(text: str) -> str:
        return text.upper()

    tool = _tool(shout)

    assert arguments_schema(tool.input_schema())[0]["required"] == ["text"]
    assert await _run(tool, {"text": "hi"}) == "HI"


async def test_one_scalar_parameter_takes_a_previous_steps_output_as_it_is() -> None:
    """In a plan, `def summary(notes: str)` after a step that returns a string gets
    that string (b3b5931: `InvalidInput: Expected object, got str`)."""

    def summary(notes: str) -> str:
        return notes[:5]

    tool = _tool(summary)

    assert await _run(tool, "a long note") == "a lon"
    assert await _run(tool, {"notes": "fields too"}) == "field"
    with pytest.raises(msgspec.ValidationError, match="notes"):
        tool.convert_input({"text": "no such field"})


async def test_the_context_is_passed_only_when_the_tool_wants_it() -> None:
    seen: list[Any] = []

    async def with_ctx(ctx: StepContext, a: int, *, b: int = 2) -> int:
        seen.append(ctx)
        return a + b

    async def old_style(ctx, data):  # type: ignore[no-untyped-def]
        return data

    async def no_input() -> str:
        return "done"

    assert await _run(_tool(with_ctx), {"a": 1}) == 3 and seen == ["the ctx"]
    assert await _run(_tool(old_style), {"any": 1}) == {"any": 1}
    assert _tool(old_style).function is old_style  # nothing between the worker and it
    tool = _tool(no_input)
    assert not tool.takes_input and await _run(tool) == "done"


def test_an_unresolvable_annotation_leaves_the_others_resolved() -> None:
    async def plan(ctx: StepContext, city: str, when: NotImportedHere) -> str:  # noqa: F821
        return city

    tool = _tool(plan)

    properties = arguments_schema(tool.input_schema())[0]["properties"]
    assert properties == {"city": {"type": "string"}, "when": {}}


async def test_a_pydantic_model_is_taken_and_returned_as_json() -> None:
    async def search(ctx: StepContext, query: Query) -> list[Query]:
        return [query]

    tool = _tool(search)

    assert tool.input_schema()["required"] == ["text"]
    assert await _run(tool, {"text": "a"}) == [{"text": "a", "limit": 3}]
    with pytest.raises(
        msgspec.ValidationError, match=r"greater than or equal to 1 - at `\$.limit`"
    ):
        tool.convert_input({"text": "a", "limit": 0})


async def test_models_a_tool_returns_are_stored_as_json_wherever_they_are() -> None:
    async def nested(text: str) -> dict[str, list[Query]]:
        return {"found": [Query(text=text)]}

    plain = {"text": "a", "limit": 3}
    assert await _run(_tool(nested), {"text": "a"}) == {"found": [plain]}
    assert stored(Sleep(1, output=Query(text="a"))).output == plain
    assert stored(NextSteps(steps=[], output=[Query(text="a")])).output == [plain]
    deep = {"found": [Query(text="a")]}
    assert stored(deep) is deep and stored(deep, deep=True) == {"found": [plain]}


async def test_a_pydantic_parameter_among_others_makes_a_pydantic_input() -> None:
    async def find(query: Query, page: int = 1) -> int:
        """Find.

        Args:
            page: Which page.
        """
        return query.limit * page

    tool = _tool(find)

    assert arguments_schema(tool.input_schema())[0]["properties"]["page"]["description"] == (
        "Which page."
    )
    assert await _run(tool, {"query": {"text": "a"}, "page": 2}) == 6
    with pytest.raises(msgspec.ValidationError, match=r"at `\$.query.text`"):
        tool.convert_input({"query": {}})


async def test_a_mutable_default_is_copied_per_call() -> None:
    async def tag(names: list[str] = ["a"]) -> list[str]:  # noqa: B006 - the point
        names.append("b")
        return names

    tool = _tool(tag)

    assert await _run(tool, {}) == ["a", "b"]
    assert await _run(tool, {}) == ["a", "b"]


# -- what it cannot take --------------------------------------------------------


class Opaque:
    pass


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("async def f(*names: str): ...", "takes *names, but a model calls a tool with named "
         "arguments: write `def f(names: list[str])`"),
        ("async def f(ctx: StepContext, a: int, **more: int): ...", "takes **more, but a model "
         "calls a tool with named arguments: write `def f(ctx: StepContext, a: int, more: "
         "dict[str, int])`"),
        ("async def f(a: int, ctx: StepContext): ...", "takes its StepContext as 'ctx', not "
         "first: write `def f(ctx: StepContext, ...)`"),
        ("async def f(a: int, o: Opaque): ...", "takes (o: Opaque), which cannot be described "
         "as JSON: make `Opaque` a msgspec Struct, a Pydantic model"),
    ],
    ids=["args", "kwargs", "ctx-late", "opaque"],
)  # fmt: skip
def test_what_it_cannot_take_is_refused_in_one_line(source: str, said: str) -> None:
    scope: dict[str, Any] = {"StepContext": StepContext, "Opaque": Opaque}
    exec(source, scope)

    with pytest.raises(DefinitionError) as refused:
        App().tool(scope["f"])

    message = str(refused.value)
    assert "\n" not in message and message.startswith("<string>:1: tool 'f' ")
    assert said in message


# -- the pieces ------------------------------------------------------------------


def test_the_args_section_is_split_from_the_description() -> None:
    doc = "Do it.\n\nArgs:\n    a: First.\n    b (int, optional): Second,\n        long.\nDone."
    assert split_docstring(doc) == ("Do it.\n\nDone.", {"a": "First.", "b": "Second, long."})
    assert split_docstring("Just this.") == ("Just this.", {})


def test_types_convert_and_encode_pydantic_and_msgspec_alike() -> None:
    assert types.convert({"x": 1, "y": 2}, Point) == Point(1, 2)
    assert types.convert(None, list[Query] | None) is None
    assert types.to_builtins({"q": Query(text="a")}) == {"q": {"text": "a", "limit": 3}}
    assert types.json_schema(Query)["properties"]["text"]["type"] == "string"
    with pytest.raises(msgspec.ValidationError, match=r"- at `\$\[1\].text`"):
        types.convert([{"text": "a"}, {}], list[Query])


def test_a_pydantic_output_type_is_asked_for_and_checked() -> None:
    class Verdict(BaseModel):
        warm: bool
        degrees: int

    typed = output_type(Verdict)

    assert typed.name == "Verdict" and typed.strict
    assert typed.response_format()["json_schema"]["schema"]["additionalProperties"] is False
    assert typed.check('{"warm": true, "degrees": 21}') == {"warm": True, "degrees": 21}
    assert typed.decode({"warm": True, "degrees": 21}) == Verdict(warm=True, degrees=21)
    with pytest.raises(WrongAnswer, match=r"`\$.degrees`"):
        typed.check('{"warm": true, "degrees": "hot"}')


def test_a_close_name_is_suggested_whichever_is_added_first() -> None:
    assert did_you_mean("serch", ["search", "fetch"]) == "did you mean 'search'?"
    assert did_you_mean("zzz", ["search"]) == ""
    calls = {"asker": ("serch",), "search": ()}
    assert misspelled_calls("asker", calls) == [("asker", "serch", "search")]
    assert misspelled_calls("search", calls) == [("asker", "serch", "search")]
    assert misspelled_calls("other", {**calls, "other": ()}) == []


def test_parameters_without_types_are_warned_about_once_at_registration(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`def add(a, b)` is served, and said to take its input unchecked (issue 50, item 8);
    a typed one is served without a word."""

    def add(a, b):  # type: ignore[no-untyped-def]
        return a + b

    def typed_add(a: int, b: int = 0) -> int:
        return a + b

    caplog.set_level(logging.WARNING, logger="tether.tools")
    _tool(add)
    _tool(typed_add)

    [said] = [r.getMessage() for r in caplog.records]
    assert "tool 'add' takes a, b without a type: taken as given, any JSON value" in said
    assert "test_tool_signatures.py:" in said and "`a: int`" in said and "\n" not in said
