"""``fleetplane stats`` (SPEC §1, §6 GetRejectionStats): sampling-contract rejection totals.

Totals over every router and every router restart, by field, by scope and by router, then the
(scope, field) detail; with routers that check API keys (``--api-keys``), by client and the
(client, scope, field) detail too.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from controlplane.cli.client import ControlPlaneClient, add_connection_arguments, run_query, table
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
    if response.by_client:
        parts.append(_section("client", response.by_client))
        parts.append(
            table(
                ("client", "scope", "field", "rejections"),
                [(d.client, d.scope, d.param, d.count) for d in response.client_detail],
            )
        )
    return "\n\n".join(parts)


def run(args: argparse.Namespace) -> int:
    return run_query(args, "stats", _rejection_stats, render)


def _rejection_stats(client: ControlPlaneClient) -> router_pb2.GetRejectionStatsResponse:
    stub = router_pb2_grpc.RouterServiceStub(client.channel)
    response: router_pb2.GetRejectionStatsResponse = client.call(
        stub.GetRejectionStats, router_pb2.GetRejectionStatsRequest()
    )
    return response
