"""The app of the deploy tests, in two builds (`TETHER_TEST_DEPLOY_VERSION`: v1 or v2):
v2's `tally` returns `{"total": n}` where v1's returned `{"sum": n}`, and v2's `report`
takes that shape, so a `report` step given v1's output on v2 would be refused.
`TETHER_TEST_VERSIONING` (moving or pinned) is the app's policy, `TETHER_TEST_WHEN_GONE`
and `TETHER_TEST_BUILD_GRACE` (seconds) what its pinned steps do when their build is gone,
`TETHER_TEST_PAUSE` (seconds) how long `count` and `tally` take."""

from __future__ import annotations

import asyncio
import os
from typing import Literal, cast

import msgspec

from tests.apps.tools import record
from tether import Agent, App, OpenAIModel, RetryPolicy, StepContext
from tether.schemas.builds import WhenGone

VERSION = os.environ.get("TETHER_TEST_DEPLOY_VERSION", "v1")
VERSIONING = cast(Literal["moving", "pinned"], os.environ.get("TETHER_TEST_VERSIONING", "moving"))
WHEN_GONE = cast(WhenGone, os.environ.get("TETHER_TEST_WHEN_GONE", "move"))
GRACE = float(os.environ.get("TETHER_TEST_BUILD_GRACE", "60"))
app = App("deploys", version=VERSION, versioning=VERSIONING, when_gone=WHEN_GONE, build_grace=GRACE)
PAUSE = float(os.environ.get("TETHER_TEST_PAUSE", "0.02"))


class Sum(msgspec.Struct, forbid_unknown_fields=True):
    sum: int


class Total(msgspec.Struct, forbid_unknown_fields=True):
    total: int


@app.tool
async def count(ctx: StepContext, n: int) -> int:
    """v1 holds while `$TETHER_TEST_HOLD` exists: its tasks are in flight as v2 comes."""
    record(ctx, VERSION)
    hold = os.environ.get("TETHER_TEST_HOLD")
    while VERSION == "v1" and hold and os.path.exists(hold):  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await asyncio.sleep(PAUSE)
    return n


if VERSION == "v1":

    @app.tool
    async def tally(ctx: StepContext, n: int) -> Sum:
        record(ctx, VERSION)
        await asyncio.sleep(PAUSE)
        return Sum(sum=n)

    @app.tool
    async def report(ctx: StepContext, tallied: Sum) -> str:
        record(ctx, VERSION)
        return f"{tallied.sum} by {VERSION}"

else:

    @app.tool
    async def tally(ctx: StepContext, n: int) -> Total:
        record(ctx, VERSION)
        await asyncio.sleep(PAUSE)
        return Total(total=n)

    @app.tool
    async def report(ctx: StepContext, tallied: Total) -> str:
        record(ctx, VERSION)
        return f"{tallied.total} by {VERSION}"


class Query(msgspec.Struct):
    query: str


@app.tool
async def lookup(ctx: StepContext, q: Query) -> str:
    record(ctx, VERSION)
    return f"found {q.query}"


deployer = app.add(
    Agent(
        "deployer",
        model=OpenAIModel("scripted", api_key="test"),
        instructions=f"You are build {VERSION}.",
        tools=["lookup"],
        retry=RetryPolicy(max_attempts=4, initial_backoff=0.05, max_backoff=0.2, jitter=0.0),
    )
)
