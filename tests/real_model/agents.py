"""The agents of the real-model suite, on llama-server at a URL known only once it runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec

from tether import Agent, App, OpenAIModel, RetryPolicy, StepContext

QUICK = RetryPolicy(max_attempts=3, initial_backoff=0.2, max_backoff=1, jitter=0.0)
"""A failed turn is retried soon: these tests wait on the outcome, not on backoff."""
PARAGRAPH = "Write a short paragraph about lighthouses."
"""About 110 tokens at temperature 0: a second or two of streaming, then a natural end."""
PATIENT = RetryPolicy(max_attempts=12, initial_backoff=0.5, max_backoff=2, jitter=0.0)
"""Outlasts a llama-server restart (a second or two to load the model) with room."""


class City(msgspec.Struct, frozen=True):
    """A typed answer whose strings the schema bounds, so the grammar ends them."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=40)]
    country: Annotated[str, msgspec.Meta(min_length=1, max_length=40)]


@dataclass(frozen=True)
class RealAgents:
    """One app with an agent per case, all on the same llama-server."""

    app: App
    plain: Agent
    typed: Agent
    tooled: Agent
    patient: Agent

    @classmethod
    def on(cls, base_url: str, name: str) -> RealAgents:
        model = OpenAIModel(name, base_url=base_url, api_key="none", settings={"temperature": 0})
        app = App("real")

        @app.tool
        async def capital(ctx: StepContext, country: str) -> str:
            """The capital city of a country."""
            return {"france": "Paris", "japan": "Tokyo"}.get(country.lower(), "unknown")

        return cls(
            app=app,
            plain=app.add(Agent("plain", model=model, retry=QUICK)),
            typed=app.add(
                Agent(
                    "typed",
                    model=model,
                    instructions="Answer with the city asked for and its country.",
                    output_type=City,
                    retry=QUICK,
                )
            ),
            tooled=app.add(
                Agent(
                    "tooled",
                    model=model,
                    instructions="You answer geography questions.",
                    tools=[capital],
                    max_turns=3,
                    retry=QUICK,
                )
            ),
            patient=app.add(Agent("patient", model=model, retry=PATIENT)),
        )
