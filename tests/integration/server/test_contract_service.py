"""ContractService over real gRPC on 127.0.0.1:0: every RPC and every error status (SPEC §3.2, §6)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from controlplane.contracts import contract_to_proto_params, parse_contract_json
from controlplane.v1 import contract_pb2 as pb

# Both store backends, one behaviour (SPEC §3.2, §6): every test runs on SQLite and on etcd.
pytestmark = pytest.mark.parametrize("store_location", ["sqlite", "etcd"], indirect=True)

TEMP_1 = '{"temperature": 1, "top_k": {"min": 1, "max": 50, "default": 40}}'


def update(
    scope: str, text: str = TEMP_1, conflict: str = "reject", **kw: object
) -> pb.UpdateContractRequest:
    params, policy = contract_to_proto_params(parse_contract_json(text, conflict))
    kw.setdefault("allow_missing", True)
    return pb.UpdateContractRequest(scope=scope, params=params, conflict=policy, **kw)  # type: ignore[arg-type]


async def status_of(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return info.value.code(), info.value.details() or ""


async def test_update_then_get_returns_the_version_with_author_time_and_comment(control_plane):
    """A first update creates version 1 at revision 1, readable with GetContract."""
    stub = control_plane.contracts
    written = (await stub.UpdateContract(update("*", comment="first"))).contract
    assert (written.scope, written.version, written.revision) == ("*", 1, 1)
    assert written.change == pb.CHANGE_KIND_UPDATE and written.comment == "first"
    assert written.author == "anonymous" and written.create_time.seconds > 0
    got = (await stub.GetContract(pb.GetContractRequest(scope="*"))).contract
    assert got == written
    assert got.params["temperature"].exact == 1.0
    assert got.params["top_k"].band.default == 40.0
    assert got.conflict == pb.CONFLICT_POLICY_REJECT


async def test_get_of_a_scope_never_set_is_not_found_naming_the_scope(control_plane):
    """GetContract on an unknown scope answers NOT_FOUND with the scope in the message."""
    code, msg = await status_of(control_plane.contracts.GetContract(pb.GetContractRequest(scope="llama")))
    assert code == grpc.StatusCode.NOT_FOUND and "llama" in msg


async def test_list_returns_live_scopes_sorted_with_the_store_revision(control_plane):
    """ListContracts returns every live scope sorted by scope, and the current revision."""
    stub = control_plane.contracts
    for scope in ("zeta", "*", "alpha"):
        await stub.UpdateContract(update(scope))
    listed = await stub.ListContracts(pb.ListContractsRequest())
    assert [c.scope for c in listed.contracts] == ["*", "alpha", "zeta"]
    assert listed.revision == 3


@pytest.mark.parametrize(
    ("text", "conflict", "needle"),
    [
        ('{"temperature": 5}', "reject", "temperature"),
        ('{"top_k": {"min": 0, "max": 5}}', "reject", "top_k"),
        ('{"top_p": {"min": 0.1, "max": 0.9}}', "allow", "top_p"),
        ('{"n": 1.5}', "reject", "n"),
    ],
)
async def test_update_with_an_invalid_contract_is_invalid_argument_naming_the_field(
    control_plane, text, conflict, needle
):
    """Invalid params are refused with INVALID_ARGUMENT naming the field; nothing is written."""
    # Build the request by hand: the local parser would refuse these before sending.
    import json

    doc = json.loads(text)
    req = pb.UpdateContractRequest(scope="*", allow_missing=True)
    req.conflict = pb.CONFLICT_POLICY_ALLOW if conflict == "allow" else pb.CONFLICT_POLICY_REJECT
    for name, value in doc.items():
        if isinstance(value, dict):
            req.params[name].band.min = value["min"]
            req.params[name].band.max = value["max"]
        else:
            req.params[name].exact = value
    code, msg = await status_of(control_plane.contracts.UpdateContract(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and needle in msg
    assert (await control_plane.contracts.ListContracts(pb.ListContractsRequest())).revision == 0


async def test_update_with_unknown_field_empty_params_or_bad_scope_is_invalid_argument(control_plane):
    """Unknown parameter, empty params map and an empty scope each name what is wrong."""
    stub = control_plane.contracts
    req = pb.UpdateContractRequest(scope="*", allow_missing=True)
    req.params["temprature"].exact = 1
    code, msg = await status_of(stub.UpdateContract(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "temprature" in msg
    code, msg = await status_of(stub.UpdateContract(pb.UpdateContractRequest(scope="*", allow_missing=True)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "params" in msg
    code, msg = await status_of(stub.UpdateContract(update("")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "scope" in msg
    req = update("*")
    req.params["temperature"].ClearField("exact")
    code, msg = await status_of(stub.UpdateContract(req))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "temperature" in msg
    code, msg = await status_of(stub.UpdateContract(update("*", expected_version=-1)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "expected_version" in msg


async def test_update_of_a_missing_scope_without_allow_missing_is_not_found(control_plane):
    """allow_missing=false on a scope with no live version: NOT_FOUND and nothing written."""
    stub = control_plane.contracts
    code, msg = await status_of(stub.UpdateContract(update("llama", allow_missing=False)))
    assert code == grpc.StatusCode.NOT_FOUND and "llama" in msg
    await stub.UpdateContract(update("llama"))
    written = (await stub.UpdateContract(update("llama", allow_missing=False))).contract
    assert written.version == 2


async def test_expected_version_mismatch_is_aborted_and_writes_nothing(control_plane):
    """A stale expected_version answers ABORTED naming the current version; history unchanged."""
    stub = control_plane.contracts
    await stub.UpdateContract(update("*", expected_version=0))
    await stub.UpdateContract(update("*", expected_version=1))
    code, msg = await status_of(stub.UpdateContract(update("*", expected_version=1)))
    assert code == grpc.StatusCode.ABORTED and "version 2" in msg
    code, _ = await status_of(stub.UpdateContract(update("new", expected_version=3)))
    assert code == grpc.StatusCode.ABORTED
    history = await stub.ListContractHistory(pb.ListContractHistoryRequest(scope="*"))
    assert [v.version for v in history.versions] == [2, 1]
    assert (await stub.ListContracts(pb.ListContractsRequest())).revision == 2


async def test_two_writers_with_the_same_expected_version_exactly_one_wins(control_plane):
    """Concurrent writers on one expected_version: one succeeds, the rest ABORTED, one version added."""
    stub = control_plane.contracts
    await stub.UpdateContract(update("*"))
    for round_ in range(5):
        calls = [
            stub.UpdateContract(update("*", comment=f"w{i}", expected_version=round_ + 1)) for i in range(4)
        ]
        results = await asyncio.gather(*calls, return_exceptions=True)
        ok = [r for r in results if isinstance(r, pb.UpdateContractResponse)]
        aborted = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(ok) == 1 and ok[0].contract.version == round_ + 2
        assert len(aborted) == 3 and all(e.code() == grpc.StatusCode.ABORTED for e in aborted)
    history = await stub.ListContractHistory(pb.ListContractHistoryRequest(scope="*"))
    assert [v.version for v in history.versions] == [6, 5, 4, 3, 2, 1]


async def test_delete_writes_a_deletion_version_and_removes_the_scope(control_plane):
    """DeleteContract adds a DELETE version without params; Get is then NOT_FOUND, List omits it."""
    stub = control_plane.contracts
    await stub.UpdateContract(update("llama"))
    deleted = (await stub.DeleteContract(pb.DeleteContractRequest(scope="llama", comment="gone"))).contract
    assert (deleted.version, deleted.revision, deleted.change) == (2, 2, pb.CHANGE_KIND_DELETE)
    assert not deleted.params and deleted.comment == "gone"
    code, _ = await status_of(stub.GetContract(pb.GetContractRequest(scope="llama")))
    assert code == grpc.StatusCode.NOT_FOUND
    assert not (await stub.ListContracts(pb.ListContractsRequest())).contracts


async def test_delete_errors_not_found_and_aborted(control_plane):
    """Deleting a missing or already deleted scope is NOT_FOUND; a stale expected_version ABORTED."""
    stub = control_plane.contracts
    code, msg = await status_of(stub.DeleteContract(pb.DeleteContractRequest(scope="nope")))
    assert code == grpc.StatusCode.NOT_FOUND and "nope" in msg
    await stub.UpdateContract(update("m"))
    code, _ = await status_of(stub.DeleteContract(pb.DeleteContractRequest(scope="m", expected_version=7)))
    assert code == grpc.StatusCode.ABORTED
    await stub.DeleteContract(pb.DeleteContractRequest(scope="m", expected_version=1))
    code, _ = await status_of(stub.DeleteContract(pb.DeleteContractRequest(scope="m")))
    assert code == grpc.StatusCode.NOT_FOUND


async def test_history_pages_newest_first_until_an_empty_token(control_plane):
    """ListContractHistory returns every version newest first, paged by next_page_token."""
    stub = control_plane.contracts
    for i in range(5):
        await stub.UpdateContract(update("*", comment=f"c{i}"))
    seen, token, pages = [], "", 0
    while True:
        page = await stub.ListContractHistory(
            pb.ListContractHistoryRequest(scope="*", page_size=2, page_token=token)
        )
        pages += 1
        seen += [(v.version, v.comment) for v in page.versions]
        token = page.next_page_token
        if not token:
            break
    assert pages == 3
    assert seen == [(5, "c4"), (4, "c3"), (3, "c2"), (2, "c1"), (1, "c0")]
    default = await stub.ListContractHistory(pb.ListContractHistoryRequest(scope="*"))
    assert len(default.versions) == 5 and default.next_page_token == ""


async def test_history_errors(control_plane):
    """Unknown scope NOT_FOUND; a forged page_token or negative page_size INVALID_ARGUMENT."""
    stub = control_plane.contracts
    code, _ = await status_of(stub.ListContractHistory(pb.ListContractHistoryRequest(scope="x")))
    assert code == grpc.StatusCode.NOT_FOUND
    await stub.UpdateContract(update("x"))
    code, msg = await status_of(
        stub.ListContractHistory(pb.ListContractHistoryRequest(scope="x", page_token="garbage"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in msg
    code, msg = await status_of(
        stub.ListContractHistory(pb.ListContractHistoryRequest(scope="x", page_size=-1))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "page_size" in msg


@pytest.mark.parametrize("token", ["²", "١٢", "9" * 30, str(2**63), "0", "-1", " 1", "1\n", "1.5"])
async def test_a_malformed_page_token_is_invalid_argument_naming_it(control_plane, token: str):
    """A page_token no response gave (Unicode digits, past int64, signs, spaces): INVALID_ARGUMENT."""
    stub = control_plane.contracts
    await stub.UpdateContract(update("x"))
    code, msg = await status_of(
        stub.ListContractHistory(pb.ListContractHistoryRequest(scope="x", page_token=token))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and msg.startswith("page_token:")


async def test_rollback_copies_an_earlier_version_as_a_new_one(control_plane):
    """Rollback to V writes V's params and policy as a new ROLLBACK version, even after a delete."""
    stub = control_plane.contracts
    await stub.UpdateContract(update("m", '{"temperature": 0.5}', "allow"))
    await stub.UpdateContract(update("m", '{"temperature": 1}'))
    await stub.DeleteContract(pb.DeleteContractRequest(scope="m"))
    back = (
        await stub.RollbackContract(pb.RollbackContractRequest(scope="m", version=1, comment="undo"))
    ).contract
    assert (back.version, back.change, back.rolled_back_from_version) == (4, pb.CHANGE_KIND_ROLLBACK, 1)
    assert back.params["temperature"].exact == 0.5 and back.conflict == pb.CONFLICT_POLICY_ALLOW
    assert (await stub.GetContract(pb.GetContractRequest(scope="m"))).contract == back


async def test_rollback_errors(control_plane):
    """Rollback: unknown scope/version NOT_FOUND, to a deletion INVALID_ARGUMENT, stale expected ABORTED."""
    stub = control_plane.contracts
    code, _ = await status_of(stub.RollbackContract(pb.RollbackContractRequest(scope="m", version=1)))
    assert code == grpc.StatusCode.NOT_FOUND
    await stub.UpdateContract(update("m"))
    await stub.DeleteContract(pb.DeleteContractRequest(scope="m"))
    code, msg = await status_of(stub.RollbackContract(pb.RollbackContractRequest(scope="m", version=9)))
    assert code == grpc.StatusCode.NOT_FOUND and "version" in msg
    code, msg = await status_of(stub.RollbackContract(pb.RollbackContractRequest(scope="m", version=2)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "version" in msg and "deletion" in msg
    code, msg = await status_of(stub.RollbackContract(pb.RollbackContractRequest(scope="m", version=0)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "version" in msg
    code, _ = await status_of(
        stub.RollbackContract(pb.RollbackContractRequest(scope="m", version=1, expected_version=1))
    )
    assert code == grpc.StatusCode.ABORTED
    assert len((await stub.ListContractHistory(pb.ListContractHistoryRequest(scope="m"))).versions) == 2


async def test_revisions_are_store_wide_and_strictly_increasing(control_plane):
    """Every change in any scope takes the next store revision; versions count per scope."""
    stub = control_plane.contracts
    a = (await stub.UpdateContract(update("a"))).contract
    b = (await stub.UpdateContract(update("b"))).contract
    d = (await stub.DeleteContract(pb.DeleteContractRequest(scope="a"))).contract
    r = (await stub.RollbackContract(pb.RollbackContractRequest(scope="a", version=1))).contract
    assert [(x.scope, x.version, x.revision) for x in (a, b, d, r)] == [
        ("a", 1, 1),
        ("b", 1, 2),
        ("a", 2, 3),
        ("a", 3, 4),
    ]
