"""The pure parts of issue 38's budget and follow-up rules, without a server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tether.agents import Agent, OpenAIModel
from tether.agents.budget import Ledger
from tether.agents.conversation import AgentStep
from tether.agents.owners import ForeignConversation, Owner, bound_owner, check_same_caller
from tether.agents.spending import BudgetAboveCeiling, check_ceiling
from tether.gateway.follow_ups import named_threads
from tether.schemas.events import AgentUpdated, MessageSent
from tether.schemas.plans import StepSpec
from tether.schemas.records import TaskRecord, TaskStatus
from tether.tasks.steering import steering_refusal

AGENT = Agent("a", OpenAIModel("m"), token_budget=1_000, cost_budget=2.0)


@pytest.mark.parametrize(
    ("asked", "refused"),
    [
        (AgentStep(input="q"), None),
        (AgentStep(input="q", token_budget=1_000, cost_budget=2.0), None),
        (AgentStep(input="q", token_budget=10**9), "token_budget of 1,000,000,000"),
        (
            AgentStep(input="q", cost_budget=2.5),
            "cost_budget of $2.50, more than the agent's $2.00",
        ),
    ],
)
def test_a_run_asks_for_at_most_its_agents_budget(asked: AgentStep, refused: str | None) -> None:
    if refused is None:
        check_ceiling(AGENT, asked)
        return
    with pytest.raises(BudgetAboveCeiling, match=refused.replace("$", r"\$")):
        check_ceiling(AGENT, asked)


def test_an_agent_without_a_budget_has_no_ceiling() -> None:
    check_ceiling(Agent("free", OpenAIModel("m")), AgentStep(input="q", token_budget=10**9))


def test_a_ledger_follows_a_raised_default_up_never_down_nor_to_a_new_limit() -> None:
    ledger = Ledger(tokens=1_000, spent_tokens=900)
    assert ledger.at_least(5_000, 3.0) == Ledger(tokens=5_000, spent_tokens=900)
    assert ledger.at_least(500, None) is ledger
    assert Ledger(usd=1.0).at_least(5_000, 0.5) == Ledger(usd=1.0)


def test_a_ledger_says_what_the_next_call_needs() -> None:
    ledger = Ledger(tokens=200, spent_tokens=50, usd=1.0)
    said = ledger.short(4_000, 0.01)
    assert said == "the next call needs up to 4,000 tokens (a limit of at least 4,050)"
    assert "$" in Ledger(usd=0.001).short(10, 0.01)


def _record(status: TaskStatus) -> TaskRecord:
    now = datetime.now(UTC)
    return TaskRecord(
        task_id="t", status=status, steps=[StepSpec(tool="a")], created_at=now, updated_at=now
    )


def test_a_failed_task_takes_new_settings_but_no_messages() -> None:
    assert steering_refusal(_record(TaskStatus.RUNNING), MessageSent) is None
    assert steering_refusal(_record(TaskStatus.FAILED), AgentUpdated) is None
    refused = steering_refusal(_record(TaskStatus.FAILED), MessageSent)
    assert refused is not None and "update_agent may still" in refused
    done = steering_refusal(_record(TaskStatus.COMPLETED), AgentUpdated)
    assert done is not None and "follow-up" in done


def test_a_follow_up_is_named_in_any_step_and_checked_by_caller() -> None:
    steps = [
        StepSpec(tool="a", input={"input": "q", "after": "x"}),
        StepSpec(parallel=[StepSpec(tool="b", input={"after": "y"}), StepSpec(tool="c")]),
    ]
    assert list(named_threads(steps)) == [("a", "x"), ("b", "y")]
    assert bound_owner("x", {"mcp": {"caller": "alice", "seal": "s"}}) == Owner("alice", None)
    assert bound_owner("x", {"mcp": "alice"}) is None
    check_same_caller("x", None, None)
    check_same_caller("x", Owner("alice", "k"), Owner("alice", "k"))
    with pytest.raises(ForeignConversation, match="'x' is not a conversation"):
        check_same_caller("x", Owner("alice", "k"), Owner("bob", "k"))
