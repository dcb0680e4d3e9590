"""An agent's `output_type`: the schema the model is asked for, and the check of answers."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from tether.agents.output import WrongAnswer, output_type


class Finding(msgspec.Struct):
    claim: str
    confidence: float


class Strict(msgspec.Struct):
    summary: str
    findings: list[Finding]


class Loose(msgspec.Struct):
    summary: str
    note: str | None = None


@dataclasses.dataclass
class Plain:
    answer: str


def test_a_struct_is_asked_for_strictly_with_every_object_closed() -> None:
    asked = output_type(Strict).response_format()["json_schema"]
    assert asked["strict"] is True and asked["name"] == "Strict"
    schema = asked["schema"]
    assert schema["type"] == "object" and "$ref" not in schema  # an object at the root
    assert schema["additionalProperties"] is False
    assert schema["$defs"]["Finding"]["additionalProperties"] is False


def test_a_type_with_an_optional_field_is_asked_for_without_strict() -> None:
    asked = output_type(Loose).response_format()["json_schema"]
    assert asked["strict"] is False  # strict mode would make the model fill `note`
    assert "additionalProperties" not in asked["schema"]


def test_answers_decode_into_structs_and_dataclasses_and_wrong_ones_name_the_field() -> None:
    typed = output_type(Strict)
    answer = '{"summary": "s", "findings": [{"claim": "c", "confidence": 0.5}]}'
    assert typed.check(answer) == msgspec.json.decode(answer)
    assert typed.decode(typed.check(answer)) == Strict("s", [Finding("c", 0.5)])
    with pytest.raises(WrongAnswer, match=r"`\$.findings\[0\].confidence`"):
        typed.check('{"summary": "s", "findings": [{"claim": "c", "confidence": "high"}]}')
    assert output_type(Plain).decode({"answer": "yes"}) == Plain("yes")


def test_a_json_schema_is_checked_as_given_and_the_answer_stays_plain_json() -> None:
    schema = {
        "title": "Verdict",
        "type": "object",
        "properties": {"verdict": {"enum": ["yes", "no"]}},
        "required": ["verdict"],
    }
    typed = output_type(schema)
    assert typed.name == "Verdict" and typed.decode({"verdict": "no"}) == {"verdict": "no"}
    assert typed.check('{"verdict": "yes"}') == {"verdict": "yes"}
    with pytest.raises(WrongAnswer, match=r"at `\$.verdict`"):
        typed.check('{"verdict": "maybe"}')
    with pytest.raises(WrongAnswer, match="not JSON"):
        typed.check("yes")


def test_an_output_type_that_is_not_an_object_is_refused_when_the_agent_is_defined() -> None:
    with pytest.raises(TypeError, match="must describe a JSON object"):
        output_type(list[str])
    with pytest.raises(TypeError, match="not a type msgspec can describe"):
        output_type(object())
