"""The read side every store backend shares: the newest published ``Snapshot`` (SPEC §3.2, §6).

Reads (Get, List, WatchContracts) are answered from the snapshot published last, never from
the backend: a backend publishes a snapshot once its change is durable (SQLite: committed;
etcd: seen on the watch, so every control plane on one etcd publishes the same revisions).
"""

from __future__ import annotations

import asyncio

from controlplane.errors import NotFound
from controlplane.store.model import EMPTY_SNAPSHOT, ContractVersion, Snapshot


class PublishedSnapshots:
    """The newest published snapshot; watchers wait for a newer revision. Event loop only."""

    def __init__(self) -> None:
        self._published = EMPTY_SNAPSHOT
        self._changed = asyncio.Event()

    def snapshot(self) -> Snapshot:
        return self._published

    async def wait_for_change(self, after_revision: int) -> Snapshot:
        while self._published.revision <= after_revision:
            await self._changed.wait()
        return self._published

    async def get(self, scope: str) -> ContractVersion:
        found = self._published.contracts.get(scope)
        if found is None:
            raise NotFound(f"scope {scope!r} has no contract", field="scope")
        return found

    async def list(self) -> Snapshot:
        return self._published

    def _publish(self, snapshot: Snapshot) -> None:
        """Publish ``snapshot`` if it is newer, and wake every waiter (an older one is ignored)."""
        if snapshot.revision > self._published.revision:
            self._published = snapshot
            self._changed.set()
            self._changed = asyncio.Event()
