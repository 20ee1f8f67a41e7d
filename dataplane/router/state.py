"""The router's current view of the world: workers + contracts, swapped as whole snapshots.

Following go-control-plane (ARCHITECTURE), a contract set arrives as a complete set at one
revision, is validated and compiled once (``enforce.compile_contract``), and replaces the
previous set in one assignment; a request reads ``state.contracts`` once and uses that snapshot
to the end, so it is never judged by half of one revision and half of another.

Standalone mode (SPEC §1): the ``--override-sampling-params`` contract is scope ``*`` at
revision 0, applied before the listener opens. With a control plane (a later issue), the
client calls ``apply_contracts``/``apply_workers`` on every update, and the router is not
ready (and judged requests get ``contract_unavailable``) until the first contract snapshot.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

from controlplane.contracts import SamplingContract, contract_to_json
from dataplane.router.balancer import DEFAULT_MAX_TOKENS, EngineView, held_work
from dataplane.router.contract.enforce import CompiledContract, compile_contract
from dataplane.router.fleet.workers import (
    UpstreamOutcomes,
    Worker,
    WorkerSet,
    WorkerSpec,
    WorkerSpecLike,
    make_pool,
    reconcile,
)
from dataplane.router.upstream.base import UpstreamPool

# How long a removed worker's in-flight answers may run on before its pool is closed anyway.
RETIRE_GRACE_S = 600.0

FLEET_SCOPE = "*"


class ContractSet:
    """One revision's contracts, by scope, compiled for the hot path (immutable)."""

    __slots__ = ("_compiled", "_fleet", "contracts", "revision", "revision_headers")

    def __init__(self, revision: int, contracts: Mapping[str, SamplingContract]) -> None:
        self.revision = revision
        self.contracts: Mapping[str, SamplingContract] = MappingProxyType(dict(contracts))
        # A plain dict (private, never mutated): compiled (scripts/build_mypyc.sh), ``get`` on
        # a MappingProxyType is a generic method call per request.
        self._compiled: dict[str, CompiledContract] = {
            scope: compile_contract(contract, scope=scope, revision=revision)
            for scope, contract in contracts.items()
        }
        self._fleet = self._compiled.get(FLEET_SCOPE)
        # Sent on every judged answer (SPEC §5), built once per snapshot.
        self.revision_headers: list[tuple[bytes, bytes]] = [(b"x-contract-revision", b"%d" % revision)]

    def for_model(self, model: str | None) -> CompiledContract | None:
        """The contract judging a request for ``model`` (SPEC §3.2: its scope, else ``*``, else none)."""
        if model is not None:
            compiled = self._compiled.get(model)
            if compiled is not None:
                return compiled
        return self._fleet

    def to_json(self) -> dict[str, Any]:
        """The ``GET /contract`` document."""
        return {
            "revision": self.revision,
            "contracts": {
                scope: {"params": json.loads(contract_to_json(c)), "conflict": c.conflict.value}
                for scope, c in sorted(self.contracts.items())
            },
        }


class EngineLoadLike(EngineView, Protocol):
    """One worker's engine load as the control-plane client hands it over (``control.EngineLoad``)."""

    @property
    def fresh(self) -> bool: ...


class RouterState:
    """The swappable snapshot holder shared by the request path and the control-plane client.

    Implements ``control.ControlTarget``: ``apply_contracts``, ``apply_workers``, ``apply_loads``,
    ``rejection_counts``, ``ejected_workers``, ``set_control_plane_connected``,
    ``set_control_plane_replica``.
    """

    def __init__(self, *, contracts: ContractSet | None = None) -> None:
        # None: subscribed to a control plane and no snapshot yet (SPEC §5 contract_unavailable).
        self.contracts: ContractSet | None = contracts
        self.workers = WorkerSet()
        self.control_plane_connected = False
        # The control-plane replica (HOST:PORT) the client is on; "" while none.
        self.control_plane_replica = ""
        # Cumulative contract rejections by (scope, param, client) since start (client "": no
        # --api-keys) (SPEC §6 ReportRouterStatus,
        # §8 fleetplane_sampling_contract_rejections_total): one dict update per violated field.
        self.rejections: dict[tuple[str, str, str], int] = {}
        # Called with the counts after each rejection, before its 400 goes out (process/journal.py).
        self.rejection_listener: Callable[[Mapping[tuple[str, str, str], int]], None] | None = None
        # Cumulative exchanges by (worker URL, protocol) since start (SPEC §8
        # fleetplane_upstream_requests_total): each Worker bumps its pair's object
        # (``Worker.outcomes``), which outlives it, so a removed worker's counts stay.
        self.upstream_outcomes: dict[tuple[str, str], UpstreamOutcomes] = {}
        self._listeners: list[Callable[[], None]] = []
        self._closers: set[asyncio.Task[None]] = set()
        # How a new worker's upstream pool is made (the router sets its upstream timeouts here).
        self.pool_factory: Callable[[WorkerSpec], UpstreamPool] = make_pool
        self.mean_work = float(DEFAULT_MAX_TOKENS)  # a mean request's work (balancer.request_work)

    @classmethod
    def standalone(cls, contract: SamplingContract | None) -> RouterState:
        """Standalone mode: the flags' contract (if any) is scope ``*`` at revision 0."""
        return cls(contracts=ContractSet(0, {FLEET_SCOPE: contract} if contract is not None else {}))

    @property
    def ready(self) -> bool:
        """``/readiness``: a worker to send to and, with a control plane, a contract snapshot."""
        return self.contracts is not None and len(self.workers) > 0

    def apply_contracts(self, revision: int, contracts: Mapping[str, SamplingContract]) -> None:
        """Install a complete contract set (compiled here, once, before the swap)."""
        self.contracts = ContractSet(revision, contracts)
        self._notify()

    def apply_workers(
        self,
        specs: Sequence[WorkerSpecLike],
        pool_factory: Callable[[WorkerSpec], UpstreamPool] | None = None,
    ) -> None:
        """Install a complete worker list (kept workers untouched).

        The pools of workers that left are closed in the background once their in-flight
        answers are done; call from the event loop.
        """
        self.workers, removed = reconcile(
            self.workers, specs, pool_factory or self.pool_factory, self.outcomes_of
        )
        for worker in removed:
            task = asyncio.get_running_loop().create_task(_close_when_idle(worker))
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)
        self._notify()

    def apply_loads(self, loads: Mapping[str, EngineLoadLike]) -> None:
        """Replace the engine load views by worker URL; only FRESH views count (SPEC §7).

        A mean request's work (for the predicted wait) is the mean over the router's requests in
        flight now, or the last one measured when none is."""
        workers = self.workers.workers
        inflight = sum(w.inflight for w in workers)
        if inflight > 0:
            self.mean_work = max(1.0, sum(held_work(w.work)[0] for w in workers) / inflight)
        for worker in workers:
            view = loads.get(worker.url)
            if view is not None and view.fresh:
                worker.observe_engine_load(view.running + view.waiting, view, self.mean_work)
            else:
                worker.observe_engine_load(None, None, self.mean_work)

    def rejection_counts(self) -> Mapping[tuple[str, str, str], int]:
        """Cumulative rejections since start, by (scope, param, client)."""
        return dict(self.rejections)

    def outcomes_of(self, url: str, protocol: str) -> UpstreamOutcomes:
        """The exchange counts of a worker URL over ``protocol`` (created at the first)."""
        counts = self.upstream_outcomes.get((url, protocol))
        if counts is None:
            counts = self.upstream_outcomes[(url, protocol)] = UpstreamOutcomes()
        return counts

    def ejected_workers(self) -> list[str]:
        """The workers out of rotation now (reported to the control plane's status page)."""
        return sorted(w.url for w in self.workers.workers if not w.healthy)

    def count_rejection(self, scope: str, params: Sequence[str], client: str = "") -> None:
        """Count one rejected request under every field it violated (SPEC §3.3), for the client
        that sent it (``--api-keys``): one count path, so the per-client counts are reported,
        journaled and summed across boots as the others are (SPEC §6)."""
        counts = self.rejections
        for param in params:
            key = (scope, param, client)
            counts[key] = counts.get(key, 0) + 1
        if self.rejection_listener is not None:
            self.rejection_listener(counts)

    def set_control_plane_connected(self, connected: bool) -> None:
        self.control_plane_connected = connected

    def set_control_plane_replica(self, address: str) -> None:
        self.control_plane_replica = address

    async def close(self) -> None:
        """Shutdown: close every pool (in-flight answers end as incomplete)."""
        for task in list(self._closers):
            task.cancel()
        for worker in self.workers.workers:
            await worker.pool.close()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every applied snapshot (metrics, status reports)."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()


async def _close_when_idle(worker: Worker) -> None:
    deadline = time.monotonic() + RETIRE_GRACE_S
    # Polling (rare, per removed worker) keeps the hot path free of per-request signalling.
    while worker.inflight and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.5)
    await worker.pool.close()
