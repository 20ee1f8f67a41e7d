"""LoadService (SPEC §6, §7): worker registry and engine load views over gRPC.

Thin: validation, discovery, durability and the ingest live in ``controlplane.load``; errors
propagate as domain exceptions and the interceptor maps them to statuses. Roles come from
the method verbs (``controlplane.server.auth``): Register/Deregister are admin only;
List/Get/Watch are open to routers and viewers too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import grpc
import structlog
from grpc import aio

from controlplane.errors import ControlPlaneError, Unavailable
from controlplane.load.convert import worker_load, worker_message
from controlplane.load.encoding import watch_response
from controlplane.load.plane import LoadPlane
from controlplane.load.status import loads_data, render_loads
from controlplane.metrics import add_freshness_source
from controlplane.server.component import AppContext, Component, ServiceBinding, StatusSection
from controlplane.store.etcd_workers import EtcdWorkerRegistry
from controlplane.v1 import load_pb2, load_pb2_grpc
from controlplane.workers.discovery import Discoverer

log = structlog.get_logger("controlplane.loads")

SERVICE_NAME = load_pb2.DESCRIPTOR.services_by_name["LoadService"].full_name

_Context = aio.ServicerContext[Any, Any]
DEADLINE_MARGIN_S = 0.5


class LoadServicer(load_pb2_grpc.LoadServiceServicer):
    def __init__(
        self,
        plane: LoadPlane,
        *,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._plane = plane
        self._wall = wall_clock
        self._clock = clock
        # The assembled messages of the hub's current version, by the version a watcher
        # starts from (None: a full view), shared by every watcher in step (``_shared``).
        self._shared_version = -1
        self._shared: dict[int | None, tuple[int, bytes | None]] = {}

    async def RegisterWorker(
        self, request: load_pb2.RegisterWorkerRequest, context: _Context
    ) -> load_pb2.RegisterWorkerResponse:
        remaining = context.time_remaining()
        # Leave the call time to store the worker and answer after discovery (SPEC §6).
        budget = None if remaining is None else max(0.1, remaining - DEADLINE_MARGIN_S)
        record = await self._plane.register(
            request.url,
            request.protocol,
            list(request.models),
            list(request.load_endpoints),
            discovery_budget_s=budget,
        )
        return load_pb2.RegisterWorkerResponse(worker=worker_message(record))

    async def DeregisterWorker(
        self, request: load_pb2.DeregisterWorkerRequest, context: _Context
    ) -> load_pb2.DeregisterWorkerResponse:
        await self._plane.deregister(request.url)
        return load_pb2.DeregisterWorkerResponse()

    async def ListWorkers(
        self, request: load_pb2.ListWorkersRequest, context: _Context
    ) -> load_pb2.ListWorkersResponse:
        return load_pb2.ListWorkersResponse(workers=[worker_message(r) for r in self._plane.workers()])

    async def GetLoads(
        self, request: load_pb2.GetLoadsRequest, context: _Context
    ) -> load_pb2.GetLoadsResponse:
        errors = self._plane.view_errors
        return load_pb2.GetLoadsResponse(workers=[worker_load(v, errors) for v in self._plane.loads()])

    async def WatchLoads(
        self, request: load_pb2.WatchLoadsRequest, context: _Context
    ) -> AsyncIterator[bytes]:
        """Yields serialized ``WatchLoadsResponse`` messages (see ``add_to_server``)."""
        hub = self._plane.hub
        interval_s = hub.push_interval_s
        log.info("load_watch_opened", router_id=request.router_id)
        with hub.subscribe() as slot:
            try:
                slot.clear()
                version, message = self._shared_message(None)
                sent_at = float("-inf")
                while True:
                    if slot.closed:
                        raise Unavailable("control plane shutting down; reconnect")
                    if message is not None:
                        # No lock is held here: a slow stream only delays its own slot, and
                        # what it sends next is the newest state (SPEC §6: newest wins).
                        # Spaced from when a message is handed to gRPC, not from when the
                        # write completed: that time would add to every interval.
                        sent_at = self._clock()
                        yield message
                    await slot.wait()
                    # At most one message per push interval per watcher (SPEC §6). The hub
                    # already publishes at that pace; this only spaces the first delta after
                    # the full view (sleeping a whole interval here would halve the rate).
                    wait_s = sent_at + interval_s - self._clock()
                    if wait_s > 0:
                        await asyncio.sleep(wait_s)
                    slot.clear()
                    version, message = self._shared_message(version)
            finally:
                log.info("load_watch_closed", router_id=request.router_id)

    def _shared_message(self, since: int | None) -> tuple[int, bytes | None]:
        """The hub's current version and the message taking a watcher there from ``since``.

        ``since`` None asks for a full view; no message (None) when nothing changed. Watchers
        in step ask for the same one, so it is assembled once per push and shared: a thousand
        workers make a ~100 KB message, and assembling it per watcher made the control plane's
        CPU grow with the number of routers (bench/README.md, ``--watchers``).
        """
        hub = self._plane.hub
        if hub.version != self._shared_version:
            self._shared_version = hub.version
            self._shared.clear()
        shared = self._shared.get(since)
        if shared is None:
            delta = hub.full() if since is None else hub.since(since)
            if delta.version != self._shared_version:
                # A full view first publishes what is pending (``LoadHub.full``): the
                # messages kept were for the version before.
                self._shared_version = delta.version
                self._shared.clear()
            message = (
                watch_response(delta.full, delta.workers, delta.removed, self._wall()) if delta else None
            )
            shared = self._shared[since] = (delta.version, message)
        return shared


def _already_serialized(message: bytes) -> bytes:
    return message


def add_to_server(servicer: LoadServicer, server: aio.Server) -> None:
    """The generated ``add_LoadServiceServicer_to_server``, except that WatchLoads yields bytes.

    Its messages are assembled from ``WorkerLoad`` bytes encoded once per change and shared
    by every watcher (``controlplane.load.encoding``); the wire is the same protobuf, so
    clients use the generated stub unchanged.
    """
    handlers = {
        "RegisterWorker": grpc.unary_unary_rpc_method_handler(
            servicer.RegisterWorker,
            request_deserializer=load_pb2.RegisterWorkerRequest.FromString,
            response_serializer=load_pb2.RegisterWorkerResponse.SerializeToString,
        ),
        "DeregisterWorker": grpc.unary_unary_rpc_method_handler(
            servicer.DeregisterWorker,
            request_deserializer=load_pb2.DeregisterWorkerRequest.FromString,
            response_serializer=load_pb2.DeregisterWorkerResponse.SerializeToString,
        ),
        "ListWorkers": grpc.unary_unary_rpc_method_handler(
            servicer.ListWorkers,
            request_deserializer=load_pb2.ListWorkersRequest.FromString,
            response_serializer=load_pb2.ListWorkersResponse.SerializeToString,
        ),
        "GetLoads": grpc.unary_unary_rpc_method_handler(
            servicer.GetLoads,
            request_deserializer=load_pb2.GetLoadsRequest.FromString,
            response_serializer=load_pb2.GetLoadsResponse.SerializeToString,
        ),
        "WatchLoads": grpc.unary_stream_rpc_method_handler(
            servicer.WatchLoads,
            request_deserializer=load_pb2.WatchLoadsRequest.FromString,
            response_serializer=_already_serialized,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]  # grpc-stubs predates it


def _follow_registry(
    plane: LoadPlane, registry: EtcdWorkerRegistry
) -> Callable[[], Coroutine[Any, Any, None]]:
    """A task taking up registrations made through the other control planes on the etcd store."""

    async def follow() -> None:
        async for _ in registry.changes():
            try:
                await plane.reload()
            except ControlPlaneError as exc:  # e.g. etcd went away between the event and the read
                log.warning("worker_registry_reload_failed", error=exc.message)

    return follow


async def load_component(ctx: AppContext) -> Component:
    """LoadService, its ingest and push tasks, and the worker-load section of the status page."""
    plane = LoadPlane(
        ctx.workers,
        stale_after_s=ctx.settings.load_stale_after_s,
        push_interval_s=ctx.settings.load_push_interval_ms / 1000,
        discoverer=Discoverer(worker_api_key=ctx.settings.worker_api_key),
    )
    await plane.start()
    background = [plane.hub.run, plane.run_rediscovery]
    if isinstance(ctx.workers, EtcdWorkerRegistry):
        background.append(_follow_registry(plane, ctx.workers))

    def freshness() -> dict[str, int]:
        counts: dict[str, int] = {}
        for view in plane.loads():
            counts[view.freshness.name] = counts.get(view.freshness.name, 0) + 1
        return counts

    forget_freshness = add_freshness_source(freshness)
    return Component(
        services=[ServiceBinding(add_to_server, LoadServicer(plane), SERVICE_NAME)],
        background=background,
        status_sections=[
            StatusSection(
                "loads", "Worker load", lambda: loads_data(plane.workers(), plane.loads()), render_loads
            )
        ],
        on_shutdown=[forget_freshness, plane.stop],
    )
