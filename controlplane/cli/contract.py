"""``fleetplane contract list|get|set|delete|history|rollback|diff`` (SPEC §1, §3.2).

``set`` takes the same JSON as the router's ``--override-sampling-params`` (``-`` reads it
from stdin), checks it locally first (the same parser the server uses, for the same message),
and creates the scope when it does not exist; ``set --dry-run`` shows the validated contract and
what it would change against the current version, and writes nothing. ``diff --scope S V1 V2``
shows what changed between two stored versions. A scope is named by ``--scope`` or ``--fleet``
(``scope``). Errors print the server's message, exit 1 (2 for a refused argument).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import grpc

from controlplane.cli.client import (
    USAGE_ERROR_EXIT,
    CommandError,
    ControlPlaneClient,
    add_connection_arguments,
    describe_rpc_error,
    message_json,
    table,
)
from controlplane.cli.contract_diff import contract_changes, describe
from controlplane.cli.scope import add_scope_arguments, check_scope, requested_scope, served_models
from controlplane.contracts import (
    ContractError,
    SamplingContract,
    contract_from_proto,
    contract_to_json,
    contract_to_proto_params,
    parse_contract_json,
)
from controlplane.v1 import contract_pb2, contract_pb2_grpc

_CHANGE = {
    contract_pb2.CHANGE_KIND_UPDATE: "update",
    contract_pb2.CHANGE_KIND_DELETE: "delete",
    contract_pb2.CHANGE_KIND_ROLLBACK: "rollback",
}
_CONFLICT = {contract_pb2.CONFLICT_POLICY_ALLOW: "allow"}  # unset/REJECT -> "reject"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_connection_arguments(
        sub.add_parser("list", help="live contracts and the store revision"), inherited=True
    )
    get = sub.add_parser("get", help="the current version of one scope")
    add_scope_arguments(get)
    add_connection_arguments(get, inherited=True)
    put = sub.add_parser("set", help="write a new version of a scope (creating it if needed)")
    add_scope_arguments(put)
    put.add_argument("--conflict", choices=("reject", "allow"), default="reject")
    put.add_argument("--expected-version", type=int, default=None, help="0 = the scope must not exist")
    put.add_argument("--comment", default="", help="kept in the history")
    put.add_argument(
        "--dry-run",
        action="store_true",
        help="print the validated contract and its changes against the current version; write nothing",
    )
    put.add_argument("json", metavar="JSON", help="contract, as --override-sampling-params; - for stdin")
    add_connection_arguments(put, inherited=True)
    delete = sub.add_parser("delete", help="delete a scope (as a new version)")
    add_scope_arguments(delete)
    delete.add_argument("--expected-version", type=int, default=None)
    delete.add_argument("--comment", default="")
    add_connection_arguments(delete, inherited=True)
    history = sub.add_parser("history", help="every version of a scope, newest first")
    add_scope_arguments(history)
    history.add_argument("--limit", type=int, default=50, help="at most this many versions")
    add_connection_arguments(history, inherited=True)
    rollback = sub.add_parser("rollback", help="write the content of an earlier version as a new one")
    add_scope_arguments(rollback)
    rollback.add_argument("--version", type=int, required=True, help="the version to restore")
    rollback.add_argument("--expected-version", type=int, default=None)
    rollback.add_argument("--comment", default="")
    add_connection_arguments(rollback, inherited=True)
    diff = sub.add_parser("diff", help="what changed between two versions of a scope")
    add_scope_arguments(diff)
    diff.add_argument("old", metavar="V1", type=int, help="the earlier version")
    diff.add_argument("new", metavar="V2", type=int, help="the later version")
    add_connection_arguments(diff, inherited=True)


# Writes that make a scope judge requests: warned about when no served model matches.
_JUDGING_WRITES = ("set", "rollback")


def _params(c: contract_pb2.Contract) -> str:
    if c.change == contract_pb2.CHANGE_KIND_DELETE:
        return "(deleted)"
    try:
        return contract_to_json(contract_from_proto(c.params, c.conflict))
    except ContractError as exc:  # never expected from our server; show rather than crash
        return f"(unreadable: {exc.message})"


def _when(c: contract_pb2.Contract) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.create_time.seconds))


def _rows(contracts: list[contract_pb2.Contract], history: bool) -> str:
    headers = [
        "scope",
        "version",
        "revision",
        "change",
        "conflict",
        "params",
        "author",
        "time (utc)",
        "comment",
    ]
    rows = []
    for c in contracts:
        change = _CHANGE.get(c.change, "?")
        if c.change == contract_pb2.CHANGE_KIND_ROLLBACK:
            change = f"rollback to v{c.rolled_back_from_version}"
        conflict = "-" if c.change == contract_pb2.CHANGE_KIND_DELETE else _CONFLICT.get(c.conflict, "reject")
        rows.append(
            [c.scope, c.version, c.revision, change, conflict, _params(c), c.author, _when(c), c.comment]
        )
    if not history:  # the live set: the change kind matters less than in the history
        headers.pop(3)
        for row in rows:
            row.pop(3)
    return table(headers, rows)


def _read_json(text: str) -> str:
    return sys.stdin.read() if text == "-" else text


def _show(args: argparse.Namespace, response: contract_pb2.Contract, message: object) -> None:
    if args.output == "json":
        print(message_json(message))  # type: ignore[arg-type]
    else:
        print(_rows([response], history=True))


def run(args: argparse.Namespace) -> int:
    command = f"contract {args.action}"
    try:
        if args.action != "list":
            args.scope = requested_scope(args)
        request = _request(args)
        with ControlPlaneClient.from_args(args) as client:
            if args.action != "list":
                models = served_models(client)
                check_scope(args.scope, models, warn_unserved=args.action in _JUDGING_WRITES)
            stub = contract_pb2_grpc.ContractServiceStub(client.channel)
            action = _dry_run if args.action == "set" and args.dry_run else _ACTIONS[args.action]
            action(args, client, stub, request)
    except CommandError as exc:
        return exc.report(command)
    return 0


def _request(args: argparse.Namespace) -> object:
    """Build (and locally check) the request before connecting."""
    if args.action == "set":
        try:
            contract = parse_contract_json(_read_json(args.json), args.conflict)
        except ContractError as exc:
            raise CommandError(exc.message, USAGE_ERROR_EXIT) from None
        params, conflict = contract_to_proto_params(contract)
        request = contract_pb2.UpdateContractRequest(
            scope=args.scope, params=params, conflict=conflict, allow_missing=True, comment=args.comment
        )
        if args.expected_version is not None:
            request.expected_version = args.expected_version
        return request
    if args.action in ("delete", "rollback"):
        req: contract_pb2.DeleteContractRequest | contract_pb2.RollbackContractRequest
        if args.action == "delete":
            req = contract_pb2.DeleteContractRequest(scope=args.scope, comment=args.comment)
        else:
            req = contract_pb2.RollbackContractRequest(
                scope=args.scope, version=args.version, comment=args.comment
            )
        if args.expected_version is not None:
            req.expected_version = args.expected_version
        return req
    if args.action == "history" and args.limit < 1:
        raise CommandError(f"--limit {args.limit}: must be >= 1", USAGE_ERROR_EXIT)
    if args.action == "diff":
        for flag, version in (("V1", args.old), ("V2", args.new)):
            if version < 1:
                raise CommandError(f"{flag} {version}: versions count from 1", USAGE_ERROR_EXIT)
    return None


_Stub = contract_pb2_grpc.ContractServiceStub


def _list(args: argparse.Namespace, client: ControlPlaneClient, stub: _Stub, _: object) -> None:
    resp = client.call(stub.ListContracts, contract_pb2.ListContractsRequest())
    if args.output == "json":
        print(message_json(resp))
        return
    print(f"revision {resp.revision}")
    if resp.contracts:
        print(_rows(list(resp.contracts), history=False))
    else:
        print("no contracts (requests are not judged)")


def _get(args: argparse.Namespace, client: ControlPlaneClient, stub: _Stub, _: object) -> None:
    resp = client.call(stub.GetContract, contract_pb2.GetContractRequest(scope=args.scope))
    _show(args, resp.contract, resp)


def _write(method_name: str) -> Callable[[argparse.Namespace, ControlPlaneClient, _Stub, object], None]:
    def write(args: argparse.Namespace, client: ControlPlaneClient, stub: _Stub, request: object) -> None:
        resp = client.call(getattr(stub, method_name), request)  # type: ignore[arg-type]
        _show(args, resp.contract, resp)

    return write


def _history(args: argparse.Namespace, client: ControlPlaneClient, stub: _Stub, _: object) -> None:
    versions: list[contract_pb2.Contract] = []
    token = ""
    while len(versions) < args.limit:
        page_size = min(args.limit - len(versions), 1000)
        resp = client.call(
            stub.ListContractHistory,
            contract_pb2.ListContractHistoryRequest(scope=args.scope, page_size=page_size, page_token=token),
        )
        versions.extend(resp.versions)
        token = resp.next_page_token
        if not token:
            break
    if args.output == "json":
        print(
            message_json(contract_pb2.ListContractHistoryResponse(versions=versions, next_page_token=token))
        )
    else:
        print(_rows(versions, history=True))


def _newest(client: ControlPlaneClient, stub: _Stub, scope: str) -> contract_pb2.Contract | None:
    """The newest version of ``scope`` (a delete included), or None when it never existed."""
    request = contract_pb2.ListContractHistoryRequest(scope=scope, page_size=1)
    try:
        resp = stub.ListContractHistory(request, metadata=client.metadata, timeout=client.timeout_s)
    except grpc.RpcError as exc:
        if isinstance(exc, grpc.Call) and exc.code() is grpc.StatusCode.NOT_FOUND:
            return None
        raise CommandError(describe_rpc_error(exc, client.target)) from None
    return resp.versions[0] if resp.versions else None


def _content(version: contract_pb2.Contract | None) -> SamplingContract | None:
    """What a stored version judges with (None: no contract, e.g. a delete)."""
    if version is None or version.change == contract_pb2.CHANGE_KIND_DELETE:
        return None
    return contract_from_proto(version.params, version.conflict)


def _version_label(version: contract_pb2.Contract | None) -> str:
    if version is None:
        return "none (the scope does not exist)"
    deleted = " (deleted)" if version.change == contract_pb2.CHANGE_KIND_DELETE else ""
    return f"version {version.version}{deleted}"


def _dry_run(args: argparse.Namespace, client: ControlPlaneClient, stub: _Stub, request: object) -> None:
    """``set --dry-run``: the validated contract and its changes against the current version."""
    assert isinstance(request, contract_pb2.UpdateContractRequest)
    current = _newest(client, stub, args.scope)
    proposed = contract_from_proto(request.params, request.conflict)
    changes = contract_changes(_content(current), proposed)
    current_version = current.version if current is not None else 0
    refusal = ""
    if request.HasField("expected_version") and request.expected_version != current_version:
        refusal = (
            f"--expected-version {request.expected_version} does not match the current version "
            f"{current_version}: the write would be refused (ABORTED)"
        )
    if args.output == "json":
        doc = {
            "dryRun": True,
            "scope": args.scope,
            "currentVersion": current_version,
            "current": json.loads(message_json(current)) if current is not None else None,
            "proposed": {
                "params": json.loads(contract_to_json(proposed)),
                "conflict": proposed.conflict.value,
            },
            "changes": changes,
            "refused": refusal,
        }
        print(json.dumps(doc, indent=2))
    else:
        print(f"dry run: nothing written to scope {args.scope!r}")
        print(f"current   {_version_label(current)}: {describe(_content(current))}")
        print(f"proposed  {describe(proposed)}")
        print("changes:" if changes else "changes: none (the proposed contract judges like the current one)")
        for line in changes:
            print(f"  {line}")
    if refusal:
        raise CommandError(refusal)


def _find_versions(
    client: ControlPlaneClient, stub: _Stub, scope: str, wanted: set[int]
) -> dict[int, contract_pb2.Contract]:
    """The stored versions ``wanted`` of ``scope``, read from its history (newest first, paged)."""
    found: dict[int, contract_pb2.Contract] = {}
    token = ""
    while True:
        resp = client.call(
            stub.ListContractHistory,
            contract_pb2.ListContractHistoryRequest(scope=scope, page_size=1000, page_token=token),
        )
        found.update((v.version, v) for v in resp.versions if v.version in wanted)
        token = resp.next_page_token
        # Newest first: once a page goes below the oldest version wanted, no later page has one.
        if (
            not token
            or len(found) == len(wanted)
            or (resp.versions and resp.versions[-1].version < min(wanted))
        ):
            return found


def _diff(args: argparse.Namespace, client: ControlPlaneClient, stub: _Stub, _: object) -> None:
    versions = _find_versions(client, stub, args.scope, {args.old, args.new})
    missing = sorted({args.old, args.new} - versions.keys())
    if missing:
        raise CommandError(f"NOT_FOUND: scope {args.scope!r} has no version {missing[0]}")
    old, new = versions[args.old], versions[args.new]
    changes = contract_changes(_content(old), _content(new))
    if args.output == "json":
        doc = {
            "scope": args.scope,
            "from": json.loads(message_json(old)),
            "to": json.loads(message_json(new)),
            "changes": changes,
        }
        print(json.dumps(doc, indent=2))
        return
    print(f"scope {args.scope!r}: {_version_label(old)} -> {_version_label(new)}")
    print(f"  v{old.version}  {describe(_content(old))}")
    print(f"  v{new.version}  {describe(_content(new))}")
    print("changes:" if changes else "changes: none (both versions judge alike)")
    for line in changes:
        print(f"  {line}")


_ACTIONS: dict[str, Callable[[argparse.Namespace, ControlPlaneClient, _Stub, object], None]] = {
    "list": _list,
    "get": _get,
    "set": _write("UpdateContract"),
    "delete": _write("DeleteContract"),
    "rollback": _write("RollbackContract"),
    "history": _history,
    "diff": _diff,
}
