"""A Python type as Tether reads it: its JSON Schema, data converted into it, and a value
of it as plain JSON values, whether it is msgspec's (a Struct, a dataclass, a TypedDict,
`str`, `list[int]`, ...) or is or holds a Pydantic `BaseModel`.

msgspec does the work unless the type holds a model, which msgspec cannot describe,
convert or encode; then Pydantic's `TypeAdapter` does it. Pydantic is imported only
then, so `import tether` stays fast: no `BaseModel` exists before pydantic is imported.
A Pydantic validation error is raised as a `msgspec.ValidationError` with msgspec's
wording (`... - at `$.field``), so every caller fails a bad input one way.
"""

from __future__ import annotations

import functools
import sys
import typing
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from pydantic import TypeAdapter


def holds_model(tp: Any) -> bool:
    """Whether `tp` is or contains a Pydantic model (`Model`, `list[Model]`, `Model | None`)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is None:  # no model can exist before pydantic is imported
        return False
    return _holds(tp, pydantic.BaseModel)


def is_model(value: Any) -> bool:
    """Whether `value` is a Pydantic model instance."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def json_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema of `tp`; raises TypeError for a type neither library describes."""
    if not holds_model(tp):
        schema: dict[str, Any] = msgspec.json.schema(tp)
        return schema
    try:
        return _adapter(tp).json_schema()
    except Exception as exc:  # pydantic's PydanticSchemaGenerationError and kin
        raise TypeError(f"cannot describe {tp!r} as JSON Schema: {exc}") from exc


def convert(data: Any, tp: Any, *, strict: bool = False) -> Any:
    """`data` (plain JSON values) as `tp`; raises msgspec.ValidationError naming the field."""
    if not holds_model(tp):
        return msgspec.convert(data, tp, strict=strict)
    from pydantic import ValidationError

    try:
        return _adapter(tp).validate_python(data, strict=strict or None)
    except ValidationError as exc:
        raise msgspec.ValidationError(_first_error(exc)) from exc


def to_builtins(value: Any) -> Any:
    """`value` as plain JSON values (Pydantic models inside it dumped in JSON mode)."""
    return msgspec.to_builtins(value, enc_hook=_dumped)


def _holds(tp: Any, base: type) -> bool:
    if isinstance(tp, type) and issubclass(tp, base):
        return True
    return any(_holds(arg, base) for arg in typing.get_args(tp) if not isinstance(arg, str))


def _adapter(tp: Any) -> TypeAdapter[Any]:
    """One adapter per type (building one compiles a validator: too slow per step)."""
    try:
        hash(tp)
    except TypeError:  # `Annotated` with unhashable metadata: built each time
        return _new_adapter(tp)
    return _cached_adapter(tp)


def _new_adapter(tp: Any) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(tp)


_cached_adapter = functools.lru_cache(maxsize=256)(_new_adapter)


def _dumped(value: Any) -> Any:
    if is_model(value):
        return value.model_dump(mode="json")
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


def _first_error(exc: Any) -> str:
    """The first of a Pydantic ValidationError's errors, worded as msgspec words one."""
    errors = exc.errors(include_url=False)
    if not errors:
        return str(exc)
    error = errors[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{error['msg']}{more} - at `${where}`"
