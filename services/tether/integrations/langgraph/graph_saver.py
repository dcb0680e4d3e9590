"""Where a graph's task keeps its thread: a `JetStreamSaver` on the worker's own NATS
connection, in the installation's graphs bucket (`Names.graphs_bucket`, made by Tether's
provisioning: `tether.nats.provision.open_graphs`), or in the bucket of the
`JetStreamSaver` the graph was compiled with, bound to a copy of the user's graph (the
graph itself is left as it was compiled)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tether.errors import DefinitionError
from tether.integrations.langgraph.saver import JetStreamSaver
from tether.nats.provision import open_graphs
from tether.schemas.names import Names

if TYPE_CHECKING:
    from langgraph.pregel import Pregel

    from tether.nats.store import Store
    from tether.tools.context import StepContext


def bucket_of(prefix: str) -> str:
    """The KV bucket of an installation's graph threads (see `Names.graphs_bucket`)."""
    return Names(prefix=prefix).graphs_bucket


def check_checkpointer(graph: Pregel[Any, Any, Any, Any], name: str) -> None:
    """Refuse a graph whose checkpointer Tether would silently replace (or that asks
    for none): its threads would not be where the user looks for them."""
    kept = graph.checkpointer
    if kept is None or isinstance(kept, JetStreamSaver):
        return
    if kept is False or kept is True:
        raise DefinitionError(
            f"graph {name!r} was compiled with checkpointer={kept}: compile it without "
            "one to add it to a Tether app (Tether checkpoints its threads on JetStream)"
        )
    raise DefinitionError(
        f"graph {name!r} was compiled with a {type(kept).__name__}: compile it without a "
        "checkpointer (or with a JetStreamSaver) to add it to a Tether app, which keeps "
        "each task's thread on JetStream where any worker resumes it"
    )


class Savers:
    """One saver per worker connection (made ready once), and the graph bound to it."""

    def __init__(self, graph: Pregel[Any, Any, Any, Any]) -> None:
        self._graph = graph
        self._bound: weakref.WeakKeyDictionary[Any, Pregel[Any, Any, Any, Any]] = (
            weakref.WeakKeyDictionary()
        )

    async def graph_for(self, ctx: StepContext) -> Pregel[Any, Any, Any, Any]:
        """The graph as the step runs it: checkpointed by the worker's saver."""
        store = ctx.connection  # the worker's connection and names: the saver shares them
        found = self._bound.get(store)
        if found is None:
            found = self._graph.copy(update={"checkpointer": await self._saver(store)})
            self._bound[store] = found
        return found

    async def _saver(self, store: Store) -> JetStreamSaver:
        kept = self._graph.checkpointer
        if not isinstance(kept, JetStreamSaver):
            await open_graphs(store.js, store.names)  # one stream info each, once made
            return JetStreamSaver(store.nc, bucket=store.names.graphs_bucket)
        saver = JetStreamSaver(
            store.nc, bucket=kept.bucket, serde=kept.serde, inline_limit=kept.inline_limit
        )
        await saver.asetup()  # the user's own bucket, made as their saver makes it
        return saver


async def remove_threads(store: Store, threads: Iterable[str]) -> None:
    """Remove graphs' threads, each with its keys and blobs, by the saver's own
    `delete_thread` (`tether gc`, for the tasks it removes)."""
    saver = JetStreamSaver(store.nc, bucket=store.names.graphs_bucket)
    try:
        for thread in threads:
            await saver.adelete_thread(thread)
    finally:
        await saver.aclose()  # the connection is the store's: left open
