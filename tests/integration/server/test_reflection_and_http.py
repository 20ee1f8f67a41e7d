"""Server reflection lists every service; the HTTP listener serves /metrics, /healthz and status."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from controlplane.contracts import contract_to_proto_params, parse_contract_json
from controlplane.v1 import contract_pb2 as pb


def _services(target: str) -> tuple[list[str], list[str]]:
    with grpc.insecure_channel(target) as channel:
        db = ProtoReflectionDescriptorDatabase(channel)
        services = list(db.get_services())
        pool = DescriptorPool(db)
        methods = [m.name for m in pool.FindServiceByName("controlplane.v1.ContractService").methods]
        return services, methods


async def test_reflection_lists_the_services_and_describes_their_methods(control_plane):
    """Stock reflection clients see ContractService (with its methods), health and reflection."""
    services, methods = await asyncio.to_thread(_services, control_plane.target)
    assert {
        "controlplane.v1.ContractService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= set(services)
    assert {
        "GetContract",
        "ListContracts",
        "UpdateContract",
        "DeleteContract",
        "ListContractHistory",
        "RollbackContract",
        "WatchContracts",
    } == set(methods)


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


async def test_metrics_healthz_and_status_page(control_plane):
    """/metrics has the watcher gauge and revision, /healthz is ok, / lists the contracts."""
    params, policy = contract_to_proto_params(parse_contract_json('{"temperature": 0.25}'))
    await control_plane.contracts.UpdateContract(
        pb.UpdateContractRequest(
            scope="llama-<3>", params=params, conflict=policy, allow_missing=True, comment="hi"
        )
    )
    call = control_plane.contracts.WatchContracts(pb.WatchContractsRequest(router_id="r"))
    await call.read()
    base = f"http://{control_plane.plane.http_address}"
    status, ctype, body = await asyncio.to_thread(_get, base + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert 'fleetplane_control_watchers{stream="contracts"} 1.0' in body
    assert "fleetplane_control_contract_changes_total" in body
    status, _, body = await asyncio.to_thread(_get, base + "/healthz")
    assert (status, body) == (200, "ok\n")
    status, ctype, body = await asyncio.to_thread(_get, base + "/")
    assert status == 200 and ctype.startswith("text/html")
    assert "llama-&lt;3&gt;" in body and "{&quot;temperature&quot;: 0.25}" in body
    status, _, _ = await asyncio.to_thread(_get, base + "/nope")
    assert status == 404
    call.cancel()
