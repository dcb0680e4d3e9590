"""Checkpoints and memos in `<prefix>-checkpoints`: written create-only, so the first
one stored wins and a replay reads it back. (An agent tree's budget ledger lives there
too, changed by compare-and-set: `entry`, `swap`.)"""

from __future__ import annotations

from tether.nats.failures import translating
from tether.nats.kv import Bucket
from tether.schemas.codec import checkpoint_decoder, encode
from tether.schemas.names import Names
from tether.schemas.records import Checkpoint


@translating
class Checkpoints:
    def __init__(self, bucket: Bucket, names: Names) -> None:
        self._bucket = bucket
        self._names = names

    async def get(self, task_id: str, step: int, branch: int | None = None) -> Checkpoint | None:
        found = await self.get_memo(self._names.step_key(task_id, step, branch))
        return None if found is None else checkpoint_decoder.decode(found)

    async def create(
        self, task_id: str, step: int, checkpoint: Checkpoint, branch: int | None = None
    ) -> Checkpoint:
        """Store `checkpoint` unless one exists; return the one that won."""
        key = self._names.step_key(task_id, step, branch)
        data = encode(checkpoint)
        if await self._bucket.create(key, data) is not None:
            return checkpoint  # most steps: the first and only checkpoint
        return checkpoint_decoder.decode(await self._winner(key, data))

    async def get_memo(self, key: str) -> bytes | None:
        found = await self._bucket.get(key)
        return None if found is None else found.value

    async def create_memo(self, key: str, value: bytes) -> bytes:
        """Store a memoized side effect's result create-only; the bytes that won (`value`
        itself when it was stored)."""
        if await self._bucket.create(key, value) is not None:
            return value
        return await self._winner(key, value)

    async def entry(self, key: str) -> tuple[bytes, int] | None:
        """A key's value and revision (for `swap`)."""
        found = await self._bucket.get(key)
        return None if found is None else (found.value, found.revision)

    async def swap(self, key: str, value: bytes, revision: int) -> int:
        """Compare-and-set; RevisionConflictError when `key` moved past `revision`."""
        return await self._bucket.update(key, value, revision)

    async def _winner(self, key: str, value: bytes) -> bytes:
        """What a lost create on `key` lost to; ours, stored now, if that was deleted in
        between (ours is as good as any)."""
        while (existing := await self.get_memo(key)) is None:
            if await self._bucket.create(key, value) is not None:
                return value
        return existing
