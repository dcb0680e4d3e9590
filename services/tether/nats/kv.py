"""The one key-value primitive: get, create, compare-and-set, put, remove and keys, the
same for every bucket, with one read path (a direct get where the bucket allows it)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from math import ceil
from typing import NamedTuple

from nats.js.errors import APIError, KeyDeletedError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from tether.errors import RevisionConflictError
from tether.nats import headers
from tether.nats.jetstream import JetStream
from tether.nats.limits import check_value

GONE = {headers.KV_OPERATION: "DEL", headers.TTL: "30s"}
"""A delete marker that expires (a plain KV delete leaves one behind for ever)."""
_DELETED = ("DEL", "PURGE")
_ABSENT = {headers.EXPECTED_LAST_SUBJECT_SEQUENCE: "0"}


class Entry(NamedTuple):
    value: bytes
    revision: int


class Removed(NamedTuple):
    """A delete marker: `note` is what its writer left in it (empty for most)."""

    note: bytes


class Bucket:
    """One KV bucket. Keys are not validated here: task ids and tool names are checked
    where they enter (dispatcher, worker, client, API), and the hot path saves the regex."""

    def __init__(self, jetstream: JetStream, kv: KeyValue, name: str, direct: bool) -> None:
        self._js = jetstream
        self._kv = kv
        self.name = name
        names = jetstream.names
        self._prefix = names.kv_subject(name)
        self._direct = names.direct_get_subject(names.kv_stream(name), self._prefix)
        self.direct = direct
        """Whether the bucket answers direct gets (single server: yes; a cluster: no)."""

    def subject(self, key: str) -> str:
        return self._prefix + key

    async def get(self, key: str) -> Entry | None:
        """The key's latest value and revision; None when deleted or never written."""
        found = await self.lookup(key)
        return found if isinstance(found, Entry) else None

    async def lookup(self, key: str) -> Entry | Removed | None:
        """The key's latest value and revision, its delete marker, or None (never written,
        or its marker expired)."""
        if not self.direct:
            try:
                entry = await self._kv.get(key, validate_keys=False)
            except KeyDeletedError as exc:
                return Removed((exc.entry.value or b"") if exc.entry is not None else b"")
            except KeyNotFoundError:
                return None
            return Entry(entry.value, entry.revision or 0) if entry.value else None
        reply = await self._js.request(self._direct + key)
        found = reply.headers or {}
        if found.get(headers.KV_OPERATION) in _DELETED:
            return Removed(reply.data)
        if found.get(headers.STATUS) == "404":
            return None
        if headers.STATUS in found:
            code = int(found.get(headers.STATUS) or 0)
            raise APIError(code=code, description=found.get(headers.DESCRIPTION, ""))
        return Entry(reply.data, int(found[headers.SEQUENCE]))

    async def written_at(self, key: str) -> datetime | None:
        """When the server stored the key's latest message, by the server's clock (None
        when it has none)."""
        stream = self._js.names.kv_stream(self.name)
        try:
            found = await self._js.nc.jetstream().get_last_msg(stream, self._prefix + key)
        except NotFoundError:
            return None
        return found.time

    async def create(self, key: str, value: bytes) -> int | None:
        """Write a key that does not exist; its revision, or None when it exists."""
        subject = self._prefix + key  # as `update`, without a call more on the hot path
        check_value(f"the value of {subject}", value, self._js.nc.max_payload)
        try:
            return (await self._js.publish(subject, value, _ABSENT)).seq
        except RevisionConflictError:
            return None

    async def update(self, key: str, value: bytes, last: int) -> int:
        """Compare-and-set: write only if the key is at revision `last` (0: absent); the
        new revision, or RevisionConflictError."""
        subject = self._prefix + key
        check_value(f"the value of {subject}", value, self._js.nc.max_payload)
        sent = {headers.EXPECTED_LAST_SUBJECT_SEQUENCE: str(last)}
        return (await self._js.publish(subject, value, sent)).seq

    async def put(self, key: str, value: bytes, what: str = "") -> int:
        """Write whatever was there; `what` names the value in a too-large error."""
        subject = self._prefix + key
        check_value(what or f"the value of {subject}", value, self._js.nc.max_payload)
        return (await self._js.publish(subject, value)).seq

    async def remove(self, key: str, note: bytes = b"", keep_for: float | None = None) -> None:
        """Delete the key with a marker that expires: after 30 s, or `keep_for` seconds
        (the marker keeps `note` until then)."""
        marker = GONE if keep_for is None else {**GONE, headers.TTL: f"{max(1, ceil(keep_for))}s"}
        await self._js.publish(self._prefix + key, note, marker)

    async def keys(self, match: str = ">") -> list[str]:
        """The keys that `match` (a subject pattern; deleted keys included: reads skip
        those). nats-py's `KeyValue.keys()` can come back empty when its watcher's
        consumer info overtakes the entries it has not processed yet."""
        stream = self._js.names.kv_stream(self.name)
        subjects = await self._js.subjects(stream, self._prefix + match)
        return [subject[len(self._prefix) :] for subject in subjects]

    async def scan(self, match: str = ">") -> dict[str, bytes]:
        """The latest value of every key that `match` (a subject pattern), deleted keys
        left out: a batch of keys per request where the bucket answers direct gets, else
        the key list then a read per key."""
        if not self.direct:
            names = await self.keys(match)
            entries = await asyncio.gather(*(self.get(key) for key in names))
            return {k: e.value for k, e in zip(names, entries, strict=True) if e is not None}
        stream = self._js.names.kv_stream(self.name)
        found: dict[str, bytes] = {}
        for msg in await self._js.direct_messages(stream, self._prefix + match):
            said = msg.headers or {}
            key = said[headers.SUBJECT][len(self._prefix) :]
            if said.get(headers.KV_OPERATION) in _DELETED:
                found.pop(key, None)  # a page that came after its key was deleted
            else:
                found[key] = msg.data
        return found

    async def watch(self, key: str, inactive: float) -> KeyValue.KeyWatcher:
        """Updates of one key: the current value first, then a None marker, then changes;
        its consumer is gone `inactive` seconds after `stop()` (nats-py only unsubscribes)."""
        return await self._kv.watch(key, inactive_threshold=inactive)
