"""Active /health checks of workers in rotation (SPEC §5): the pure schedule and the prober."""

from __future__ import annotations

import asyncio
import random

from dataplane.errors import UpstreamTimeout
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
    return HealthTracker(policy, clock, random.Random(3), lambda w, h: changes.append((w, h))), clock, changes


def test_first_checks_are_spread_over_one_interval_then_repeat() -> None:
    """A worker's first check comes within one interval; later ones about an interval apart."""
    t, clock, _ = _tracker(check_interval_s=2.0, probe_jitter=0.0)
    t.checks_due(["w"])  # first seen: scheduled
    first = t.next_check_in()
    assert first is not None and 0.0 <= first < 2.0
    clock.now += 2.0
    assert t.take_checks_due(["w"]) == ["w"]
    assert t.take_checks_due(["w"]) == []  # in flight until recorded
    assert t.next_check_in() is None
    sent = clock.now
    clock.now += 0.01
    assert not t.record_check("w", True, sent)
    assert t.checks_due(["w"]) == []
    clock.now = sent + 2.0
    assert t.checks_due(["w"]) == ["w"]


def test_consecutive_failed_checks_eject_and_remember_when_the_worker_went_quiet() -> None:
    """N failed checks in a row eject; a good one in between restarts the count; the ejection
    keeps the time the first of those checks was sent."""
    t, _clock, changes = _tracker(check_interval_s=2.0, eject_after_failures=3, probe_jitter=0.0)
    assert not t.record_check("w", False, 10.0)
    assert not t.record_check("w", True, 12.0)
    assert not t.record_check("w", False, 14.0)
    assert not t.record_check("w", False, 16.0)
    assert t.healthy("w")
    assert t.record_check("w", False, 18.0)
    assert not t.healthy("w") and changes == [("w", False)]
    assert t.stalled_since("w") == 14.0
    assert t.checks_due(["w"]) == []  # ejected: probed back, not checked


def test_a_check_that_timed_out_is_followed_at_once() -> None:
    """The next check is scheduled from when the last one was sent: after a 2 s timeout with a
    2 s interval it is due right away."""
    t, clock, _ = _tracker(check_interval_s=2.0, probe_jitter=0.0)
    sent = clock.now
    clock.now += 2.0
    t.record_check("w", False, sent)
    assert t.checks_due(["w"]) == ["w"]


def test_check_failures_do_not_mix_with_request_failures() -> None:
    """Two failed requests and two failed checks (threshold 3) eject nobody; a good check does not
    end the request failure streak."""
    t, _, _ = _tracker(eject_after_failures=3)
    t.record_failure("w")
    t.record_failure("w")
    t.record_check("w", False, 0.0)
    t.record_check("w", False, 1.0)
    assert t.healthy("w")
    t.record_check("w", True, 2.0)
    assert t.consecutive_failures("w") == 2


def test_interval_zero_turns_checks_off() -> None:
    """--health-check-interval-s 0: nothing is ever due."""
    t, clock, _ = _tracker(check_interval_s=0.0)
    clock.now += 1000
    assert t.checks_due(["w"]) == [] and t.next_check_in() is None


class _Answer:
    def __init__(self) -> None:
        self.status = 200
        self.headers: list[tuple[bytes, bytes]] = []

    def buffered_body(self) -> bytes:
        return b""


class _Pool:
    """A worker's pool whose /health hangs while ``hung`` (until the probe timeout)."""

    protocol = "http1"

    def __init__(self) -> None:
        self.hung = False
        self.checks = 0
        self.stalled_calls: list[float] = []
        self.first_hung_check_at: float | None = None  # loop time of the first check that hung

    async def request(
        self, method: bytes, path: bytes, headers: object, body: bytes, *, timeout_s: float
    ) -> _Answer:
        self.checks += 1
        if self.hung:
            if self.first_hung_check_at is None:
                self.first_hung_check_at = asyncio.get_running_loop().time()
            await asyncio.sleep(timeout_s)
            raise UpstreamTimeout()
        return _Answer()

    def fail_stalled(self, since: float) -> int:
        self.stalled_calls.append(since)
        return 2

    async def close(self) -> None:
        return None


class _Worker:
    def __init__(self, url: str) -> None:
        self.url = url
        self.models = ("m",)
        self.pool = _Pool()
        self.healthy = True
        self.health: HealthTracker | None = None


async def test_a_hung_worker_is_ejected_and_its_stalled_requests_failed() -> None:
    """Checks every 50 ms with a 50 ms timeout: a worker whose /health hangs is ejected after 3
    checks, its pool is told to fail what stalled since the first failed check, and the healthy
    worker next to it stays in rotation."""
    hung, fine = _Worker("http://hung:1"), _Worker("http://fine:1")
    policy = HealthPolicy(check_interval_s=0.05, probe_timeout_s=0.05, probe_interval_s=10, probe_jitter=0)
    health = WorkerHealth(lambda: [hung, fine], policy)
    health.attach()
    health.start()
    try:
        await asyncio.sleep(0.2)
        assert hung.pool.checks >= 1 and fine.pool.checks >= 1
        hung.pool.hung = True
        went_quiet = asyncio.get_running_loop().time()
        for _ in range(100):
            if not hung.healthy:
                break
            await asyncio.sleep(0.02)
        assert not hung.healthy and fine.healthy
        assert len(hung.pool.stalled_calls) == 1
        # Since the first check that hung (sent after it went quiet), whenever the machine let
        # that check run: not a bound on how soon it ran.
        first = hung.pool.first_hung_check_at
        assert first is not None and first >= went_quiet
        assert abs(hung.pool.stalled_calls[0] - first) <= 0.002
        assert health.ejections == {"http://hung:1": 1}
    finally:
        await health.stop()
