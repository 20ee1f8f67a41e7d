"""Several control planes on one etcd: changes reach every watcher, versions are never duplicated,
prefixes are isolated, workers and rejection counts are shared (SPEC §3.2, §6 Durability)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import grpc
import pytest

from controlplane.app import ControlPlane
from controlplane.contracts import contract_to_proto_params, parse_contract_json
from controlplane.errors import NotFound, VersionMismatch
from controlplane.settings import EtcdLocation, parse_store
from controlplane.store.etcd import EtcdStore
from controlplane.store.etcd_routers import EtcdRouterStatsStore
from controlplane.store.model import ContractVersion
from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc, load_pb2, load_pb2_grpc, router_pb2, router_pb2_grpc
from tests.fakes.etcd import EtcdServer

Factory = Callable[..., AbstractAsyncContextManager[ControlPlane]]


def _update(scope: str, temperature: float, **kw: Any) -> pb.UpdateContractRequest:
    params, policy = contract_to_proto_params(parse_contract_json(f'{{"temperature": {temperature}}}'))
    return pb.UpdateContractRequest(scope=scope, params=params, conflict=policy, allow_missing=True, **kw)


def _location(url: str) -> EtcdLocation:
    location = parse_store(url)
    assert isinstance(location, EtcdLocation)
    return location


def _stub(plane: ControlPlane) -> tuple[grpc.aio.Channel, contract_pb2_grpc.ContractServiceStub]:
    channel = grpc.aio.insecure_channel(str(plane.grpc_address))
    return channel, contract_pb2_grpc.ContractServiceStub(channel)


async def test_an_update_through_one_plane_reaches_a_watcher_of_the_other(control_plane_factory: Factory):
    """UpdateContract on A: a WatchContracts client of B receives the new set at A's revision."""
    async with control_plane_factory() as a, control_plane_factory() as b:
        ca, stub_a = _stub(a)
        cb, stub_b = _stub(b)
        async with ca, cb:
            call = stub_b.WatchContracts(pb.WatchContractsRequest(router_id="r"))
            first = await asyncio.wait_for(call.read(), 5)
            assert first.revision == 0 and not first.contracts
            written = await stub_a.UpdateContract(_update("m", 0.5, comment="via A"))
            message = await asyncio.wait_for(call.read(), 5)
            assert message.revision == written.contract.revision == 1
            assert [(c.scope, c.version, c.comment) for c in message.contracts] == [("m", 1, "via A")]
            got = await stub_b.GetContract(pb.GetContractRequest(scope="m"))
            assert got.contract.params == written.contract.params
            call.cancel()


async def test_concurrent_writers_through_two_planes_never_share_a_version(control_plane_factory: Factory):
    """40 concurrent updates of one scope through A and B: versions 1..40 and revisions 1..40, once each."""
    async with control_plane_factory() as a, control_plane_factory() as b:
        ca, stub_a = _stub(a)
        cb, stub_b = _stub(b)
        async with ca, cb:
            replies = await asyncio.gather(
                *(
                    (stub_a if i % 2 else stub_b).UpdateContract(_update("*", i / 40, comment=str(i)))
                    for i in range(40)
                )
            )
            versions = sorted(r.contract.version for r in replies)
            revisions = sorted(r.contract.revision for r in replies)
            assert versions == list(range(1, 41)) and revisions == list(range(1, 41))
            history = await stub_b.ListContractHistory(
                pb.ListContractHistoryRequest(scope="*", page_size=100)
            )
            assert sorted(v.comment for v in history.versions) == sorted(str(i) for i in range(40))
            for plane in (a, b):
                snapshot = await asyncio.wait_for(plane.store.wait_for_change(39), 5)
                assert snapshot.revision == 40 and snapshot.contracts["*"].version == 40


async def test_sixteen_writers_on_distinct_scopes_all_succeed_with_dense_revisions(
    control_plane_factory: Factory,
):
    """16 writers (8 per plane) x 60 updates of their own scopes: 960 acknowledged, revisions 1..960."""
    async with control_plane_factory() as a, control_plane_factory() as b:
        ca, stub_a = _stub(a)
        cb, stub_b = _stub(b)
        async with ca, cb:

            async def writer(w: int) -> list[pb.Contract]:
                stub = stub_a if w % 2 else stub_b
                return [
                    (await stub.UpdateContract(_update(f"model-{w}", (i % 20) / 10, comment=str(i)))).contract
                    for i in range(60)
                ]

            written = [c for cs in await asyncio.gather(*(writer(w) for w in range(16))) for c in cs]
            assert sorted(c.revision for c in written) == list(range(1, 961))
            for w in range(16):
                mine = [c for c in written if c.scope == f"model-{w}"]
                assert [c.version for c in mine] == list(range(1, 61))
                assert [c.revision for c in mine] == sorted(c.revision for c in mine)
            for plane in (a, b):
                snapshot = await asyncio.wait_for(plane.store.wait_for_change(959), 5)
                assert snapshot.revision == 960 and len(snapshot.contracts) == 16


async def test_sixteen_stores_contending_on_the_revision_key_all_succeed(store_url: str):
    """16 stores on one prefix (16 control planes' worth), one writer each, 30 updates: all land, 1..480."""
    stores = [EtcdStore(_location(store_url)) for _ in range(16)]
    for store in stores:
        await store.open()
    try:
        contract = parse_contract_json('{"temperature": 0.3}')

        async def writer(w: int) -> list[int]:
            return [
                (
                    await stores[w].update(
                        f"m{w}", contract, expected_version=None, allow_missing=True, author="a", comment=""
                    )
                ).revision
                for _ in range(30)
            ]

        revisions = [r for rs in await asyncio.gather(*(writer(w) for w in range(16))) for r in rs]
        assert sorted(revisions) == list(range(1, 481))
    finally:
        for store in stores:
            await store.close()


async def test_writes_queued_together_are_decided_as_if_one_after_another(store_url: str):
    """One store, writes issued at once: one expected_version=0 wins, a rollback to a version of the batch works."""
    store = EtcdStore(_location(store_url))
    await store.open()
    try:
        contract = parse_contract_json('{"temperature": 0.3}')
        results = await asyncio.gather(
            *(
                store.update(
                    "m", contract, expected_version=0, allow_missing=True, author="a", comment=str(i)
                )
                for i in range(5)
            ),
            store.update("m", contract, expected_version=1, allow_missing=False, author="a", comment="v2"),
            store.rollback("m", 1, expected_version=2, author="a", comment="back"),
            store.delete("n", expected_version=None, author="a", comment="nothing to delete"),
            return_exceptions=True,
        )
        wins = [r for r in results[:5] if not isinstance(r, BaseException)]
        assert len(wins) == 1 and all(isinstance(r, VersionMismatch) for r in results[:5] if r not in wins)
        v2, back, missing = results[5:]
        assert isinstance(missing, NotFound)
        assert isinstance(v2, ContractVersion) and isinstance(back, ContractVersion)
        assert [(v.version, v.revision) for v in (wins[0], v2, back)] == [(1, 1), (2, 2), (3, 3)]
        assert back.rolled_back_from_version == 1 and back.contract == contract
        assert store.snapshot().revision == 3
    finally:
        await store.close()


async def test_expected_version_across_planes_lets_exactly_one_writer_win(control_plane_factory: Factory):
    """Two planes write with the same expected_version at once: one commits, the other is ABORTED."""
    async with control_plane_factory() as a, control_plane_factory() as b:
        ca, stub_a = _stub(a)
        cb, stub_b = _stub(b)
        async with ca, cb:
            await stub_a.UpdateContract(_update("*", 1.0))
            results = await asyncio.gather(
                stub_a.UpdateContract(_update("*", 0.1, expected_version=1)),
                stub_b.UpdateContract(_update("*", 0.2, expected_version=1)),
                return_exceptions=True,
            )
            errors = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
            assert len(errors) == 1 and errors[0].code() == grpc.StatusCode.ABORTED
            history = await stub_b.ListContractHistory(pb.ListContractHistoryRequest(scope="*"))
            assert [v.version for v in history.versions] == [2, 1]


async def test_two_prefixes_on_one_etcd_do_not_see_each_other(
    etcd: EtcdServer, control_plane_factory: Factory
):
    """A plane on another prefix of the same etcd keeps its own contracts, revision and workers."""
    async with (
        control_plane_factory(store=etcd.url("iso-one")) as one,
        control_plane_factory(store=etcd.url("iso-one-two")) as two,
    ):
        c1, stub_1 = _stub(one)
        c2, stub_2 = _stub(two)
        async with c1, c2:
            await stub_1.UpdateContract(_update("*", 1.0))
            await load_pb2_grpc.LoadServiceStub(c1).RegisterWorker(
                load_pb2.RegisterWorkerRequest(
                    url="http://127.0.0.1:9",
                    protocol=load_pb2.WORKER_PROTOCOL_HTTP1,
                    models=["m"],
                    load_endpoints=["tcp://127.0.0.1:9"],
                )
            )
            await asyncio.sleep(0.2)  # time for a (wrong) watch event to arrive
            listed = await stub_2.ListContracts(pb.ListContractsRequest())
            assert (listed.revision, list(listed.contracts)) == (0, [])
            workers = await load_pb2_grpc.LoadServiceStub(c2).ListWorkers(load_pb2.ListWorkersRequest())
            assert list(workers.workers) == []


async def test_scopes_that_prefix_each_other_keep_separate_histories(store_url: str):
    """Scope "org" and scope "org/model" (a / in a model name) never mix versions or history."""
    store = EtcdStore(_location(store_url))
    await store.open()
    try:
        contract = parse_contract_json('{"n": 1}')
        for scope in ("org", "org/model", "org/model", "org"):
            await store.update(
                scope, contract, expected_version=None, allow_missing=True, author="t", comment=scope
            )
        for scope in ("org", "org/model"):
            page = await store.history(scope, page_size=10, before_version=None)
            assert [(v.scope, v.version) for v in page.versions] == [(scope, 2), (scope, 1)]
        page = await store.history("org", page_size=1, before_version=2)
        assert [v.version for v in page.versions] == [1] and page.next_before_version is None
    finally:
        await store.close()


async def test_workers_registered_through_one_plane_are_kept_in_etcd(control_plane_factory: Factory):
    """A worker registered through A is listed by a plane started afterwards, and by A after a restart."""
    request = load_pb2.RegisterWorkerRequest(
        url="http://127.0.0.1:9",
        protocol=load_pb2.WORKER_PROTOCOL_HTTP1,
        models=["m"],
        load_endpoints=["tcp://127.0.0.1:9"],
    )
    async with control_plane_factory() as a, grpc.aio.insecure_channel(str(a.grpc_address)) as channel:
        await load_pb2_grpc.LoadServiceStub(channel).RegisterWorker(request)
    async with control_plane_factory() as b, grpc.aio.insecure_channel(str(b.grpc_address)) as channel:
        listed = await load_pb2_grpc.LoadServiceStub(channel).ListWorkers(load_pb2.ListWorkersRequest())
        assert [(w.url, list(w.models)) for w in listed.workers] == [("http://127.0.0.1:9", ["m"])]


async def test_rejection_counts_reported_to_one_plane_survive_for_the_next(control_plane_factory: Factory):
    """Counts a router reported through A are in GetRejectionStats of a plane started after A stops."""
    async with control_plane_factory() as a, grpc.aio.insecure_channel(str(a.grpc_address)) as channel:
        call = router_pb2_grpc.RouterServiceStub(channel).ReportRouterStatus()
        await call.write(
            router_pb2.ReportRouterStatusRequest(
                router_id="r1",
                boot_id="b1",
                applied_revision=0,
                rejections=[router_pb2.RejectionCount(scope="*", param="top_p", count=7)],
            )
        )
        await call.done_writing()
        await call
    async with control_plane_factory() as b, grpc.aio.insecure_channel(str(b.grpc_address)) as channel:
        stats = await router_pb2_grpc.RouterServiceStub(channel).GetRejectionStats(
            router_pb2.GetRejectionStatsRequest()
        )
        assert stats.total == 7 and [(k.key, k.count) for k in stats.by_router] == [("r1", 7)]


@pytest.mark.parametrize("rounds", [5])
async def test_concurrent_count_writers_keep_the_highest_count(store_url: str, rounds: int):
    """Two planes saving counts of one router boot at once: the stored count is the maximum, never lower."""
    from controlplane.reports.rejections import RejectionRow

    stores = [EtcdStore(parse_store(store_url)) for _ in range(2)]  # type: ignore[arg-type]
    for store in stores:
        await store.open()
    try:
        stats = [EtcdRouterStatsStore(store.client) for store in stores]
        for r in range(rounds):
            high, low = 10 * (r + 1) + 5, 10 * (r + 1)
            await asyncio.gather(
                stats[0].save([], [RejectionRow("r", "b", "*", "n", high)]),
                stats[1].save([], [RejectionRow("r", "b", "*", "n", low)]),
            )
            _, rows = await stats[1].load()
            assert [row.count for row in rows] == [high]
    finally:
        for store in stores:
            await store.close()


async def test_a_router_status_written_late_but_older_does_not_replace_the_newer(store_url: str):
    """After a failover the plane the router left writes its last status (its stream ended)
    after the new plane wrote a newer one: the store keeps the newer, with the new replica."""
    from controlplane.reports.rollout import RouterRecord

    stores = [EtcdStore(parse_store(store_url)) for _ in range(2)]  # type: ignore[arg-type]
    for store in stores:
        await store.open()
    try:
        old, new = (EtcdRouterStatsStore(store.client) for store in stores)
        await old.save([RouterRecord("edge", "b1", 4, "", 100.0, control_plane_address="10.0.0.1:1")], [])
        await new.save([RouterRecord("edge", "b1", 4, "", 105.0, control_plane_address="10.0.0.2:1")], [])
        await old.save([RouterRecord("edge", "b1", 4, "", 100.0, control_plane_address="")], [])
        records, _ = await old.load()
        assert [(r.last_report_unix_s, r.control_plane_address) for r in records] == [(105.0, "10.0.0.2:1")]
        await old.save([RouterRecord("edge", "b1", 5, "", 110.0, control_plane_address="10.0.0.1:1")], [])
        records, _ = await new.load()
        assert [(r.applied_revision, r.control_plane_address) for r in records] == [(5, "10.0.0.1:1")]
    finally:
        for store in stores:
            await store.close()


async def _until(read: Callable[[], Awaitable[Any]], expected: Any, timeout_s: float = 5.0) -> None:
    """Poll ``read()`` until it returns ``expected`` (a change reaches the other plane through a watch)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while (got := await read()) != expected:
        assert asyncio.get_running_loop().time() < deadline, f"still {got!r}, expected {expected!r}"
        await asyncio.sleep(0.05)


async def test_a_worker_registered_through_one_running_plane_is_listed_by_the_other(
    control_plane_factory: Factory,
):
    """RegisterWorker on A shows in B's ListWorkers while both run; DeregisterWorker on A removes it."""
    request = load_pb2.RegisterWorkerRequest(
        url="http://127.0.0.1:9",
        protocol=load_pb2.WORKER_PROTOCOL_HTTP1,
        models=["m"],
        load_endpoints=["tcp://127.0.0.1:9"],
    )
    async with (
        control_plane_factory() as a,
        control_plane_factory() as b,
        grpc.aio.insecure_channel(str(a.grpc_address)) as ca,
        grpc.aio.insecure_channel(str(b.grpc_address)) as cb,
    ):
        stub_a, stub_b = load_pb2_grpc.LoadServiceStub(ca), load_pb2_grpc.LoadServiceStub(cb)

        async def listed_by_b() -> list[str]:
            return [w.url for w in (await stub_b.ListWorkers(load_pb2.ListWorkersRequest())).workers]

        await stub_a.RegisterWorker(request)
        await _until(listed_by_b, ["http://127.0.0.1:9"])
        await stub_a.DeregisterWorker(load_pb2.DeregisterWorkerRequest(url="http://127.0.0.1:9"))
        await _until(listed_by_b, [])


async def test_rejections_reported_to_one_running_plane_count_in_the_other(control_plane_factory: Factory):
    """A router reports to A: B's GetRejectionStats has the same totals while both run."""
    async with (
        control_plane_factory() as a,
        control_plane_factory() as b,
        grpc.aio.insecure_channel(str(a.grpc_address)) as ca,
        grpc.aio.insecure_channel(str(b.grpc_address)) as cb,
    ):
        call = router_pb2_grpc.RouterServiceStub(ca).ReportRouterStatus()
        await call.write(
            router_pb2.ReportRouterStatusRequest(
                router_id="r1",
                boot_id="b1",
                applied_revision=0,
                rejections=[router_pb2.RejectionCount(scope="*", param="n", count=3)],
            )
        )
        stub_b = router_pb2_grpc.RouterServiceStub(cb)

        async def total_on_b() -> int:
            return int((await stub_b.GetRejectionStats(router_pb2.GetRejectionStatsRequest())).total)

        await _until(total_on_b, 3)
        routers = await stub_b.ListRouters(router_pb2.ListRoutersRequest())
        assert [(r.router_id, r.boot_id) for r in routers.routers] == [("r1", "b1")]
        await call.done_writing()
        await call
