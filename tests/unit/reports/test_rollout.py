"""The rollout view (SPEC §6 ListRouters): applied revision vs current, connected while streaming."""

from __future__ import annotations

from controlplane.reports.rollout import RolloutBoard, RouterRecord


def _record(router_id: str = "r1", applied: int = 3, error: str = "", boot: str = "b1") -> RouterRecord:
    return RouterRecord(router_id, boot, applied, error, 100.0)


def test_router_at_the_current_revision_is_up_to_date() -> None:
    """applied_revision == current and no apply error means up to date."""
    board = RolloutBoard()
    board.report(_record(applied=3))
    assert [v.up_to_date for v in board.view(3)] == [True]
    assert [v.up_to_date for v in board.view(4)] == [False]


def test_apply_error_means_not_up_to_date() -> None:
    """A router that reports an apply error is behind even at the current revision."""
    board = RolloutBoard()
    board.report(_record(applied=3, error="top_p: out of range"))
    assert board.view(3)[0].up_to_date is False


def test_connected_only_while_a_stream_is_open_even_with_overlap() -> None:
    """Two overlapping streams of one router keep it connected until both end."""
    board = RolloutBoard()
    board.report(_record())
    board.stream_opened("r1")
    board.stream_opened("r1")
    board.stream_closed("r1")
    assert board.view(3)[0].connected is True
    board.stream_closed("r1")
    assert board.view(3)[0].connected is False


def test_newest_report_replaces_the_previous_boot() -> None:
    """A restarted router shows its new boot id; routers are sorted by id."""
    board = RolloutBoard([_record("r2"), _record("r1", boot="old")])
    board.report(_record("r1", boot="new", applied=5))
    view = board.view(5)
    assert [(v.record.router_id, v.record.boot_id, v.up_to_date) for v in view] == [
        ("r1", "new", True),
        ("r2", "b1", False),
    ]


def test_only_status_changes_are_dirty_not_the_report_time() -> None:
    """A report that changes only the time is not written; a new revision is."""
    board = RolloutBoard()
    board.report(_record())
    assert [r.router_id for r in board.take_dirty()] == ["r1"]
    board.report(RouterRecord("r1", "b1", 3, "", 200.0))
    assert board.take_dirty() == []
    board.report(_record(applied=4))
    assert [r.applied_revision for r in board.take_dirty()] == [4]


def test_long_silent_disconnected_router_leaves_the_view_but_a_connected_one_stays() -> None:
    """A disconnected router silent past the retention is dropped; a connected one never is."""
    board = RolloutBoard([_record("gone"), _record("live")])  # last report at t=100
    board.stream_opened("live")
    ids = [v.record.router_id for v in board.view(3, now_unix_s=100 + 61, forget_after_s=60)]
    assert ids == ["live"]
    assert [v.record.router_id for v in board.view(3, now_unix_s=150, forget_after_s=60)] == ["gone", "live"]


def test_the_replica_a_router_is_on_is_kept_until_its_last_stream_ends() -> None:
    """The record names the replica the router reported; once its last stream here ends it names
    none (and is written again), so a plane the router left does not claim it."""
    board = RolloutBoard()
    board.stream_opened("r1")
    board.stream_opened("r1")
    board.report(RouterRecord("r1", "b1", 3, "", 100.0, control_plane_address="10.0.0.1:50051"))
    board.take_dirty()
    board.stream_closed("r1")
    assert board.view(3)[0].record.control_plane_address == "10.0.0.1:50051"
    board.stream_closed("r1")
    [view] = board.view(3)
    assert (view.record.control_plane_address, view.record.last_report_unix_s) == ("", 100.0)
    assert [r.router_id for r in board.take_dirty()] == ["r1"]
