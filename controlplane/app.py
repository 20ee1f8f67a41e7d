"""The control plane's composition root: store, services, interceptor, listeners, lifecycle.

``COMPONENTS`` lists the services the control plane runs; each is a factory returning a
``Component`` (``controlplane.server.component``), so adding a service is one line here.
Start order: store -> components -> gRPC server (+ health, reflection) -> background tasks ->
HTTP. Stop order: health NOT_SERVING -> components' shutdown hooks (end their streams) ->
server stop with grace -> background tasks cancelled -> HTTP -> store closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import ssl
from collections.abc import Sequence
from types import TracebackType

import grpc
import structlog
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from controlplane.errors import SettingsError
from controlplane.server.auth import TokenFileError, TokenTable, load_tokens
from controlplane.server.component import AppContext, Component, ComponentFactory
from controlplane.server.contract_service import contract_component
from controlplane.server.contract_views import ContractViews
from controlplane.server.grpc_metrics import MetricsInterceptor
from controlplane.server.health import ListingHealthServicer
from controlplane.server.http import StatusHttpServer
from controlplane.server.interceptor import ServiceInterceptor
from controlplane.server.load_service import load_component
from controlplane.server.reflection import enable_reflection
from controlplane.server.router_service import router_component
from controlplane.settings import Address, ControlSettings
from controlplane.store.backend import describe, make_store, open_tables

log = structlog.get_logger("controlplane.app")

COMPONENTS: tuple[ComponentFactory, ...] = (contract_component, router_component, load_component)

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
# Long-lived watch streams: let clients keep idle connections alive with pings (routers), and
# never share the port with another process (gRPC sets SO_REUSEPORT by default). Routers ping
# every 1.5 s to notice a hung replica and fail over (dataplane.router.control.channel): pings
# that often are allowed (a faster client gets GOAWAY too_many_pings). The option is gRPC core's
# GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, spelt "min_ping_interval"; an unknown
# name is ignored silently (the default: five minutes).
SERVER_OPTIONS = (
    ("grpc.so_reuseport", 0),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 1_000),
    ("grpc.http2.max_pings_without_data", 0),
)


def _read(flag: str, path: object) -> bytes:
    try:
        with open(str(path), "rb") as f:
            return f.read()
    except OSError as exc:
        raise SettingsError(f"{flag} {path}: cannot read ({exc.strerror})") from None


def _credentials(settings: ControlSettings) -> grpc.ServerCredentials | None:
    tls = settings.tls
    if tls is None:
        return None
    key, cert = _read("--tls-key", tls.key), _read("--tls-cert", tls.cert)
    client_ca = _read("--tls-client-ca", tls.client_ca) if tls.client_ca else None
    # gRPC's core only says "cannot bind" (after lines of its own) for a bad certificate or
    # key: check them here, so the one error line names the file at fault (SPEC §1).
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(tls.cert), str(tls.key))
    except ssl.SSLError as exc:
        raise SettingsError(
            f"--tls-cert {tls.cert} / --tls-key {tls.key}: not a PEM certificate and its private key "
            f"({exc.reason or exc})"
        ) from None
    if tls.client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(tls.client_ca))
        except ssl.SSLError as exc:
            raise SettingsError(
                f"--tls-client-ca {tls.client_ca}: not a PEM CA certificate ({exc.reason or exc})"
            ) from None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def _check_bindable(flag: str, address: Address) -> None:
    """Refuse a taken port ourselves: gRPC's core would log its own line before ours (SPEC §1:
    a startup error is one line). Same SO_REUSEADDR as gRPC, so only a listener refuses."""
    if address.port == 0:
        return
    try:
        # An IPv6 literal needs its family: create_server's default (AF_INET) cannot bind "::1".
        family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
        with socket.create_server((address.host, address.port), family=family):
            pass
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise SettingsError(f"{flag} {address}: cannot bind ({reason})") from None


class ControlPlane:
    """One running control plane; ``async with ControlPlane(settings) as cp: cp.grpc_address``."""

    def __init__(self, settings: ControlSettings, components: Sequence[ComponentFactory] = COMPONENTS):
        self.settings = settings
        self._factories = tuple(components)
        self.store = make_store(settings.store)
        self.contracts = ContractViews(self.store)
        self._components: list[Component] = []
        self._server: aio.Server | None = None
        self._health = ListingHealthServicer()
        self._tasks: list[asyncio.Task[None]] = []
        self._http: StatusHttpServer | None = None
        self._stopping = False
        self._failed: list[str] = []  # background tasks that died
        self._health_updates: set[asyncio.Future[None]] = set()
        self._store_open = False
        self.grpc_address: Address | None = None
        self.http_address: Address | None = None

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        settings = self.settings
        _check_bindable("--listen", settings.listen)
        if settings.http_listen is not None:
            _check_bindable("--http-listen", settings.http_listen)
        tokens = self._tokens()
        credentials = _credentials(settings)
        self._store_open = True  # close() also releases the database thread after a failed open
        try:
            await self.store.open()
            tables = await open_tables(self.store)
        except Exception as exc:
            raise SettingsError(f"--store {describe(settings.store)}: {exc}") from exc
        ctx = AppContext(
            settings, self.store, tables.database, self.contracts, tables.workers, tables.router_stats
        )
        self._components = [await factory(ctx) for factory in self._factories]

        # Metrics outermost: the calls auth refuses are counted too.
        server = aio.server(
            interceptors=[MetricsInterceptor(), ServiceInterceptor(tokens)], options=SERVER_OPTIONS
        )
        self._server = server
        names = [HEALTH_SERVICE]
        for component in self._components:
            for binding in component.services:
                binding.register(server)
                names.append(binding.name)
                await self._health.set(binding.name, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        enable_reflection(names, server)
        target = str(settings.listen)
        try:
            port = (
                server.add_insecure_port(target)
                if credentials is None
                else server.add_secure_port(target, credentials)
            )
        except RuntimeError as exc:
            raise SettingsError(f"--listen {target}: cannot bind ({exc})") from None
        if port == 0:
            raise SettingsError(f"--listen {target}: cannot bind (address in use?)")
        await server.start()
        self.grpc_address = Address(settings.listen.host, port)

        for component in self._components:
            services = [binding.name for binding in component.services]
            for run in component.background:
                task = asyncio.create_task(run(), name=f"background:{getattr(run, '__qualname__', run)}")
                task.add_done_callback(functools.partial(self._background_done, services))
                self._tasks.append(task)

        if settings.http_listen is not None:
            sections = [s for c in self._components for s in c.status_sections]
            self._http = StatusHttpServer(sections, unhealthy=self._unhealthy, tokens=tokens)
            try:
                _, http_port = await self._http.start(settings.http_listen.host, settings.http_listen.port)
            except OSError as exc:
                raise SettingsError(
                    f"--http-listen {settings.http_listen}: cannot bind ({exc.strerror})"
                ) from None
            self.http_address = Address(settings.http_listen.host, http_port)
        log.info(
            "control_plane_started",
            listen=str(self.grpc_address),
            http=str(self.http_address) if self.http_address else None,
            store=describe(settings.store),
            revision=self.store.snapshot().revision,
            auth=tokens is not None,
            tls=settings.tls is not None,
        )

    def _tokens(self) -> TokenTable | None:
        path = self.settings.auth_tokens
        if path is None:
            return None
        try:
            return load_tokens(path)
        except TokenFileError as exc:
            raise SettingsError(f"--auth-tokens {path}: {exc}") from None

    def _background_done(self, services: list[str], task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None or self._stopping:
            return
        log.error("background_task_failed", task=task.get_name(), exc_info=task.exception())
        # The process keeps answering, but what the task did has stopped (a dead LoadHub.run
        # froze every WatchLoads stream): say so where supervisors look, rather than stay
        # healthy. The component's services and the server as a whole turn NOT_SERVING.
        self._failed.append(task.get_name())
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", *services):
            update = asyncio.ensure_future(self._health.set(name, not_serving))
            self._health_updates.add(update)
            update.add_done_callback(self._health_updates.discard)

    def _unhealthy(self) -> str:
        if self._stopping:
            return "stopping"
        if self._failed:
            return f"background task failed: {', '.join(self._failed)}"
        return ""

    async def stop(self) -> None:
        """Idempotent graceful stop; every listener, task and the store are closed."""
        if self._stopping:
            return
        self._stopping = True
        await self._health.enter_graceful_shutdown()
        for component in self._components:
            for hook in component.on_shutdown:
                result = hook()
                if result is not None:
                    await result
        if self._server is not None:
            await self._server.stop(self.settings.shutdown_grace_s)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._http is not None:
            await self._http.stop()
        if self._store_open:
            await self.store.close()
        if self.grpc_address is not None:  # a startup error is one line on stderr (SPEC §1), no more
            log.info("control_plane_stopped")

    async def __aenter__(self) -> ControlPlane:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
