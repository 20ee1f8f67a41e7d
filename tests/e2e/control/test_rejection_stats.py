"""RouterService as a black box (SPEC §6): reports acknowledged are durable, totals survive restarts."""

from __future__ import annotations

import grpc

from controlplane.v1 import router_pb2 as pb
from controlplane.v1 import router_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess


def _report(target: str, router_id: str, boot_id: str, count: int) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = router_pb2_grpc.RouterServiceStub(channel)
        report = pb.ReportRouterStatusRequest(
            router_id=router_id,
            boot_id=boot_id,
            applied_revision=0,
            rejections=[pb.RejectionCount(scope="*", param="temperature", count=count)],
        )
        stub.ReportRouterStatus(iter([report]), timeout=10)


def _by_router(target: str) -> dict[str, int]:
    with grpc.insecure_channel(target) as channel:
        stats = router_pb2_grpc.RouterServiceStub(channel).GetRejectionStats(
            pb.GetRejectionStatsRequest(), timeout=10
        )
    return {kc.key: kc.count for kc in stats.by_router}


def test_an_acknowledged_report_survives_sigkill() -> None:
    """Counts of a report stream that got its response are still there after kill -9 and restart."""
    with ControlPlaneProcess() as cp:
        # Two streams back to back: the second lands inside the flusher's coalescing second.
        _report(cp.target, "r1", "boot-a", 10)
        _report(cp.target, "r1", "boot-a", 11)
        cp.kill()
        cp.start()
        assert _by_router(cp.target) == {"r1": 11}


def test_a_router_restart_neither_loses_nor_double_counts_across_a_control_plane_restart() -> None:
    """Cumulative counts per boot: a new boot adds, a repeated report of a boot replaces."""
    with ControlPlaneProcess() as cp:
        _report(cp.target, "r1", "boot-a", 4)
        _report(cp.target, "r1", "boot-a", 4)
        cp.kill()
        cp.start()
        _report(cp.target, "r1", "boot-b", 3)
        _report(cp.target, "r2", "boot-x", 1)
        assert _by_router(cp.target) == {"r1": 7, "r2": 1}
