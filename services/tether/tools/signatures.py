"""A tool's function signature as its input type and its call (pure, no I/O).

Tools are written as people write them for other frameworks (`@function_tool`,
`@agent.tool_plain`), so the signature decides:

- The first parameter is the `StepContext` when annotated so (or unannotated, or `Any`,
  and named `ctx`, `context` or `_ctx`, as tools were always written); otherwise the
  function takes no context.
- With the context and one more parameter, that parameter is the whole input (`(ctx,
  text: str)` takes a string). Without it, one parameter of an object type (a msgspec
  Struct, a Pydantic model, a dataclass, a TypedDict) is the whole input.
- Otherwise each parameter is a field of an object input (defaults kept, descriptions
  from the docstring's `Args:`), and the call spreads the fields over the parameters.
- `*args` and `**kwargs` are refused: a model calls a tool with named arguments.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import typing
from typing import Annotated, Any

import msgspec

from tether.errors import DefinitionError
from tether.schemas import types
from tether.tools.docstrings import split_docstring

CONTEXT_NAMES = frozenset({"ctx", "context", "_ctx"})
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


@dataclasses.dataclass(frozen=True)
class Signature:
    """What a tool function takes, read once when it is defined."""

    wants_ctx: bool
    parameters: tuple[str, ...] = ()
    """Its parameters after the context, in order: what its input fills."""
    input_type: Any = Any
    spread: bool = False
    """Each parameter is a field of the input; else the one parameter is the input."""
    keyword: frozenset[str] = frozenset()
    """Of the spread parameters, those passed by keyword (keyword-only parameters)."""
    description: str = ""

    @property
    def takes_input(self) -> bool:
        return bool(self.parameters)

    @property
    def lone_field(self) -> bool:
        """One parameter, taken as the one field of an object input."""
        return self.spread and len(self.parameters) == 1

    def arguments(self, given: tuple[Any, ...]) -> tuple[list[Any], dict[str, Any]]:
        """The function's arguments for the worker's `(ctx)` or `(ctx, data)`."""
        args: list[Any] = [given[0]] if self.wants_ctx else []
        if not self.spread:
            return args + list(given[1 : 1 + len(self.parameters)]), {}
        data = given[1]
        kwargs = {name: getattr(data, name) for name in self.parameters if name in self.keyword}
        args += [getattr(data, name) for name in self.parameters if name not in self.keyword]
        return args, kwargs


def hints_of(fn: Any) -> dict[str, Any]:
    """`fn`'s resolved annotations (`Annotated` kept); when some cannot be resolved (a
    name imported under TYPE_CHECKING, a local class), the others, each on its own."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception:  # judged one by one below
        pass
    hints: dict[str, Any] = {}
    scope = getattr(inspect.unwrap(fn), "__globals__", {})
    for name, annotation in getattr(fn, "__annotations__", {}).items():
        try:  # a string annotation is an expression: evaluated as get_type_hints does
            hints[name] = eval(annotation, scope) if isinstance(annotation, str) else annotation
        except Exception:  # left out: Any, as the worker takes it at run time
            continue
    return hints


def read_signature(fn: Any, label: str, hints: dict[str, Any]) -> Signature:
    """How `fn` takes its input; raises DefinitionError, in one line, for what it cannot.
    `hints` are its resolved annotations (empty when they could not be resolved)."""
    parameters = list(inspect.signature(fn).parameters.values())
    for parameter in parameters:
        if parameter.kind in _VARIADIC:
            raise DefinitionError(_variadic(label, fn, parameters, parameter, hints))
    wants_ctx = bool(parameters) and is_context(parameters[0], hints)
    rest = parameters[1:] if wants_ctx else parameters
    for parameter in rest:
        if is_context(parameter, hints, by_name=False):
            raise DefinitionError(
                f"{label} takes its StepContext as {parameter.name!r}, not first: write "
                f"`def {fn.__name__}(ctx: StepContext, ...)` with the context first"
            )
    description, described = split_docstring(inspect.getdoc(fn) or "")
    names = tuple(p.name for p in rest)
    if not rest:
        return Signature(wants_ctx, description=description)
    _check_describable(label, rest, hints)
    whole = hints.get(rest[0].name, Any)
    if len(rest) == 1 and (wants_ctx or is_object_type(whole)):
        return Signature(wants_ctx, names, whole, description=description)
    input_type = fields_type(fn.__name__, rest, hints, described)
    keyword = frozenset(p.name for p in rest if p.kind is inspect.Parameter.KEYWORD_ONLY)
    return Signature(wants_ctx, names, input_type, True, keyword, description)


def untyped(fn: Any, signature: Signature) -> tuple[str, ...]:
    """The input parameters of `fn` written without a type (`def add(a, b)`): each takes
    whatever JSON value it is given, unchecked, and a model sees no type for it."""
    given = inspect.signature(fn).parameters
    return tuple(
        name for name in signature.parameters if given[name].annotation is inspect.Parameter.empty
    )


def is_context(parameter: inspect.Parameter, hints: dict[str, Any], by_name: bool = True) -> bool:
    """Whether `parameter` is a StepContext: annotated so, or (`by_name`) unannotated or
    `Any` and named as contexts are (`ctx`)."""
    from tether.tools.context import StepContext  # the store and nats-py: only when used

    annotation = _bare(hints.get(parameter.name, parameter.annotation))
    if annotation is inspect.Parameter.empty or annotation is Any:
        return by_name and parameter.name in CONTEXT_NAMES
    if isinstance(annotation, str):  # a forward reference not resolved
        return annotation.rsplit(".", 1)[-1] == StepContext.__name__
    return isinstance(annotation, type) and issubclass(annotation, StepContext)


def is_object_type(tp: Any) -> bool:
    """A type whose values are JSON objects of named fields: taken as the whole input."""
    tp = _bare(tp)
    if not isinstance(tp, type):
        return False
    if issubclass(tp, msgspec.Struct) or dataclasses.is_dataclass(tp):
        return True
    return typing.is_typeddict(tp) or types.holds_model(tp)


def fields_type(
    name: str, parameters: list[inspect.Parameter], hints: dict[str, Any], described: dict[str, str]
) -> Any:
    """An object type with one field per parameter (a Pydantic model when a field holds
    one, which msgspec cannot take; else a msgspec Struct)."""
    annotations = {p.name: hints.get(p.name, Any) for p in parameters}
    if any(types.holds_model(tp) for tp in annotations.values()):
        return _model(name, parameters, annotations, described)
    fields: list[tuple[str, Any, Any] | tuple[str, Any]] = []
    for parameter in parameters:
        tp = annotations[parameter.name]
        if parameter.name in described:
            tp = Annotated[tp, msgspec.Meta(description=described[parameter.name])]
        if parameter.default is inspect.Parameter.empty:
            fields.append((parameter.name, tp))
        else:
            fields.append((parameter.name, tp, _default(parameter.default)))
    return msgspec.defstruct(name, fields, kw_only=True)


def _model(
    name: str,
    parameters: list[inspect.Parameter],
    annotations: dict[str, Any],
    described: dict[str, str],
) -> Any:
    from pydantic import Field, create_model

    fields: dict[str, Any] = {}
    for parameter in parameters:
        default = parameter.default
        required = default is inspect.Parameter.empty
        field = Field(... if required else default, description=described.get(parameter.name))
        fields[parameter.name] = (annotations[parameter.name], field)
    return create_model(name, **fields)


def _check_describable(
    label: str, parameters: list[inspect.Parameter], hints: dict[str, Any]
) -> None:
    """A parameter type neither msgspec nor Pydantic can describe would fail the worker
    at its start (a tool's schema is advertised), so it is refused where it is written."""
    for parameter in parameters:
        tp = hints.get(parameter.name, Any)
        try:
            types.json_schema(tp)
        except (TypeError, ValueError) as exc:
            shown = getattr(tp, "__name__", repr(tp))
            raise DefinitionError(
                f"{label} takes ({parameter.name}: {shown}), which cannot be described as "
                f"JSON: make `{shown}` a msgspec Struct, a Pydantic model, a dataclass or a "
                "TypedDict, or take JSON types (`dict[str, Any]` takes any object)"
            ) from exc


def _default(value: Any) -> Any:
    """A mutable default as a factory of copies (msgspec refuses a shared one)."""
    if isinstance(value, list | dict | set | bytearray):
        return msgspec.field(default_factory=functools.partial(copy.deepcopy, value))
    return value


def _bare(tp: Any) -> Any:
    """`tp` without `Annotated[...]`'s metadata."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def _variadic(
    label: str,
    fn: Any,
    parameters: list[inspect.Parameter],
    variadic: inspect.Parameter,
    hints: dict[str, Any],
) -> str:
    """The refusal of `*args`/`**kwargs`, with the signature to write instead."""
    item = getattr(hints.get(variadic.name), "__name__", "Any")
    spelled = []
    for parameter in parameters:
        shown = getattr(hints.get(parameter.name), "__name__", None)
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            spelled.append(f"{parameter.name}: list[{item}]")
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            spelled.append(f"{parameter.name}: dict[str, {item}]")
        else:
            spelled.append(parameter.name if shown is None else f"{parameter.name}: {shown}")
    star = "*" if variadic.kind is inspect.Parameter.VAR_POSITIONAL else "**"
    return (
        f"{label} takes {star}{variadic.name}, but a model calls a tool with named "
        f"arguments: write `def {fn.__name__}({', '.join(spelled)})`"
    )
