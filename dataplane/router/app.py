"""The router's composition root: settings -> state, admission, balancer, metrics, proxy, server.

``Router`` wires the parts (tests and the control-plane client reach them through its
attributes); ``serve(settings)`` is the single entry point of a router process: it starts the
router, prints ``router listening on http://HOST:PORT``, runs until SIGTERM/SIGINT and drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import signal
import ssl
import sys

import structlog

import dataplane
from dataplane.errors import StartupError
from dataplane.http import HttpServer, ServerLimits, server_tls, start_server
from dataplane.router.access_log import AccessLog
from dataplane.router.admission import Admission
from dataplane.router.balancer import Balancer
from dataplane.router.control.channel import control_settings
from dataplane.router.control.client import subscription
from dataplane.router.control.convert import ControlConfigError
from dataplane.router.fleet.discovery import DiscoveryError, discover
from dataplane.router.fleet.late_workers import LateDiscovery, discover_fleet
from dataplane.router.fleet.probing import WorkerHealth
from dataplane.router.fleet.workers import Worker, WorkerUrlError, make_pool
from dataplane.router.metrics import RouterMetrics
from dataplane.router.path.forwarder import ProxyConfig
from dataplane.router.path.proxy import Proxy
from dataplane.router.process.journal import journal_from_env, open_journal_when_free
from dataplane.router.process.metrics import process_metrics_from_env
from dataplane.router.settings import RouterSettings
from dataplane.router.state import RouterState

log = structlog.get_logger(__name__)

# Set by the ``--processes`` supervisor in each child: bind the shared port with SO_REUSEPORT.
REUSE_PORT_ENV = "FLEETPLANE_ROUTER_REUSE_PORT"


class Router:
    """One router: its parts, and ``start``/``stop`` of its listener and background tasks."""

    def __init__(self, settings: RouterSettings, state: RouterState | None = None) -> None:
        self.settings = settings
        self.state = state if state is not None else RouterState.standalone(settings.contract)
        # Every worker's pool enforces the first-byte and idle timeouts (upstream/base.py).
        self.state.pool_factory = functools.partial(
            make_pool, timeouts=settings.upstream, api_key=settings.worker_api_key
        )
        self.admission = Admission(settings.max_concurrency, settings.queue_size, settings.queue_timeout_s)
        self.balancer: Balancer[Worker] = Balancer(settings.policy)
        self.access_log = AccessLog(settings.access_log, self.state) if settings.access_log else None
        self.metrics = RouterMetrics(self.state, self.admission, settings.api_keys, self.access_log)
        # Under the --processes supervisor: /metrics answers for every process (process_metrics).
        self.process_metrics = process_metrics_from_env(self.metrics)
        self.proxy = Proxy(
            self.state,
            self.admission,
            self.balancer,
            self.metrics,
            ProxyConfig(request_timeout_s=settings.request_timeout_s, retry_attempts=settings.retry_attempts),
            settings.routes,
            keys=settings.api_keys,
            strip_credentials=settings.worker_api_key is not None,
        )
        self.server: HttpServer | None = None
        # Passive ejection + /health probing back (SPEC §5), re-attached on every worker-set change.
        self.health = WorkerHealth(lambda: self.state.workers.workers, settings.health)
        self.state.on_change(self.health.attach)
        self._discover = functools.partial(discover, api_key=settings.worker_api_key)
        self.late = LateDiscovery([], [], self.state.apply_workers, discover_one=self._discover)

    async def register_workers(self) -> None:
        """Standalone mode: discover every ``--worker`` (protocol, models) and apply the set.

        Workers that do not answer while others do join as placeholders and are discovered
        later in the background (``late_workers``); none answering is a startup error.
        """
        try:
            specs, pending = await discover_fleet(self.settings.workers, self._discover)
        except (WorkerUrlError, DiscoveryError) as exc:
            raise StartupError(f"--worker {exc}") from None
        self.late = LateDiscovery(specs, pending, self.state.apply_workers, discover_one=self._discover)
        self.state.apply_workers(self.late.specs())
        for spec in specs:
            log.info("worker registered", url=spec.url, protocol=spec.protocol, models=list(spec.models))
        for url in pending:
            log.warning("worker not answering: registered later, once it does", url=url)

    async def start(self) -> int:
        """Open the listener; returns the bound port."""
        settings = self.settings
        limits = ServerLimits(
            max_body_bytes=settings.max_body_bytes,
            max_buffered_body_bytes=settings.max_buffered_body_bytes,
            max_connection_body_bytes=settings.max_connection_body_bytes,
        )
        tls = None
        if settings.listen_tls_cert is not None and settings.listen_tls_key is not None:
            try:
                tls = server_tls(str(settings.listen_tls_cert), str(settings.listen_tls_key))
            except (ssl.SSLError, OSError) as exc:
                raise StartupError(
                    f"--listen-tls-cert {str(settings.listen_tls_cert)!r}/--listen-tls-key "
                    f"{str(settings.listen_tls_key)!r}: unusable ({getattr(exc, 'reason', None) or exc})"
                ) from None
        if self.access_log is not None:
            try:
                self.access_log.start()
            except OSError as exc:
                raise StartupError(f"--access-log {self.access_log.sink!r}: {exc.strerror or exc}") from None
        self.health.start()
        self.late.start()
        try:
            self.server = await start_server(
                self.proxy.handle,
                settings.listen_host,
                settings.listen_port,
                limits=limits,
                reuse_port=os.environ.get(REUSE_PORT_ENV) == "1",
                on_refusal=self._count_refusal,
                tls=tls,
            )
        except OSError as exc:
            await self.health.stop()
            await self.late.stop()
            if self.access_log is not None:
                await self.access_log.stop()
            raise StartupError(
                f"--listen {settings.listen_host}:{settings.listen_port}: {exc.strerror or exc}"
            ) from None
        if self.process_metrics is not None:
            await self.process_metrics.start()
            self.metrics.aggregate = self.process_metrics.render
        return self.server.port

    def _count_refusal(self, target: bytes, status: int) -> None:
        # Refused by the HTTP server before the proxy saw it (e.g. 413): still an answer (SPEC §8).
        self.metrics.route(self.proxy.route_name(target)).observe(status, 0.0)

    async def stop(self, grace_s: float | None = None) -> None:
        """Stop accepting, let in-flight requests finish (up to the grace period), close pools."""
        if self.server is not None:
            await self.server.drain(self.settings.drain_grace_s if grace_s is None else grace_s)
            self.server = None
        if self.process_metrics is not None:
            await self.process_metrics.stop()
        await self.health.stop()
        await self.late.stop()
        if self.access_log is not None:
            await self.access_log.stop()  # after the drain: the last answers' lines too
        await self.state.close()


async def serve(settings: RouterSettings) -> int:
    """Run one router process until SIGTERM/SIGINT; 0 on a clean stop, 2 on a startup error."""
    if settings.control_plane:
        # Workers, contracts and load come from the control plane (SPEC §1): start with no
        # contract snapshot (judged requests get contract_unavailable until the first arrives).
        try:
            control = control_settings(
                ",".join(settings.control_plane),
                settings.router_id,
                settings.token,
                settings.tls_ca,
                tls_cert=settings.tls_cert,
                tls_key=settings.tls_key,
            )
        except ControlConfigError as exc:
            print(f"fleetplane router: {exc}", file=sys.stderr, flush=True)
            return 2
        router = Router(settings, RouterState())
        try:
            port = await router.start()
        except StartupError as exc:
            print(f"fleetplane router: {exc}", file=sys.stderr, flush=True)
            await router.stop(0)
            return 2
        # Counts outlive a SIGKILL (process/journal.py): the supervisor's file for this slot, or
        # this router's own (--counts-journal).
        journal_path = journal_from_env() or settings.counts_journal
        journal = None
        if journal_path is not None:
            journal = await open_journal_when_free(journal_path, control.router_id)
        predecessors = journal.predecessors if journal is not None else []
        async with subscription(control, router.state, predecessors=predecessors) as client:
            if journal is not None:
                journal.start(client.boot_id)
                router.state.rejection_listener = journal.record
            code = await _serve_until_signal(router, settings, port)
        if journal is not None and client.final_report_taken:
            journal.remove()  # every count in it has reached the control plane
        return code
    router = Router(settings)
    try:
        await router.register_workers()
        port = await router.start()
    except StartupError as exc:
        print(f"fleetplane router: {exc}", file=sys.stderr, flush=True)
        await router.stop(0)
        return 2
    if not settings.workers:
        log.warning("no --worker given: every request will be answered no_healthy_workers")
    return await _serve_until_signal(router, settings, port)


async def _serve_until_signal(router: Router, settings: RouterSettings, port: int) -> int:
    # Everything built so far lives as long as the process: move it out of the cyclic GC's
    # generations so collections triggered by request garbage stop re-scanning it.
    gc.collect()
    gc.freeze()
    host = f"[{settings.listen_host}]" if ":" in settings.listen_host else settings.listen_host
    # One write per line: with --processes N every child prints it, and unbuffered print()
    # writes the text and the newline separately (the lines would interleave).
    scheme = "https" if settings.listen_tls_cert is not None else "http"
    print(f"router listening on {scheme}://{host}:{port}\n", end="", flush=True)
    log.info(
        "router started",
        port=port,
        workers=len(settings.workers),
        policy=settings.policy.value,
        form=dataplane.FORM.name,
        form_why=dataplane.FORM.why,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
    log.info("router stopping", in_flight=router.admission.in_use)
    await router.stop()
    return 0
