"""Server reflection, ``grpc.reflection.v1`` beside ``v1alpha`` (SPEC §6: stock gRPC tools work).

grpcio-reflection only ships the deprecated ``v1alpha`` service; current tools ask for ``v1``
first (most then fall back). The two protocols are the same messages under another package, so
``v1`` is served by the same servicer with ``v1alpha``'s (de)serializers, and its descriptor (the
``v1alpha`` file renamed) is added to the pool so reflection can describe itself either way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc import aio
from grpc_reflection.v1alpha import reflection, reflection_pb2, reflection_pb2_grpc
from grpc_reflection.v1alpha._async import ReflectionServicer

V1ALPHA_SERVICE = reflection.SERVICE_NAME
V1_SERVICE = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _rename(message: descriptor_pb2.DescriptorProto, old: str, new: str) -> None:
    for field in message.field:
        if field.type_name.startswith(old):
            field.type_name = new + field.type_name[len(old) :]
    for nested in message.nested_type:
        _rename(nested, old, new)


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    with contextlib.suppress(ImportError):  # a grpcio-reflection that ships v1 registers it itself
        import grpc_reflection.v1.reflection_pb2  # noqa: F401
    try:
        pool.FindFileByName(_V1_FILE)
        return  # a second control plane in the same process
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    old, new = ".grpc.reflection.v1alpha.", ".grpc.reflection.v1."
    proto.name, proto.package = _V1_FILE, "grpc.reflection.v1"
    proto.ClearField("options")
    for message in proto.message_type:
        _rename(message, old, new)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(old, new)
            method.output_type = method.output_type.replace(old, new)
    pool.AddSerializedFile(proto.SerializeToString())


def enable_reflection(service_names: Sequence[str], server: aio.Server) -> None:
    """Serve reflection (both versions) listing ``service_names`` and the reflection services."""
    _add_v1_descriptor(descriptor_pool.Default())
    servicer = ReflectionServicer([*service_names, V1ALPHA_SERVICE, V1_SERVICE])
    reflection_pb2_grpc.add_ServerReflectionServicer_to_server(servicer, server)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(V1_SERVICE, {"ServerReflectionInfo": handler}),)
    )
