"""Passive ejection and probe scheduling of the pure health tracker (SPEC §5)."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given
from hypothesis import strategies as st

from dataplane.errors import UpstreamUnreachable
from dataplane.router.fleet.health import HealthPolicy, HealthTracker
from dataplane.router.fleet.probing import WorkerHealth


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _tracker(**kw: float) -> tuple[HealthTracker, Clock, list[tuple[str, bool]]]:
    clock = Clock()
    changes: list[tuple[str, bool]] = []
    policy = HealthPolicy(**kw)  # type: ignore[arg-type]
    tracker = HealthTracker(policy, clock, random.Random(7), lambda w, h: changes.append((w, h)))
    return tracker, clock, changes


def test_ejects_after_consecutive_failures() -> None:
    """The Nth consecutive transport failure ejects the worker, not before."""
    t, _, changes = _tracker(eject_after_failures=3)
    assert not t.record_failure("w")
    assert not t.record_failure("w")
    assert t.healthy("w")
    assert t.record_failure("w")
    assert not t.healthy("w")
    assert changes == [("w", False)]


def test_success_resets_the_streak() -> None:
    """A success between failures restarts the count: only consecutive failures eject."""
    t, _, _ = _tracker(eject_after_failures=3)
    for _ in range(5):
        t.record_failure("w")
        t.record_failure("w")
        t.record_success("w")
    assert t.healthy("w")
    assert t.consecutive_failures("w") == 0


def test_success_does_not_uneject() -> None:
    """A late success from an in-flight request does not bring an ejected worker back; a probe does."""
    t, _, _ = _tracker(eject_after_failures=1)
    t.record_failure("w")
    t.record_success("w")
    assert not t.healthy("w")


def test_probe_due_after_interval_and_restores() -> None:
    """An ejected worker is probed after about one interval; a good probe restores it."""
    t, clock, changes = _tracker(eject_after_failures=1, probe_interval_s=1.0, probe_jitter=0.2)
    t.record_failure("w")
    assert t.due() == []
    clock.now += 1.25
    assert t.due() == ["w"]
    assert t.record_probe("w", True)
    assert t.healthy("w")
    assert t.due() == []
    assert changes == [("w", False), ("w", True)]


def test_failed_probes_back_off_up_to_the_cap() -> None:
    """Each failed probe doubles the wait, capped at probe_interval_max_s."""
    t, clock, _ = _tracker(
        eject_after_failures=1, probe_interval_s=1.0, probe_interval_max_s=4.0, probe_jitter=0
    )
    t.record_failure("w")
    waits = []
    for _ in range(5):
        wait = t.next_due_in()
        assert wait is not None
        waits.append(wait)
        clock.now += wait
        assert t.due() == ["w"]
        assert not t.record_probe("w", False)
    assert waits == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_nothing_ejected_means_nothing_due() -> None:
    """With every worker healthy there is no probe to schedule."""
    t, _, _ = _tracker()
    t.record_failure("w")
    assert t.next_due_in() is None
    assert t.ejected() == []


@given(st.floats(min_value=0.01, max_value=30), st.floats(min_value=0, max_value=0.9), st.integers(0, 2**32))
def test_jittered_interval_stays_in_band(interval: float, jitter: float, seed: int) -> None:
    """The first probe comes within interval x [1 - jitter, 1 + jitter]."""
    clock = Clock()
    policy = HealthPolicy(
        eject_after_failures=1, probe_interval_s=interval, probe_interval_max_s=60, probe_jitter=jitter
    )
    t = HealthTracker(policy, clock, random.Random(seed))
    t.record_failure("w")
    wait = t.next_due_in()
    assert wait is not None
    assert interval * (1 - jitter) - 1e-9 <= wait <= interval * (1 + jitter) + 1e-9


class _Answer:
    def __init__(self, status: int) -> None:
        self.status = status
        self.headers: list[tuple[bytes, bytes]] = []

    def buffered_body(self) -> bytes:
        return b""


class _Pool:
    """An upstream pool whose /health fails until ``up`` is set."""

    protocol = "http1"

    def __init__(self) -> None:
        self.up = False
        self.probes = 0

    async def request(
        self, method: bytes, path: bytes, headers: object, body: bytes, *, timeout_s: float
    ) -> _Answer:
        assert (method, path) == (b"GET", b"/health")
        self.probes += 1
        if not self.up:
            raise UpstreamUnreachable()
        return _Answer(200)

    async def close(self) -> None:
        return None


class _Worker:
    def __init__(self, url: str) -> None:
        self.url = url
        self.models = ("m",)
        self.pool = _Pool()
        self.healthy = True
        self.health: HealthTracker | None = None


async def test_prober_brings_an_ejected_worker_back() -> None:
    """An ejected worker is probed with GET /health until it answers, then it is back in rotation."""
    worker = _Worker("http://w:1")
    health = WorkerHealth(
        lambda: [worker], HealthPolicy(eject_after_failures=2, probe_interval_s=0.02, probe_jitter=0)
    )
    health.attach()
    health.start()
    try:
        assert worker.health is health.tracker
        for _ in range(2):
            if worker.health.record_failure(worker.url):
                worker.healthy = False
        assert not worker.healthy
        await asyncio.sleep(0.1)
        assert worker.pool.probes >= 1
        assert not worker.healthy
        worker.pool.up = True
        for _ in range(100):
            if worker.healthy:
                break
            await asyncio.sleep(0.01)
        assert worker.healthy
        assert health.ejections == {"http://w:1": 1}
    finally:
        await health.stop()
