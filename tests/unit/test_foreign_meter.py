"""A foreign agent's model calls that overlap (sub-agents called by the tool calls of one
response, which run at once) each settle the budget hold they took, not another's (no
server: the tree's ledger in memory)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, cast

from tether.agents.budget import Ledger, TreeBudget
from tether.integrations.meter import Meter
from tether.schemas.records import Usage
from tether.tools.context import StepContext


class Tree:
    """A tree's ledger in memory; each read and change yields, as a KV round trip does."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger, self.held = ledger, False

    async def read(self) -> tuple[Ledger, int]:
        await asyncio.sleep(0)
        return self.ledger, 1

    async def change(self, change: Callable[[Ledger], Ledger | None]) -> Ledger | None:
        await asyncio.sleep(0)
        new = change(self.ledger)
        if new is not None:
            self.ledger = new
        return new


async def test_calls_that_overlap_each_settle_their_own_hold() -> None:
    tree = Tree(Ledger(tokens=100_000))
    ctx = cast(StepContext, SimpleNamespace(idempotency_key="t.0", add_usage=lambda u: None))
    meter = Meter(ctx, cast(TreeBudget, tree))
    a_holds, b_holds, a_settled = asyncio.Event(), asyncio.Event(), asyncio.Event()
    seen: dict[str, Any] = {}

    async def a() -> None:
        await meter.reserve("m", 300, 100)
        a_holds.set()
        await b_holds.wait()
        await meter.settle(Usage(input_tokens=100, output_tokens=10, requests=1))
        a_settled.set()

    async def b() -> None:
        await a_holds.wait()
        await meter.reserve("m", 600, 200)
        seen["both"] = dict(tree.ledger.held)
        b_holds.set()
        await a_settled.wait()
        seen["after a"] = dict(tree.ledger.held)
        await meter.settle(Usage(input_tokens=200, output_tokens=20, requests=1))

    await asyncio.wait_for(asyncio.gather(a(), b()), timeout=5)

    assert seen["both"] == {"t.0.c1": (101 + 100, 0.0), "t.0.c2": (201 + 200, 0.0)}
    assert seen["after a"] == {"t.0.c2": (201 + 200, 0.0)}  # b's call is still held
    assert tree.ledger.held == {}
    assert tree.ledger.spent_tokens == 330
