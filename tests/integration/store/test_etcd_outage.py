"""etcd unreachable: a clear startup error, UNAVAILABLE while down with nothing half-written, and a
watch that resumes when it returns (SPEC §1 startup errors, §6 Durability)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import grpc
import pytest

from controlplane.app import ControlPlane
from controlplane.contracts import contract_to_proto_params, parse_contract_json
from controlplane.errors import SettingsError
from controlplane.settings import ControlSettings
from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.etcd import EtcdServer, require_etcd
from tests.fakes.inproc_control_plane import running_control_plane


def _update(scope: str, temperature: float, **kw: object) -> pb.UpdateContractRequest:
    params, policy = contract_to_proto_params(parse_contract_json(f'{{"temperature": {temperature}}}'))
    return pb.UpdateContractRequest(scope=scope, params=params, conflict=policy, allow_missing=True, **kw)  # type: ignore[arg-type]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_etcd_at_startup_is_a_startup_error_naming_the_store():
    """Starting on an etcd nobody listens on fails with one message naming --store and the endpoint."""
    url = f"etcd://127.0.0.1:{_closed_port()}/p"
    plane = ControlPlane(ControlSettings.build(listen="127.0.0.1:0", store=url, http_listen="off"))
    with pytest.raises(SettingsError) as info:
        await plane.start()
    message = str(info.value)
    assert message.startswith(f"--store {url}") and "unavailable" in message and "\n" not in message


async def test_writes_while_etcd_is_down_are_unavailable_and_the_watch_resumes(tmp_path: Path):
    """etcd stopped: UpdateContract is UNAVAILABLE, reads still answer; restarted: B sees A's next write."""
    require_etcd()
    with EtcdServer(tmp_path) as etcd:
        url = etcd.url("outage")
        async with (
            running_control_plane(tmp_path / "a", store=url) as a,
            running_control_plane(tmp_path / "b", store=url) as b,
            grpc.aio.insecure_channel(str(a.grpc_address)) as ca,
            grpc.aio.insecure_channel(str(b.grpc_address)) as cb,
        ):
            stub_a = contract_pb2_grpc.ContractServiceStub(ca)
            stub_b = contract_pb2_grpc.ContractServiceStub(cb)
            await stub_a.UpdateContract(_update("*", 1.0))
            watch = stub_b.WatchContracts(pb.WatchContractsRequest(router_id="r"))
            assert (await asyncio.wait_for(watch.read(), 5)).revision == 1

            await asyncio.to_thread(etcd.stop)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub_a.UpdateContract(_update("*", 0.5), timeout=20)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "etcd" in (info.value.details() or "")
            got = await stub_a.GetContract(pb.GetContractRequest(scope="*"))  # served from memory
            assert got.contract.version == 1

            await asyncio.to_thread(etcd.start)
            written = None
            for _ in range(100):  # the channel reconnects with backoff
                try:
                    written = await stub_a.UpdateContract(_update("*", 0.25, comment="after"), timeout=5)
                    break
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE
                    await asyncio.sleep(0.1)
            assert written is not None
            # Nothing of the refused write was kept: the next version is 2 at revision 2.
            assert (written.contract.version, written.contract.revision) == (2, 2)
            message = await asyncio.wait_for(watch.read(), 15)
            assert message.revision == 2 and message.contracts[0].comment == "after"
            watch.cancel()
