"""Stock gRPC tools against a running control plane (SPEC §6): reflection resolves everything, health answers."""

from __future__ import annotations

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from tests.fakes.control_plane import ControlPlaneProcess

OURS = ("controlplane.v1.ContractService", "controlplane.v1.LoadService", "controlplane.v1.RouterService")


def test_reflection_describes_every_service_with_its_dependencies(
    shared_control_plane: ControlPlaneProcess,
) -> None:
    """A reflection client lists every service and builds each one's descriptors, imports included."""
    with grpc.insecure_channel(shared_control_plane.target) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {*OURS, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= services
        pool = DescriptorPool(database)
        for name in services:
            service = pool.FindServiceByName(name)
            for method in service.methods:
                # Input and output types resolve, across files (google/protobuf/timestamp.proto).
                assert method.input_type.full_name and method.output_type.full_name
        contract = pool.FindMessageTypeByName("controlplane.v1.Contract")
        assert contract.fields_by_name["create_time"].message_type.full_name == "google.protobuf.Timestamp"


def test_health_check_and_list_answer_for_every_service(shared_control_plane: ControlPlaneProcess) -> None:
    """Health Check is SERVING for the server and each service; List names them all."""
    serving = health_pb2.HealthCheckResponse.SERVING
    with grpc.insecure_channel(shared_control_plane.target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", *OURS):
            assert stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5).status == serving
        listed = stub.List(health_pb2.HealthListRequest(), timeout=5)
        assert {name: s.status for name, s in listed.statuses.items()} == {
            name: serving for name in ("", *OURS)
        }


def test_reflection_v1_answers_like_v1alpha(shared_control_plane: ControlPlaneProcess) -> None:
    """grpc.reflection.v1 (what current tools ask first) lists the services and describes itself."""
    from grpc_reflection.v1alpha import reflection_pb2 as r  # the v1 messages are the same on the wire

    with grpc.insecure_channel(shared_control_plane.target) as channel:
        call = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=r.ServerReflectionRequest.SerializeToString,
            response_deserializer=r.ServerReflectionResponse.FromString,
        )
        requests = [
            r.ServerReflectionRequest(list_services=""),
            r.ServerReflectionRequest(file_containing_symbol="grpc.reflection.v1.ServerReflection"),
            r.ServerReflectionRequest(file_containing_symbol="controlplane.v1.LoadService"),
        ]
        listed, itself, load = list(call(iter(requests), timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {*OURS, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} <= names
    assert not itself.HasField("error_response") and itself.file_descriptor_response.file_descriptor_proto
    assert not load.HasField("error_response")
