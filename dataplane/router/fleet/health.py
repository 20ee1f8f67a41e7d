"""Worker health: passive ejection on consecutive failures, active ``/health`` probing back (SPEC §5).

"A worker that fails repeatedly is ejected and probed back." Two parts:

* ``HealthTracker`` (pure, clock and randomness injected): counts consecutive transport failures
  per worker (unreachable, dropped mid-answer, timed out; never a 4xx or any answer the worker
  gave), ejects at ``eject_after_failures``, schedules probes for ejected workers with jittered,
  growing intervals (many routers must not probe in lock-step), and restores a worker on the first
  successful probe.
* ``HealthProber`` (adapter): a background task that, for every ejected worker whose probe is
  due, sends ``GET /health`` through that worker's own upstream pool (so over its protocol:
  h2c or HTTP/1.1) and feeds the outcome back.

The request path only reads ``worker.healthy`` and reports outcomes through ``worker.record_*``;
with no healthy worker left for a model it answers ``no_healthy_workers`` (SPEC §5).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from dataplane.errors import RouterError
from dataplane.router.upstream.base import UpstreamPool

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """Ejection and probing knobs (defaults: eject after 3 failures, probe every ~1 s, up to 10 s)."""

    eject_after_failures: int = 3
    probe_interval_s: float = 1.0
    probe_interval_max_s: float = 10.0
    probe_jitter: float = 0.2  # each interval is scaled by a factor in [1 - j, 1 + j]
    probe_timeout_s: float = 2.0


@dataclass(slots=True)
class _State:
    failures: int = 0
    ejected: bool = False
    probe_failures: int = 0
    next_probe_at: float = 0.0


@dataclass
class HealthTracker:
    """The per-worker health state machine: HEALTHY --N failures--> EJECTED --probe ok--> HEALTHY."""

    policy: HealthPolicy = field(default_factory=HealthPolicy)
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    on_change: Callable[[str, bool], None] | None = None  # (worker, healthy) on every transition
    _states: dict[str, _State] = field(default_factory=dict)

    def healthy(self, worker: str) -> bool:
        state = self._states.get(worker)
        return state is None or not state.ejected

    def consecutive_failures(self, worker: str) -> int:
        state = self._states.get(worker)
        return 0 if state is None else state.failures

    def ejected(self) -> list[str]:
        return [w for w, s in self._states.items() if s.ejected]

    def record_success(self, worker: str) -> None:
        """The worker answered: its failure streak ends (a success never un-ejects: probes do)."""
        state = self._states.get(worker)
        if state is not None and not state.ejected:
            state.failures = 0

    def record_failure(self, worker: str) -> bool:
        """A transport failure; True when this one ejects the worker."""
        state = self._states.setdefault(worker, _State())
        state.failures += 1
        if state.ejected or state.failures < self.policy.eject_after_failures:
            return False
        state.ejected = True
        state.probe_failures = 0
        state.next_probe_at = self.clock() + self._interval(0)
        self._changed(worker, False)
        return True

    def due(self) -> list[str]:
        """Ejected workers whose next probe is due now."""
        now = self.clock()
        return [w for w, s in self._states.items() if s.ejected and s.next_probe_at <= now]

    def next_due_in(self) -> float | None:
        """Seconds until the next probe is due (0 if overdue), None if nothing is ejected."""
        times = [s.next_probe_at for s in self._states.values() if s.ejected]
        return None if not times else max(0.0, min(times) - self.clock())

    def record_probe(self, worker: str, ok: bool) -> bool:
        """A probe's outcome; True when it restores the worker."""
        state = self._states.get(worker)
        if state is None or not state.ejected:
            return False
        if ok:
            state.ejected = False
            state.failures = 0
            self._changed(worker, True)
            return True
        state.probe_failures += 1
        state.next_probe_at = self.clock() + self._interval(state.probe_failures)
        return False

    def forget(self, worker: str) -> None:
        """The worker left the set."""
        self._states.pop(worker, None)

    def _interval(self, attempt: int) -> float:
        p = self.policy
        base = min(p.probe_interval_s * float(1 << min(attempt, 16)), p.probe_interval_max_s)
        return base * (1.0 + p.probe_jitter * (2.0 * self.rng.random() - 1.0))

    def _changed(self, worker: str, healthy: bool) -> None:
        if self.on_change is not None:
            self.on_change(worker, healthy)


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
    """Background task probing ejected workers back (owned by the router app, cancelled on stop)."""

    def __init__(
        self,
        tracker: HealthTracker,
        targets: Callable[[], Iterable[ProbeTarget]],
        *,
        idle_wait_s: float = 0.5,
    ) -> None:
        self._tracker = tracker
        self._targets = targets
        self._idle_wait_s = idle_wait_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="health-prober")

    def poke(self) -> None:
        """A worker was just ejected: recompute the schedule now."""
        self._wake.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            wait = self._tracker.next_due_in()
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._idle_wait_s if wait is None else wait):
                    await self._wake.wait()
            due = set(self._tracker.due())
            if not due:
                continue
            targets = [t for t in self._targets() if t.url in due]
            results = await asyncio.gather(*(self._probe(t) for t in targets))
            for target, ok in zip(targets, results, strict=True):
                self._tracker.record_probe(target.url, ok)

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
        self.tracker = HealthTracker(policy or HealthPolicy(), on_change=self._changed)
        self.prober = HealthProber(self.tracker, workers)
        self.ejections: dict[str, int] = {}

    def attach(self) -> None:
        urls = set()
        for worker in self._workers():
            worker.health = self.tracker
            # A worker with no models (a placeholder awaiting discovery) is never in rotation.
            worker.healthy = bool(worker.models) and self.tracker.healthy(worker.url)
            urls.add(worker.url)
        for url in set(self.tracker.ejected()) - urls:
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
