"""``fleetplane routers`` and ``fleetplane stats`` text output."""

from __future__ import annotations

from controlplane.cli.routers import render as render_routers
from controlplane.cli.routers import report_age
from controlplane.cli.stats import render as render_stats
from controlplane.v1 import router_pb2


def test_routers_table_shows_rollout_columns() -> None:
    """Each router shows boot, applied vs current revision, up to date, connected, the replica it
    is on and report age; a router on no replica shows ``-``."""
    response = router_pb2.ListRoutersResponse(current_revision=7)
    status = response.routers.add(
        router_id="r1",
        boot_id="ab12",
        applied_revision=6,
        connected=True,
        control_plane_address="10.0.0.2:50051",
    )
    status.last_report_time.FromSeconds(1000)
    response.routers.add(router_id="r2", boot_id="cd34", applied_revision=7, up_to_date=True)
    lines = render_routers(response, now_unix_s=1003).splitlines()
    assert lines[0].split() == [
        "ROUTER_ID",
        "BOOT",
        "APPLIED",
        "CURRENT",
        "UP-TO-DATE",
        "CONNECTED",
        "REPLICA",
        "LAST",
        "REPORT",
    ]
    assert lines[1].split() == ["r1", "ab12", "6", "7", "NO", "yes", "10.0.0.2:50051", "3s"]
    assert lines[2].split() == ["r2", "cd34", "7", "7", "yes", "no", "-", "-"]


def test_routers_table_adds_apply_error_column_only_when_needed() -> None:
    """An apply error appears as an extra column."""
    response = router_pb2.ListRoutersResponse(current_revision=2)
    response.routers.add(router_id="r1", boot_id="b", applied_revision=1, apply_error="top_p: bad")
    assert "top_p: bad" in render_routers(response, now_unix_s=0)


def test_no_routers_says_so() -> None:
    """With no reports the command says so instead of printing an empty table."""
    assert "no router" in render_routers(router_pb2.ListRoutersResponse(current_revision=3), 0)


def test_report_age_units() -> None:
    """Ages read as seconds, minutes, hours, days."""
    assert [report_age(100, 100 + d) for d in (5, 300, 3 * 3600, 5 * 86400)] == ["5s", "5m", "3h", "5d"]


def test_stats_lists_totals_by_field_scope_router() -> None:
    """Stats print the total and per-field, per-scope and per-router counts."""
    response = router_pb2.GetRejectionStatsResponse(
        total=3,
        by_field=[router_pb2.KeyCount(key="temperature", count=3)],
        by_scope=[router_pb2.KeyCount(key="*", count=3)],
        by_router=[router_pb2.KeyCount(key="r1", count=3)],
        detail=[router_pb2.RejectionCount(scope="*", param="temperature", count=3)],
    )
    text = render_stats(response)
    assert "total rejections: 3" in text
    assert any(line.split() == ["temperature", "3"] for line in text.splitlines())
    assert any(line.split() == ["r1", "3"] for line in text.splitlines())
    assert any(line.split() == ["*", "temperature", "3"] for line in text.splitlines())


def test_stats_without_rejections_says_so() -> None:
    """Zero rejections print one line."""
    assert render_stats(router_pb2.GetRejectionStatsResponse()) == "no sampling-contract rejections"


def test_routers_table_names_the_workers_a_router_ejected() -> None:
    """A router with workers out of rotation gets an "ejected workers" column listing them."""
    response = router_pb2.ListRoutersResponse(current_revision=2)
    response.routers.add(router_id="r1", boot_id="b", applied_revision=2, up_to_date=True)
    response.routers.add(
        router_id="r2",
        boot_id="c",
        applied_revision=2,
        up_to_date=True,
        ejected_workers=["http://w1:1", "http://w2:2"],
    )
    header, first, second = render_routers(response, now_unix_s=0).splitlines()
    assert header.endswith("EJECTED WORKERS") and "APPLY ERROR" not in header
    assert first.endswith(" -") and second.endswith("http://w1:1, http://w2:2")
