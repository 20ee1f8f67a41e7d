"""Bytes that are no request message of the method: every method of every service the control plane
serves answers INTERNAL naming the message type, as stock gRPC servers do, and nothing of Python leaks."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from google.protobuf import descriptor_pool

from controlplane.v1 import contract_pb2, load_pb2, router_pb2

# A field 1 of wire type 2 (length-delimited) declaring 5 bytes where 2 follow, and an invalid tag.
GARBAGE = (b"\x0a\x05ab", b"\xff\xff\xff")
SERVICES = [
    *(f.services_by_name[n] for f in (contract_pb2.DESCRIPTOR, load_pb2.DESCRIPTOR, router_pb2.DESCRIPTOR)
      for n in f.services_by_name),
    descriptor_pool.Default().FindServiceByName("grpc.health.v1.Health"),
    descriptor_pool.Default().FindServiceByName("grpc.reflection.v1alpha.ServerReflection"),
]  # fmt: skip
# Reflection v1 is served with v1alpha's messages (controlplane/server/reflection.py).
METHODS = [(s.full_name, m) for s in SERVICES for m in s.methods] + [
    ("grpc.reflection.v1.ServerReflection", m) for m in SERVICES[-1].methods
]


async def _call(channel: grpc.aio.Channel, path: str, method: object, payload: bytes) -> grpc.aio.AioRpcError:
    client_streams = method.client_streaming  # type: ignore[attr-defined]
    server_streams = method.server_streaming  # type: ignore[attr-defined]

    async def requests() -> AsyncIterator[bytes]:
        yield payload

    with pytest.raises(grpc.aio.AioRpcError) as info:
        if client_streams and server_streams:
            async for _ in channel.stream_stream(path)(requests(), timeout=5):
                pass
        elif client_streams:
            await channel.stream_unary(path)(requests(), timeout=5)
        elif server_streams:
            async for _ in channel.unary_stream(path)(payload, timeout=5):
                pass
        else:
            await channel.unary_unary(path)(payload, timeout=5)
    return info.value


@pytest.mark.parametrize(("service", "method"), METHODS, ids=[f"{s}/{m.name}" for s, m in METHODS])
async def test_an_undecodable_request_is_internal_naming_the_message_type(control_plane, service, method):
    """Garbage bytes to any method: INTERNAL "cannot parse the request as <type>", no class names."""
    path = f"/{service}/{method.name}"
    for payload in GARBAGE:
        error = await _call(control_plane.channel, path, method, payload)
        assert error.code() == grpc.StatusCode.INTERNAL, (path, error.details())
        assert error.details() == f"cannot parse the request as {method.input_type.full_name}"
    # The server goes on answering well-formed calls.
    listed = await control_plane.contracts.ListContracts(contract_pb2.ListContractsRequest())
    assert listed.revision == 0
