"""Standalone ``--worker``s that could not be discovered at startup while others could (SPEC §5).

A fleet must not fail to start because one of its workers is down: when at least one ``--worker``
answers discovery, the router starts with it, and every worker that did not answer joins the set
as a placeholder (its URL and a provisional protocol, no models: the balancer never picks it and
``fleetplane_worker_healthy`` reports it 0). ``LateDiscovery`` retries the discovery of those in
the background (growing, jittered intervals) and applies the real spec — protocol probed,
models read — as soon as the worker answers. When no worker answers at all, startup still fails
with the first error (the operator named only unreachable workers: most likely a typo).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Sequence

import structlog

from dataplane.router.fleet.discovery import DiscoveryError, discover
from dataplane.router.fleet.workers import H2C, HTTP1, WorkerAddress, WorkerSpec

log = structlog.get_logger(__name__)


def placeholder(url: str) -> WorkerSpec:
    """A worker known by URL only: provisional protocol, no models (never chosen)."""
    address = WorkerAddress.parse(url)
    return WorkerSpec(address.url, H2C if address.forced_h2c else HTTP1, ())


async def discover_fleet(
    urls: Sequence[str], discover_one: Callable[[str], Awaitable[WorkerSpec]] = discover
) -> tuple[list[WorkerSpec], list[str]]:
    """(discovered specs, URLs that did not answer). Raises ``WorkerUrlError`` for a malformed
    URL and the first ``DiscoveryError`` when no worker could be discovered."""
    results = await asyncio.gather(*(discover_one(u) for u in urls), return_exceptions=True)
    specs: list[WorkerSpec] = []
    pending: list[str] = []
    first_error: DiscoveryError | None = None
    for url, result in zip(urls, results, strict=True):
        if isinstance(result, DiscoveryError):
            pending.append(url)
            first_error = first_error or result
        elif isinstance(result, BaseException):
            raise result
        else:
            specs.append(result)
    if first_error is not None and not specs:
        raise first_error
    return specs, pending


class LateDiscovery:
    """Background re-discovery of placeholder workers; ``apply`` installs each completed set."""

    def __init__(
        self,
        known: Sequence[WorkerSpec],
        pending: Sequence[str],
        apply: Callable[[list[WorkerSpec]], None],
        *,
        discover_one: Callable[[str], Awaitable[WorkerSpec]] = discover,
        interval_s: float = 1.0,
        max_interval_s: float = 10.0,
    ) -> None:
        self._known = list(known)
        self._pending = {url: placeholder(url) for url in pending}
        self._apply = apply
        self._discover = discover_one
        self._interval_s = interval_s
        self._max_interval_s = max_interval_s
        self._task: asyncio.Task[None] | None = None

    def specs(self) -> list[WorkerSpec]:
        """The set to apply now: discovered workers plus placeholders for the pending ones."""
        return [*self._known, *self._pending.values()]

    def start(self) -> None:
        if self._pending and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="late-discovery")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        interval = self._interval_s
        while self._pending:
            await asyncio.sleep(interval * random.uniform(0.8, 1.2))
            found = False
            for url in list(self._pending):
                try:
                    spec = await self._discover(url)
                except DiscoveryError:
                    continue
                del self._pending[url]
                self._known.append(spec)
                found = True
                log.info(
                    "late worker registered", url=spec.url, protocol=spec.protocol, models=list(spec.models)
                )
            if found:
                self._apply(self.specs())
            interval = min(interval * 2, self._max_interval_s)
