"""Shared plumbing of the operator commands (SPEC §1): connect, authenticate, print, fail.

Every operator command (``contract``, ``workers``, ``loads``, ``routers``, ``stats``) uses::

    def add_arguments(parser):
        add_connection_arguments(parser)          # --control-plane, --token[-file], --tls-ca, --output
        ...

    def run(args) -> int:
        with ControlPlaneClient.from_args(args) as client:
            stub = contract_pb2_grpc.ContractServiceStub(client.channel)
            try:
                response = client.call(stub.ListContracts, contract_pb2.ListContractsRequest())
            except CommandError as exc:
                return exc.report("contract list")
            client.print_message(response) if args.output == "json" else print(table(...))
        return 0

``call`` adds the bearer token and a deadline and turns ``grpc.RpcError`` into ``CommandError``
carrying the server's status and message (the adapter boundary: no gRPC error leaks past it).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from controlplane.envflags import freeze_help

DEFAULT_CONTROL_PLANE = "127.0.0.1:50051"
DEFAULT_TIMEOUT_S = 10.0
SERVER_ERROR_EXIT = 1
USAGE_ERROR_EXIT = 2
# Large fleets' GetLoads/ListWorkers answers outgrow gRPC's default 4 MB receive limit.
_CHANNEL_OPTIONS = (("grpc.max_receive_message_length", 256 * 1024 * 1024),)

R = TypeVar("R")
M = TypeVar("M", bound=Message)


def add_connection_arguments(parser: argparse.ArgumentParser, *, inherited: bool = False) -> None:
    """The connection flags; ``inherited``: on an action's parser (``contract list``) under a
    command's parser that has them too, so ``contract --output json list`` works as well as
    ``contract list --output json`` (unset here, they leave the command's value alone)."""
    actions = [
        parser.add_argument("--control-plane", default=DEFAULT_CONTROL_PLANE, metavar="HOST:PORT"),
        parser.add_argument(
            "--token",
            default=None,
            help="bearer token (see the control plane's --auth-tokens); visible in ps, prefer --token-file",
        ),
        parser.add_argument(
            "--token-file",
            default=None,
            metavar="FILE",
            help="read the bearer token from FILE (one trailing newline is ignored); not with --token",
        ),
        parser.add_argument("--tls-ca", default=None, metavar="FILE", help="use TLS, trusting this CA (PEM)"),
        parser.add_argument(
            "--tls-cert",
            default=None,
            metavar="FILE",
            help="client certificate for mTLS (PEM; with --tls-ca)",
        ),
        parser.add_argument(
            "--tls-key", default=None, metavar="FILE", help="client private key for mTLS (PEM)"
        ),
        parser.add_argument("--output", choices=("table", "json"), default="table"),
        parser.add_argument(
            "--timeout-s",
            type=positive_seconds,
            default=DEFAULT_TIMEOUT_S,
            help="per-call deadline (seconds)",
        ),
    ]
    if inherited:
        for action in actions:
            freeze_help(action)  # the default still shows in --help; the command's parser applies it
            action.default = argparse.SUPPRESS


def positive_seconds(text: str) -> float:
    """A duration flag's value: a finite number of seconds above 0 (a deadline of 0 or less, or
    NaN, would fail every call before it is sent)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number of seconds")
    return value


class CommandError(Exception):
    """A failed call or a refused argument; ``report`` prints it and returns the exit code."""

    def __init__(self, message: str, exit_code: int = SERVER_ERROR_EXIT) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def report(self, command: str) -> int:
        print(f"fleetplane {command}: {self.message}", file=sys.stderr, flush=True)
        return self.exit_code


class ControlPlaneClient:
    """A channel to the control plane plus the caller's metadata and deadline."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        if (tls_cert is None) != (tls_key is None):
            raise CommandError("--tls-cert and --tls-key: give both or neither", USAGE_ERROR_EXIT)
        if tls_ca is None and tls_cert is None:
            self.channel = grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_pem("--tls-ca", tls_ca),
                private_key=_read_pem("--tls-key", tls_key),
                certificate_chain=_read_pem("--tls-cert", tls_cert),
            )
            self.channel = grpc.secure_channel(target, credentials, options=_CHANNEL_OPTIONS)

    @staticmethod
    def from_args(args: argparse.Namespace) -> ControlPlaneClient:
        return ControlPlaneClient(
            args.control_plane,
            token=read_token(args.token, args.token_file),
            tls_ca=args.tls_ca,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            timeout_s=args.timeout_s,
        )

    def call(self, method: Callable[..., R], request: Message) -> R:
        """One unary call; a failure raises ``CommandError`` with the status and server message."""
        try:
            return method(request, metadata=self.metadata, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise CommandError(describe_rpc_error(exc, self.target)) from None

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> ControlPlaneClient:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def read_token(token: str | None, token_file: str | None) -> str | None:
    """The bearer token of ``--token`` or ``--token-file`` (whose one trailing newline is not part of it).

    A file keeps the token out of ``ps`` and shell history; both at once is refused, as is an
    empty token or one with spaces (it could never match a line of the tokens file).
    """
    if token is not None and token_file is not None:
        raise CommandError("--token and --token-file: give one of them", USAGE_ERROR_EXIT)
    if token_file is None:
        return token
    try:
        with open(token_file, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise CommandError(f"--token-file {token_file}: cannot read ({reason})", USAGE_ERROR_EXIT) from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text or not text.isprintable() or " " in text:
        raise CommandError(
            f"--token-file {token_file}: must hold one token, printable without spaces", USAGE_ERROR_EXIT
        )
    return text


def _read_pem(flag: str, path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise CommandError(f"{flag} {path}: cannot read ({exc.strerror})", USAGE_ERROR_EXIT) from None


def run_query(
    args: argparse.Namespace,
    command: str,
    fetch: Callable[[ControlPlaneClient], M],
    render: Callable[[M], str],
) -> int:
    """A read-only command: connect, ``fetch`` one answer and print it (JSON or ``render``'s text).

    ``fetch`` makes its calls through ``client.call``; a failure is reported as ``fleetplane
    {command}: ...`` and its exit code returned.
    """
    try:
        with ControlPlaneClient.from_args(args) as client:
            response = fetch(client)
    except CommandError as exc:
        return exc.report(command)
    print(message_json(response) if args.output == "json" else render(response))
    return 0


# What gRPC says when the peer is an HTTP server but not a gRPC one: an h2 server that answers a
# plain HTTP status (a fleetplane router: 404 route_not_found), or an HTTP/1.x server.
_HTTP_STATUS = re.compile(r"Received http2 header with status: (\d+)")
_HTTP1_PEER = ("Trying to connect an http1.x server", "Failed parsing HTTP/2")
_WHERE = "point --control-plane at the control plane's gRPC address (its --listen, default 127.0.0.1:50051)"


def describe_rpc_error(exc: grpc.RpcError, target: str) -> str:
    code: grpc.StatusCode | None = exc.code() if isinstance(exc, grpc.Call) else None
    details = (exc.details() if isinstance(exc, grpc.Call) else None) or str(exc)
    if code is grpc.StatusCode.UNIMPLEMENTED and (status := _HTTP_STATUS.search(details)):
        return (
            f"{target} is not a fleetplane control plane: it answered with HTTP status {status.group(1)} "
            f"(a router, or another HTTP server?); {_WHERE}"
        )
    if code is grpc.StatusCode.UNAVAILABLE and any(marker in details for marker in _HTTP1_PEER):
        return (
            f"{target} is not a fleetplane control plane: it does not speak gRPC (an HTTP/1 server, "
            f"such as the control plane's status page on --http-listen?); {_WHERE}"
        )
    if code is grpc.StatusCode.UNIMPLEMENTED and "Method not found" in details:
        return f"{target} is a gRPC server without the fleetplane control-plane API; {_WHERE}"
    if code is grpc.StatusCode.UNAVAILABLE:
        return f"control plane at {target} unavailable: {details}"
    name = code.name if code is not None else "ERROR"
    return f"{name}: {details}"


def message_json(message: Message, indent: int | None = 2) -> str:
    """protobuf's JSON mapping (SPEC §1 ``--output json``), zero values included.

    The mapping leaves out fields at their default unless asked: a script reading
    ``.total`` of ``stats`` or ``.ranks[0].dpRank`` of ``loads`` must find 0, not nothing.
    """
    return json_format.MessageToJson(message, indent=indent, always_print_fields_with_no_presence=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned text table (no borders), headers in capitals."""
    cells = [[str(h).upper() for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )
