"""ContractService as a black box (SPEC §3.2, §6): versions, revision, history, rollback, delete, watch."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess


def _update(stub, scope: str, temperature: float, **extra: object) -> pb.Contract:  # type: ignore[no-untyped-def]
    request = pb.UpdateContractRequest(
        scope=scope, params={"temperature": pb.ParamSpec(exact=temperature)}, allow_missing=True, **extra
    )
    return stub.UpdateContract(request, timeout=10).contract


def _code(call, request) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=10)
    return info.value.code()


def test_versions_revisions_history_rollback_and_delete(channel: grpc.Channel) -> None:
    """Per-scope versions 1,2,..; one store revision across scopes; history newest first in pages."""
    stub = contract_pb2_grpc.ContractServiceStub(channel)
    assert [(c.version, c.revision) for c in (_update(stub, "*", 1.0), _update(stub, "m", 0.5))] == [
        (1, 1),
        (1, 2),
    ]
    v2 = _update(stub, "*", 0.7, comment="cooler")
    assert (v2.version, v2.revision, v2.author, v2.comment) == (2, 3, "anonymous", "cooler")
    assert v2.change == pb.CHANGE_KIND_UPDATE and v2.create_time.seconds > 0
    back = stub.RollbackContract(pb.RollbackContractRequest(scope="*", version=1, comment="undo"), timeout=10)
    assert (back.contract.version, back.contract.revision, back.contract.rolled_back_from_version) == (
        3,
        4,
        1,
    )
    assert back.contract.change == pb.CHANGE_KIND_ROLLBACK
    assert back.contract.params["temperature"].exact == 1.0
    gone = stub.DeleteContract(pb.DeleteContractRequest(scope="m"), timeout=10).contract
    assert (gone.version, gone.revision, gone.change, dict(gone.params)) == (2, 5, pb.CHANGE_KIND_DELETE, {})
    listed = stub.ListContracts(pb.ListContractsRequest(), timeout=10)
    assert listed.revision == 5 and [c.scope for c in listed.contracts] == ["*"]
    assert _code(stub.GetContract, pb.GetContractRequest(scope="m")) == grpc.StatusCode.NOT_FOUND
    # A deleted scope's history is kept, and it can be rolled back to life.
    pages, token = [], ""
    while True:
        page = stub.ListContractHistory(
            pb.ListContractHistoryRequest(scope="*", page_size=2, page_token=token), timeout=10
        )
        pages.append([v.version for v in page.versions])
        token = page.next_page_token
        if not token:
            break
    assert pages == [[3, 2], [1]]
    revived = stub.RollbackContract(pb.RollbackContractRequest(scope="m", version=1), timeout=10).contract
    assert (revived.version, revived.revision, revived.params["temperature"].exact) == (3, 6, 0.5)


def test_refusals_write_nothing(channel: grpc.Channel) -> None:
    """ABORTED on expected_version, NOT_FOUND on missing, INVALID_ARGUMENT on a deletion target: no revision used."""
    stub = contract_pb2_grpc.ContractServiceStub(channel)
    _update(stub, "*", 1.0, expected_version=0)
    params = {"temperature": pb.ParamSpec(exact=0.1)}
    assert _code(
        stub.UpdateContract, pb.UpdateContractRequest(scope="*", params=params, expected_version=0)
    ) == (grpc.StatusCode.ABORTED)
    assert (
        _code(stub.DeleteContract, pb.DeleteContractRequest(scope="*", expected_version=7))
        == grpc.StatusCode.ABORTED
    )
    assert _code(
        stub.RollbackContract, pb.RollbackContractRequest(scope="*", version=1, expected_version=2)
    ) == (grpc.StatusCode.ABORTED)
    assert (
        _code(stub.UpdateContract, pb.UpdateContractRequest(scope="new", params=params))
        == grpc.StatusCode.NOT_FOUND
    )
    assert _code(stub.DeleteContract, pb.DeleteContractRequest(scope="new")) == grpc.StatusCode.NOT_FOUND
    assert (
        _code(stub.RollbackContract, pb.RollbackContractRequest(scope="*", version=9))
        == grpc.StatusCode.NOT_FOUND
    )
    assert (
        _code(stub.ListContractHistory, pb.ListContractHistoryRequest(scope="new"))
        == grpc.StatusCode.NOT_FOUND
    )
    stub.DeleteContract(pb.DeleteContractRequest(scope="*", expected_version=1), timeout=10)
    assert _code(stub.RollbackContract, pb.RollbackContractRequest(scope="*", version=2)) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert _code(stub.GetContract, pb.GetContractRequest(scope="")) == grpc.StatusCode.INVALID_ARGUMENT
    assert stub.ListContracts(pb.ListContractsRequest(), timeout=10).revision == 2


def test_the_revision_survives_sigkill_and_is_never_reused() -> None:
    """After kill -9 the store keeps every acknowledged version and the next write gets the next revision."""
    with ControlPlaneProcess() as cp:
        with grpc.insecure_channel(cp.target) as channel:
            stub = contract_pb2_grpc.ContractServiceStub(channel)
            for i in range(3):
                _update(stub, "*", i / 10)
        cp.kill()
        cp.start()
        with grpc.insecure_channel(cp.target) as channel:
            stub = contract_pb2_grpc.ContractServiceStub(channel)
            assert stub.GetContract(pb.GetContractRequest(scope="*"), timeout=10).contract.version == 3
            assert _update(stub, "*", 0.9).revision == 4


def test_watch_contracts_first_message_and_every_change(channel: grpc.Channel) -> None:
    """The first message comes at once (known_revision 0, or older); a current known_revision waits for a change."""
    stub = contract_pb2_grpc.ContractServiceStub(channel)
    first = next(
        iter(stub.WatchContracts(pb.WatchContractsRequest(router_id="w", known_revision=0), timeout=5))
    )
    assert (first.revision, list(first.contracts)) == (0, [])
    _update(stub, "*", 1.0)
    _update(stub, "m", 1.0)
    seen: list[pb.WatchContractsResponse] = []
    call = stub.WatchContracts(pb.WatchContractsRequest(router_id="w", known_revision=2))

    def pump() -> None:
        try:
            for message in call:
                seen.append(message)
        except grpc.RpcError:
            pass

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        time.sleep(0.5)
        assert seen == []  # known_revision is current: nothing to send yet
        _update(stub, "m", 0.5)
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
        assert seen[0].revision == 3
        assert {c.scope: c.version for c in seen[0].contracts} == {"*": 1, "m": 2}  # the complete set
    finally:
        call.cancel()
        reader.join(5)
    stale = next(iter(stub.WatchContracts(pb.WatchContractsRequest(known_revision=1), timeout=5)))
    assert stale.revision == 3
