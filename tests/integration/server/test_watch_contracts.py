"""WatchContracts semantics (SPEC §6): complete set per message, newest wins, cleanup."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from controlplane.contracts import contract_to_proto_params, parse_contract_json
from controlplane.v1 import contract_pb2 as pb

# Both store backends, one behaviour (SPEC §3.2, §6): every test runs on SQLite and on etcd.
pytestmark = pytest.mark.parametrize("store_location", ["sqlite", "etcd"], indirect=True)


def update(scope: str, temperature: float = 1.0) -> pb.UpdateContractRequest:
    params, policy = contract_to_proto_params(parse_contract_json(f'{{"temperature": {temperature}}}'))
    return pb.UpdateContractRequest(scope=scope, params=params, conflict=policy, allow_missing=True)


async def until(predicate, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():  # noqa: ASYNC110 (polls state owned by the server)
            await asyncio.sleep(0.01)


async def test_first_message_on_an_empty_store_is_the_empty_set_at_revision_zero(control_plane):
    """A new watcher (known_revision 0) gets the current set at once, even when empty."""
    call = control_plane.contracts.WatchContracts(pb.WatchContractsRequest(router_id="r1"))
    first = await asyncio.wait_for(call.read(), 5)
    assert first.revision == 0 and not first.contracts
    call.cancel()


async def test_every_change_sends_the_complete_set_at_its_revision(control_plane):
    """After each change the watcher receives every live scope, sorted, at the new revision."""
    stub = control_plane.contracts
    await stub.UpdateContract(update("b"))
    call = stub.WatchContracts(pb.WatchContractsRequest(router_id="r1"))
    first = await asyncio.wait_for(call.read(), 5)
    assert first.revision == 1 and [c.scope for c in first.contracts] == ["b"]
    await stub.UpdateContract(update("a", 0.5))
    second = await asyncio.wait_for(call.read(), 5)
    assert second.revision == 2 and [c.scope for c in second.contracts] == ["a", "b"]
    assert second.contracts[0].params["temperature"].exact == 0.5
    await stub.DeleteContract(pb.DeleteContractRequest(scope="b"))
    third = await asyncio.wait_for(call.read(), 5)
    assert third.revision == 3 and [c.scope for c in third.contracts] == ["a"]
    call.cancel()


async def test_no_message_while_known_revision_is_current(control_plane):
    """known_revision equal to the current revision: nothing until the next change."""
    stub = control_plane.contracts
    await stub.UpdateContract(update("*"))
    call = stub.WatchContracts(pb.WatchContractsRequest(router_id="r1", known_revision=1))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(read_task := asyncio.ensure_future(call.read())), 0.3)
    await stub.UpdateContract(update("*", 0.7))
    msg = await asyncio.wait_for(read_task, 5)
    assert msg.revision == 2
    call.cancel()


async def test_a_stale_known_revision_gets_the_current_set_at_once(control_plane):
    """known_revision behind the store: the current set is sent immediately."""
    stub = control_plane.contracts
    await stub.UpdateContract(update("*"))
    await stub.UpdateContract(update("*", 0.2))
    call = stub.WatchContracts(pb.WatchContractsRequest(router_id="r1", known_revision=1))
    msg = await asyncio.wait_for(call.read(), 5)
    assert msg.revision == 2 and msg.contracts[0].params["temperature"].exact == 0.2
    call.cancel()


async def test_a_slow_watcher_skips_to_the_newest_revision(control_plane):
    """A watcher that does not read while many changes happen later sees the newest, not each one."""
    plane, stub = control_plane.plane, control_plane.contracts
    contract = parse_contract_json('{"temperature": 1, "top_p": 0.5, "min_p": 0.1, "n": 1}')
    # Large messages (400 scopes) so a few of them fill the stream's flow-control window.
    for i in range(400):
        await plane.store.update(
            f"model-{i:04d}-with-a-rather-long-name",
            contract,
            expected_version=None,
            allow_missing=True,
            author="t",
            comment="",
        )
    call = stub.WatchContracts(pb.WatchContractsRequest(router_id="slow"))
    first = await asyncio.wait_for(call.read(), 5)
    changes = 150
    for i in range(changes):
        await stub.UpdateContract(update("*", round(i / changes, 3)))
    final = first.revision + changes
    revisions = []
    while not revisions or revisions[-1] != final:
        revisions.append((await asyncio.wait_for(call.read(), 5)).revision)
    assert revisions == sorted(set(revisions))
    assert len(revisions) < changes  # intermediate revisions were skipped
    call.cancel()


async def test_many_watchers_all_receive_a_change(control_plane):
    """Fifty watchers on one channel each receive the same new revision."""
    stub = control_plane.contracts
    calls = [stub.WatchContracts(pb.WatchContractsRequest(router_id=f"r{i}")) for i in range(50)]
    for call in calls:
        assert (await asyncio.wait_for(call.read(), 5)).revision == 0
    await stub.UpdateContract(update("*"))
    got = await asyncio.gather(*(asyncio.wait_for(c.read(), 5) for c in calls))
    assert {m.revision for m in got} == {1}
    for call in calls:
        call.cancel()


async def test_watchers_are_removed_after_cancel(control_plane):
    """Cancelling watch calls removes their slots from the broadcast (no leak)."""
    broadcast = control_plane.plane.contracts.broadcast
    calls = [control_plane.contracts.WatchContracts(pb.WatchContractsRequest()) for _ in range(5)]
    for call in calls:
        await asyncio.wait_for(call.read(), 5)
    assert len(broadcast) == 5
    for call in calls:
        call.cancel()
    await until(lambda: len(broadcast) == 0)


async def test_watchers_end_with_unavailable_when_the_control_plane_stops(control_plane_factory):
    """Stopping the control plane ends open watch streams with UNAVAILABLE (clients reconnect)."""
    async with control_plane_factory() as plane:
        channel = grpc.aio.insecure_channel(str(plane.grpc_address))
        from controlplane.v1 import contract_pb2_grpc

        call = contract_pb2_grpc.ContractServiceStub(channel).WatchContracts(pb.WatchContractsRequest())
        await asyncio.wait_for(call.read(), 5)
        stopping = asyncio.create_task(plane.stop())
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(call.read(), 5)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        await stopping
        await channel.close()
