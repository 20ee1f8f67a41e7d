"""The router's control-plane client (SPEC §1 ``--control-plane``, §6, §7): an adapter.

Four loops share one gRPC channel, each reconnecting forever with jittered exponential backoff:

- ``WatchContracts``: every message is the complete contract set at one revision. It is
  converted once (``contract_from_proto``, which validates again) and handed to the router in
  one call, so requests see either the old set or the new one. A snapshot that fails to convert
  is not applied: the router keeps the last good set and reports ``apply_error``.
- ``WatchLoads``: engine load per worker (full view, then deltas). Only FRESH views count
  (SPEC §7); when the stream breaks the views are dropped, so the balancer falls back to the
  router's own in-flight counts rather than trusting numbers that can no longer go stale.
- ``ListWorkers`` polled every ``workers_poll_s`` (and at once when ``WatchLoads`` names a
  worker the router does not know, or removes one): the registry, i.e. url, resolved protocol
  and models. The control plane has no registry stream.
- ``ReportRouterStatus``: router id, boot id, applied revision or apply error, cumulative
  rejection counts; sent on change (checked every ``report_check_s``) and at least every
  ``report_heartbeat_s``.

Through every outage the router keeps serving with the last applied snapshot and worker set.
``grpc.aio.AioRpcError`` never leaves this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from pathlib import Path

import grpc
import structlog

from controlplane.v1 import (
    contract_pb2,
    contract_pb2_grpc,
    load_pb2,
    load_pb2_grpc,
    router_pb2,
    router_pb2_grpc,
)
from dataplane.router.counts_journal import BootCounts
from dataplane.router.subscription import (
    Backoff,
    ControlConfigError,
    ControlSettings,
    ControlTarget,
    LoadViews,
    check_target,
    snapshot_contracts,
    worker_specs,
)
from dataplane.router.workers import WorkerSpec

log = structlog.get_logger(__name__)

# The channel's own reconnect backoff (default: up to 120 s) must not outlast ours.
_CHANNEL_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
)


class _Episodes:
    """Log a stream failure once per failure episode, and its recovery once."""

    def __init__(self) -> None:
        self._failing: set[str] = set()

    def failed(self, stream: str, exc: BaseException) -> None:
        if stream not in self._failing:
            self._failing.add(stream)
            detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            code = exc.code().name if isinstance(exc, grpc.aio.AioRpcError) else type(exc).__name__
            log.warning("control_plane_stream_failed", stream=stream, code=code, detail=detail)

    def recovered(self, stream: str) -> None:
        if stream in self._failing:
            self._failing.discard(stream)
            log.info("control_plane_stream_recovered", stream=stream)


def _read_pem(flag: str, path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ControlConfigError(f"{flag} {str(path)!r}: cannot read: {exc.strerror}") from None


def _credentials(settings: ControlSettings) -> grpc.ChannelCredentials | None:
    """TLS with --tls-ca (None: the system's roots) and, for mTLS, a client certificate."""
    if settings.tls_ca is None and settings.tls_cert is None:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=_read_pem("--tls-ca", settings.tls_ca),
        private_key=_read_pem("--tls-key", settings.tls_key),
        certificate_chain=_read_pem("--tls-cert", settings.tls_cert),
    )


class ControlPlaneClient:
    """Subscribes the router to the control plane; ``run()`` until cancelled, then ``close()``."""

    def __init__(
        self,
        settings: ControlSettings,
        target: ControlTarget,
        *,
        clock: Callable[[], float] = time.monotonic,
        predecessors: Sequence[BootCounts] = (),
    ) -> None:
        self._settings = settings
        # Final counts of earlier boots of this router id that could not send them (SIGKILL):
        # re-sent at the start of every report stream (counts_journal.py; idempotent upstream).
        self._predecessors = tuple(predecessors)
        self._target = target
        self._clock = clock
        self.boot_id = secrets.token_hex(8)  # a new one per process start: counters restart with it
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {settings.token}"),) if settings.token else ()
        )
        credentials = _credentials(settings)
        check_target(settings.target)
        self._channel = (
            grpc.aio.secure_channel(settings.target, credentials, options=_CHANNEL_OPTIONS)
            if credentials is not None
            else grpc.aio.insecure_channel(settings.target, options=_CHANNEL_OPTIONS)
        )
        self._contracts = contract_pb2_grpc.ContractServiceStub(self._channel)
        self._loads = load_pb2_grpc.LoadServiceStub(self._channel)
        self._routers = router_pb2_grpc.RouterServiceStub(self._channel)
        self._episodes = _Episodes()
        self.has_snapshot = False
        self.applied_revision = 0
        self.apply_error = ""
        self._known_urls: set[str] = set()
        self._workers: tuple[WorkerSpec, ...] | None = None
        self._load_views = LoadViews()
        self._refresh_workers = asyncio.Event()
        self._report_now = asyncio.Event()
        # fleetplane_control_plane_connected needs both: a READY channel alone is not a
        # subscription (a refused --token leaves the channel up while every stream fails).
        self._channel_ready = False
        self._loads_live = False

    async def run(self) -> None:
        """Run every loop until cancelled (each one reconnects on its own)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._connectivity_loop(), name="control-connectivity")
            group.create_task(self._contracts_loop(), name="control-contracts")
            group.create_task(self._loads_loop(), name="control-loads")
            group.create_task(self._workers_loop(), name="control-workers")
            group.create_task(self._report_loop(), name="control-report")

    async def close(self) -> None:
        """Close the channel (after ``run()`` was cancelled)."""
        await self._channel.close(grace=None)

    @property
    def refresh_requested(self) -> bool:
        """True while a registry refresh is pending (a load view named an unknown worker)."""
        return self._refresh_workers.is_set()

    # -- contracts -------------------------------------------------------------------------

    def apply_snapshot(self, snapshot: contract_pb2.WatchContractsResponse) -> bool:
        """Convert and apply one snapshot; False (and ``apply_error`` set) when it cannot be."""
        try:
            contracts = snapshot_contracts(snapshot)
            self._target.apply_contracts(snapshot.revision, contracts)
        except ValueError as exc:  # ContractError is a ValueError; so is a compile refusal
            self.apply_error = f"revision {snapshot.revision}: {exc}"
            log.error("contract_snapshot_refused", revision=snapshot.revision, error=str(exc))
            self._report_now.set()
            return False
        self.has_snapshot = True
        self.applied_revision = snapshot.revision
        self.apply_error = ""
        log.info("contract_snapshot_applied", revision=snapshot.revision, scopes=sorted(contracts))
        self._report_now.set()
        return True

    async def _contracts_loop(self) -> None:
        backoff = Backoff(self._settings.backoff_initial_s, self._settings.backoff_max_s)
        while True:
            # known_revision 0 means "none": the control plane sends the current set at once.
            # After an outage the last applied revision lets it skip an unchanged set.
            known = self.applied_revision if self.has_snapshot and not self.apply_error else 0
            request = contract_pb2.WatchContractsRequest(
                router_id=self._settings.router_id, known_revision=known
            )
            await self._stream("contracts", backoff, self._watch_contracts(request, backoff))

    async def _watch_contracts(self, request: contract_pb2.WatchContractsRequest, backoff: Backoff) -> None:
        call = self._contracts.WatchContracts(request, metadata=self._metadata)
        async for snapshot in call:
            backoff.reset()
            self._episodes.recovered("contracts")
            self.apply_snapshot(snapshot)

    # -- loads and workers -------------------------------------------------------------------

    def apply_load_message(self, message: load_pb2.WatchLoadsResponse) -> None:
        """Fold one WatchLoads message (full view or delta) into the views and hand them over."""
        self._load_views.fold(message)
        # A worker the router does not know yet (or one that left): refresh the registry now.
        if message.removed_urls or any(url not in self._known_urls for url in self._load_views.views):
            self._refresh_workers.set()
        self._target.apply_loads(dict(self._load_views.views))

    async def _loads_loop(self) -> None:
        backoff = Backoff(self._settings.backoff_initial_s, self._settings.backoff_max_s)
        while True:
            try:
                await self._stream("loads", backoff, self._watch_loads(backoff))
            finally:
                # No stream, no view: fall back to own in-flight counts (SPEC §7).
                self._load_views.clear()
                self._target.apply_loads({})
                self._set_connected(loads_live=False)

    async def _watch_loads(self, backoff: Backoff) -> None:
        request = load_pb2.WatchLoadsRequest(router_id=self._settings.router_id)
        call = self._loads.WatchLoads(request, metadata=self._metadata)
        async for message in call:
            backoff.reset()
            self._episodes.recovered("loads")
            self.apply_load_message(message)
            if not self._loads_live:
                self._set_connected(loads_live=True)

    def apply_registry(self, workers: Sequence[load_pb2.Worker]) -> None:
        """Replace the worker set when the registry changed."""
        usable, errors = worker_specs(workers)
        specs = tuple(usable)
        self._known_urls = {w.url for w in workers}
        for error in errors:
            log.warning("worker_skipped", error=error)
        if specs != self._workers:
            self._workers = specs
            self._target.apply_workers(specs)
            log.info("workers_applied", workers=[spec.url for spec in specs])

    async def _workers_loop(self) -> None:
        while True:
            # Cleared before the call: a refresh asked for while it runs triggers another one.
            self._refresh_workers.clear()
            try:
                response = await self._loads.ListWorkers(
                    load_pb2.ListWorkersRequest(), metadata=self._metadata, timeout=5.0
                )
                self._episodes.recovered("workers")
                self.apply_registry(response.workers)
            except grpc.aio.AioRpcError as exc:
                self._episodes.failed("workers", exc)
            except Exception as exc:  # a bug must not end the subscription: log it, poll again
                log.exception("control_plane_stream_error", stream="workers")
                self._episodes.failed("workers", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._settings.workers_poll_s):
                    await self._refresh_workers.wait()

    # -- status reports ----------------------------------------------------------------------

    def build_report(self) -> router_pb2.ReportRouterStatusRequest:
        """The router's current status with its cumulative rejection counts (SPEC §6)."""
        apply_error = self.apply_error or ("" if self.has_snapshot else "no contract snapshot received yet")
        counts = sorted(self._target.rejection_counts().items())
        return router_pb2.ReportRouterStatusRequest(
            router_id=self._settings.router_id,
            boot_id=self.boot_id,
            applied_revision=self.applied_revision,
            apply_error=apply_error,
            rejections=[router_pb2.RejectionCount(scope=s, param=p, count=c) for (s, p), c in counts],
        )

    def predecessor_reports(self) -> list[router_pb2.ReportRouterStatusRequest]:
        """One report per predecessor boot: its final counts, under its own boot id."""
        reports = []
        for boot in self._predecessors:
            report = self.build_report()
            report.boot_id = boot.boot_id
            del report.rejections[:]
            report.rejections.extend(
                router_pb2.RejectionCount(scope=s, param=p, count=c)
                for (s, p), c in sorted(boot.counts.items())
            )
            reports.append(report)
        return reports

    async def _report_loop(self) -> None:
        backoff = Backoff(self._settings.backoff_initial_s, self._settings.backoff_max_s)
        while True:
            await self._stream("report", backoff, self._report(backoff))

    async def _report(self, backoff: Backoff) -> None:
        call = self._routers.ReportRouterStatus(metadata=self._metadata)
        last: router_pb2.ReportRouterStatusRequest | None = None
        last_sent = 0.0
        try:
            # Sent before this boot's own first report, so the rollout view ends on this boot.
            for report in self.predecessor_reports():
                await call.write(report)
            while not call.done():
                report = self.build_report()
                now = self._clock()
                if report != last or now - last_sent >= self._settings.report_heartbeat_s:
                    await call.write(report)
                    last, last_sent = report, now
                    backoff.reset()
                    self._episodes.recovered("report")
                self._report_now.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._settings.report_check_s):
                        await self._report_now.wait()
            await call  # the server ended the stream: its status says why
        except asyncio.CancelledError:
            # Shutting down: one last report so the counts of this boot are complete.
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError):
                async with asyncio.timeout(1.0):
                    await call.write(self.build_report())
                    await call.done_writing()
                    await call
            raise
        except asyncio.InvalidStateError:
            await call  # written after the server finished: surface its status

    # -- plumbing ----------------------------------------------------------------------------

    async def _stream(self, name: str, backoff: Backoff, body: Coroutine[object, object, None]) -> None:
        """Run one stream attempt; on any end or failure wait a jittered backoff delay."""
        try:
            await body
            self._episodes.failed(name, ConnectionError("stream ended by the control plane"))
        except grpc.aio.AioRpcError as exc:
            self._episodes.failed(name, exc)
        except Exception as exc:  # a bug must not end the subscription: log it, reconnect
            log.exception("control_plane_stream_error", stream=name)
            self._episodes.failed(name, exc)
        await asyncio.sleep(backoff.next_delay_s())

    def _set_connected(self, *, channel_ready: bool | None = None, loads_live: bool | None = None) -> None:
        # SPEC §8 fleetplane_control_plane_connected: the channel is up AND the router is
        # subscribed: WatchLoads (whose first message is always a full view, so a resumed
        # stream proves itself at once) delivered on the current call.
        if channel_ready is not None:
            self._channel_ready = channel_ready
        if loads_live is not None:
            self._loads_live = loads_live
        self._target.set_control_plane_connected(self._channel_ready and self._loads_live)

    async def _connectivity_loop(self) -> None:
        state = self._channel.get_state(try_to_connect=True)
        while True:
            self._set_connected(channel_ready=state is grpc.ChannelConnectivity.READY)
            await self._channel.wait_for_state_change(state)
            state = self._channel.get_state(try_to_connect=True)


def control_settings(
    target: str,
    router_id: str,
    token: str | None,
    tls_ca: str | Path | None,
    *,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
) -> ControlSettings:
    """Checked settings from the router's flags; ControlConfigError names the flag."""
    check_target(target)
    if token is not None and (not token or not token.isprintable() or " " in token):
        raise ControlConfigError("--token: must be a non-empty printable string without spaces")
    if bool(tls_cert) != bool(tls_key):
        given = f"--tls-cert {str(tls_cert)!r}" if tls_cert else f"--tls-key {str(tls_key)!r}"
        missing = "--tls-key" if tls_cert else "--tls-cert"
        raise ControlConfigError(f"{given}: needs {missing} too (a client certificate and its key)")
    settings = ControlSettings(
        target=target,
        router_id=router_id,
        token=token or None,
        tls_ca=Path(tls_ca) if tls_ca else None,
        tls_cert=Path(tls_cert) if tls_cert else None,
        tls_key=Path(tls_key) if tls_key else None,
    )
    _credentials(settings)  # an unreadable file is a startup error, not a reconnect loop
    return settings


@contextlib.asynccontextmanager
async def subscription(
    settings: ControlSettings, target: ControlTarget, *, predecessors: Sequence[BootCounts] = ()
) -> AsyncIterator[ControlPlaneClient]:
    """Run the client in a task for the duration of the block; on exit it sends a last report."""
    client = ControlPlaneClient(settings, target, predecessors=predecessors)
    task = asyncio.create_task(client.run(), name="control-plane-client")
    try:
        yield client
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
