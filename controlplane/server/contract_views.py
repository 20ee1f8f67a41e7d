"""The contract set as protobuf, converted once per revision and shared by every watcher.

``current()`` reads the store's newest snapshot (no I/O) and returns its cached
``WatchContractsResponse``; ``run()`` (a background task owned by the app) wakes the watchers'
slots on every store change (ARCHITECTURE.md: convert protobuf once per snapshot).
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from controlplane.broadcast import Broadcast
from controlplane.metrics import CONTRACT_REVISION
from controlplane.server.convert import snapshot_to_watch_response
from controlplane.store import Snapshot, Store
from controlplane.v1 import contract_pb2

log = structlog.get_logger("controlplane.contracts")


@dataclass(frozen=True, slots=True)
class ContractView:
    snapshot: Snapshot
    response: contract_pb2.WatchContractsResponse

    @property
    def revision(self) -> int:
        return self.snapshot.revision


class ContractViews:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._view: ContractView | None = None
        self.broadcast = Broadcast()

    def current(self) -> ContractView:
        snapshot = self._store.snapshot()
        view = self._view
        if view is None or view.snapshot is not snapshot:
            view = ContractView(snapshot, snapshot_to_watch_response(snapshot))
            # Keep the newest only: a reader holding an older snapshot must not evict it.
            if self._view is None or snapshot.revision >= self._view.revision:
                self._view = view
        return view

    @property
    def revision(self) -> int:
        return self._store.snapshot().revision

    async def run(self) -> None:
        """Wake every watcher once per store change (collapsed under bursts)."""
        revision = self._store.snapshot().revision
        CONTRACT_REVISION.set(revision)
        while True:
            revision = (await self._store.wait_for_change(revision)).revision
            CONTRACT_REVISION.set(revision)
            self.broadcast.notify()

    def close(self) -> None:
        self.broadcast.close()
