"""``RouterService`` (SPEC §6): router status reports in, the rollout view and rejection totals out.

State lives in two pure structures (``controlplane.reports``): the rollout board and the rejection
ledger. Reports update them at once (``ListRouters``/``GetRejectionStats`` see a report as soon
as it arrives); a background flusher writes what changed to the ``RouterStatsStore`` at most
once per ``flush_interval_s`` and soon after a report stream ends, so a chatty router costs
at most one small transaction per second however often it reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import grpc
import structlog
from google.protobuf.timestamp_pb2 import Timestamp

from controlplane.contracts import FIELD_BY_NAME
from controlplane.errors import InvalidArgument, PermissionDenied
from controlplane.metrics import WATCHERS, add_router_source
from controlplane.reports.history import RejectionHistory
from controlplane.reports.page import rejections_data, render_rejections, render_routers, routers_data
from controlplane.reports.rejections import RejectionLedger, RejectionTotals
from controlplane.reports.rollout import RolloutBoard, RouterRecord, RouterView
from controlplane.server.auth import current_principal, may_report_as
from controlplane.server.component import AppContext, Component, ServiceBinding, StatusSection
from controlplane.store.etcd_routers import EtcdRouterStatsStore
from controlplane.store.routers import (
    RouterStatsStore,
    RouterStoreError,
)
from controlplane.v1 import router_pb2, router_pb2_grpc

log = structlog.get_logger(__name__)

SERVICE_NAME = router_pb2.DESCRIPTOR.services_by_name["RouterService"].full_name
# SPEC §8 (control plane): report streams open now, i.e. routers connected.
REPORT_STREAMS = WATCHERS.labels("reports")

MAX_ID_CHARS = 256
MAX_APPLY_ERROR_CHARS = 4096
# A report carries one entry per (scope, param); 8 fields x 1024 scopes is far past any real fleet.
MAX_REJECTION_ENTRIES = 8192
# A router's ejected workers: at most as many as a fleet has workers, each a URL.
MAX_EJECTED_WORKERS = 8192
HISTORY_EVERY_S = 10.0
MAX_URL_CHARS = 2048
# The rollout view leaves out a disconnected router silent this long (its counts stay in the totals).
FORGET_ROUTER_AFTER_S = 24 * 3600.0


class ReportInvalid(InvalidArgument):
    """A status report that cannot be accepted; the message names the field (INVALID_ARGUMENT)."""


def _check_id(name: str, value: str) -> None:
    if not value:
        raise ReportInvalid(f"{name}: must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise ReportInvalid(f"{name}: longer than {MAX_ID_CHARS} characters")


def _check_namespace(router_id: str) -> None:
    """A router token reports only as its own name or ``NAME/...`` (SPEC §6 Auth)."""
    principal = current_principal()
    if not may_report_as(principal, router_id):
        raise PermissionDenied(
            f"router_id: token {principal.name!r} may only report as {principal.name!r} or "
            f"{principal.name + '/...'!r}, not {router_id!r}",
            field="router_id",
        )


def parse_report(request: router_pb2.ReportRouterStatusRequest) -> dict[tuple[str, str, str], int]:
    """Validate one report; returns its counts by (scope, param, client)."""
    _check_id("router_id", request.router_id)
    _check_id("boot_id", request.boot_id)
    if request.applied_revision < 0:
        raise ReportInvalid(f"applied_revision: must be >= 0, got {request.applied_revision}")
    if len(request.apply_error) > MAX_APPLY_ERROR_CHARS:
        raise ReportInvalid(f"apply_error: longer than {MAX_APPLY_ERROR_CHARS} characters")
    if len(request.control_plane_address) > MAX_ID_CHARS or not request.control_plane_address.isprintable():
        raise ReportInvalid(f"control_plane_address: must be printable, at most {MAX_ID_CHARS} characters")
    if len(request.rejections) > MAX_REJECTION_ENTRIES:
        raise ReportInvalid(f"rejections: more than {MAX_REJECTION_ENTRIES} entries")
    if len(request.ejected_workers) > MAX_EJECTED_WORKERS:
        raise ReportInvalid(f"ejected_workers: more than {MAX_EJECTED_WORKERS} entries")
    for url in request.ejected_workers:
        if not url or len(url) > MAX_URL_CHARS or not url.isprintable():
            raise ReportInvalid(f"ejected_workers: {url[:80]!r} is not a worker URL")
    counts: dict[tuple[str, str, str], int] = {}
    for entry in request.rejections:
        _check_id("rejections.scope", entry.scope)
        if entry.param not in FIELD_BY_NAME:
            raise ReportInvalid(
                f"rejections.param: {entry.param!r} is not a sampling field ({', '.join(FIELD_BY_NAME)})"
            )
        if entry.count < 0:
            raise ReportInvalid(f"rejections.count: must be >= 0, got {entry.count} for {entry.param}")
        if entry.client:  # names from the router's --api-keys file (clients.MAX_NAME_CHARS)
            _check_id("rejections.client", entry.client)
        key = (entry.scope, entry.param, entry.client)
        counts[key] = max(counts.get(key, 0), entry.count)
    return counts


def _timestamp(unix_s: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(unix_s * 1e9))
    return ts


class RouterService(router_pb2_grpc.RouterServiceServicer):
    """The RouterService servicer plus the flusher task it owns (``start``/``stop``)."""

    def __init__(
        self,
        store: RouterStatsStore,
        current_revision: Callable[[], Awaitable[int]],
        *,
        flush_interval_s: float = 1.0,
        forget_after_s: float = FORGET_ROUTER_AFTER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._current_revision = current_revision
        self._flush_interval_s = flush_interval_s
        self._forget_after_s = forget_after_s
        self._clock = clock
        self._board = RolloutBoard()
        self._ledger = RejectionLedger()
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._failing = False
        # One flush at a time: a stream that ends waits for a write already under way.
        self._flush_lock = asyncio.Lock()

    async def load(self) -> None:
        """Take up what the store kept (before serving)."""
        records, rows = await self._store.load()
        self._board = RolloutBoard(records)
        self._ledger = RejectionLedger(rows)

    async def start(self) -> None:
        """Load, then run the flusher as a task owned by this service (without an app)."""
        await self.load()
        self._flusher = asyncio.create_task(self.run_flusher(), name="router-stats-flusher")

    async def stop(self) -> None:
        """Stop the flusher started by ``start`` (it writes what is pending as it ends)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None

    def views(self, current_revision: int) -> list[RouterView]:
        """The rollout view (ListRouters and the status page)."""
        return self._board.view(
            current_revision, now_unix_s=self._clock(), forget_after_s=self._forget_after_s
        )

    def totals(self) -> RejectionTotals:
        """The rejection totals (for the status page)."""
        return self._ledger.totals()

    async def flush(self) -> None:
        """Write every changed record and count now; on failure keep them for the next try."""
        async with self._flush_lock:
            await self._flush()

    async def _flush(self) -> None:
        records = self._board.take_dirty()
        rows = self._ledger.take_dirty()
        if not records and not rows:
            return
        try:
            await self._store.save(records, rows)
        except (RouterStoreError, OSError) as exc:
            self._board.restore_dirty(records)
            self._ledger.restore_dirty(rows)
            if not self._failing:  # log once per failure episode
                log.error("router_stats_write_failed", error=str(exc))
            self._failing = True
            return
        except BaseException:
            # Cancelled (a stop, or the report stream whose end flushes went away): the write may
            # not have happened (a call still queued for the database thread is dropped), so what
            # was taken is dirty again and the last flush of ``run_flusher`` writes it. Written
            # twice it is the same maximum: nothing double counted.
            self._board.restore_dirty(records)
            self._ledger.restore_dirty(rows)
            raise
        if self._failing:
            log.info("router_stats_write_recovered")
        self._failing = False

    async def refresh(self) -> None:
        """Merge in what the store holds (what other control planes on a shared store wrote)."""
        records, rows = await self._store.load()
        self._board.merge(records)
        self._ledger.merge(rows)

    async def run_flusher(self) -> None:
        """Write changes at most once per interval until cancelled; then write what is left."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                await self.flush()
                # Coalesce: whatever arrives meanwhile waits for the next turn.
                await asyncio.sleep(self._flush_interval_s)
        finally:
            # Shutdown (the server has stopped, so the report streams have ended): last write.
            await asyncio.shield(self.flush())

    async def ReportRouterStatus(
        self,
        request_iterator: AsyncIterator[router_pb2.ReportRouterStatusRequest],
        context: grpc.aio.ServicerContext[
            router_pb2.ReportRouterStatusRequest, router_pb2.ReportRouterStatusResponse
        ],
    ) -> router_pb2.ReportRouterStatusResponse:
        """Take a router's reports for as long as its stream stays open (it is 'connected')."""
        router_id: str | None = None
        try:
            async for request in request_iterator:
                # ReportInvalid ends the stream; the interceptor maps it to INVALID_ARGUMENT.
                counts = parse_report(request)
                _check_namespace(request.router_id)
                if router_id is not None and request.router_id != router_id:
                    raise ReportInvalid(
                        f"router_id: changed within one stream ({router_id!r} -> {request.router_id!r})"
                    )
                if router_id is None:
                    router_id = request.router_id
                    self._board.stream_opened(router_id)
                    REPORT_STREAMS.inc()
                    log.info("router_connected", router_id=router_id, boot_id=request.boot_id)
                self._ledger.observe(request.router_id, request.boot_id, counts)
                self._board.report(
                    RouterRecord(
                        router_id=request.router_id,
                        boot_id=request.boot_id,
                        applied_revision=request.applied_revision,
                        apply_error=request.apply_error,
                        last_report_unix_s=self._clock(),
                        ejected_workers=tuple(sorted(request.ejected_workers)),
                        control_plane_address=request.control_plane_address,
                    )
                )
                if self._board.has_dirty() or self._ledger.has_dirty():
                    self._wake.set()
        finally:
            if router_id is not None:
                self._board.stream_closed(router_id)
                REPORT_STREAMS.dec()
                self._board.touch_dirty(router_id)  # keep the last report time across restarts
                self._wake.set()
                log.info("router_disconnected", router_id=router_id)
        # The response acknowledges the reports: answer only once they are durable (SPEC §6:
        # the stats survive a control-plane restart, a SIGKILL included).
        await self.flush()
        return router_pb2.ReportRouterStatusResponse()

    async def ListRouters(
        self,
        request: router_pb2.ListRoutersRequest,
        context: grpc.aio.ServicerContext[router_pb2.ListRoutersRequest, router_pb2.ListRoutersResponse],
    ) -> router_pb2.ListRoutersResponse:
        """The rollout view: each router's applied revision against the store's current one."""
        current = await self._current_revision()
        return router_pb2.ListRoutersResponse(
            current_revision=current,
            routers=[
                router_pb2.RouterStatus(
                    router_id=v.record.router_id,
                    boot_id=v.record.boot_id,
                    applied_revision=v.record.applied_revision,
                    apply_error=v.record.apply_error,
                    connected=v.connected,
                    last_report_time=_timestamp(v.record.last_report_unix_s),
                    up_to_date=v.up_to_date,
                    ejected_workers=v.record.ejected_workers,
                    control_plane_address=v.record.control_plane_address,
                )
                for v in self.views(current)
            ],
        )

    async def GetRejectionStats(
        self,
        request: router_pb2.GetRejectionStatsRequest,
        context: grpc.aio.ServicerContext[
            router_pb2.GetRejectionStatsRequest, router_pb2.GetRejectionStatsResponse
        ],
    ) -> router_pb2.GetRejectionStatsResponse:
        """Rejection totals over every router and every boot."""
        totals = self._ledger.totals()
        return router_pb2.GetRejectionStatsResponse(
            total=totals.total,
            by_field=[router_pb2.KeyCount(key=k, count=c) for k, c in totals.by_field],
            by_scope=[router_pb2.KeyCount(key=k, count=c) for k, c in totals.by_scope],
            by_router=[router_pb2.KeyCount(key=k, count=c) for k, c in totals.by_router],
            detail=[router_pb2.RejectionCount(scope=s, param=p, count=c) for s, p, c in totals.detail],
            by_client=[router_pb2.KeyCount(key=k, count=c) for k, c in totals.by_client],
            client_detail=[
                router_pb2.RejectionCount(scope=s, param=p, count=c, client=k)
                for k, s, p, c in totals.client_detail
            ],
        )


def _follow_store(
    service: RouterService, store: EtcdRouterStatsStore
) -> Callable[[], Coroutine[Any, Any, None]]:
    """A task merging in what the other control planes on the etcd store wrote: reports that
    reached them count in this plane's GetRejectionStats and ListRouters too."""

    async def follow() -> None:
        async for _ in store.changes():
            try:
                await service.refresh()
            except RouterStoreError as exc:
                log.warning("router_stats_refresh_failed", error=str(exc))

    return follow


async def router_component(ctx: AppContext) -> Component:
    """RouterService, its flusher, and the routers and rejections sections of the status page."""
    store = ctx.router_stats

    async def current_revision() -> int:
        return ctx.store.snapshot().revision

    service = RouterService(store, current_revision)
    await service.load()

    def routers_section() -> dict[str, Any]:
        revision = ctx.store.snapshot().revision
        return routers_data(service.views(revision), revision, time.time())

    # Rejection totals sampled every few seconds for the page's rates (in memory: an hour).
    history = RejectionHistory(every_s=HISTORY_EVERY_S)

    def rejections_section() -> dict[str, Any]:
        now = time.time()
        totals = service.totals()
        history.record(now, dict(totals.by_field))
        return rejections_data(totals, history, now)

    async def sample_history() -> None:
        while True:
            history.record(time.time(), dict(service.totals().by_field))
            await asyncio.sleep(HISTORY_EVERY_S)

    background = [service.run_flusher, sample_history]
    if isinstance(store, EtcdRouterStatsStore):
        background.append(_follow_store(service, store))

    def rollout() -> list[tuple[str, int, bool, bool]]:
        views = service.views(ctx.store.snapshot().revision)
        return [(v.record.router_id, v.record.applied_revision, v.connected, v.up_to_date) for v in views]

    forget_routers = add_router_source(rollout)
    return Component(
        services=[ServiceBinding(router_pb2_grpc.add_RouterServiceServicer_to_server, service, SERVICE_NAME)],
        background=background,
        status_sections=[
            StatusSection("routers", "Routers", routers_section, render_routers),
            StatusSection("rejections", "Rejections", rejections_section, render_rejections),
        ],
        on_shutdown=[forget_routers],
    )
