"""``fleetplane loads`` text output."""

from __future__ import annotations

from controlplane.cli.loads import render
from controlplane.v1 import load_pb2


def test_unreachable_ranks_are_listed_under_the_table_with_the_reason() -> None:
    """A rank whose publisher cannot be reached is named with its endpoint and why; others are not."""
    w = load_pb2.WorkerLoad(url="http://10.0.0.5:30000", freshness=load_pb2.FRESHNESS_UNKNOWN)
    w.ranks.add(dp_rank=0, endpoint="tcp://10.0.0.5:5557")
    w.ranks.add(dp_rank=1, endpoint="tcp://10.0.0.5:5558", connect_error="connection refused")
    text = render([w])
    assert text.splitlines()[-2:] == [
        "not connected to these load publishers:",
        "  http://10.0.0.5:30000 rank 1 (tcp://10.0.0.5:5558): connection refused",
    ]
    w.ranks[1].connect_error = ""
    assert "not connected" not in render([w])
