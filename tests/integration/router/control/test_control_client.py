"""The router's control-plane client against a real in-process control plane (SPEC §1, §6)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from controlplane.app import ControlPlane
from controlplane.contracts import Exact
from controlplane.settings import ControlSettings
from controlplane.v1 import contract_pb2, contract_pb2_grpc, router_pb2, router_pb2_grpc
from dataplane.router.control.client import ControlPlaneClient, subscription
from dataplane.router.control.convert import ControlClientSettings as RouterControlSettings
from tests.fakes.control_targets import FakeRouter
from tests.fakes.polling import eventually


@contextlib.asynccontextmanager
async def plane_on(tmp_path: Path, listen: str = "127.0.0.1:0") -> AsyncIterator[ControlPlane]:
    settings = ControlSettings.build(
        listen=listen, store=f"sqlite:{tmp_path / 'control.db'}", http_listen=None
    )
    async with ControlPlane(settings) as plane:
        yield plane


@contextlib.asynccontextmanager
async def subscribed(target: str, router: FakeRouter) -> AsyncIterator[ControlPlaneClient]:
    settings = RouterControlSettings(
        target=target,
        router_id="router-a",
        report_check_s=0.02,
        report_heartbeat_s=0.5,
        backoff_initial_s=0.05,
        backoff_max_s=0.3,
        workers_poll_s=0.2,
    )
    async with subscription(settings, router) as client:
        yield client


async def set_contract(channel: grpc.aio.Channel, params: str) -> int:
    """Write scope '*' from operator-style JSON; returns the new revision."""
    spec = {k: contract_pb2.ParamSpec(exact=v) for k, v in json.loads(params).items()}
    stub = contract_pb2_grpc.ContractServiceStub(channel)
    response = await stub.UpdateContract(
        contract_pb2.UpdateContractRequest(scope="*", params=spec, allow_missing=True)
    )
    return int(response.contract.revision)


async def list_routers(channel: grpc.aio.Channel) -> router_pb2.ListRoutersResponse:
    return await router_pb2_grpc.RouterServiceStub(channel).ListRouters(router_pb2.ListRoutersRequest())


async def test_contract_change_reaches_the_router_and_the_rollout_view(tmp_path: Path) -> None:
    """A contract update is applied by the router and ListRouters shows it up to date and connected."""
    router = FakeRouter()
    async with (
        plane_on(tmp_path) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
        subscribed(str(plane.grpc_address), router) as client,
    ):
        revision = await set_contract(channel, '{"temperature": 0.5}')

        async def applied() -> bool:
            return bool(router.contracts) and router.contracts[-1][0] == revision

        await eventually(applied, timeout_s=2.0)
        assert router.contracts[-1][1]["*"].params["temperature"] == Exact(0.5)

        async def up_to_date() -> bool:
            routers = (await list_routers(channel)).routers
            return [(r.router_id, r.up_to_date, r.connected) for r in routers] == [("router-a", True, True)]

        await eventually(up_to_date)
        assert (await list_routers(channel)).routers[0].boot_id == client.boot_id
        assert router.connected


async def test_rejection_counts_reach_get_rejection_stats(tmp_path: Path) -> None:
    """Counts the router reports show in GetRejectionStats soon after they change."""
    router = FakeRouter()
    async with (
        plane_on(tmp_path) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
        subscribed(str(plane.grpc_address), router),
    ):
        router.rejections[("*", "top_p", "")] = 4
        stub = router_pb2_grpc.RouterServiceStub(channel)

        async def counted() -> bool:
            stats = await stub.GetRejectionStats(router_pb2.GetRejectionStatsRequest())
            return [(k.key, k.count) for k in stats.by_router] == [("router-a", 4)]

        await eventually(counted, timeout_s=2.0)


async def test_refused_snapshot_is_not_applied_and_reported(tmp_path: Path) -> None:
    """A snapshot the router cannot compile is not applied; ListRouters shows the apply error."""
    router = FakeRouter()
    async with plane_on(tmp_path) as plane, grpc.aio.insecure_channel(str(plane.grpc_address)) as channel:
        first = await set_contract(channel, '{"temperature": 1}')
        async with subscribed(str(plane.grpc_address), router) as client:

            async def applied() -> bool:
                return client.applied_revision == first

            await eventually(applied)
            router.refuse = True
            await set_contract(channel, '{"temperature": 0.2}')

            async def refused() -> bool:
                [status] = (await list_routers(channel)).routers
                return "cannot compile" in status.apply_error and not status.up_to_date

            await eventually(refused)
            assert [rev for rev, _ in router.contracts] == [first]
            assert client.applied_revision == first


async def test_router_keeps_its_contract_and_reconnects_after_a_control_plane_restart(tmp_path: Path) -> None:
    """While the control plane is down the last snapshot stays; after it returns, updates flow again."""
    router = FakeRouter()
    async with plane_on(tmp_path) as plane:
        target = str(plane.grpc_address)
        async with grpc.aio.insecure_channel(target) as channel:
            first = await set_contract(channel, '{"temperature": 1}')
        async with subscribed(target, router) as client:

            async def applied_first() -> bool:
                return client.applied_revision == first

            await eventually(applied_first)
            await plane.stop()

            async def disconnected() -> bool:
                return not router.connected

            await eventually(disconnected)
            assert client.has_snapshot and client.applied_revision == first
            async with (
                plane_on(tmp_path, listen=target) as again,
                grpc.aio.insecure_channel(target) as channel,
            ):
                assert str(again.grpc_address) == target
                second = await set_contract(channel, '{"temperature": 0.7}')

                async def applied_second() -> bool:
                    return client.applied_revision == second and router.connected

                await eventually(applied_second, timeout_s=5.0)

                async def reported() -> bool:
                    [status] = (await list_routers(channel)).routers
                    return status.connected and status.up_to_date and status.applied_revision == second

                await eventually(reported)


@pytest.mark.parametrize("target", ["nope", "host:", "host:0", "host:99999"])
def test_bad_control_plane_address_is_a_startup_error(target: str) -> None:
    """--control-plane must be HOST:PORT; the error names the flag."""
    from dataplane.router.control.convert import ControlConfigError, check_target

    with pytest.raises(ControlConfigError, match="--control-plane"):
        check_target(target)


async def test_router_shutdown_sends_a_last_report(tmp_path: Path) -> None:
    """Counts that changed just before the router stops still reach the control plane."""
    router = FakeRouter()
    async with plane_on(tmp_path) as plane, grpc.aio.insecure_channel(str(plane.grpc_address)) as channel:
        settings = RouterControlSettings(
            target=str(plane.grpc_address), router_id="router-a", report_check_s=30, report_heartbeat_s=30
        )
        async with subscription(settings, router):

            async def listed() -> bool:
                return bool((await list_routers(channel)).routers)

            await eventually(listed)
            router.rejections[("*", "n", "")] = 7  # no periodic report will carry this one
        stub = router_pb2_grpc.RouterServiceStub(channel)

        async def counted() -> bool:
            stats = await stub.GetRejectionStats(router_pb2.GetRejectionStatsRequest())
            return stats.total == 7

        await eventually(counted)
        [status] = (await list_routers(channel)).routers
        assert not status.connected


@pytest.mark.parametrize("turns", range(6))
async def test_a_stop_while_a_report_is_being_written_still_sends_the_last_report(
    tmp_path: Path, turns: int
) -> None:
    """A snapshot applied just before the stop starts a report; the stop lands during its write."""
    router = FakeRouter()
    async with plane_on(tmp_path) as plane, grpc.aio.insecure_channel(str(plane.grpc_address)) as channel:
        settings = RouterControlSettings(
            target=str(plane.grpc_address), router_id="router-a", report_check_s=30, report_heartbeat_s=30
        )
        async with subscription(settings, router) as client:

            async def listed() -> bool:
                return bool((await list_routers(channel)).routers)

            await eventually(listed)
            router.rejections[("*", "n", "")] = 7
            client.apply_snapshot(contract_pb2.WatchContractsResponse(revision=0))  # wakes the report loop
            for _ in range(turns):  # the stop lands at a different step of that report each time
                await asyncio.sleep(0)
            router.rejections[("*", "n", "")] = 9
        stub = router_pb2_grpc.RouterServiceStub(channel)

        async def counted() -> bool:
            stats = await stub.GetRejectionStats(router_pb2.GetRejectionStatsRequest())
            return stats.total == 9

        await eventually(counted)


async def test_the_routers_keepalive_pings_are_accepted_by_the_control_plane(tmp_path: Path) -> None:
    """A stream on the router's channel options stays open past several keepalive pings: the
    control plane allows them (with its ping policy at gRPC's default the third ping, at 4.5 s,
    ended it with GOAWAY too_many_pings)."""
    from dataplane.router.control.channel import _CHANNEL_OPTIONS, KEEPALIVE_TIME_MS

    async with (
        plane_on(tmp_path) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address), options=_CHANNEL_OPTIONS) as channel,
    ):
        call = contract_pb2_grpc.ContractServiceStub(channel).WatchContracts(
            contract_pb2.WatchContractsRequest(router_id="r")
        )
        await call.read()  # the current set; then nothing while the contracts do not change
        # Not cancelled on timeout (that would cancel the call): the read just waits on.
        pending = asyncio.ensure_future(call.read())
        await asyncio.wait({pending}, timeout=4 * KEEPALIVE_TIME_MS / 1000)
        assert not call.done(), await call.details()
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
            await pending
