"""RouterService over real gRPC on loopback with the SQLite router-stats table (SPEC §6)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import grpc
import pytest

from controlplane.v1 import router_pb2
from tests.fakes.polling import eventually
from tests.fakes.router_service import RouterPlane

Factory = Callable[[list[int]], Awaitable[RouterPlane]]


def _report(
    boot: str, applied: int, count: int, router_id: str = "r1"
) -> router_pb2.ReportRouterStatusRequest:
    return router_pb2.ReportRouterStatusRequest(
        router_id=router_id,
        boot_id=boot,
        applied_revision=applied,
        rejections=[router_pb2.RejectionCount(scope="*", param="temperature", count=count)],
    )


async def _total(plane: RouterPlane) -> int:
    return (await plane.stub.GetRejectionStats(router_pb2.GetRejectionStatsRequest())).total


async def test_reports_show_in_list_routers_and_rejection_stats(plane_factory: Factory) -> None:
    """A router's reports appear in the rollout view (connected, up to date) and the totals."""
    plane = await plane_factory([4])
    call = plane.stub.ReportRouterStatus()
    await call.write(_report("b1", 4, 2))
    await call.write(_report("b1", 4, 3))

    async def seen() -> bool:
        return await _total(plane) == 3

    await eventually(seen)
    routers = await plane.stub.ListRouters(router_pb2.ListRoutersRequest())
    assert routers.current_revision == 4
    [status] = routers.routers
    assert (status.router_id, status.boot_id, status.connected, status.up_to_date) == ("r1", "b1", True, True)
    assert status.last_report_time.seconds > 0
    stats = await plane.stub.GetRejectionStats(router_pb2.GetRejectionStatsRequest())
    assert [(k.key, k.count) for k in stats.by_field] == [("temperature", 3)]
    assert [(k.key, k.count) for k in stats.by_router] == [("r1", 3)]
    await call.done_writing()
    await call

    async def disconnected() -> bool:
        routers = await plane.stub.ListRouters(router_pb2.ListRoutersRequest())
        return not routers.routers[0].connected

    await eventually(disconnected)


async def test_stats_survive_a_control_plane_restart_without_double_counting(plane_factory: Factory) -> None:
    """After a restart totals are kept; re-sent counts add nothing, a new router boot adds."""
    plane = await plane_factory([1])
    call = plane.stub.ReportRouterStatus()
    await call.write(_report("b1", 1, 5))

    async def five() -> bool:
        return await _total(plane) == 5

    await eventually(five)
    call.cancel()
    await plane.stop()

    plane = await plane_factory([2])
    assert await _total(plane) == 5
    [status] = (await plane.stub.ListRouters(router_pb2.ListRoutersRequest())).routers
    assert (status.connected, status.applied_revision, status.up_to_date) == (False, 1, False)
    call = plane.stub.ReportRouterStatus()
    await call.write(_report("b1", 2, 5))  # the same boot reconnects and re-sends its cumulative count
    await call.write(_report("b2", 2, 1, router_id="r1"))  # ...and then restarts: a new boot

    async def six() -> bool:
        return await _total(plane) == 6

    await eventually(six)
    await call.done_writing()
    await call


async def test_counts_whose_write_waits_for_the_database_when_the_service_stops_are_kept(
    plane_factory: Factory,
) -> None:
    """A stop while a flush's write still waits for the database thread (busy with another call)
    loses no count: the next start has them."""
    plane = await plane_factory([1])
    busy = asyncio.ensure_future(plane.database.read(lambda _: time.sleep(0.5)))
    call = plane.stub.ReportRouterStatus()
    await call.write(_report("b1", 1, 5))

    async def five() -> bool:
        return await _total(plane) == 5

    await eventually(five)
    await asyncio.sleep(0.1)  # the flusher has taken the count and queued its write behind ``busy``
    call.cancel()
    await plane.stop()
    await busy
    plane = await plane_factory([1])
    assert await _total(plane) == 5


async def test_invalid_report_is_refused_naming_the_field(plane_factory: Factory) -> None:
    """A report with an unknown sampling field ends the stream with INVALID_ARGUMENT."""
    plane = await plane_factory([0])
    call = plane.stub.ReportRouterStatus()
    bad = router_pb2.ReportRouterStatusRequest(
        router_id="r1",
        boot_id="b1",
        rejections=[router_pb2.RejectionCount(scope="*", param="temprature", count=1)],
    )
    await call.write(bad)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "temprature" in (info.value.details() or "")


async def test_empty_router_id_is_refused(plane_factory: Factory) -> None:
    """A report without router_id is INVALID_ARGUMENT naming router_id."""
    plane = await plane_factory([0])
    call = plane.stub.ReportRouterStatus()
    await call.write(router_pb2.ReportRouterStatusRequest(boot_id="b1"))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "router_id" in (info.value.details() or "")


async def test_an_ejected_worker_that_is_no_url_is_refused(plane_factory: Factory) -> None:
    """ejected_workers holds worker URLs: an empty or non-printable entry is INVALID_ARGUMENT."""
    plane = await plane_factory([0])
    call = plane.stub.ReportRouterStatus()
    await call.write(
        router_pb2.ReportRouterStatusRequest(router_id="r1", boot_id="b1", ejected_workers=["a\nb"])
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ejected_workers" in (info.value.details() or "")
