"""The operator's actions of `Client`: where new tasks go (ramp, promote, roll back a
build) and the store's upkeep (sweep, reindex). Only the operator's NATS user is
allowed them; any other is refused at once (NotAllowedError), not after a timeout."""

from __future__ import annotations

from datetime import timedelta

from tether.client.actions import Actions
from tether.client.reads import connected
from tether.deploys import actions as deploys
from tether.nats.store import Store
from tether.schemas.builds import BuildsReply, BuildsRequest, DeployRequest
from tether.tasks.retention import DEFAULT_RETENTION
from tether.tasks.sweep import Sweeper, SweepReport


class Operations:
    """The operator's half of `Client`; deploys go through its actions (here, or asked of
    the API's `deploy` when acting through it)."""

    _store: Store | None
    _actions: Actions | None = None
    """Picked at `connect()`: done here, or asked of the API."""

    def _acting(self) -> Actions:
        connected(self._store)  # raises when not connected
        assert self._actions is not None
        return self._actions

    async def builds(self, request: BuildsRequest | None = None) -> BuildsReply:
        """The builds workers run, with their workers and steps; a request with an
        `action` changes where tasks go first (see `ramp`, `promote`, `rollback`)."""
        if request is None or request.action == "list" or not request.build:
            return await deploys.answer(connected(self._store), request)
        return await self._acting().deploy(
            DeployRequest(action=request.action, build=request.build, percent=request.percent)
        )

    async def ramp(self, build: str, percent: float) -> BuildsReply:
        """Send `percent` % of new tasks (by task id) to `build`, the rest where they went."""
        return await self._acting().deploy(
            DeployRequest(action="ramp", build=build, percent=percent)
        )

    async def promote(self, build: str) -> BuildsReply:
        """Send every new task, and every moving step, to `build`."""
        return await self._acting().deploy(DeployRequest(action="promote", build=build))

    async def rollback(self, build: str) -> BuildsReply:
        """Send new tasks and moving steps back to the build before `build`; tasks pinned
        to it stay on it while its workers run."""
        return await self._acting().deploy(DeployRequest(action="rollback", build=build))

    async def sweep(
        self, retention: timedelta = DEFAULT_RETENTION, dry_run: bool = False
    ) -> SweepReport:
        """Remove finished tasks past `retention` and blobs nothing refers to."""
        return await Sweeper(connected(self._store)).sweep(retention, dry_run=dry_run)

    async def reindex(self) -> int:
        """Write the status index row of every task (for tasks from before the index)."""
        return await connected(self._store).records.reindex()
