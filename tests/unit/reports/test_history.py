"""The rejection history: bounded samples of the totals, and rates from them."""

from __future__ import annotations

from controlplane.reports.history import RejectionHistory


def test_the_last_minute_is_the_growth_of_the_totals_over_60_s() -> None:
    """Rejections of the last minute = totals now minus totals a minute ago, over every field."""
    history = RejectionHistory(every_s=10)
    for t, temperature, top_p in ((0, 5, 0), (10, 6, 0), (30, 8, 1), (60, 9, 4), (70, 12, 4)):
        history.record(1000.0 + t, {"temperature": temperature, "top_p": top_p})
    assert history.last_minute(1070.0) == (12 - 6) + (4 - 0)


def test_rates_are_unknown_before_the_history_reaches_back() -> None:
    """A control plane up for 30 s cannot say what the last minute saw: None, not 0."""
    history = RejectionHistory()
    history.record(1000.0, {"temperature": 3})
    history.record(1030.0, {"temperature": 9})
    assert history.last_minute(1030.0) is None


def test_per_minute_gives_an_hour_by_the_clock_and_the_minute_so_far() -> None:
    """Sixty bars: whole minutes before the first sample are unknown; the minute under way counts
    what happened since the first sample when that is later."""
    history = RejectionHistory(every_s=10)
    start = 60 * 1000 + 15  # 15 s into a minute
    history.record(start, {"top_k": 2})
    history.record(start + 20, {"top_k": 5})
    minutes = history.per_minute(start + 20)
    assert len(minutes) == 60
    assert all(m.by_field is None for m in minutes[:-1])
    assert minutes[-1].by_field == {"top_k": 3}


def test_samples_stay_bounded_and_a_lower_total_is_no_negative_count() -> None:
    """Hours of recording every second keep about keep_s / every_s samples; a total that went down
    (a store merge replaced a count) counts 0, never a negative number."""
    history = RejectionHistory(every_s=10, keep_s=600)
    for t in range(0, 7200):
        history.record(float(t), {"n": t})
    assert len(history._samples) <= 600 / 10 + 2
    history.record(7300.0, {"n": 1})
    assert history.growth(7199.0, 7300.0) == {}


def test_the_minute_just_ended_is_the_newest_whole_bar() -> None:
    """Rejections between the last minute boundary and the one before it are the 59th bar (the
    60th is the minute under way)."""
    history = RejectionHistory(every_s=10)
    for t, n in ((0, 0), (70, 4), (125, 9), (130, 9)):
        history.record(6000.0 + t, {"temperature": n})
    minutes = history.per_minute(6130.0)
    assert [m.end_unix_s for m in minutes[-3:]] == [6060.0, 6120.0, 6130.0]
    assert minutes[-2].by_field == {"temperature": 4} and minutes[-1].by_field == {"temperature": 5}
