"""A bare gRPC server on 127.0.0.1:0 serving only RouterService over a SQLite file (SPEC §6)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from controlplane.server.interceptor import ServiceInterceptor
from controlplane.server.router_service import RouterService
from controlplane.store.database import SqliteDatabase
from controlplane.store.routers import SqliteRouterStatsStore
from controlplane.v1 import router_pb2_grpc


@dataclass
class RouterPlane:
    """One running RouterService: its address, a stub, and how to stop it."""

    target: str
    stub: router_pb2_grpc.RouterServiceStub
    stop: Callable[[], Awaitable[None]]
    database: SqliteDatabase


async def start_router_plane(db: Path, revision: list[int], flush_interval_s: float = 0.05) -> RouterPlane:
    """Serve RouterService over ``db``; ``revision[0]`` is the store's current revision."""
    database = SqliteDatabase(db)
    await database.open()
    store = await SqliteRouterStatsStore.open(database)

    async def current_revision() -> int:
        return revision[0]

    service = RouterService(store, current_revision, flush_interval_s=flush_interval_s)
    await service.start()
    server = grpc.aio.server(interceptors=[ServiceInterceptor(None)])  # errors -> statuses
    router_pb2_grpc.add_RouterServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")

    stopped = False

    async def stop() -> None:
        nonlocal stopped
        if stopped:
            return
        stopped = True
        await channel.close()
        await server.stop(grace=0.5)
        await service.stop()
        await store.close()
        await database.close()

    return RouterPlane(f"127.0.0.1:{port}", router_pb2_grpc.RouterServiceStub(channel), stop, database)
