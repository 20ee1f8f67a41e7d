"""Bearer-token auth and roles over real gRPC (SPEC §6 Auth); TLS and mTLS."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from controlplane.contracts import contract_to_proto_params, parse_contract_json
from controlplane.errors import SettingsError
from controlplane.settings import ControlSettings
from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc, load_pb2, load_pb2_grpc, router_pb2, router_pb2_grpc
from tests.fakes.pki import make_pki

TOKENS = {
    "ops": {"token": "admin-secret-123", "role": "admin"},
    "router-a": {"token": "router-secret-456", "role": "router"},
    "grafana": {"token": "viewer-secret-789", "role": "viewer"},
}


def update(scope: str = "*") -> pb.UpdateContractRequest:
    params, policy = contract_to_proto_params(parse_contract_json('{"temperature": 1}'))
    return pb.UpdateContractRequest(scope=scope, params=params, conflict=policy, allow_missing=True)


def bearer(name: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[name]['token']}"),)


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(TOKENS))
    return path


async def code_of(call: object) -> tuple[grpc.StatusCode, str]:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def test_roles_decide_which_methods_a_token_may_call(control_plane_factory, tokens_file):
    """admin writes; router and viewer read and watch; writes by them are PERMISSION_DENIED."""
    async with (
        control_plane_factory(auth_tokens=str(tokens_file)) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        stub = contract_pb2_grpc.ContractServiceStub(channel)
        written = await stub.UpdateContract(update(), metadata=bearer("ops"))
        assert written.contract.author == "ops"
        for name in ("router-a", "grafana"):
            code, msg = await code_of(stub.UpdateContract(update(), metadata=bearer(name)))
            assert code == grpc.StatusCode.PERMISSION_DENIED and name in msg and "UpdateContract" in msg
            code, _ = await code_of(
                stub.DeleteContract(pb.DeleteContractRequest(scope="*"), metadata=bearer(name))
            )
            assert code == grpc.StatusCode.PERMISSION_DENIED
            got = await stub.GetContract(pb.GetContractRequest(scope="*"), metadata=bearer(name))
            assert got.contract.version == 1
            listed = await stub.ListContracts(pb.ListContractsRequest(), metadata=bearer(name))
            assert listed.revision == 1
            call = stub.WatchContracts(pb.WatchContractsRequest(router_id=name), metadata=bearer(name))
            assert (await asyncio.wait_for(call.read(), 5)).revision == 1
            call.cancel()


async def test_missing_or_wrong_token_is_unauthenticated_and_the_token_is_not_echoed(
    control_plane_factory, tokens_file
):
    """No token, an unknown token or a non-Bearer scheme answer UNAUTHENTICATED."""
    async with (
        control_plane_factory(auth_tokens=str(tokens_file)) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        stub = contract_pb2_grpc.ContractServiceStub(channel)
        code, msg = await code_of(stub.ListContracts(pb.ListContractsRequest()))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "Bearer" in msg
        code, msg = await code_of(
            stub.ListContracts(pb.ListContractsRequest(), metadata=(("authorization", "Bearer nope-xyz"),))
        )
        assert code == grpc.StatusCode.UNAUTHENTICATED and "nope-xyz" not in msg
        code, _ = await code_of(
            stub.ListContracts(
                pb.ListContractsRequest(), metadata=(("authorization", "Basic admin-secret-123"),)
            )
        )
        assert code == grpc.StatusCode.UNAUTHENTICATED
        call = stub.WatchContracts(pb.WatchContractsRequest())
        code, _ = await code_of(call.read())
        assert code == grpc.StatusCode.UNAUTHENTICATED


async def test_health_and_reflection_are_open_without_a_token(control_plane_factory, tokens_file):
    """Health answers SERVING and reflection lists the services without credentials."""
    async with (
        control_plane_factory(auth_tokens=str(tokens_file)) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "controlplane.v1.ContractService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        call = reflection.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")])
        )
        reply = await call.read()
        names = {s.name for s in reply.list_services_response.service}
        assert "controlplane.v1.ContractService" in names
        call.cancel()


def test_a_non_loopback_listen_address_needs_a_tokens_file():
    """Without --auth-tokens, only loopback addresses are accepted (the error names the flag)."""
    with pytest.raises(SettingsError, match=r"--listen.*--auth-tokens"):
        ControlSettings.build(listen="0.0.0.0:50051", store="sqlite:x.db")
    assert ControlSettings.build(listen="[::1]:0", store="sqlite:x.db").listen.loopback
    assert ControlSettings.build(listen="0.0.0.0:0", store="sqlite:x.db", auth_tokens="t.json")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("not json", "JSON"),
        ('{"a": {"token": "x", "role": "root"}}', "role"),
        ('{"a": {"token": "", "role": "admin"}}', "token"),
        ('{"a": {"token": "same", "role": "admin"}, "b": {"token": "same", "role": "viewer"}}', "same token"),
    ],
)
async def test_a_bad_tokens_file_refuses_to_start_naming_the_flag(
    control_plane_factory, tmp_path, content, needle
):
    """A malformed tokens file is a startup error naming --auth-tokens, never quoting a secret."""
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(SettingsError, match="--auth-tokens") as info:
        async with control_plane_factory(auth_tokens=str(path)):
            pass
    assert needle in str(info.value)
    assert "same" not in str(info.value).replace("same token", "")


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    return make_pki(tmp_path / "pki")


async def test_tls_and_mtls(control_plane_factory, pki):
    """With --tls-client-ca a client needs a certificate from that CA; with it the call succeeds."""
    async with control_plane_factory(
        tls_cert=str(pki / "server.pem"), tls_key=str(pki / "server.key"), tls_client_ca=str(pki / "ca.pem")
    ) as plane:
        ca = (pki / "ca.pem").read_bytes()
        target = f"127.0.0.1:{plane.grpc_address.port}"
        no_cert = grpc.ssl_channel_credentials(root_certificates=ca)
        async with grpc.aio.secure_channel(target, no_cert) as channel:
            code, _ = await code_of(
                contract_pb2_grpc.ContractServiceStub(channel).ListContracts(
                    pb.ListContractsRequest(), timeout=5
                )
            )
            assert code == grpc.StatusCode.UNAVAILABLE
        with_cert = grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=(pki / "client.key").read_bytes(),
            certificate_chain=(pki / "client.pem").read_bytes(),
        )
        async with grpc.aio.secure_channel(target, with_cert) as channel:
            reply = await contract_pb2_grpc.ContractServiceStub(channel).ListContracts(
                pb.ListContractsRequest()
            )
            assert reply.revision == 0


def _http(url: str, authorization: str | None = None) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_with_tokens_metrics_and_the_status_page_need_a_token_and_healthz_does_not(
    control_plane_factory, tokens_file
):
    """/metrics and / answer 401 + Basic challenge without a token; Bearer or Basic password opens them."""
    async with control_plane_factory(auth_tokens=str(tokens_file)) as plane:
        base = f"http://{plane.http_address}"
        for path in ("/metrics", "/", "/status", "/nowhere"):
            for authorization in (
                None,
                "Bearer nope-xyz",
                _basic("ops", "nope-xyz"),
                "Basic !!!",
                "Digest x",
            ):
                status, headers, body = await asyncio.to_thread(_http, base + path, authorization)
                assert status == 401, (path, authorization)
                assert headers["WWW-Authenticate"] == 'Basic realm="fleetplane"'
                assert "nope-xyz" not in body and "fleetplane_" not in body
        for name in TOKENS:
            token = TOKENS[name]["token"]
            for authorization in (f"Bearer {token}", _basic("anyone", token), _basic("", token)):
                status, _, body = await asyncio.to_thread(_http, base + "/metrics", authorization)
                assert status == 200 and "fleetplane_control_contract_revision" in body
                status, _, body = await asyncio.to_thread(_http, base + "/", authorization)
                assert status == 200 and "<html" in body.lower()
        status, _, body = await asyncio.to_thread(_http, base + "/healthz")
        assert (status, body) == (200, "ok\n")


def test_a_non_loopback_http_listen_address_needs_a_tokens_file():
    """Without --auth-tokens, --http-listen must be loopback too (the error names the flag)."""
    with pytest.raises(SettingsError, match=r"^--http-listen '0\.0\.0\.0:9464'.*--auth-tokens"):
        ControlSettings.build(listen="127.0.0.1:0", store="sqlite:x.db", http_listen="0.0.0.0:9464")
    with pytest.raises(SettingsError, match=r"^--http-listen"):
        ControlSettings.build(listen="127.0.0.1:0", store="sqlite:x.db", http_listen="example.org:9464")
    assert ControlSettings.build(store="sqlite:x.db", http_listen="[::1]:0").http_listen is not None
    assert ControlSettings.build(store="sqlite:x.db", http_listen="0.0.0.0:0", auth_tokens="t.json")


async def _report(channel: grpc.aio.Channel, name: str, router_id: str) -> tuple[grpc.StatusCode, str]:
    stub = router_pb2_grpc.RouterServiceStub(channel)
    call = stub.ReportRouterStatus(metadata=bearer(name))
    try:
        await call.write(router_pb2.ReportRouterStatusRequest(router_id=router_id, boot_id="b1"))
        await call.done_writing()
    except grpc.aio.AioRpcError:
        pass  # refused before the write went through: the status is the call's
    return await code_of(call)


async def test_a_router_token_reports_only_router_ids_of_its_own_namespace(
    control_plane_factory, tokens_file
):
    """Token "router-a" may report as router-a or router-a/...; as anything else PERMISSION_DENIED."""
    async with (
        control_plane_factory(auth_tokens=str(tokens_file)) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        for router_id in ("router-a", "router-a/1", "router-a/pod-7/2"):
            assert await _report(channel, "router-a", router_id) == (grpc.StatusCode.OK, "")
        for router_id in ("router-b", "router-ab", "router-", "x/router-a", "router-a-1"):
            code, msg = await _report(channel, "router-a", router_id)
            assert code == grpc.StatusCode.PERMISSION_DENIED and msg.startswith("router_id:"), router_id
            assert "router-secret" not in msg
        assert await _report(channel, "ops", "anyone") == (grpc.StatusCode.OK, "")
        listed = await router_pb2_grpc.RouterServiceStub(channel).ListRouters(
            router_pb2.ListRoutersRequest(), metadata=bearer("ops")
        )
        assert sorted(r.router_id for r in listed.routers) == [
            "anyone",
            "router-a",
            "router-a/1",
            "router-a/pod-7/2",
        ]


async def test_the_router_role_gets_no_rejection_stats_nor_the_rollout_view(
    control_plane_factory, tokens_file
):
    """SPEC §6: router = watch, report, get/list of contracts, workers and loads; stats are the viewer's."""
    async with (
        control_plane_factory(auth_tokens=str(tokens_file)) as plane,
        grpc.aio.insecure_channel(str(plane.grpc_address)) as channel,
    ):
        routers = router_pb2_grpc.RouterServiceStub(channel)
        for call in (
            routers.GetRejectionStats(router_pb2.GetRejectionStatsRequest(), metadata=bearer("router-a")),
            routers.ListRouters(router_pb2.ListRoutersRequest(), metadata=bearer("router-a")),
        ):
            code, msg = await code_of(call)
            assert code == grpc.StatusCode.PERMISSION_DENIED and "router-a" in msg
        stats = await routers.GetRejectionStats(
            router_pb2.GetRejectionStatsRequest(), metadata=bearer("grafana")
        )
        assert stats.total == 0
        loads = load_pb2_grpc.LoadServiceStub(channel)
        await loads.ListWorkers(load_pb2.ListWorkersRequest(), metadata=bearer("router-a"))
        await loads.GetLoads(load_pb2.GetLoadsRequest(), metadata=bearer("router-a"))
