"""WatchLoads fan-out: coalesced, versioned deltas with newest-wins watchers (SPEC §6).

One ticker (``run``, an app-owned background task) turns the table's changes into
serialized ``WorkerLoad`` messages (``encoding.py``) at most once per
``--load-push-interval-ms``, each encoded once and shared by every watcher, and bumps a version. It also wakes at least every
``freshness_tick_s`` so a rank going STALE is pushed though no frame arrives. Right before
each push it drains the ingest (``drain``), so what arrived since the last push is in it and
the ingest wakes once per push under a steady stream (``ingest/subscriber.py``).

A watcher remembers the version it last sent and, when woken, asks for everything newer:
the workers whose message version is newer, and the URLs removed since. A slow watcher
therefore skips intermediate states (newest wins); what it holds is bounded by the number
of workers, never a queue; nothing here waits on a stream or holds a lock while one is
written (the Broadcast slot pattern of ``controlplane.broadcast``).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from controlplane import metrics
from controlplane.broadcast import Broadcast, Subscription
from controlplane.load.convert import ViewErrors
from controlplane.load.encoding import WorkerLoadEncoder
from controlplane.load.table import LoadTable

# Removed URLs remembered for lagging watchers; one lagging further gets a full view.
MAX_REMEMBERED_REMOVALS = 10_000
MAX_FRESHNESS_TICK_S = 0.1


@dataclass(frozen=True, slots=True)
class Delta:
    """What a watcher at some version has not seen yet (``workers``: serialized ``WorkerLoad``)."""

    version: int
    full: bool
    workers: list[bytes]
    removed: list[str]

    def __bool__(self) -> bool:
        return self.full or bool(self.workers or self.removed)


class LoadHub:
    """Versioned latest ``WorkerLoad`` per worker, and the watchers waiting for them."""

    def __init__(
        self,
        table: LoadTable,
        *,
        push_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
        drain: Callable[[], None] = lambda: None,
        view_errors: ViewErrors | None = None,
    ) -> None:
        self._table = table
        self._drain = drain
        self.push_interval_s = push_interval_s
        self._clock = clock
        self._freshness_tick_s = min(MAX_FRESHNESS_TICK_S, table.stale_after_s / 4)
        self._version = 0
        self._encoder = WorkerLoadEncoder(table.stale_after_s, view_errors)
        self._latest: dict[str, tuple[int, bytes]] = {}
        self._removed: OrderedDict[str, int] = OrderedDict()
        self._removed_floor = 0  # versions <= this may have lost removals: send them a full view
        self._dirty = asyncio.Event()
        self._broadcast = Broadcast()

    @property
    def version(self) -> int:
        return self._version

    @property
    def watchers(self) -> int:
        return len(self._broadcast)

    def mark_dirty(self) -> None:
        """Something changed in the table: a push is due (called per drained batch: cheap)."""
        self._dirty.set()

    @contextmanager
    def subscribe(self) -> Iterator[Subscription]:
        with self._broadcast.subscribe() as sub:
            metrics.LOAD_WATCHERS.inc()
            try:
                yield sub
            finally:
                metrics.LOAD_WATCHERS.dec()

    def close(self) -> None:
        """Wake every watcher for the last time (shutdown)."""
        self._broadcast.close()

    # -- the ticker ---------------------------------------------------------------------

    async def run(self) -> None:
        """Push changes forever: at most once per push interval, at least a freshness check per tick."""
        last_push = float("-inf")
        while True:
            try:
                async with asyncio.timeout(self._freshness_tick_s):
                    await self._dirty.wait()
            except TimeoutError:
                pass
            wait_s = last_push + self.push_interval_s - self._clock()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            # What the ingest has not read yet goes into this push (it marks us dirty as
            # it reads: drain first, then clear). Pushes are paced from their start, so
            # the work of one does not stretch the interval.
            started = self._clock()
            self._drain()
            self._dirty.clear()
            if self.publish():
                last_push = started

    def publish(self) -> bool:
        """Turn the table's pending changes into a new version; True if there were any."""
        return self._publish(self._clock())

    def _publish(self, now: float) -> bool:
        changes = self._table.take_changes(now)
        if not changes:
            return False
        self._version += 1
        version = self._version
        watched = len(self._broadcast) > 0
        for url in changes.changed:
            ranks = self._table.rank_states(url)
            if watched and ranks is not None:
                self._latest[url] = (version, self._encoder.encode(url, ranks, now))
            else:
                # Nobody to send it to; a watcher that comes later starts from a full view.
                self._latest.pop(url, None)
        for url in changes.removed:
            self._latest.pop(url, None)
            self._encoder.forget(url)
            self._removed.pop(url, None)
            self._removed[url] = version
        while len(self._removed) > MAX_REMEMBERED_REMOVALS:
            _, dropped_version = self._removed.popitem(last=False)
            self._removed_floor = max(self._removed_floor, dropped_version)
        self._broadcast.notify()
        return True

    # -- what watchers read -------------------------------------------------------------

    def full(self) -> Delta:
        """Every worker as of now, at a version that includes every change made until now.

        The view is encoded from the table as it is, so it already shows what is still pending
        there: frames since the last push and, above all, a rank whose deadline passed before
        the ticker re-evaluated freshness (it does so once per tick, while a view computes
        freshness at ``now``). Left pending, those would be published after this version and
        sent to the new watcher as changes it has already seen (SPEC §6: after the full view,
        only changed workers). So they are published first, at this same ``now``. Other
        watchers get that version early; each watcher's stream still sends at most one
        message per push interval (``LoadServicer.WatchLoads``).
        """
        now = self._clock()
        self._publish(now)
        workers = []
        for url in self._table.urls():
            ranks = self._table.rank_states(url)
            if ranks is not None:
                workers.append(self._encoder.encode(url, ranks, now))
        return Delta(version=self._version, full=True, workers=workers, removed=[])

    def since(self, version: int) -> Delta:
        """Workers changed and URLs removed after ``version`` (a full view if that is too old)."""
        if version < self._removed_floor:
            return self.full()
        workers = [encoded for v, encoded in self._latest.values() if v > version]
        removed = [url for url, v in self._removed.items() if v > version and url not in self._table]
        return Delta(version=self._version, full=False, workers=workers, removed=removed)
