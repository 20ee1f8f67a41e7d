"""The load table (pure): per-rank frame accounting, per-worker sums and freshness (SPEC §6, §7).

No I/O and no clock of its own: every call that depends on time takes ``now`` (monotonic
seconds), so freshness is tested with an injected clock. The ZMQ adapter
(``ingest/subscriber.py``) feeds it decoded frames; the watch hub (``hub.py``) asks it which
workers changed since the last push.

Sequence rules (SPEC §7): the first frame of a subscription sets the baseline; a forward
jump counts the skipped frames as dropped; a sequence that does not advance means the
publisher restarted (its counter starts again at 0), which resets the baseline without
counting drops (frames a new publisher sent before we reconnected were never ours). So does
a publisher closing its connection: the first frame after we reconnect is a restart, whatever
its sequence (``record_publisher_left``).
Malformed frames received since the last good one took sequence numbers of that jump:
they were received (and counted as malformed), not lost, so they are not dropped too.

Change detection for deltas: a worker is *changed* when it received a frame (good or
malformed), when the freshness of any of its ranks changed, or when its registration
changed. Every frame counts, not only changed values: a heartbeat is a newer observation,
and routers add their own in-flight count "since the last view" (SPEC §7).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from controlplane.load.wire import LoadStat

# The largest count a rank keeps: the int64 fields of ``RankLoad`` (sequence numbers are below it
# by the wire format). Counts that grow by one per frame never get there; a gap can.
COUNTER_MAX = 2**63 - 1


class Freshness(enum.IntEnum):
    """Numbered as the protobuf ``Freshness`` enum so conversion is an int cast."""

    UNKNOWN = 1
    FRESH = 2
    STALE = 3


class FrameOutcome(enum.Enum):
    """What one received frame did to its rank (the ``outcome`` label of the frame counter)."""

    OK = "ok"
    GAP = "gap"
    RESTART = "restart"
    MALFORMED = "malformed"


@dataclass(slots=True, eq=False)
class RankState:
    """Mutable accounting of one (worker, dp rank) subscription."""

    worker_url: str
    dp_rank: int
    endpoint: str
    stat: LoadStat | None = None
    seq: int = -1
    last_rx: float | None = None
    dropped_frames: int = 0
    publisher_restarts: int = 0
    frames_received: int = 0
    malformed_frames: int = 0
    freshness: Freshness = Freshness.UNKNOWN
    # False until the first frame after (re)subscribing: that frame only sets the baseline.
    has_baseline: bool = False
    # The publisher closed its connection (its engine stopped or restarted): the first frame
    # after we reconnect comes from a new publisher, a restart whatever its seq.
    publisher_left: bool = False
    # Why the ingest is not connected to the publisher ("" while connected).
    connect_error: str = ""
    # Malformed frames since the last good one (non-zero: an episode, logged once). A later
    # jump of the sequence is explained by them first: a frame received as garbage is
    # malformed, not also dropped.
    malformed_run: int = 0


@dataclass(frozen=True, slots=True)
class RankView:
    """One rank as shown to watchers."""

    dp_rank: int
    endpoint: str
    num_running_reqs: int
    num_waiting_reqs: int
    num_tokens: int
    max_total_num_tokens: int
    seq: int
    age_s: float
    dropped_frames: int
    publisher_restarts: int
    freshness: Freshness
    frames_received: int
    malformed_frames: int
    connect_error: str = ""
    # SGLang 0.5.23's appended counts (SPEC §7); None: the last frame had six positions.
    num_waiting_uncached_tokens: int | None = None
    num_total_tokens: int | None = None
    max_running_requests: int | None = None
    total_prefill_uncached_tokens: int | None = None
    total_prefill_busy_us: int | None = None


# The appended LoadStat counts, in wire order: each is summed per worker (tokens and requests add
# up over ranks, and so do the cumulative prefill counters whose deltas give the prefill rate).
APPENDED = (
    "num_waiting_uncached_tokens",
    "num_total_tokens",
    "max_running_requests",
    "total_prefill_uncached_tokens",
    "total_prefill_busy_us",
)


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker summed over its ranks; an appended count is summed only when every rank sent it."""

    url: str
    num_running_reqs: int
    num_waiting_reqs: int
    num_tokens: int
    max_total_num_tokens: int
    freshness: Freshness
    age_s: float
    ranks: tuple[RankView, ...]
    num_waiting_uncached_tokens: int | None = None
    num_total_tokens: int | None = None
    max_running_requests: int | None = None
    total_prefill_uncached_tokens: int | None = None
    total_prefill_busy_us: int | None = None


def appended_sums(stats: Sequence[LoadStat | None]) -> tuple[int | None, ...]:
    """The per-worker sums of the appended counts: None where a rank lacks one (or has no stat,
    or there is no rank)."""
    if not stats:
        return (None,) * len(APPENDED)
    sums: list[int | None] = []
    for name in APPENDED:
        total: int | None = 0
        for stat in stats:
            value = None if stat is None else getattr(stat, name)
            if value is None:
                total = None
                break
            total += value
        sums.append(total)
    return tuple(sums)


@dataclass(frozen=True, slots=True)
class Changes:
    """URLs of workers changed and removed since the previous ``take_changes``."""

    changed: tuple[str, ...]
    removed: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.changed or self.removed)


@dataclass(slots=True)
class _Worker:
    url: str
    ranks: list[RankState] = field(default_factory=list)


class LoadTable:
    """Every registered worker's ranks; the single owner of load state in the control plane."""

    def __init__(self, stale_after_s: float) -> None:
        if stale_after_s <= 0:
            raise ValueError(f"stale_after_s must be > 0, got {stale_after_s}")
        self.stale_after_s = stale_after_s
        self._workers: dict[str, _Worker] = {}
        self._dirty: set[str] = set()
        self._removed: set[str] = set()

    # -- registration -------------------------------------------------------------------

    def set_worker(self, url: str, endpoints: Sequence[str]) -> list[RankState]:
        """Add or update a worker; returns its rank states (index = dp rank).

        A rank whose endpoint is unchanged keeps its state and counters (a re-registration
        reconnects, so its next frame only re-sets the baseline); a rank whose endpoint
        changed starts over as UNKNOWN.
        """
        old = self._workers.get(url)
        previous = {r.dp_rank: r for r in old.ranks} if old is not None else {}
        ranks: list[RankState] = []
        for dp_rank, endpoint in enumerate(endpoints):
            kept = previous.get(dp_rank)
            if kept is not None and kept.endpoint == endpoint:
                kept.has_baseline = False
                kept.publisher_left = False
                ranks.append(kept)
            else:
                ranks.append(RankState(worker_url=url, dp_rank=dp_rank, endpoint=endpoint))
        self._workers[url] = _Worker(url=url, ranks=ranks)
        self._removed.discard(url)
        self._dirty.add(url)
        return ranks

    def remove_worker(self, url: str) -> bool:
        """Forget a worker; it is reported in the next ``take_changes().removed``."""
        if self._workers.pop(url, None) is None:
            return False
        self._dirty.discard(url)
        self._removed.add(url)
        return True

    def urls(self) -> list[str]:
        return sorted(self._workers)

    def __contains__(self, url: object) -> bool:
        return url in self._workers

    def __len__(self) -> int:
        return len(self._workers)

    # -- ingest (called once per frame: keep it cheap) ------------------------------------

    def record_frame(self, rank: RankState, seq: int, stat: LoadStat, now: float) -> FrameOutcome:
        """Account one well-formed frame of ``rank``."""
        outcome = FrameOutcome.OK
        if rank.has_baseline:
            expected = rank.seq + 1
            if seq > expected:
                lost = seq - expected - rank.malformed_run
                if lost > 0:
                    # Saturating: two jumps to 2**63 - 1 would pass what the int64 field of
                    # WatchLoads can carry, and that rank is broken beyond counting.
                    rank.dropped_frames = min(COUNTER_MAX, rank.dropped_frames + lost)
                    outcome = FrameOutcome.GAP
            elif seq < expected:
                rank.publisher_restarts += 1
                outcome = FrameOutcome.RESTART
        elif rank.publisher_left:
            rank.publisher_left = False
            rank.publisher_restarts += 1
            outcome = FrameOutcome.RESTART
        rank.has_baseline = True
        rank.seq = seq
        rank.stat = stat
        rank.last_rx = now
        rank.frames_received += 1
        rank.freshness = Freshness.FRESH
        rank.malformed_run = 0
        self._dirty.add(rank.worker_url)
        return outcome

    def record_publisher_left(self, rank: RankState) -> None:
        """The publisher closed its connection (FIN or reset), so its process or socket went away.

        A publisher's sequence lives as long as its socket, so whoever we reach next starts
        a new one: its first frame sets the baseline and counts as a restart. Comparing it
        with the old sequence would count, as dropped, what the new publisher sent before we
        were subscribed again (a PUB discards frames without subscribers: never ours), and
        would miss the restart when the old publisher had sent fewer frames than that.
        """
        if rank.has_baseline:
            rank.has_baseline = False
            rank.publisher_left = True

    def record_connect_error(self, rank: RankState, error: str) -> None:
        """Why the ingest cannot reach ``rank``'s publisher ("" once connected); pushed on change only."""
        if rank.connect_error != error:
            rank.connect_error = error
            self._dirty.add(rank.worker_url)

    def record_malformed(self, rank: RankState) -> bool:
        """Count a malformed frame; True when it starts a new episode (the one to log)."""
        rank.malformed_frames += 1
        rank.malformed_run += 1
        self._dirty.add(rank.worker_url)
        return rank.malformed_run == 1

    # -- time ---------------------------------------------------------------------------

    def refresh(self, now: float) -> int:
        """Re-evaluate freshness at ``now``; marks workers whose ranks changed state.

        Returns how many ranks went stale (the periodic tick that pushes STALE even when
        no frame arrives, SPEC §6).
        """
        deadline = now - self.stale_after_s
        went_stale = 0
        for worker in self._workers.values():
            for rank in worker.ranks:
                if rank.freshness is Freshness.FRESH and rank.last_rx is not None and rank.last_rx < deadline:
                    rank.freshness = Freshness.STALE
                    self._dirty.add(worker.url)
                    went_stale += 1
        return went_stale

    # -- views --------------------------------------------------------------------------

    def take_changes(self, now: float) -> Changes:
        """URLs of the workers changed since the last call (freshness re-evaluated at ``now``)
        and of those removed; the caller builds views only if someone is watching."""
        self.refresh(now)
        changes = Changes(changed=tuple(sorted(self._dirty)), removed=tuple(sorted(self._removed)))
        self._dirty.clear()
        self._removed.clear()
        return changes

    def rank_states(self, url: str) -> Sequence[RankState] | None:
        """The live rank states of ``url`` (read-only use: the watch encoder reads them as is)."""
        worker = self._workers.get(url)
        return None if worker is None else worker.ranks

    def view(self, url: str, now: float) -> WorkerView | None:
        worker = self._workers.get(url)
        return None if worker is None else self._view(worker, now)

    def views(self, now: float, urls: Iterable[str] | None = None) -> list[WorkerView]:
        """Every worker (or those of ``urls`` that exist), sorted by URL."""
        wanted = sorted(self._workers) if urls is None else sorted(u for u in urls if u in self._workers)
        return [self._view(self._workers[u], now) for u in wanted]

    def _view(self, worker: _Worker, now: float) -> WorkerView:
        return worker_view(worker.url, worker.ranks, now, self.stale_after_s)


def worker_view(url: str, ranks: Sequence[RankState], now: float, stale_after_s: float) -> WorkerView:
    """The view of one worker's ``ranks`` at ``now``: their sums, freshness and per-rank detail."""
    deadline = now - stale_after_s
    views = []
    running = waiting = tokens = capacity = 0
    oldest = 0.0
    any_unknown = any_stale = False
    for rank in ranks:
        freshness = rank_freshness(rank, deadline)
        stat = rank.stat
        if stat is not None:
            running += stat.num_running_reqs
            waiting += stat.num_waiting_reqs
            tokens += stat.num_tokens
            capacity += stat.max_total_num_tokens
        age = 0.0 if rank.last_rx is None else max(0.0, now - rank.last_rx)
        oldest = max(oldest, age)
        any_unknown |= freshness is Freshness.UNKNOWN
        any_stale |= freshness is Freshness.STALE
        views.append(
            RankView(
                dp_rank=rank.dp_rank,
                endpoint=rank.endpoint,
                num_running_reqs=0 if stat is None else stat.num_running_reqs,
                num_waiting_reqs=0 if stat is None else stat.num_waiting_reqs,
                num_tokens=0 if stat is None else stat.num_tokens,
                max_total_num_tokens=0 if stat is None else stat.max_total_num_tokens,
                seq=rank.seq,
                age_s=age,
                dropped_frames=rank.dropped_frames,
                publisher_restarts=rank.publisher_restarts,
                freshness=freshness,
                frames_received=rank.frames_received,
                malformed_frames=rank.malformed_frames,
                connect_error=rank.connect_error,
                num_waiting_uncached_tokens=None if stat is None else stat.num_waiting_uncached_tokens,
                num_total_tokens=None if stat is None else stat.num_total_tokens,
                max_running_requests=None if stat is None else stat.max_running_requests,
                total_prefill_uncached_tokens=None if stat is None else stat.total_prefill_uncached_tokens,
                total_prefill_busy_us=None if stat is None else stat.total_prefill_busy_us,
            )
        )
    uncached, total, limit, prefilled, busy_us = (
        appended_sums([r.stat for r in ranks]) if ranks else (None,) * 5
    )
    return WorkerView(
        url=url,
        num_running_reqs=running,
        num_waiting_reqs=waiting,
        num_tokens=tokens,
        max_total_num_tokens=capacity,
        freshness=worker_freshness(any_unknown=any_unknown, any_stale=any_stale, ranks=len(views)),
        age_s=oldest,
        ranks=tuple(views),
        num_waiting_uncached_tokens=uncached,
        num_total_tokens=total,
        max_running_requests=limit,
        total_prefill_uncached_tokens=prefilled,
        total_prefill_busy_us=busy_us,
    )


def rank_freshness(rank: RankState, deadline: float) -> Freshness:
    """UNKNOWN before the first frame, FRESH if the last one came at or after ``deadline``."""
    if rank.last_rx is None:
        return Freshness.UNKNOWN
    return Freshness.FRESH if rank.last_rx >= deadline else Freshness.STALE


def worker_freshness(*, any_unknown: bool, any_stale: bool, ranks: int) -> Freshness:
    """FRESH only while every rank is fresh (SPEC §7); a silent rank makes the worker STALE.

    A worker without load endpoints, or with a rank that never sent a frame, is UNKNOWN:
    routers then fall back to their own in-flight counts.
    """
    if any_stale:
        return Freshness.STALE
    if any_unknown or ranks == 0:
        return Freshness.UNKNOWN
    return Freshness.FRESH
