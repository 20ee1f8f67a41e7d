"""``fleetplane contract list|get|set|delete|history|rollback`` (SPEC §1, §3.2).

``set`` takes the same JSON as the router's ``--override-sampling-params`` (``-`` reads it
from stdin), checks it locally first (the same parser the server uses, for the same message),
and creates the scope when it does not exist. Errors print the server's message, exit 1 (2 for
a refused argument).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from controlplane.cli.client import (
    USAGE_ERROR_EXIT,
    CommandError,
    ControlPlaneClient,
    add_connection_arguments,
    message_json,
    table,
)
from controlplane.contracts import (
    ContractError,
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
    get.add_argument("--scope", required=True, help='"*" (fleet default) or a model name')
    add_connection_arguments(get, inherited=True)
    put = sub.add_parser("set", help="write a new version of a scope (creating it if needed)")
    put.add_argument("--scope", required=True, help='"*" (fleet default) or a model name')
    put.add_argument("--conflict", choices=("reject", "allow"), default="reject")
    put.add_argument("--expected-version", type=int, default=None, help="0 = the scope must not exist")
    put.add_argument("--comment", default="", help="kept in the history")
    put.add_argument("json", metavar="JSON", help="contract, as --override-sampling-params; - for stdin")
    add_connection_arguments(put, inherited=True)
    delete = sub.add_parser("delete", help="delete a scope (as a new version)")
    delete.add_argument("--scope", required=True)
    delete.add_argument("--expected-version", type=int, default=None)
    delete.add_argument("--comment", default="")
    add_connection_arguments(delete, inherited=True)
    history = sub.add_parser("history", help="every version of a scope, newest first")
    history.add_argument("--scope", required=True)
    history.add_argument("--limit", type=int, default=50, help="at most this many versions")
    add_connection_arguments(history, inherited=True)
    rollback = sub.add_parser("rollback", help="write the content of an earlier version as a new one")
    rollback.add_argument("--scope", required=True)
    rollback.add_argument("--version", type=int, required=True, help="the version to restore")
    rollback.add_argument("--expected-version", type=int, default=None)
    rollback.add_argument("--comment", default="")
    add_connection_arguments(rollback, inherited=True)


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
        request = _request(args)
        with ControlPlaneClient.from_args(args) as client:
            stub = contract_pb2_grpc.ContractServiceStub(client.channel)
            _ACTIONS[args.action](args, client, stub, request)
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


_ACTIONS: dict[str, Callable[[argparse.Namespace, ControlPlaneClient, _Stub, object], None]] = {
    "list": _list,
    "get": _get,
    "set": _write("UpdateContract"),
    "delete": _write("DeleteContract"),
    "rollback": _write("RollbackContract"),
    "history": _history,
}
