"""``fleetplane routers`` (SPEC §1, §6 ListRouters): the rollout view.

One row per router: its boot, the contract revision it has in force against the store's current
one, whether it is up to date and connected, the control-plane replica it is on (stored with
its status, so every replica of a shared etcd store shows it), how long ago it last reported, and
(when any has) the workers it has ejected and why it could not apply a revision.
"""

from __future__ import annotations

import argparse
import time

from controlplane.cli.client import ControlPlaneClient, add_connection_arguments, run_query, table
from controlplane.v1 import router_pb2, router_pb2_grpc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)


def report_age(last_report_unix_s: float, now_unix_s: float) -> str:
    """``3s``, ``5m``, ``2h``, ``4d`` (``-`` when the router never reported a time)."""
    if last_report_unix_s <= 0:
        return "-"
    seconds = max(0, int(now_unix_s - last_report_unix_s))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def render(response: router_pb2.ListRoutersResponse, now_unix_s: float) -> str:
    """The rollout table (and a line when no router has reported)."""
    if not response.routers:
        return f"no router has reported (current revision {response.current_revision})"
    rows = [
        [
            r.router_id,
            r.boot_id,
            r.applied_revision,
            response.current_revision,
            "yes" if r.up_to_date else "NO",
            "yes" if r.connected else "no",
            r.control_plane_address or "-",
            report_age(r.last_report_time.ToNanoseconds() / 1e9, now_unix_s),
            ", ".join(r.ejected_workers) or "-",
            r.apply_error,
        ]
        for r in response.routers
    ]
    headers = ["router_id", "boot", "applied", "current", "up-to-date", "connected", "replica", "last report"]
    keep = list(range(len(headers)))
    base = len(headers)
    # Optional columns, shown only when some router has something in them.
    optional = (
        ("ejected workers", any(r.ejected_workers for r in response.routers)),
        ("apply error", any(r.apply_error for r in response.routers)),
    )
    for offset, (name, shown) in enumerate(optional):
        if shown:
            headers.append(name)
            keep.append(base + offset)
    return table(headers, [[row[i] for i in keep] for row in rows])


def run(args: argparse.Namespace) -> int:
    return run_query(args, "routers", _list_routers, lambda response: render(response, time.time()))


def _list_routers(client: ControlPlaneClient) -> router_pb2.ListRoutersResponse:
    stub = router_pb2_grpc.RouterServiceStub(client.channel)
    response: router_pb2.ListRoutersResponse = client.call(stub.ListRouters, router_pb2.ListRoutersRequest())
    return response
