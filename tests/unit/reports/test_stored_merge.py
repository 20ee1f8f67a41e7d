"""Merging stored router stats written by another control plane (shared etcd store, SPEC §6)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controlplane.reports.rejections import RejectionLedger, RejectionRow
from controlplane.reports.rollout import RolloutBoard, RouterRecord

rows = st.lists(
    st.builds(
        RejectionRow,
        st.sampled_from(["r1", "r2"]),
        st.sampled_from(["b1", "b2"]),
        st.sampled_from(["*", "m"]),
        st.sampled_from(["n", "top_p"]),
        st.integers(0, 100),
    ),
    max_size=20,
)


@given(rows, rows)
def test_merging_keeps_the_highest_count_and_is_idempotent(
    local: list[RejectionRow], stored: list[RejectionRow]
):
    """Totals after a merge equal those of one ledger fed every row; merging again changes nothing."""
    ledger = RejectionLedger(local)
    ledger.merge(stored)
    assert ledger.totals() == RejectionLedger([*local, *stored]).totals()
    ledger.merge(stored)
    assert ledger.totals() == RejectionLedger([*local, *stored]).totals()


def test_merged_counts_are_not_written_back():
    """Counts taken from the store are not dirty: this plane does not rewrite what another wrote."""
    ledger = RejectionLedger()
    ledger.merge([RejectionRow("r", "b", "*", "n", 4)])
    assert ledger.totals().total == 4 and ledger.take_dirty() == []


def test_a_stored_router_record_replaces_an_older_one_only():
    """The newer report wins; an older stored record does not roll the view back."""
    board = RolloutBoard([RouterRecord("r", "b1", 3, "", 100.0)])
    board.merge([RouterRecord("r", "b0", 1, "", 50.0), RouterRecord("s", "b", 2, "", 60.0)])
    views = {v.record.router_id: v.record for v in board.view(3)}
    assert (views["r"].boot_id, views["s"].applied_revision) == ("b1", 2)
    board.merge([RouterRecord("r", "b2", 3, "", 200.0)])
    assert {v.record.router_id: v.record for v in board.view(3)}["r"].boot_id == "b2"
    assert board.take_dirty() == []
