"""The worker-load section of the status page: bars, freshness, stale values dated and greyed."""

from __future__ import annotations

import json

from controlplane.load.status import loads_data, render_loads
from controlplane.load.table import Freshness, RankView, WorkerView
from controlplane.store.workers import Protocol, WorkerRecord


def _view(
    url: str, freshness: Freshness, age_s: float, running: int = 0, error: str = "", **appended: int
) -> WorkerView:
    rank = RankView(0, "tcp://h:1", running, 2, 300, 1000, 7, age_s, 0, 0, freshness, 5, 0, error, **appended)
    return WorkerView(url, running, 2, 300, 1000, freshness, age_s, (rank,), **appended)


def _data() -> dict[str, object]:
    records = [
        WorkerRecord(url, Protocol.AUTO, Protocol.HTTP1, models=("m",))
        for url in ("http://fresh:1", "http://stale:1", "http://never:1")
    ]
    views = [
        _view(
            "http://fresh:1",
            Freshness.FRESH,
            0.4,
            running=6,
            max_running_requests=8,
            num_waiting_uncached_tokens=700,
            total_prefill_uncached_tokens=30_000,
            total_prefill_busy_us=2_000_000,
        ),
        _view("http://stale:1", Freshness.STALE, 12.3, running=3),
        _view("http://never:1", Freshness.UNKNOWN, 0.0, error="Connection refused"),
    ]
    return loads_data(records, views)


def test_only_a_fresh_worker_is_current_and_an_unknown_one_has_no_numbers() -> None:
    """The JSON says which values are current; a STALE worker's are dated, an UNKNOWN one has none."""
    fresh, stale, never = _data()["workers"]  # type: ignore[misc]
    assert (fresh["current"], fresh["running"], fresh["kv_tokens"], fresh["kv_capacity"]) == (
        True,
        6,
        300,
        1000,
    )
    assert (stale["current"], stale["age_s"], stale["running"]) == (False, 12.3, 3)
    assert (never["running"], never["age_s"]) == (None, None)
    assert never["notes"] == ["rank 0 (tcp://h:1): Connection refused"]
    # SGLang 0.5.23's appended counts where the engine sent them; None (unknown) where it did not.
    assert (fresh["running_limit"], fresh["waiting_uncached_tokens"], fresh["prefill_tokens_per_s"]) == (
        8,
        700,
        15_000.0,
    )
    assert (stale["running_limit"], stale["prefill_tokens_per_s"]) == (None, None)
    json.dumps(_data())


def test_the_table_greys_stale_rows_with_their_age_and_draws_three_bars() -> None:
    """A STALE row is greyed and says how old its numbers are; every worker has running, waiting
    and KV bars; an UNKNOWN worker shows dashes, never 0."""
    page = render_loads(_data())
    rows = page.split("<tr")[2:]
    fresh, stale, never = rows
    assert "class='stale'" not in fresh and fresh.count("class='bar'") == 3 and "30% (300/1000)" in fresh
    assert stale.startswith(" class='stale'") and "last load 12 s ago" in stale and "#bbb" in stale
    assert "never heard" in never and "Connection refused" in never
    assert never.count("<span class='muted'>-</span>") == 6


def test_running_is_drawn_against_the_running_limit_with_the_appended_counts_beside() -> None:
    """6 of a limit of 8 fills three quarters of the bar; the limit, the queued prefill tokens and
    the prefill speed have their cells, and dashes where the engine does not send them."""
    fresh, stale, _ = render_loads(_data()).split("<tr")[2:]
    assert "<span style='width:68px;background:#47c'></span></span> <span class='num'>6</span>" in fresh
    assert "<td>8</td>" in fresh and "<td>700</td>" in fresh and "<td>15,000</td>" in fresh
    assert stale.count("<td><span class='muted'>-</span></td>") == 3


def test_a_worker_ejected_by_routers_says_by_which() -> None:
    """Router-side health: the row names the routers that took the worker out of rotation."""
    data = _data()
    data["workers"][1]["ejected_by"] = ["edge-1", "edge-2"]  # type: ignore[index]
    assert "ejected by router edge-1, edge-2" in render_loads(data)
