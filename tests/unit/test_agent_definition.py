"""An agent is one definition and a tool the app adds; the author's API stands apart
from the worker host; the agent package's errors and budget protocol each have a room."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import tether
import tether.agents
from tether import Agent, App, OpenAIModel, RetryPolicy, StepContext
from tether.errors import RetryableError, TerminalError
from tether.tools import Tool, ToolSource

SERVICES = Path(tether.__file__).parent


def screen(ctx: StepContext, question: str) -> None:
    """A plain-function guardrail."""


def _options() -> dict[str, object]:
    return {
        "model": OpenAIModel("gpt-4o-mini", max_concurrency=3),
        "instructions": "Answer.",
        "tools": ["search"],
        "token_budget": 1000,
        "input_guardrails": [screen],
        "output_type": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "handoffs": ["billing"],
        "retry": RetryPolicy(max_attempts=2),
        "versioning": "pinned",
    }


def test_app_add_registers_an_agent_with_its_helpers() -> None:
    app = App("a")
    agent = app.add(Agent("helper", **_options()))  # type: ignore[arg-type]
    assert isinstance(agent, Agent) and isinstance(agent, ToolSource)
    assert sorted(app.tools) == ["helper", "screen"]
    one = app.tools["helper"]
    assert one.calls == ("search", "screen", "billing")
    assert one.agent and one.versioning == "pinned" and one.max_concurrency == 3
    assert one.retry == RetryPolicy(max_attempts=2)
    assert one.schema is not None and one.schema["properties"]["token_budget"]["maximum"] == 1000


def test_an_agent_is_defined_one_way_everywhere() -> None:
    """`app.add(Agent(...))`: the app has no second door (`app.agent`, removed after
    round 4), and no example, docs page, message or test names it."""
    assert not hasattr(App, "agent")
    root = SERVICES.parent.parent
    texts = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    texts += sorted(SERVICES.rglob("*.py")) + sorted((root / "tests").rglob("*.py"))
    door = "app." + "agent("  # spelled apart, so that this file does not name it
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in texts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if door in line
    ]
    assert found == []


def test_app_add_takes_a_plain_tool_and_any_tool_source() -> None:
    async def echo(ctx: StepContext, data: str) -> str:
        return data

    class Foreign:  # an agent of another framework, behind a thin adapter
        def as_tool(self) -> Tool:
            return Tool(name="foreign", function=echo, agent=True)

    app = App("x", versioning="pinned")
    plain = Tool(name="echo", function=echo)
    assert app.add(plain) is plain
    source = Foreign()
    assert app.add(source) is source
    assert sorted(app.tools) == ["echo", "foreign"]
    assert app.tools["foreign"].versioning == "pinned"  # the app's defaults apply


def test_a_guardrail_the_app_has_already_is_not_registered_again() -> None:
    app = App("x")
    app.tool(screen)
    app.add(Agent("helper", model="m", input_guardrails=[screen], output_guardrails=["screen"]))
    assert sorted(app.tools) == ["helper", "screen"]


def test_an_agent_is_checked_where_it_is_defined() -> None:
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        Agent("helper", model="m", max_turns=0)
    with pytest.raises(ValueError, match="output_retries"):
        Agent("helper", model="m", output_retries=-1)
    agent = Agent("helper", model="m", budget_timeout=5, tools=("a",))
    assert agent.llm.name == "m" and agent.budget_timeout is not None
    assert agent.budget_timeout.total_seconds() == 5


def _imports(path: Path) -> list[tuple[str, bool, str]]:
    """(module imported, at module level?, enclosing function) for each import."""
    found: list[tuple[str, bool, str]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ImportFrom) and child.module:
                found.append((child.module, where == "", where))
            elif isinstance(child, ast.Import):
                found.extend((alias.name, where == "", where) for alias in child.names)
            inner = (
                child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else where
            )
            if not (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)):
                visit(child, inner)

    visit(ast.parse(path.read_text()), "")
    return found


def test_the_authors_package_and_the_worker_import_nothing_from_agents() -> None:
    offending = []
    for package in ("tools", "worker"):
        for path in sorted((SERVICES / package).glob("*.py")):
            for module, _, where in _imports(path):
                shim = (package, path.name, where) == ("tools", "app.py", "agent")
                if module.startswith("tether.agents") and not shim:
                    offending.append(f"{package}/{path.name}: {module}")
    assert offending == []


def test_the_authors_package_does_not_import_the_worker_host() -> None:
    for path in sorted((SERVICES / "tools").glob("*.py")):
        assert not [m for m, _, _ in _imports(path) if m.startswith("tether.worker")], path


def _agent_modules() -> list[str]:
    return [f"tether.agents.{m.name}" for m in pkgutil.iter_modules(tether.agents.__path__)]


def test_every_exception_of_the_agent_package_is_in_its_errors_module() -> None:
    from tether.agents import errors

    elsewhere = []
    for name in _agent_modules():
        if name.endswith(".mcp_tools"):
            continue  # the `mcp` client is an extra; it defines no exception either
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException):
                if value.__module__ == name and name != errors.__name__:
                    elsewhere.append(f"{name}.{attribute}")
    assert elsewhere == []
    documented = errors.__doc__ or ""
    for value in vars(errors).values():
        if inspect.isclass(value) and value.__module__ == errors.__name__:
            assert value.__name__ in documented, value


@pytest.mark.parametrize(
    ("where", "name", "base"),
    [
        ("tether.agents.agent", "MaxTurnsExceeded", TerminalError),
        ("tether.agents.budget", "BudgetExceeded", TerminalError),
        ("tether.agents.spending", "TokenBudgetExceeded", TerminalError),
        ("tether.agents.spending", "BudgetAboveCeiling", TerminalError),
        ("tether.agents.owners", "ForeignConversation", TerminalError),
        ("tether.agents.output", "InvalidOutput", TerminalError),
        ("tether.agents.models", "ModelAuthError", TerminalError),
        ("tether.agents.models", "ContextLengthExceeded", TerminalError),
        ("tether.agents.models", "ModelRequestError", TerminalError),
        ("tether.agents.models", "ModelOutputTruncated", TerminalError),
        ("tether.agents.models", "ModelContentFiltered", TerminalError),
        ("tether.agents.models", "ModelQuotaExceeded", TerminalError),
        ("tether.agents.models", "StructuredOutputsRefused", TerminalError),
        ("tether.agents.models", "RateLimited", RetryableError),
    ],
)
def test_agent_errors_keep_their_names_and_old_homes(where: str, name: str, base: type) -> None:
    from tether.agents import errors

    moved = getattr(errors, name)
    assert getattr(importlib.import_module(where), name) is moved
    assert moved.__name__ == name and issubclass(moved, base)  # `ErrorInfo.type` on the wire


def test_only_the_budget_protocol_changes_the_ledger() -> None:
    """Reserve, settle, release and answers: `spending` (over `budget`'s ledger) only."""
    allowed = {"spending.py", "budget.py"}
    for path in sorted((SERVICES / "agents").glob("*.py")):
        if path.name not in allowed:
            assert ".change(" not in path.read_text(), path.name


def test_the_call_shape_is_not_named_like_a_builds_tool_shape() -> None:
    from tether.agents import turns

    assert hasattr(turns, "CallShape") and not hasattr(turns, "ToolShape")
