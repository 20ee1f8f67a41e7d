"""The load table: sums, freshness with an injected clock, sequence accounting, deltas."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from controlplane.load.table import COUNTER_MAX, FrameOutcome, Freshness, LoadTable
from controlplane.load.wire import LoadStat

URL = "http://127.0.0.1:9001"
EPS = ["tcp://127.0.0.1:5560", "tcp://127.0.0.1:5561"]


def stat(running: int = 0, waiting: int = 0, tokens: int = 0, cap: int = 0) -> LoadStat:
    return LoadStat(running, waiting, tokens, cap, None)


def test_worker_sums_running_waiting_and_kv_over_ranks() -> None:
    """A worker's counts are the sums of its ranks' last frames."""
    table = LoadTable(stale_after_s=3.0)
    r0, r1 = table.set_worker(URL, EPS)
    table.record_frame(r0, 0, stat(1, 2, 100, 1000), now=10.0)
    table.record_frame(r1, 0, stat(3, 4, 200, 2000), now=10.5)
    view = table.view(URL, now=11.0)
    assert view is not None
    assert (view.num_running_reqs, view.num_waiting_reqs) == (4, 6)
    assert (view.num_tokens, view.max_total_num_tokens) == (300, 3000)
    assert view.age_s == 1.0
    assert [r.age_s for r in view.ranks] == [1.0, 0.5]


def test_appended_counts_per_rank_and_summed_when_every_rank_sent_them() -> None:
    """SGLang 0.5.23's five appended counts are kept per rank and summed per worker; a rank with a
    six-position frame (or none) leaves the worker's sums unknown, not zero."""
    table = LoadTable(stale_after_s=3.0)
    r0, r1 = table.set_worker(URL, EPS)
    table.record_frame(r0, 0, LoadStat(1, 2, 100, 1000, 0, 50, 400, 8, 7000, 300_000), now=10.0)
    view = table.view(URL, now=10.0)
    assert view is not None and view.ranks[0].num_waiting_uncached_tokens == 50
    assert (view.num_waiting_uncached_tokens, view.max_running_requests) == (None, None)
    table.record_frame(r1, 0, stat(3, 4, 200, 2000), now=10.0)
    view = table.view(URL, now=10.0)
    assert view is not None and view.num_total_tokens is None and view.ranks[1].num_total_tokens is None
    table.record_frame(r1, 1, LoadStat(3, 4, 200, 2000, 1, 5, 300, 8, 3000, 100_000), now=10.5)
    view = table.view(URL, now=11.0)
    assert view is not None
    assert (view.num_waiting_uncached_tokens, view.num_total_tokens, view.max_running_requests) == (
        55,
        700,
        16,
    )
    assert (view.total_prefill_uncached_tokens, view.total_prefill_busy_us) == (10_000, 400_000)


def test_unknown_before_first_frame_of_every_rank() -> None:
    """A worker is UNKNOWN until every rank has sent a frame, then FRESH."""
    table = LoadTable(stale_after_s=3.0)
    r0, r1 = table.set_worker(URL, EPS)
    assert table.view(URL, 0.0).freshness is Freshness.UNKNOWN  # type: ignore[union-attr]
    table.record_frame(r0, 0, stat(), now=1.0)
    assert table.view(URL, 1.0).freshness is Freshness.UNKNOWN  # type: ignore[union-attr]
    table.record_frame(r1, 0, stat(), now=1.0)
    assert table.view(URL, 1.0).freshness is Freshness.FRESH  # type: ignore[union-attr]


def test_one_silent_rank_makes_the_worker_stale() -> None:
    """FRESH while every rank had a frame within stale_after_s; STALE once one is silent longer."""
    table = LoadTable(stale_after_s=3.0)
    r0, r1 = table.set_worker(URL, EPS)
    table.record_frame(r0, 0, stat(), now=0.0)
    table.record_frame(r1, 0, stat(), now=0.0)
    table.record_frame(r0, 1, stat(), now=2.5)
    assert table.view(URL, 3.0).freshness is Freshness.FRESH  # type: ignore[union-attr]
    view = table.view(URL, 3.01)
    assert view is not None and view.freshness is Freshness.STALE
    assert [r.freshness for r in view.ranks] == [Freshness.FRESH, Freshness.STALE]


def test_worker_without_endpoints_is_unknown() -> None:
    """A worker that publishes no load stays UNKNOWN (routers fall back to their own counts)."""
    table = LoadTable(stale_after_s=3.0)
    table.set_worker(URL, [])
    assert table.view(URL, 100.0).freshness is Freshness.UNKNOWN  # type: ignore[union-attr]


def test_gap_counts_dropped_frames() -> None:
    """A forward jump in the sequence counts the skipped frames as dropped."""
    table = LoadTable(stale_after_s=3.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    assert table.record_frame(r0, 5, stat(), 0.0) is FrameOutcome.OK  # baseline, not a gap
    assert table.record_frame(r0, 6, stat(), 0.0) is FrameOutcome.OK
    assert table.record_frame(r0, 9, stat(), 0.0) is FrameOutcome.GAP
    assert r0.dropped_frames == 2 and r0.seq == 9


def test_dropped_frames_saturate_at_the_int64_maximum() -> None:
    """seq 0, 2^63-1, 0, 2^63-1: the dropped count stops at 2^63-1 instead of passing what int64 holds."""
    table = LoadTable(stale_after_s=3.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    for seq in (0, COUNTER_MAX, 0, COUNTER_MAX):
        table.record_frame(r0, seq, stat(), now=1.0)
    assert (r0.dropped_frames, r0.publisher_restarts, r0.frames_received) == (COUNTER_MAX, 1, 4)
    assert COUNTER_MAX == 2**63 - 1


def test_sequence_going_back_counts_a_restart() -> None:
    """A sequence that does not advance means the publisher restarted; no drops are counted."""
    table = LoadTable(stale_after_s=3.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    for seq in range(4):
        table.record_frame(r0, seq, stat(), 0.0)
    assert table.record_frame(r0, 0, stat(7), 1.0) is FrameOutcome.RESTART
    assert table.record_frame(r0, 1, stat(8), 1.1) is FrameOutcome.OK
    assert (r0.publisher_restarts, r0.dropped_frames, r0.frames_received) == (1, 0, 6)
    assert table.view(URL, 1.1).num_running_reqs == 8  # type: ignore[union-attr]


def test_a_publisher_that_left_restarts_whatever_its_next_sequence() -> None:
    """After the publisher closed its connection, the next frame is one restart and no drops."""
    table = LoadTable(stale_after_s=3.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    table.record_frame(r0, 0, stat(), 0.0)
    table.record_publisher_left(r0)
    # A young engine restarted: it sent 0..4 to nobody before we reconnected.
    assert table.record_frame(r0, 5, stat(2), 1.0) is FrameOutcome.RESTART
    assert table.record_frame(r0, 7, stat(3), 1.1) is FrameOutcome.GAP
    table.record_publisher_left(r0)
    assert table.record_frame(r0, 0, stat(4), 2.0) is FrameOutcome.RESTART  # counted once, not twice
    assert (r0.publisher_restarts, r0.dropped_frames, r0.frames_received) == (2, 1, 4)


def test_a_publisher_leaving_before_its_first_frame_or_re_registered_is_no_restart() -> None:
    """No frame yet, or a re-registration after it left: the next frame only sets the baseline."""
    table = LoadTable(stale_after_s=3.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    table.record_publisher_left(r0)
    assert table.record_frame(r0, 9, stat(), 0.0) is FrameOutcome.OK
    table.record_publisher_left(r0)
    (r0,) = table.set_worker(URL, EPS[:1])
    assert table.record_frame(r0, 3, stat(), 1.0) is FrameOutcome.OK
    assert (r0.publisher_restarts, r0.dropped_frames) == (0, 0)


def test_a_connect_error_changes_the_worker_only_when_it_changes() -> None:
    """Retrying a dead endpoint does not push the worker again and again: only a new reason does."""
    table = LoadTable(stale_after_s=3.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    table.take_changes(0.0)
    table.record_connect_error(r0, "connection refused")
    assert table.take_changes(0.0).changed == (URL,)
    table.record_connect_error(r0, "connection refused")
    assert not table.take_changes(0.0)
    table.record_connect_error(r0, "")
    assert table.take_changes(0.0).changed == (URL,)
    assert table.view(URL, 0.0).ranks[0].connect_error == ""  # type: ignore[union-attr]


def test_stale_rank_recovers_on_next_frame() -> None:
    """A STALE rank is FRESH again as soon as a frame arrives."""
    table = LoadTable(stale_after_s=1.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    table.record_frame(r0, 0, stat(), 0.0)
    assert table.view(URL, 5.0).freshness is Freshness.STALE  # type: ignore[union-attr]
    table.record_frame(r0, 0, stat(), 5.0)
    assert table.view(URL, 5.0).freshness is Freshness.FRESH  # type: ignore[union-attr]


def test_malformed_frames_logged_once_per_episode() -> None:
    """Malformed frames are counted; only the first of a run (until a good frame) is an episode."""
    table = LoadTable(stale_after_s=1.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    assert [table.record_malformed(r0) for _ in range(3)] == [True, False, False]
    table.record_frame(r0, 0, stat(), 0.0)
    assert table.record_malformed(r0) is True
    assert r0.malformed_frames == 4
    assert table.view(URL, 0.0).ranks[0].malformed_frames == 4  # type: ignore[union-attr]


def test_malformed_frames_in_a_sequence_jump_are_not_dropped_too() -> None:
    """Garbage frames between two good ones took their seqs: only the rest of the jump is dropped."""
    table = LoadTable(stale_after_s=1.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    table.record_frame(r0, 0, stat(), 0.0)
    table.record_malformed(r0)
    table.record_malformed(r0)
    assert table.record_frame(r0, 3, stat(), 0.0) is FrameOutcome.OK
    assert r0.dropped_frames == 0
    table.record_malformed(r0)
    assert table.record_frame(r0, 8, stat(), 0.0) is FrameOutcome.GAP
    assert (r0.dropped_frames, r0.malformed_frames) == (3, 3)
    table.record_malformed(r0)  # garbage without a seq of its own, then the next frame in order
    assert table.record_frame(r0, 9, stat(), 0.0) is FrameOutcome.OK
    assert table.record_frame(r0, 11, stat(), 0.0) is FrameOutcome.GAP  # the run ended at seq 9
    assert r0.dropped_frames == 4


def test_deltas_report_changed_and_removed_workers_once() -> None:
    """take_changes returns workers touched since the last call and removed URLs, then nothing."""
    table = LoadTable(stale_after_s=3.0)
    (a,) = table.set_worker("http://a:1", EPS[:1])
    table.set_worker("http://b:1", EPS[1:])
    first = table.take_changes(0.0)
    assert list(first.changed) == ["http://a:1", "http://b:1"]
    assert not table.take_changes(0.0)
    table.record_frame(a, 0, stat(1), 0.5)
    table.remove_worker("http://b:1")
    second = table.take_changes(0.5)
    assert list(second.changed) == ["http://a:1"]
    assert second.removed == ("http://b:1",)
    assert not table.take_changes(0.6)


def test_going_stale_is_a_change_without_any_frame() -> None:
    """The freshness tick reports a worker whose rank went STALE though no frame arrived."""
    table = LoadTable(stale_after_s=1.0)
    (a,) = table.set_worker(URL, EPS[:1])
    table.record_frame(a, 0, stat(), 0.0)
    table.take_changes(0.0)
    assert not table.take_changes(0.9)
    assert table.take_changes(1.5).changed == (URL,)
    assert table.view(URL, 1.5).freshness is Freshness.STALE  # type: ignore[union-attr]
    assert not table.take_changes(2.0)


def test_reregistering_same_endpoint_keeps_counters_but_resets_baseline() -> None:
    """Re-registration keeps a rank's counters; its next frame is a new baseline, not a gap."""
    table = LoadTable(stale_after_s=3.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    table.record_frame(r0, 0, stat(), 0.0)
    (again,) = table.set_worker(URL, EPS[:1])
    assert again is r0
    assert table.record_frame(again, 50, stat(), 0.1) is FrameOutcome.OK
    assert (again.dropped_frames, again.frames_received) == (0, 2)
    (moved,) = table.set_worker(URL, ["tcp://127.0.0.1:6000"])
    assert moved is not r0 and moved.frames_received == 0


def test_reregistered_worker_is_not_reported_removed() -> None:
    """Removing then re-adding a worker before the next delta reports it changed, not removed."""
    table = LoadTable(stale_after_s=3.0)
    table.set_worker(URL, EPS)
    table.take_changes(0.0)
    table.remove_worker(URL)
    table.set_worker(URL, EPS)
    changes = table.take_changes(0.0)
    assert changes.removed == () and changes.changed == (URL,)


@given(st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=50))
def test_counters_account_for_every_frame(seqs: list[int]) -> None:
    """Property: frames_received is the number of frames; drops are the sum of forward gaps."""
    table = LoadTable(stale_after_s=3.0)
    (r0,) = table.set_worker(URL, EPS[:1])
    for seq in seqs:
        table.record_frame(r0, seq, stat(), 0.0)
    gaps = sum(b - a - 1 for a, b in itertools.pairwise(seqs) if b > a + 1)
    restarts = sum(1 for a, b in itertools.pairwise(seqs) if b <= a)
    assert (r0.frames_received, r0.dropped_frames, r0.publisher_restarts) == (len(seqs), gaps, restarts)
