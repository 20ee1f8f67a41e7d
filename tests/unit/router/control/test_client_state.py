"""The control-plane client's bookkeeping, fed messages directly (no stream, no socket used)."""

from __future__ import annotations

from controlplane.v1 import contract_pb2, load_pb2
from dataplane.router.control.client import ControlPlaneClient
from dataplane.router.control.convert import ControlClientSettings, EngineLoad
from dataplane.router.process.journal import BootCounts
from tests.fakes.control_targets import Recorder


def _client(target: Recorder) -> ControlPlaneClient:
    return ControlPlaneClient(ControlClientSettings(target="127.0.0.1:1", router_id="r1"), target)


def _snapshot(revision: int, top_p: float) -> contract_pb2.WatchContractsResponse:
    contract = contract_pb2.Contract(scope="*", params={"top_p": contract_pb2.ParamSpec(exact=top_p)})
    return contract_pb2.WatchContractsResponse(revision=revision, contracts=[contract])


async def test_before_the_first_snapshot_the_report_says_so() -> None:
    """Until a snapshot arrives the report carries revision 0 and an explanatory apply_error."""
    client = _client(Recorder())
    report = client.build_report()
    assert (report.router_id, report.applied_revision) == ("r1", 0)
    assert "no contract snapshot" in report.apply_error
    assert len(report.boot_id) == 16
    await client.close()


async def test_bad_snapshot_keeps_the_last_good_one_and_reports_the_error() -> None:
    """An invalid snapshot is not applied; the report keeps the old revision and names the error."""
    target = Recorder()
    client = _client(target)
    assert client.apply_snapshot(_snapshot(4, 0.9))
    assert not client.apply_snapshot(_snapshot(5, 7.0))
    assert target.contracts == [4]
    report = client.build_report()
    assert (
        report.applied_revision == 4 and "revision 5" in report.apply_error and "top_p" in report.apply_error
    )
    assert client.apply_snapshot(_snapshot(6, 0.8))
    assert client.build_report().apply_error == ""
    await client.close()


async def test_report_carries_cumulative_counts_sorted() -> None:
    """Rejection counts go out as (scope, param, count) entries in a stable order."""
    target = Recorder()
    target.counts = {("llama", "n", ""): 2, ("*", "top_p", ""): 5}
    client = _client(target)
    report = client.build_report()
    assert [(r.scope, r.param, r.count) for r in report.rejections] == [("*", "top_p", 5), ("llama", "n", 2)]
    await client.close()


async def test_report_names_this_boots_ejected_workers_only() -> None:
    """The report carries the workers out of rotation now; a predecessor boot's report carries none
    (its health is not this process's)."""
    target = Recorder()
    target.ejected = ["http://w1:1"]
    settings = ControlClientSettings(target="127.0.0.1:1", router_id="r1")
    client = ControlPlaneClient(settings, target, predecessors=[BootCounts("old", {("*", "n", ""): 1})])
    assert list(client.build_report().ejected_workers) == ["http://w1:1"]
    (old,) = client.predecessor_reports()
    assert old.boot_id == "old" and list(old.ejected_workers) == []
    target.ejected = []
    assert list(client.build_report().ejected_workers) == []
    await client.close()


async def test_registry_is_applied_only_when_it_changes() -> None:
    """The same ListWorkers answer twice replaces the worker set once."""
    target = Recorder()
    client = _client(target)
    workers = [load_pb2.Worker(url="http://127.0.0.1:9001", models=["m"])]
    client.apply_registry(workers)
    client.apply_registry(workers)
    assert len(target.workers) == 1
    await client.close()


async def test_unknown_worker_in_a_load_view_asks_for_a_registry_refresh() -> None:
    """A load view naming a worker the router does not know triggers an immediate ListWorkers."""
    target = Recorder()
    client = _client(target)
    client.apply_registry([load_pb2.Worker(url="http://a:1", models=["m"])])
    view = load_pb2.WorkerLoad(url="http://a:1", num_running_reqs=2, freshness=load_pb2.FRESHNESS_FRESH)
    client.apply_load_message(load_pb2.WatchLoadsResponse(full=True, workers=[view]))
    assert not client.refresh_requested
    assert target.loads["http://a:1"] == EngineLoad(2, 0, True)
    client.apply_load_message(load_pb2.WatchLoadsResponse(workers=[load_pb2.WorkerLoad(url="http://b:2")]))
    assert client.refresh_requested
    await client.close()
