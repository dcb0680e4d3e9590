"""Tools written as people write them for other frameworks: Pydantic models, plain
functions of several parameters described by their docstring, no `ctx`; and an agent
whose `output_type` is a Pydantic model (the scripted model at $OPENAI_BASE_URL)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from tether import Agent, App, OpenAIModel, RetryPolicy

app = App("written")
QUICK = RetryPolicy(max_attempts=2, initial_backoff=0.05, max_backoff=0.1, jitter=0.0)


class Query(BaseModel):
    text: str
    limit: int = Field(default=2, ge=1)


class Hit(BaseModel):
    title: str
    rank: int


@app.tool(retry=QUICK)
async def search(query: Query) -> list[Hit]:
    """Search the catalogue."""
    return [Hit(title=f"{query.text} {n}", rank=n) for n in range(1, query.limit + 1)]


@app.tool(retry=QUICK)
def get_weather(city: str, unit: str = "C") -> str:
    """Get the current weather in a city.

    Args:
        city: The city, as people write it (e.g. "Paris").
        unit: "C" or "F".
    """
    return f"18°{unit} in {city}"


@app.tool(retry=QUICK)
async def top_hit(ctx, data):  # type: ignore[no-untyped-def]
    """Written the old way, unannotated: its model result is stored as JSON all the same."""
    return Hit(title=str(data), rank=1)


@app.tool(retry=QUICK)
async def today() -> str:
    """Today's date (no input, no context)."""
    return "2026-12-03"


class Verdict(BaseModel):
    city: str
    warm: bool
    degrees: int


judge = app.add(
    Agent(
        "judge",
        model=OpenAIModel("scripted", api_key="test"),
        instructions="Say whether it is warm.",
        tools=["get_weather"],
        output_type=Verdict,
        retry=QUICK,
    )
)
