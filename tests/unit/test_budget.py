"""A tree's budget, the pure part: reservations, settling, answers, prices."""

from __future__ import annotations

import pytest

from tether.agents.budget import Ledger, Price, cost, output_cap, price_of, worst_case
from tether.schemas.records import Usage


def test_a_call_fits_only_with_the_calls_in_flight_counted_and_a_retry_replaces_its_own() -> None:
    ledger = Ledger(tokens=10_000, spent_tokens=1_000)
    one = ledger.reserve("t.1.b0", 4_000, 0.0)
    assert one is not None
    two = one.reserve("t.1.b1", 4_000, 0.0)
    assert two is not None
    assert two.reserve("t.1.b2", 4_000, 0.0) is None  # 1k + 8k held + 4k > 10k
    assert not two.spent_for(4_000, 0.0)  # ...but it fits once the others settle: wait
    assert two.reserve("t.1.b0", 4_000, 0.0) is not None  # a retry replaces its own
    settled = two.settle("t.1.b0", 1_500, 0.0).settle("t.1.b1", 1_500, 0.0)
    assert (settled.spent_tokens, settled.held) == (4_000, {})
    assert settled.spent_for(6_001, 0.0)  # truly spent: ask a person


def test_an_answer_raises_a_limit_never_lowers_it_and_stop_stops_every_call() -> None:
    ledger = Ledger(tokens=1_000, usd=2.0, asking="child")
    raised = ledger.answered({"tokens": 5_000, "usd": 3.5}, "child")
    assert (raised.tokens, raised.usd, raised.asking) == (5_000, 3.5, None)
    assert raised.answered({"tokens": 10}, "child").tokens == 5_000  # read twice: the same
    stopped = raised.answered({"stop": True}, "child")
    assert stopped.stopped and stopped.reserve("k", 1, 0.0) is None
    assert ledger.answered({}, "another").asking == "child"  # only the asker's answer clears


def test_dollar_limits_hold_like_token_limits_and_say_what_is_spent() -> None:
    ledger = Ledger(usd=1.0, spent_usd=0.75)
    assert ledger.reserve("k", 0, 0.3) is None and ledger.spent_for(0, 0.3)
    assert ledger.reserve("k", 0, 0.2) is not None
    said = Ledger(tokens=50_000, spent_tokens=49_200, held={"k": (4_500, 0.0)}).spent()
    assert said == "budget of 50,000 tokens (49,200 spent, 4,500 held) reached"


def test_prices_come_from_the_model_or_the_table_by_its_longest_prefix() -> None:
    own = Price(input=1.0, output=2.0)
    assert price_of("anything", own) is own
    assert price_of("gpt-4o-mini-2024-07-18") == price_of("gpt-4o-mini") != price_of("gpt-4o")
    assert price_of("llama3.1") is None
    usage = Usage(input_tokens=1_000_000, cached_tokens=500_000, output_tokens=100_000)
    assert cost(usage, Price(input=2.0, output=8.0, cached=0.5)) == pytest.approx(1.0 + 0.25 + 0.8)


def test_a_calls_worst_case_is_what_it_sends_and_the_most_it_may_answer() -> None:
    messages = [{"role": "user", "content": "x" * 300}]
    assert worst_case(messages, [], 100) > 100 + 300 // 4
    assert output_cap({"max_tokens": 64}) == 64
    assert output_cap({}) == 4096
