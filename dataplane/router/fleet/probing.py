"""Worker health, the I/O: the background task that checks workers in rotation and probes
ejected ones back with ``GET /health``, over each worker's own upstream pool (SPEC §5).

The decisions (who is due, who is ejected, who is back) are ``health.HealthTracker``'s; this
module sends the probes, feeds their outcomes back, and flips ``worker.healthy``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

import structlog

from dataplane.errors import RouterError
from dataplane.router.fleet.health import HealthPolicy, HealthTracker
from dataplane.router.upstream.base import UpstreamPool

log = structlog.get_logger(__name__)


class ProbeTarget(Protocol):
    """What the prober needs from a worker (``workers.Worker`` fits): identity and upstream pool."""

    @property
    def url(self) -> str: ...

    @property
    def models(self) -> tuple[str, ...]: ...

    @property
    def pool(self) -> UpstreamPool: ...


async def probe_health(pool: UpstreamPool, timeout_s: float) -> bool:
    """``GET /health`` over the worker's own protocol; True on a 2xx answer read to the end."""
    response = await pool.request(b"GET", b"/health", [], b"", timeout_s=timeout_s)
    if response.buffered_body() is None:
        async for _ in response.chunks():
            pass
    return 200 <= response.status < 300


class HealthProber:
    """Background task probing ejected workers back and checking those in rotation (owned by the
    router app, cancelled on stop)."""

    def __init__(
        self,
        tracker: HealthTracker,
        targets: Callable[[], Iterable[HealthSubject]],
        *,
        idle_wait_s: float = 0.5,
    ) -> None:
        self._tracker = tracker
        self._targets = targets
        self._idle_wait_s = idle_wait_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._probes: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="health-prober")

    def poke(self) -> None:
        """A worker was just ejected: recompute the schedule now."""
        self._wake.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        probes, self._probes = self._probes, set()
        for running in (task, *probes):
            if running is not None:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

    async def _run(self) -> None:
        tracker = self._tracker
        while True:
            targets = {t.url: t for t in self._targets()}
            for url in tracker.take_due():
                if url in targets:
                    self._spawn(self._probe_back(targets[url]))
                else:
                    tracker.forget(url)
            in_rotation = [t.url for t in targets.values() if t.healthy and t.models]
            for url in tracker.take_checks_due(in_rotation):
                self._spawn(self._check(targets[url]))
            # Woken early by an ejection (poke) and by every probe or check that completes.
            waits = [w for w in (tracker.next_due_in(), tracker.next_check_in()) if w is not None]
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(waits, default=self._idle_wait_s)):
                    await self._wake.wait()

    def _spawn(self, probe: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(probe, name="health-probe")
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _probe_back(self, target: HealthSubject) -> None:
        self._tracker.record_probe(target.url, await self._probe(target))
        self._wake.set()  # its next probe (if any) is scheduled now

    async def _check(self, target: HealthSubject) -> None:
        tracker = self._tracker
        sent_at = tracker.clock()
        ok = await self._probe(target)
        if tracker.record_check(target.url, ok, sent_at):
            # Hung (not answering /health for N checks): what it has not sent a byte of since the
            # first failed check will not come; answer those requests now (504).
            stalled = target.pool.fail_stalled(tracker.stalled_since(target.url))
            log.warning(
                "worker ejected: its /health checks failed",
                worker=target.url,
                checks=tracker.policy.eject_after_failures,
                stalled_requests_timed_out=stalled,
            )
        self._wake.set()  # its next check is scheduled now

    async def _probe(self, target: ProbeTarget) -> bool:
        try:
            return await probe_health(target.pool, self._tracker.policy.probe_timeout_s)
        except (RouterError, OSError, TimeoutError):
            return False


class HealthSubject(ProbeTarget, Protocol):
    """A worker as health sees it (``workers.Worker`` fits): probe target plus the two flags."""

    healthy: bool
    health: HealthTracker | None


class WorkerHealth:
    """The router's health component: one tracker and one prober over the current worker set.

    ``attach`` (called after every worker-set change) points each worker at the tracker, so the
    request path's ``worker.record_failure()`` feeds passive ejection; transitions flip
    ``worker.healthy``, which is all the balancer reads.
    """

    def __init__(
        self, workers: Callable[[], Iterable[HealthSubject]], policy: HealthPolicy | None = None
    ) -> None:
        self._workers = workers
        # On the loop's clock: check times are compared with the upstream pools' (fail_stalled).
        self.tracker = HealthTracker(policy or HealthPolicy(), clock=_loop_time, on_change=self._changed)
        self.prober = HealthProber(self.tracker, workers)
        self.ejections: dict[str, int] = {}

    def attach(self) -> None:
        urls = set()
        for worker in self._workers():
            worker.health = self.tracker
            # A worker with no models (a placeholder awaiting discovery) is never in rotation.
            worker.healthy = bool(worker.models) and self.tracker.healthy(worker.url)
            urls.add(worker.url)
        for url in set(self.tracker.known()) - urls:
            self.tracker.forget(url)

    def start(self) -> None:
        self.prober.start()

    async def stop(self) -> None:
        await self.prober.stop()

    def _changed(self, url: str, healthy: bool) -> None:
        for worker in self._workers():
            if worker.url == url:
                worker.healthy = healthy
        if healthy:
            log.info("worker back in rotation after a good /health probe", worker=url)
        else:
            self.ejections[url] = self.ejections.get(url, 0) + 1
            log.warning("worker ejected after consecutive failures", worker=url)
            self.prober.poke()


def _loop_time() -> float:
    """The running loop's clock (the pools' ``loop.time()``), else the monotonic clock."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()
