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
The channel, its credentials and the retry plumbing the loops share: ``control.channel``.
``grpc.aio.AioRpcError`` never leaves these two modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence

import grpc
import structlog

from controlplane.v1 import contract_pb2, load_pb2, router_pb2
from dataplane.router.control.backoff import Backoff
from dataplane.router.control.channel import ControlChannel
from dataplane.router.control.convert import (
    ControlClientSettings,
    ControlTarget,
    LoadViews,
    snapshot_contracts,
    worker_specs,
)
from dataplane.router.fleet.workers import WorkerSpec
from dataplane.router.process.journal import BootCounts

log = structlog.get_logger(__name__)


class ControlPlaneClient(ControlChannel):
    """Subscribes the router to the control plane; ``run()`` until cancelled, then ``close()``."""

    def __init__(
        self,
        settings: ControlClientSettings,
        target: ControlTarget,
        *,
        clock: Callable[[], float] = time.monotonic,
        predecessors: Sequence[BootCounts] = (),
    ) -> None:
        super().__init__(settings, target)
        # Final counts of earlier boots of this router id that could not send them (SIGKILL):
        # re-sent at the start of every report stream (process/journal.py; idempotent upstream).
        self._predecessors = tuple(predecessors)
        self._clock = clock
        self.boot_id = secrets.token_hex(8)  # a new one per process start: counters restart with it
        self.has_snapshot = False
        self.applied_revision = 0
        self.apply_error = ""
        self._known_urls: set[str] = set()
        self._workers: tuple[WorkerSpec, ...] | None = None
        self._load_views = LoadViews()
        self._refresh_workers = asyncio.Event()
        self._report_now = asyncio.Event()
        # The control plane took the last report of a clean stop (the stream ended OK after it).
        self.final_report_taken = False

    async def run(self) -> None:
        """Run every loop until cancelled (each one reconnects on its own)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._connectivity_loop(), name="control-connectivity")
            group.create_task(self._contracts_loop(), name="control-contracts")
            group.create_task(self._loads_loop(), name="control-loads")
            group.create_task(self._workers_loop(), name="control-workers")
            group.create_task(self._report_loop(), name="control-report")

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
            await self._stream("loads", backoff, self._watch_loads(backoff))

    async def _watch_loads(self, backoff: Backoff) -> None:
        request = load_pb2.WatchLoadsRequest(router_id=self._settings.router_id)
        try:
            call = self._loads.WatchLoads(request, metadata=self._metadata)
            async for message in call:
                backoff.reset()
                self._episodes.recovered("loads")
                self.apply_load_message(message)
                if not self._loads_live:
                    self._set_connected(loads_live=True)
        finally:
            # No stream, no view: fall back to own in-flight counts (SPEC §7) at once, not after
            # the backoff delay (a failover would otherwise show the new replica connected while
            # this stream still counted as live).
            self._load_views.clear()
            self._target.apply_loads({})
            self._set_connected(loads_live=False)

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
            rejections=[
                router_pb2.RejectionCount(scope=s, param=p, count=c, client=client)
                for (s, p, client), c in counts
            ],
            ejected_workers=self._target.ejected_workers(),
            # The replica now, not the one the loads stream came up on: a report stream on a new
            # replica says so in its first message (``fleetplane routers`` shows it).
            control_plane_address=self.report_replica(),
        )

    def predecessor_reports(self) -> list[router_pb2.ReportRouterStatusRequest]:
        """One report per predecessor boot: its final counts, under its own boot id."""
        reports = []
        for boot in self._predecessors:
            report = self.build_report()
            report.boot_id = boot.boot_id
            del report.rejections[:]
            del report.ejected_workers[:]  # a predecessor's health is not this boot's
            report.rejections.extend(
                router_pb2.RejectionCount(scope=s, param=p, count=c, client=client)
                for (s, p, client), c in sorted(boot.counts.items())
            )
            reports.append(report)
        return reports

    async def _report_loop(self) -> None:
        backoff = Backoff(self._settings.backoff_initial_s, self._settings.backoff_max_s)
        while True:
            await self._stream("report", backoff, self._report(backoff))

    async def _report(self, backoff: Backoff) -> None:
        loop = asyncio.get_running_loop()
        call = self._routers.ReportRouterStatus(metadata=self._metadata)
        self._reported_replica = None  # a new stream: on whichever replica the channel is now
        last: router_pb2.ReportRouterStatusRequest | None = None
        last_sent = 0.0
        writing: asyncio.Future[None] | None = None

        async def write(report: router_pb2.ReportRouterStatusRequest) -> None:
            # Shielded: grpc cancels the whole call when a write is cancelled, and a stop landing
            # there would leave the last report (below) no stream to go on.
            nonlocal writing
            writing = asyncio.ensure_future(call.write(report))
            await asyncio.shield(writing)

        try:
            # Sent before this boot's own first report, so the rollout view ends on this boot.
            for report in self.predecessor_reports():
                await write(report)
            while not call.done():
                report = self.build_report()
                now = self._clock()
                if report != last or now - last_sent >= self._settings.report_heartbeat_s:
                    await write(report)
                    last, last_sent = report, now
                    backoff.reset()
                    self._episodes.recovered("report")
                self._report_now.clear()
                # Look again when something sets ``_report_now``, or when the timer does: no
                # cancellation and no exception per look, as asyncio.timeout made (an idle
                # router's main thread: 3.0-3.2 -> 2.7-2.9 ms/s).
                look = loop.call_later(self._settings.report_check_s, self._report_now.set)
                try:
                    await self._report_now.wait()
                finally:
                    look.cancel()
            await call  # the server ended the stream: its status says why
        except asyncio.CancelledError:
            # Shutting down: one last report so the counts of this boot are complete.
            with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError):
                async with asyncio.timeout(1.0):
                    if writing is not None:
                        await writing  # the write the stop interrupted goes first
                    await call.write(self.build_report())
                    await call.done_writing()
                    await call
                    self.final_report_taken = True
            raise
        except asyncio.InvalidStateError:
            await call  # written after the server finished: surface its status


@contextlib.asynccontextmanager
async def subscription(
    settings: ControlClientSettings, target: ControlTarget, *, predecessors: Sequence[BootCounts] = ()
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
