"""Bearer-token auth and roles over real gRPC (SPEC §6 Auth); TLS and mTLS."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from controlplane.contracts import contract_to_proto_params, parse_contract_json
from controlplane.errors import SettingsError
from controlplane.settings import ControlSettings
from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc
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
