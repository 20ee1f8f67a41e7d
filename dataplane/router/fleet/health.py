"""Worker health, the decisions: passive ejection on consecutive failures, active checks, probing
back (SPEC §5). Pure: the clock and the randomness are injected; the I/O is ``probing``.

"A worker that fails repeatedly is ejected and probed back." Two parts:

* ``HealthTracker`` (pure, clock and randomness injected): counts consecutive transport failures
  per worker (unreachable, dropped mid-answer, timed out; never a 4xx or any answer the worker
  gave), ejects at ``eject_after_failures``, schedules probes for ejected workers with jittered,
  growing intervals (many routers must not probe in lock-step), and restores a worker on the first
  successful probe. It also schedules the active checks of workers in rotation (a worker
  that hangs, e.g. SIGSTOPped, fails no request quickly, so passive ejection alone never
  sees it): every ``check_interval_s`` (jittered), ``eject_after_failures`` failed checks in a row
  eject it. Their failures are counted apart from the requests', so a worker that answers
  ``/health`` but drops requests is still ejected passively.
* ``probing.HealthProber`` (the adapter, its own module): a background task that sends ``GET /health`` through a worker's own
  upstream pool (so over its protocol: h2c or HTTP/1.1) for every check or probe that is due, each
  probe on its own task (a hung worker's probe delays nobody else's), and feeds the outcome back.
  A worker ejected by its checks has its stalled exchanges (nothing heard from it since its first
  failed check) timed out at once (``UpstreamPool.fail_stalled``): they would otherwise wait for
  ``--upstream-ttfb-timeout-s``; exchanges still receiving bytes go on.

The request path only reads ``worker.healthy`` and reports outcomes through ``worker.record_*``;
with no healthy worker left for a model it answers ``no_healthy_workers`` (SPEC §5).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """Ejection and probing knobs (defaults: eject after 3 failures, probe every ~1 s, up to 10 s;
    check workers in rotation every ~2 s, so a hung one is ejected in about 6 to 8 s)."""

    eject_after_failures: int = 3
    probe_interval_s: float = 1.0
    probe_interval_max_s: float = 10.0
    probe_jitter: float = 0.2  # each interval is scaled by a factor in [1 - j, 1 + j]
    probe_timeout_s: float = 2.0
    check_interval_s: float = 2.0  # 0: no active checks of workers in rotation


@dataclass(slots=True)
class _State:
    failures: int = 0
    ejected: bool = False
    probe_failures: int = 0
    next_probe_at: float = 0.0
    check_failures: int = 0  # failed checks in a row while in rotation
    next_check_at: float = 0.0
    stalled_since: float = 0.0  # when the first of those failed checks was sent (caller's clock)


@dataclass
class HealthTracker:
    """The per-worker health state machine: HEALTHY --N failures--> EJECTED --probe ok--> HEALTHY."""

    policy: HealthPolicy
    clock: Callable[[], float]  # seconds, monotonic (the prober passes the event loop's)
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
        # A probe in flight (``take_due``) is due at infinity until its outcome is recorded.
        times = [s.next_probe_at for s in self._states.values() if s.ejected and s.next_probe_at < math.inf]
        return None if not times else max(0.0, min(times) - self.clock())

    def checks_due(self, workers: Iterable[str]) -> list[str]:
        """Workers in rotation among ``workers`` whose next active check is due now."""
        if not self.policy.check_interval_s:
            return []
        now = self.clock()
        due = []
        for worker in workers:
            state = self._states.get(worker)
            if state is None:
                # First seen: its first check after a jittered fraction of the interval, so a
                # fleet of routers started together does not check in step.
                state = self._states[worker] = _State()
                state.next_check_at = now + self.rng.random() * self.policy.check_interval_s
            if not state.ejected and state.next_check_at <= now:
                due.append(worker)
        return due

    def next_check_in(self) -> float | None:
        """Seconds until the next active check of a worker in rotation (0 if overdue)."""
        if not self.policy.check_interval_s:
            return None
        times = [
            s.next_check_at for s in self._states.values() if not s.ejected and s.next_check_at < math.inf
        ]
        return None if not times else max(0.0, min(times) - self.clock())

    def record_check(self, worker: str, ok: bool, sent_at: float) -> bool:
        """An active check's outcome (``sent_at``: when it was sent); True when this failure
        ejects the worker."""
        state = self._states.setdefault(worker, _State())
        p = self.policy
        # Scheduled from when it was sent: after a check that timed out (it took longer than
        # the interval) the next one goes at once, so a hung worker is out in about N timeouts.
        state.next_check_at = sent_at + p.check_interval_s * (
            1.0 + p.probe_jitter * (2.0 * self.rng.random() - 1.0)
        )
        if state.ejected:  # ejected meanwhile (passively): probes bring it back
            return False
        if ok:
            state.check_failures = 0
            return False
        if not state.check_failures:
            state.stalled_since = sent_at
        state.check_failures += 1
        if state.check_failures < p.eject_after_failures:
            return False
        state.check_failures = 0
        state.ejected = True
        state.probe_failures = 0
        state.next_probe_at = self.clock() + self._interval(0)
        self._changed(worker, False)
        return True

    def stalled_since(self, worker: str) -> float:
        """When the first of the failed checks that ejected ``worker`` was sent."""
        state = self._states.get(worker)
        return 0.0 if state is None else state.stalled_since

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

    def known(self) -> list[str]:
        """Every worker with a state (failures, an ejection or a check schedule)."""
        return list(self._states)

    def take_due(self) -> list[str]:
        """``due()`` for a prober that probes each on its own task: the workers returned are not
        due again until their outcome is recorded (``record_probe``)."""
        due = self.due()
        for worker in due:
            self._states[worker].next_probe_at = math.inf
        return due

    def take_checks_due(self, workers: Iterable[str]) -> list[str]:
        """``checks_due`` likewise: not due again until ``record_check``."""
        due = self.checks_due(workers)
        for worker in due:
            self._states[worker].next_check_at = math.inf
        return due

    def _interval(self, attempt: int) -> float:
        p = self.policy
        base = min(p.probe_interval_s * float(1 << min(attempt, 16)), p.probe_interval_max_s)
        return base * (1.0 + p.probe_jitter * (2.0 * self.rng.random() - 1.0))

    def _changed(self, worker: str, healthy: bool) -> None:
        if self.on_change is not None:
            self.on_change(worker, healthy)
