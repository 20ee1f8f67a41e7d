"""``fleetplane stats`` (SPEC §1, §6 GetRejectionStats): sampling-contract rejection totals.

Totals over every router and every router restart, by field, by scope and by router, then the
(scope, field) detail.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from controlplane.cli.client import (
    CommandError,
    ControlPlaneClient,
    add_connection_arguments,
    message_json,
    table,
)
from controlplane.v1 import router_pb2, router_pb2_grpc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)


def _section(heading: str, counts: Sequence[router_pb2.KeyCount]) -> str:
    return table((heading, "rejections"), [(c.key, c.count) for c in counts])


def render(response: router_pb2.GetRejectionStatsResponse) -> str:
    """The totals as text tables; one line when there are none."""
    if response.total == 0:
        return "no sampling-contract rejections"
    parts = [
        f"total rejections: {response.total}",
        _section("field", response.by_field),
        _section("scope", response.by_scope),
        _section("router", response.by_router),
        table(("scope", "field", "rejections"), [(d.scope, d.param, d.count) for d in response.detail]),
    ]
    return "\n\n".join(parts)


def run(args: argparse.Namespace) -> int:
    try:
        with ControlPlaneClient.from_args(args) as client:
            stub = router_pb2_grpc.RouterServiceStub(client.channel)
            response = client.call(stub.GetRejectionStats, router_pb2.GetRejectionStatsRequest())
    except CommandError as exc:
        return exc.report("stats")
    print(message_json(response) if args.output == "json" else render(response))
    return 0
