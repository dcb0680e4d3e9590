"""The exported JSON Schemas and AsyncAPI document match the code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.api import contract


@pytest.mark.parametrize("path", sorted(contract.files()), ids=lambda p: p.name)
def test_exported_file_is_current(path: Path) -> None:
    expected = contract.files()[path]
    assert path.exists(), f"{path} is missing: run 'just schemas'"
    current = path.read_text()
    assert json.loads(current) == json.loads(expected), f"{path} is stale: run 'just schemas'"


def test_asyncapi_lists_every_channel_with_a_msgspec_payload() -> None:
    document = contract.asyncapi()
    addresses = {c["address"] for c in document["channels"].values()}
    assert document["asyncapi"] == "3.0.0"
    assert {
        "tether.submit.{task_id}",
        "tether.status.{task_id}",
        "tether.work.{tool}",
        "tether.dead.{tool}",
    } <= addresses
    assert {
        f"tether.api.{verb}"
        for verb in ("submit", "get", "result", "list", "cancel", "input", "retry")
    } <= addresses
    schemas = document["components"]["schemas"]
    for message in document["components"]["messages"].values():
        refs = message["payload"].get("oneOf", [message["payload"]])
        for ref in refs:
            assert ref["$ref"].split("/")[-1] in schemas
    assert schemas["TaskSubmit"]["required"] == ["task_id", "steps"]


def test_exported_schemas_state_the_constraints_the_protocol_page_gives() -> None:
    import jsonschema

    for name in ("TaskSubmit", "SubmitRequest"):
        schema = json.loads((contract.OUT / "jsonschema" / f"{name}.json").read_text())
        validator = jsonschema.Draft202012Validator(schema)
        assert validator.is_valid({"task_id": "ok-1", "steps": [{"tool": "fast"}]})
        for bad in (
            {"task_id": "a.b", "steps": [{"tool": "fast"}]},
            {"task_id": "ok", "steps": []},
            {"task_id": "ok", "steps": [{"tool": "fast"}] * 1001},
            {"task_id": "ok", "steps": [{"tool": "fa.st"}]},
            {"task_id": "ok", "steps": [{"tool": "fast", "timeout_ms": 0}]},
        ):
            assert not validator.is_valid(bad), (name, bad)
