"""The pure cap of a call's answer under a budget (`agents.answer_caps`)."""

from __future__ import annotations

import pytest

from tether.agents import OpenAIModel, Price
from tether.agents.answer_caps import MIN_ANSWER, answer_cap, capped, needs, short
from tether.agents.budget import DEFAULT_OUTPUT_CAP, Ledger
from tether.agents.truncation import BUDGET_CAP, limit_advice, sent_options


def test_a_call_answers_with_what_the_budget_leaves_after_its_input() -> None:
    ledger = Ledger(tokens=2000)
    assert answer_cap(ledger, "a", 300, DEFAULT_OUTPUT_CAP, None) == 1700
    assert answer_cap(ledger, "a", 300, 500, None) == 500  # its own cap is smaller
    assert answer_cap(Ledger(), "a", 300, 500, None) == 500  # no limit


def test_a_call_waits_for_calls_in_flight_rather_than_take_a_sliver() -> None:
    busy = Ledger(tokens=2000, held={"b": (1500, 0.0)})
    assert answer_cap(busy, "a", 300, DEFAULT_OUTPUT_CAP, None) is None
    own = Ledger(tokens=2000, held={"a": (1500, 0.0)})  # its own earlier reservation
    assert answer_cap(own, "a", 300, DEFAULT_OUTPUT_CAP, None) == 1700


def test_no_room_for_a_short_answer_is_no_cap() -> None:
    ledger = Ledger(tokens=1000, spent_tokens=700)
    assert answer_cap(ledger, "a", 300 - MIN_ANSWER, 4096, None) == MIN_ANSWER
    assert answer_cap(ledger, "a", 300 - MIN_ANSWER + 1, 4096, None) is None


def test_dollars_bound_the_answer_at_the_output_price() -> None:
    price = Price(input=1.0, output=2.0)  # $ per million tokens
    cap = answer_cap(Ledger(usd=0.001), "a", 200, 4096, price)
    assert cap is not None and 399 - 1 <= cap <= 400
    assert 200 * 1e-6 + cap * 2e-6 <= 0.001


@pytest.mark.parametrize(
    ("settings", "base_url", "sent"),
    [
        ({}, "http://127.0.0.1:8080/v1", {"max_tokens": 100}),
        ({}, "https://api.openai.com/v1", {"max_completion_tokens": 100}),
        ({"max_tokens": 50}, None, {"max_tokens": 50}),
        ({"max_completion_tokens": 900}, "http://x/v1", {"max_completion_tokens": 100}),
    ],
)
def test_the_cap_goes_under_the_name_the_settings_use(
    settings: dict[str, int], base_url: str | None, sent: dict[str, int]
) -> None:
    model = OpenAIModel("m", base_url=base_url, settings=settings)
    options = sent_options(capped(model, {"temperature": 0}, 100))
    assert {**model.settings, **options} == {"temperature": 0, **sent}


@pytest.mark.parametrize(
    ("settings", "noted"),
    [({}, True), ({"max_tokens": 900}, True), ({"max_tokens": 50}, False)],
)
def test_a_cap_the_budget_lowered_is_noted_so_a_cut_answer_blames_the_budget(
    settings: dict[str, int], noted: bool
) -> None:
    """Only a cap below what the call asks is the budget's doing: an answer cut at its
    own `max_tokens` is told as that setting's."""
    options = capped(OpenAIModel("m", base_url="http://x/v1", settings=settings), {}, 100)
    advice = limit_advice(settings, options)
    assert ("token budget had room for 100 answer tokens" in advice) is noted
    assert ("OpenAIModel(settings=...)" in advice) is not noted


def test_what_the_next_call_needs_names_its_input_and_both_limits() -> None:
    said = needs(short(Ledger(tokens=100), 300, None), 4096)
    assert said == (
        "the next call sends about 300 tokens and answers with up to 4,096 (at least 16): "
        "a limit of at least 316, 4,396 for a full answer"
    )


@pytest.mark.parametrize(
    ("settings", "options"),
    [
        ({}, {BUDGET_CAP: 100, "max_tokens": 100}),
        ({}, {"max_tokens": 50}),
        ({"max_tokens": 50}, {}),
        ({}, {}),
    ],
)
def test_a_cut_answer_says_how_to_retry_the_task(
    settings: dict[str, int], options: dict[str, int]
) -> None:
    """Whichever limit stopped it, the advice ends with the command and the button that
    run the task on (issue 50, item 8), not a bare "then retry the task"."""
    advice = limit_advice(settings, options)
    assert "'tether dlq retry ID'" in advice and "Retry button on its dashboard page" in advice
