"""The load plane: registry + discovery + ZMQ ingest + load table + watch hub, composed.

``LoadPlane`` is what the LoadService servicer calls. It keeps the in-memory registry in
step with the durable one: a change is written first (acknowledged only once durable, SPEC
§6), then applied to the table and the subscriptions, under one lock so concurrent
registrations apply in commit order. Discovery (network, seconds) runs before the lock.

Workers whose discovery failed (e.g. registered before the engine was up) are asked again
in the background until it succeeds, each on its own backoff (first after a second, doubling
to every ``REDISCOVER_INTERVAL_S``), several at a time; explicit endpoints and models are
never overwritten.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import structlog

from controlplane.errors import NotFound
from controlplane.load.convert import ViewErrors
from controlplane.load.hub import LoadHub
from controlplane.load.ingest.dialer import SubscribeError
from controlplane.load.ingest.subscriber import LoadSubscriber
from controlplane.load.table import LoadTable, WorkerView
from controlplane.store.workers import LOAD_TOPIC, Protocol, WorkerRecord, WorkerRegistry
from controlplane.workers.discovery import Discoverer
from controlplane.workers.registration import (
    parse_load_endpoints,
    parse_models,
    parse_protocol,
    parse_worker_url,
)
from controlplane.workers.url import WorkerUrl

log = structlog.get_logger(__name__)

REDISCOVER_INTERVAL_S = 10.0
# An engine registered just before it came up is read again this soon (then less and less often).
REDISCOVER_FIRST_S = 1.0
# Workers asked at once: a hung one (a few seconds per attempt) must not hold up the others.
REDISCOVER_CONCURRENCY = 16
RETRY_NOTE = "; asked again in the background"


@dataclass(slots=True)
class _Retry:
    """When a worker with an incomplete discovery is asked next."""

    registered_unix_s: float  # the registration this schedule belongs to (a new one starts over)
    delay_s: float
    due: float


class LoadPlane:
    """Owns the load state of one control plane. Create, ``start``, run ``run_*`` tasks, ``stop``."""

    def __init__(
        self,
        registry: WorkerRegistry,
        *,
        stale_after_s: float,
        push_interval_s: float,
        discoverer: Discoverer | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        rediscover_interval_s: float = REDISCOVER_INTERVAL_S,
        rediscover_first_s: float = REDISCOVER_FIRST_S,
    ) -> None:
        self._registry = registry
        self._discoverer = discoverer or Discoverer()
        self._clock = clock
        self._wall = wall_clock
        self._rediscover_interval_s = rediscover_interval_s
        self._rediscover_first_s = min(rediscover_first_s, rediscover_interval_s)
        self._rediscovery_failing: set[str] = set()  # logged once per failure episode
        self.table = LoadTable(stale_after_s)
        # Shared by GetLoads and WatchLoads: one episode per worker whichever answer met it.
        self.view_errors = ViewErrors()
        self.hub = LoadHub(
            self.table,
            push_interval_s=push_interval_s,
            clock=clock,
            drain=self._drain,
            view_errors=self.view_errors,
        )
        self._subscriber: LoadSubscriber | None = None
        self._workers: dict[str, WorkerRecord] = {}
        self._lock = asyncio.Lock()

    @property
    def subscriber(self) -> LoadSubscriber:
        assert self._subscriber is not None, "LoadPlane not started"
        return self._subscriber

    async def start(self) -> None:
        """Load the registry and subscribe to every stored worker's endpoints."""
        # The ingest reads at most once per push interval unless the hub drains it right
        # before a push: at a thousand publishers, one wakeup per push, not per frame.
        self._subscriber = LoadSubscriber(
            self.table, self.hub.mark_dirty, clock=self._clock, tick_s=self.hub.push_interval_s
        )
        for record in await self._registry.list():
            self._apply(record)
        log.info("load_plane_started", workers=len(self._workers))

    async def stop(self) -> None:
        self.hub.close()
        if self._subscriber is not None:
            self._subscriber.close()
            self._subscriber = None

    # -- registry -----------------------------------------------------------------------

    def workers(self) -> list[WorkerRecord]:
        return [self._workers[url] for url in sorted(self._workers)]

    async def register(
        self,
        url: str,
        protocol: int,
        models: Sequence[str],
        load_endpoints: Sequence[str],
        *,
        discovery_budget_s: float | None = None,
    ) -> WorkerRecord:
        """Validate, discover what is missing, store durably, then subscribe.

        Discovery is bounded by ``discovery_budget_s`` (what is left of the caller's
        deadline); what it could not learn in time is reported in ``discovery_error`` and
        asked again in the background.
        """
        address = parse_worker_url(url)
        asked = parse_protocol(protocol, address)
        explicit_models = parse_models(list(models))
        explicit_endpoints = parse_load_endpoints(list(load_endpoints), address)
        record = await self._resolve(address, asked, explicit_models, explicit_endpoints, discovery_budget_s)
        # Shielded: once the write is submitted it happens; the memory must follow it even
        # if the client gives up (cancellation) in the meantime.
        await asyncio.shield(self._commit(record))
        log.info(
            "worker_registered",
            url=record.url,
            protocol=record.resolved_protocol.name,
            endpoints=list(record.load_endpoints),
            discovery_error=record.discovery_error or None,
        )
        return record

    async def deregister(self, url: str) -> None:
        """Remove a worker durably and close its sockets; NOT_FOUND if it is not registered."""
        # A URL exactly as listed is always removable, even one an older version let in that
        # today's validation refuses (the operator must be able to clean up).
        key = url.strip() if url.strip() in self._workers else parse_worker_url(url).url
        if key not in self._workers:
            # The same host:port under the other scheme (http:// vs h2c://) is the same worker.
            authority = key.split("://", 1)[1]
            same = [u for u in self._workers if u.split("://", 1)[1] == authority]
            if not same:
                raise NotFound(f"url: worker {key} is not registered", field="url")
            key = same[0]
        await asyncio.shield(self._remove(key))
        log.info("worker_deregistered", url=key)

    async def _resolve(
        self,
        address: WorkerUrl,
        asked: Protocol,
        models: tuple[str, ...],
        endpoints: tuple[str, ...],
        budget_s: float | None,
    ) -> WorkerRecord:
        forced = Protocol.H2C if address.scheme == "h2c" else asked
        resolved = forced
        topic = LOAD_TOPIC
        error = ""
        discovered = False
        if not endpoints or not models or forced is Protocol.AUTO:
            found = await self._discoverer.discover(
                address, forced, want_endpoints=not endpoints, want_models=not models, budget_s=budget_s
            )
            resolved = found.resolved_protocol
            error = found.error
            if not endpoints:
                endpoints, topic, discovered = found.load_endpoints, found.load_topic, True
            if not models:
                models = found.models
        return _noted(
            WorkerRecord(
                url=address.url,
                protocol=asked,
                resolved_protocol=resolved,
                models=models,
                load_endpoints=endpoints,
                load_topic=topic,
                discovered=discovered,
                register_time_unix_s=self._wall(),
                discovery_error=error,
            )
        )

    async def _commit(self, record: WorkerRecord) -> None:
        async with self._lock:
            # One worker per host:port: h2c://H:P replaces http://H:P and vice versa.
            authority = record.url.split("://", 1)[1]
            replaced = [u for u in self._workers if u != record.url and u.split("://", 1)[1] == authority]
            await self._registry.put(record, replaces=replaced)
            for url in replaced:
                self._forget(url)
            self._apply(record)

    async def _remove(self, url: str) -> None:
        async with self._lock:
            if url not in self._workers:
                return
            await self._registry.delete(url)
            self._forget(url)

    async def reload(self) -> None:
        """Take up the registry as stored: another control plane on a shared (etcd) store changed it.

        Under the lock, so a listing never undoes a change this plane committed after it;
        workers whose record is unchanged keep their subscriptions.
        """
        async with self._lock:
            stored = {record.url: record for record in await self._registry.list()}
            for url in [url for url in self._workers if url not in stored]:
                self._forget(url)
            for url, record in stored.items():
                if self._workers.get(url) != record:
                    self._apply(record)

    def _apply(self, record: WorkerRecord) -> None:
        # Every (re)registration reconnects: the engine behind the URL may have restarted.
        self._workers[record.url] = record
        ranks = self.table.set_worker(record.url, record.load_endpoints)
        if self._subscriber is None:
            return  # stopping: the table still answers, but no new sockets are opened
        try:
            self._subscriber.subscribe(record.url, ranks, record.load_topic.encode())
        except SubscribeError as exc:
            log.error("load_subscribe_failed", url=record.url, error=str(exc))
        self.hub.mark_dirty()

    def _forget(self, url: str) -> None:
        self._workers.pop(url, None)
        self.table.remove_worker(url)
        if self._subscriber is not None:
            self._subscriber.unsubscribe(url)
        self.hub.mark_dirty()

    # -- loads --------------------------------------------------------------------------

    def loads(self) -> list[WorkerView]:
        self._drain()  # what has arrived is visible to GetLoads at once
        return self.table.views(self._clock())

    def _drain(self) -> None:
        if self._subscriber is not None:
            self._subscriber.drain()

    # -- background ---------------------------------------------------------------------

    async def run_rediscovery(self) -> None:
        """Ask again the workers whose discovery failed, each on its own backoff.

        First ``rediscover_first_s`` after the worker was (re)registered, then doubling up to
        every ``rediscover_interval_s``: an engine that comes up right after its registration
        is read within a couple of seconds, one that stays down costs a request every interval.
        At most ``REDISCOVER_CONCURRENCY`` at once, so a hung worker delays no other; a worker
        whose answer breaks discovery is logged and asked again later, the loop goes on.
        """
        first = self._rediscover_first_s
        retries: dict[str, _Retry] = {}
        running: dict[str, asyncio.Task[None]] = {}
        try:
            while True:
                now = self._clock()
                for url in [url for url, task in running.items() if task.done()]:
                    del running[url]
                waiting = {u: r for u, r in self._workers.items() if r.discovery_error and _incomplete(r)}
                for url in [url for url in retries if url not in waiting]:
                    del retries[url]
                for url, record in waiting.items():
                    retry = retries.get(url)
                    if retry is None or retry.registered_unix_s != record.register_time_unix_s:
                        retry = retries[url] = _Retry(record.register_time_unix_s, first, now + first)
                    if url in running or now < retry.due or len(running) >= REDISCOVER_CONCURRENCY:
                        continue
                    running[url] = asyncio.create_task(self._rediscover_in_turn(record, retry))
                next_due = min((r.due for u, r in retries.items() if u not in running), default=now + first)
                await asyncio.sleep(min(max(next_due - now, 0.2), first))
        finally:
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)

    async def _rediscover_in_turn(self, record: WorkerRecord, retry: _Retry) -> None:
        try:
            await self._rediscover(record)
        except Exception as exc:  # e.g. the store went away, a record an older version stored
            if record.url not in self._rediscovery_failing:
                self._rediscovery_failing.add(record.url)
                log.error("worker_rediscovery_failed", url=record.url, error=repr(exc), exc_info=exc)
        else:
            self._rediscovery_failing.discard(record.url)
        finally:
            retry.delay_s = min(retry.delay_s * 2, self._rediscover_interval_s)
            retry.due = self._clock() + retry.delay_s

    async def _rediscover(self, record: WorkerRecord) -> None:
        address = parse_worker_url(record.url)
        want_endpoints = record.discovered and not record.load_endpoints
        found = await self._discoverer.discover(
            address, record.protocol, want_endpoints=want_endpoints, want_models=not record.models
        )
        auto = record.protocol is Protocol.AUTO and address.scheme != "h2c"
        protocol_read = auto and not found.error.startswith("protocol AUTO assumed")
        updated = _noted(
            replace(
                record,
                resolved_protocol=found.resolved_protocol if protocol_read else record.resolved_protocol,
                load_endpoints=found.load_endpoints
                if want_endpoints and found.load_endpoints
                else record.load_endpoints,
                load_topic=found.load_topic if want_endpoints and found.load_endpoints else record.load_topic,
                models=record.models or found.models,
                discovery_error=found.error,
            )
        )
        if updated == record:
            return
        async with self._lock:
            if self._workers.get(record.url) != record:
                return  # re-registered or removed meanwhile: that decision wins
            await self._registry.put(updated)
            self._apply(updated)
        log.info(
            "worker_rediscovered",
            url=record.url,
            protocol=updated.resolved_protocol.name,
            endpoints=list(updated.load_endpoints),
            discovery_error=updated.discovery_error or None,
        )


def _noted(record: WorkerRecord) -> WorkerRecord:
    """Say in ``discovery_error`` that the worker will be asked again, when it will (SPEC §6:
    an operator reading `workers add` or `workers list` must not have to guess)."""
    if record.discovery_error and _incomplete(record) and not record.discovery_error.endswith(RETRY_NOTE):
        return replace(record, discovery_error=record.discovery_error + RETRY_NOTE)
    return record


def _incomplete(record: WorkerRecord) -> bool:
    """Something discovery should have told: endpoints, models, or an AUTO protocol."""
    missing_endpoints = record.discovered and not record.load_endpoints
    unresolved = record.protocol is Protocol.AUTO and record.discovery_error.startswith(
        "protocol AUTO assumed"
    )
    return missing_endpoints or not record.models or unresolved
