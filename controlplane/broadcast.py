"""Latest-value fan-out to watch streams (SPEC §6; the gRPC health servicer's watch pattern).

Each subscriber owns one slot: an ``asyncio.Event`` that ``notify`` sets. A subscriber clears
its slot, reads the newest value from wherever it lives and writes it; notifications that come
while it is writing collapse into one. So a slow watcher skips to the newest value, memory per
watcher is constant (never a queue), and ``notify`` never waits on any stream nor holds a lock
while one is written.

A leaf below ``server/`` and ``load/``: WatchContracts (``server.contract_views``) and WatchLoads
(``load.hub``) both fan out through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class Subscription:
    """One watcher's slot."""

    def __init__(self, broadcast: Broadcast) -> None:
        self._broadcast = broadcast
        self._pending = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._broadcast.closed

    def clear(self) -> None:
        """Call before reading the newest value: a later notify wakes the next ``wait``."""
        self._pending.clear()

    async def wait(self) -> None:
        """Until notified (or the broadcast closes) since the last ``clear``."""
        await self._pending.wait()

    def _notify(self) -> None:
        self._pending.set()


class Broadcast:
    """A set of subscriptions woken together."""

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()
        self.closed = False

    def __len__(self) -> int:
        return len(self._subscriptions)

    def notify(self) -> None:
        for sub in self._subscriptions:
            sub._notify()

    def close(self) -> None:
        """Wake everyone for the last time; ``Subscription.closed`` is then true."""
        self.closed = True
        self.notify()

    @contextmanager
    def subscribe(self) -> Iterator[Subscription]:
        """A slot for the duration of the ``with`` block (removed on cancel as well)."""
        sub = Subscription(self)
        self._subscriptions.add(sub)
        try:
            yield sub
        finally:
            self._subscriptions.discard(sub)
