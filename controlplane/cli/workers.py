"""``fleetplane workers list|add|remove`` (SPEC §1, §6 RegisterWorker/DeregisterWorker/ListWorkers).

``add URL`` without ``--load-endpoint`` lets the control plane discover the endpoints (and,
without ``--model``, the models) from the worker's ``/server_info`` and ``/v1/models``;
``--protocol auto`` resolves HTTP/1.1 or h2c from ``enable_http2``. A worker that is not up yet is
registered all the same (exit 0; the control plane keeps asking it); ``--wait-s S`` waits up to S
seconds for its discovery to succeed and exits 1 if it did not. Errors print the server's
message (it names the field) and exit 1.
"""

from __future__ import annotations

import argparse
import os
import time

from controlplane.cli.client import (
    DEFAULT_TIMEOUT_S,
    CommandError,
    ControlPlaneClient,
    add_connection_arguments,
    message_json,
    positive_seconds,
    table,
)
from controlplane.envflags import env_name
from controlplane.v1 import load_pb2, load_pb2_grpc

PROTOCOLS = {
    "auto": load_pb2.WORKER_PROTOCOL_AUTO,
    "http1": load_pb2.WORKER_PROTOCOL_HTTP1,
    "h2c": load_pb2.WORKER_PROTOCOL_H2C,
}
PROTOCOL_NAMES = {
    load_pb2.WORKER_PROTOCOL_UNSPECIFIED: "auto",
    load_pb2.WORKER_PROTOCOL_AUTO: "auto",
    load_pb2.WORKER_PROTOCOL_HTTP1: "http1",
    load_pb2.WORKER_PROTOCOL_H2C: "h2c",
}
# Discovery may retry two GETs (3 attempts of 2 s each, SPEC §6): give `add` room for that.
ADD_TIMEOUT_S = 30.0
WAIT_POLL_S = 0.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    if env_name("--timeout-s") not in os.environ:
        # Unset unless given: `add` then waits for discovery, the others DEFAULT_TIMEOUT_S;
        # a --timeout-s the operator gives is the deadline, for `add` too (discovery fits in it).
        parser.set_defaults(timeout_s=None)
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add_connection_arguments(sub.add_parser("list", help="registered workers"), inherited=True)
    add = sub.add_parser("add", help="register a worker (or replace its registration)")
    add.add_argument("url", metavar="URL", help="http://HOST:PORT or h2c://HOST:PORT")
    add.add_argument("--protocol", choices=tuple(PROTOCOLS), default="auto")
    add.add_argument(
        "--load-endpoint",
        action="append",
        default=[],
        metavar="tcp://HOST:PORT",
        help="load publisher of dp rank 0, 1, ... (repeat); default: discovered from /server_info",
    )
    add.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME",
        help="served model (repeat); default: /v1/models",
    )
    add.add_argument(
        "--wait-s",
        type=positive_seconds,
        default=None,
        metavar="S",
        help="wait up to S seconds for discovery to succeed; exit 1 if it did not",
    )
    add_connection_arguments(add, inherited=True)
    remove = sub.add_parser("remove", help="deregister a worker")
    remove.add_argument("url", metavar="URL")
    add_connection_arguments(remove, inherited=True)


def render(workers: list[load_pb2.Worker]) -> str:
    if not workers:
        return "no workers registered"
    rows = []
    for w in workers:
        asked = PROTOCOL_NAMES.get(w.protocol, "?")
        resolved = PROTOCOL_NAMES.get(w.resolved_protocol, "?")
        protocol = resolved if asked == resolved else f"{resolved} ({asked})"
        source = "discovered" if w.discovered else "explicit"
        # Nothing found is not "discovered": the discovery error column says why.
        endpoints = f"{', '.join(w.load_endpoints)} ({source})" if w.load_endpoints else "-"
        registered = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(w.register_time.seconds))
        rows.append(
            (
                w.url,
                protocol,
                ", ".join(w.models) or "-",
                w.dp_size,
                endpoints,
                registered,
                w.discovery_error,
            )
        )
    headers = ("url", "protocol", "models", "ranks", "load endpoints", "registered (utc)")
    if any(w.discovery_error for w in workers):
        return table((*headers, "discovery error"), rows)
    return table(headers, [row[:-1] for row in rows])


def run(args: argparse.Namespace) -> int:
    command = f"workers {args.action}"
    if args.timeout_s is None:
        args.timeout_s = ADD_TIMEOUT_S if args.action == "add" else DEFAULT_TIMEOUT_S
    try:
        with ControlPlaneClient.from_args(args) as client:
            stub = load_pb2_grpc.LoadServiceStub(client.channel)
            if args.action == "list":
                listed = client.call(stub.ListWorkers, load_pb2.ListWorkersRequest())
                print(message_json(listed) if args.output == "json" else render(list(listed.workers)))
            elif args.action == "add":
                request = load_pb2.RegisterWorkerRequest(
                    url=args.url,
                    protocol=PROTOCOLS[args.protocol],
                    models=args.model,
                    load_endpoints=args.load_endpoint,
                )
                added = client.call(stub.RegisterWorker, request)
                worker = added.worker
                if args.wait_s is not None:
                    worker = _wait_for_discovery(client, stub, worker, args.wait_s)
                    added = load_pb2.RegisterWorkerResponse(worker=worker)
                print(message_json(added) if args.output == "json" else render([worker]))
                if args.wait_s is not None and worker.discovery_error:
                    raise CommandError(
                        f"discovery of {worker.url} did not succeed within {args.wait_s:g} s: "
                        f"{worker.discovery_error} (the worker stays registered; "
                        f"`fleetplane workers remove {worker.url}` forgets it)"
                    )
            else:
                removed = client.call(stub.DeregisterWorker, load_pb2.DeregisterWorkerRequest(url=args.url))
                print(message_json(removed) if args.output == "json" else f"removed {args.url}")
    except CommandError as exc:
        return exc.report(command)
    return 0


def _wait_for_discovery(
    client: ControlPlaneClient, stub: load_pb2_grpc.LoadServiceStub, worker: load_pb2.Worker, wait_s: float
) -> load_pb2.Worker:
    """The worker as listed once its discovery succeeded, or gave up for good, or ``wait_s`` passed."""
    # Imported here: the load plane's modules (zmq, asyncio) would slow every other command's start.
    from controlplane.load.plane import RETRY_NOTE

    deadline = time.monotonic() + wait_s
    while worker.discovery_error.endswith(RETRY_NOTE) and time.monotonic() < deadline:
        time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))
        listed = client.call(stub.ListWorkers, load_pb2.ListWorkersRequest())
        found = next((w for w in listed.workers if w.url == worker.url), None)
        if found is None:
            raise CommandError(f"{worker.url} was removed while waiting for its discovery")
        worker = found
    return worker
