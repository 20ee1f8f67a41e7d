"""Noticing clients that went away while their request waits (queue, worker head, next chunk).

The shared HTTP server marks a responder ``disconnected`` but does not interrupt its handler. A
watcher task per request would cost more than the rest of the request path, so one sweeper
task scans the watched requests every ``interval_s`` and cancels the handler task of each whose
client is gone. Cancellation then does the rest where the handler is waiting: the admission
queue entry is removed, the upstream exchange is aborted (h1: connection closed, h2:
RST_STREAM), the slot and in-flight counts are released by the handler's ``finally`` blocks.

Per request this is one dict insert and one delete; detection lags by at most ``interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from dataplane.http import Responder


class DisconnectSweeper:
    """Cancels the handler of every watched request whose client disconnected."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self._watched: dict[Responder, Callable[[], object]] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(self, responder: Responder, on_gone: Callable[[], object]) -> None:
        self._watched[responder] = on_gone

    def unwatch(self, responder: Responder) -> None:
        self._watched.pop(responder, None)

    def __len__(self) -> int:
        return len(self._watched)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="disconnect-sweeper")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def sweep(self) -> int:
        """One scan; returns how many handlers were cancelled."""
        gone = [r for r in self._watched if r.disconnected]
        for responder in gone:
            on_gone = self._watched.pop(responder)
            on_gone()
        return len(gone)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            if self._watched:
                self.sweep()
