"""A store with a connection of its own: opened and closed as one, so a front end holds
the store and never the connection under it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from tether.nats.connection import NatsConfig, close, connect
from tether.nats.layout import Layout
from tether.nats.store import Store


async def open_store(
    config: NatsConfig,
    layout: Layout,
    *,
    provision: bool = True,
    on_lost: Callable[[str], None] | None = None,
) -> Store:
    """Connect as `config` says and open the installation `layout` names (see
    `Store.open`); the connection is closed again when the store cannot be opened."""
    nc = await connect(config, on_lost)
    try:
        return await Store.open(nc, layout, provision=provision)
    except BaseException:
        await close(nc)
        raise


async def close_store(store: Store) -> None:
    """Finish the store's writes under way, then close its connection on purpose (its
    `on_lost` stays silent); never raises."""
    with contextlib.suppress(Exception):
        await store.finish_writes()
    await close(store.nc)
