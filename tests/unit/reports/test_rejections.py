"""Rejection-stat aggregation across router boots (SPEC §6: restarts neither lose nor double count)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controlplane.reports.rejections import RejectionLedger, RejectionRow


def test_repeated_cumulative_report_is_not_double_counted() -> None:
    """The same cumulative count reported twice counts once."""
    ledger = RejectionLedger()
    ledger.observe("r1", "b1", {("*", "temperature", ""): 3})
    ledger.observe("r1", "b1", {("*", "temperature", ""): 3})
    assert ledger.totals().total == 3


def test_router_restart_keeps_the_old_boot_and_adds_the_new() -> None:
    """A new boot's counts (restarting at 0) add to the previous boot's last count."""
    ledger = RejectionLedger()
    ledger.observe("r1", "b1", {("*", "temperature", ""): 5})
    ledger.observe("r1", "b2", {("*", "temperature", ""): 2})
    totals = ledger.totals()
    assert totals.total == 7
    assert totals.by_router == (("r1", 7),)


def test_a_lower_count_within_a_boot_never_takes_counts_back() -> None:
    """A stale (lower) report within one boot leaves the higher count in place."""
    ledger = RejectionLedger()
    ledger.observe("r1", "b1", {("*", "top_p", ""): 9})
    assert not ledger.observe("r1", "b1", {("*", "top_p", ""): 4})
    assert ledger.totals().total == 9


def test_totals_group_by_field_scope_router_and_detail() -> None:
    """Totals are summed by field, by scope, by router and by (scope, param), each sorted."""
    ledger = RejectionLedger()
    ledger.observe("r1", "b1", {("*", "temperature", ""): 1, ("llama", "top_k", ""): 2})
    ledger.observe("r2", "b9", {("*", "temperature", ""): 4, ("llama", "temperature", ""): 8})
    totals = ledger.totals()
    assert totals.total == 15
    assert totals.by_field == (("temperature", 13), ("top_k", 2))
    assert totals.by_scope == (("*", 5), ("llama", 10))
    assert totals.by_router == (("r1", 3), ("r2", 12))
    assert totals.detail == (("*", "temperature", 5), ("llama", "temperature", 8), ("llama", "top_k", 2))


def test_empty_ledger_totals_are_zero() -> None:
    """Before any report every total is zero and every list is empty."""
    totals = RejectionLedger().totals()
    assert (totals.total, totals.by_field, totals.detail) == (0, (), ())


def test_dirty_rows_are_only_the_changed_entries() -> None:
    """take_dirty returns what grew since the last call, then nothing."""
    ledger = RejectionLedger()
    ledger.observe("r1", "b1", {("*", "n", ""): 1, ("*", "top_p", ""): 1})
    assert len(ledger.take_dirty()) == 2
    ledger.observe("r1", "b1", {("*", "n", ""): 2, ("*", "top_p", ""): 1})
    assert ledger.take_dirty() == [RejectionRow("r1", "b1", "*", "n", 2)]
    assert ledger.take_dirty() == []


def test_restored_rows_reload_to_the_same_totals_and_resent_counts_do_not_add() -> None:
    """After a control-plane restart (reload from rows) a router re-sending its counts adds nothing."""
    ledger = RejectionLedger()
    ledger.observe("r1", "b1", {("*", "temperature", ""): 5})
    reloaded = RejectionLedger(ledger.rows())
    reloaded.observe("r1", "b1", {("*", "temperature", ""): 5})
    assert reloaded.totals() == ledger.totals()
    reloaded.observe("r1", "b1", {("*", "temperature", ""): 6})
    assert reloaded.totals().total == 6


# (scope, param, client): client "" for a router without --api-keys.
KEYS = st.sampled_from(
    [
        ("*", "temperature", ""),
        ("*", "top_p", ""),
        ("llama", "n", ""),
        ("*", "temperature", "ci"),
        ("*", "n", "web"),
    ]
)
# One boot: a list of increments (which key), reported as cumulative snapshots.
BOOT = st.lists(KEYS, max_size=12)
ROUTER = st.lists(BOOT, min_size=1, max_size=4)


@given(
    routers=st.lists(ROUTER, min_size=1, max_size=3),
    replay=st.lists(st.integers(min_value=0, max_value=50), max_size=20),
    reload_at=st.integers(min_value=0, max_value=60),
)
def test_totals_equal_true_counts_whatever_replays_and_restarts(
    routers: list[list[list[tuple[str, str, str]]]], replay: list[int], reload_at: int
) -> None:
    """Totals (and per-client totals) equal the true number of rejections under replayed reports,
    router and ledger restarts."""
    reports: list[tuple[str, str, dict[tuple[str, str, str], int]]] = []
    truth = 0
    by_client: dict[str, int] = {}
    for r, boots in enumerate(routers):
        for b, increments in enumerate(boots):
            cumulative: dict[tuple[str, str, str], int] = {}
            reports.append((f"r{r}", f"b{b}", dict(cumulative)))
            for key in increments:
                cumulative[key] = cumulative.get(key, 0) + 1
                truth += 1
                if key[2]:
                    by_client[key[2]] = by_client.get(key[2], 0) + 1
                reports.append((f"r{r}", f"b{b}", dict(cumulative)))
    # Replays of earlier (stale) reports, delivered late, must change nothing.
    reports += [reports[i % len(reports)] for i in replay]
    ledger = RejectionLedger()
    for i, (router_id, boot_id, counts) in enumerate(reports):
        if i == reload_at:  # control-plane restart: state comes back from the persisted rows
            ledger = RejectionLedger(ledger.rows())
        ledger.observe(router_id, boot_id, counts)
    assert ledger.totals().total == truth
    assert dict(ledger.totals().by_client) == by_client
