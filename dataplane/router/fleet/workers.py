"""The worker set: who can serve which model, over which protocol, how loaded (SPEC §5, §7).

``WorkerSpec`` is what registration yields (standalone: ``--worker`` + discovery; later: the
control plane's worker list). ``Worker`` is the live object the request path uses: its upstream
pool, the router's own in-flight count, a health flag and the engine load hook. ``WorkerSet`` is
an immutable index (model -> workers) rebuilt only when the set changes, never per request.

The protocol of a worker is chosen in exactly one place, ``make_pool``. Health (``healthy``,
``record_success``/``record_failure``) is the seam where passive ejection and active probing
plug in (``health``, ``probing``); the request path only reads ``healthy``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from controlplane.workers.url import worker_url
from dataplane.router.balancer import (
    DEFAULT_MAX_TOKENS,
    PROMPT_MASK,
    PROMPT_TOKEN_WORK,
    WORK_SHIFT,
    EngineView,
    Scored,
    WaitTerms,
    wait_terms,
)
from dataplane.router.upstream.base import UpstreamPool, UpstreamTimeouts

if TYPE_CHECKING:
    from dataplane.router.fleet.health import HealthTracker

HTTP1 = "http1"
H2C = "h2c"


class WorkerUrlError(ValueError):
    """A ``--worker`` URL the router cannot use; the message says what is allowed."""


@dataclass(frozen=True, slots=True)
class WorkerAddress:
    """A parsed worker URL: ``http://H:P`` (protocol discovered) or ``h2c://H:P`` (forced)."""

    url: str
    host: str
    port: int
    forced_h2c: bool

    @classmethod
    def parse(cls, url: str) -> WorkerAddress:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise WorkerUrlError(f"{url!r}: {exc}; expected http://HOST:PORT or h2c://HOST:PORT") from None
        if parts.scheme not in ("http", "h2c") or not parts.hostname:
            raise WorkerUrlError(f"{url!r}: expected http://HOST:PORT or h2c://HOST:PORT")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
            raise WorkerUrlError(f"{url!r}: expected http://HOST:PORT or h2c://HOST:PORT (no path)")
        if port is None:
            port = 80
        # The registry's spelling (controlplane.workers.url): both planes name one worker alike.
        return cls(
            worker_url(parts.scheme, parts.hostname, port), parts.hostname, port, parts.scheme == "h2c"
        )


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """A registered worker: its URL (the identity), resolved protocol and served models.

    Same fields as ``control.WorkerSpec`` (what the control plane's registry yields), so either
    can be applied.
    """

    url: str
    protocol: str  # HTTP1 | H2C
    models: tuple[str, ...]


class WorkerSpecLike(Protocol):
    """Anything with a worker's url, protocol and models (ours or ``control.WorkerSpec``)."""

    @property
    def url(self) -> str: ...
    @property
    def protocol(self) -> str: ...
    @property
    def models(self) -> Sequence[str]: ...


def make_pool(
    spec: WorkerSpec, timeouts: UpstreamTimeouts | None = None, api_key: str | None = None
) -> UpstreamPool:
    """The upstream pool for a worker's protocol: the one place the protocol is chosen.

    ``api_key``: sent on every request of the pool (``--worker-api-key``): forwarded requests,
    health checks and probes, discovery."""
    address = WorkerAddress.parse(spec.url)
    if spec.protocol == H2C:
        from dataplane.router.upstream.h2c.pool import H2Pool

        return H2Pool(address.host, address.port, timeouts=timeouts, api_key=api_key)
    from dataplane.router.upstream.h1.pool import H1Pool

    return H1Pool(address.host, address.port, timeouts=timeouts, api_key=api_key)


class UpstreamOutcomes:
    """The exchanges with one worker URL over one protocol, by outcome (SPEC §8
    ``fleetplane_upstream_requests_total``): ``ok`` a field the request path bumps, the failure
    outcomes (rare) by name. ``RouterState`` keeps one per (URL, protocol) for the router's
    lifetime and hands it to every ``Worker`` of that pair, so counts outlive a removed worker.

    Plain numbers, no names of outcomes: ``metrics`` gives them meaning and renders them.
    """

    __slots__ = ("failed", "ok")

    def __init__(self) -> None:
        self.ok = 0
        self.failed: dict[str, int] = {}


class Worker(Scored):
    """A live worker as the request path sees it (scored by the balancer: ``load``, ``wait``)."""

    __slots__ = (
        "_prompts_at_view",
        "_slots",
        "_terms",
        "consecutive_failures",
        "engine_load",
        "health",
        "healthy",
        "inflight",
        "inflight_at_view",
        "models",
        "outcomes",
        "pool",
        "protocol",
        "spec",
        "url",
        "work",
    )

    def __init__(
        self, spec: WorkerSpec, pool: UpstreamPool, outcomes: UpstreamOutcomes | None = None
    ) -> None:
        self.spec = spec
        self.url = spec.url
        self.protocol = spec.protocol
        self.models = spec.models
        self.pool = pool
        # Its exchanges by outcome: the object of its (URL, protocol), shared with the Workers
        # that had them before (``reconcile``); bumped on the hot path as a field.
        self.outcomes = outcomes if outcomes is not None else UpstreamOutcomes()
        self.healthy = True
        self.health: HealthTracker | None = None  # passive ejection (health.WorkerHealth.attach)
        self.inflight = 0  # requests this router has sent and not finished (streams included)
        # Their work (balancer.request_work, packed), added and subtracted with inflight.
        self.work = 0
        self.consecutive_failures = 0
        # Engine load from the control plane's FRESH view (SPEC §7): running + waiting requests.
        # None (standalone, or the view is stale or gone): the router's own counts only.
        self.engine_load: float | None = None
        self.inflight_at_view = 0
        self._slots = 1  # the engine's running-request limit, as last seen
        self._prompts_at_view = 0
        self._terms: WaitTerms = wait_terms(None, own_inflight=0, mean_work=DEFAULT_MAX_TOKENS, slots=1)

    def load(self) -> float:
        """``least_request``'s figure: the engine's requests plus the router's own change since
        that view, signed (its completions since then count too), or its own in-flight count."""
        engine = self.engine_load
        if engine is None:
            return self.inflight
        # Requests in flight when the view was taken are (mostly) already in the engine's counts.
        return engine + self.inflight - self.inflight_at_view

    def wait(self) -> float:
        """``least_load``'s and ``power_of_two``'s figure: the predicted wait of a new request
        (``balancer.predicted_wait``), from the last FRESH view and the router's own work."""
        # balancer.predicted_wait, inlined: it runs for every candidate of every request.
        t = self._terms
        held = self.work
        prompts = held & PROMPT_MASK
        since = prompts - self._prompts_at_view  # prompts added since the view (completions net)
        if since < 0:
            since = 0
        ahead = t.excess + ((held >> WORK_SHIFT) + prompts * PROMPT_TOKEN_WORK) * t.inv_mean_work
        wait = t.prefill_s + since * t.prompt_token_s + ahead * t.tie_s
        if ahead > 0.0:
            wait += ahead * t.slot_s
        kv = t.kv_excess + since
        if kv > 0.0:
            wait += kv * t.kv_token_s
        return wait

    def observe_engine_load(
        self, load: float | None, view: EngineView | None = None, mean_work: float = 0.0
    ) -> None:
        """Hook for the control-plane load view: a FRESH load (and the view it came from), or
        None when stale/missing. ``mean_work``: a mean request's work across the router."""
        self.engine_load = load
        self.inflight_at_view = self.inflight
        self._prompts_at_view = self.work & PROMPT_MASK
        if view is not None and view.max_running:
            self._slots = view.max_running
        self._terms = wait_terms(
            view if load is not None else None,
            own_inflight=self.inflight,
            mean_work=mean_work if mean_work > 0 else DEFAULT_MAX_TOKENS,
            slots=self._slots,
        )

    def record_success(self) -> None:
        """An exchange completed: the worker answers."""
        if self.consecutive_failures:
            self.consecutive_failures = 0
            if self.health is not None:
                self.health.record_success(self.url)

    def record_failure(self) -> None:
        """An exchange failed at the transport (unreachable, dropped, timed out).

        Passive ejection (``health``, SPEC §5) decides here when ``healthy`` turns False.
        """
        self.consecutive_failures += 1
        if self.health is not None and self.health.record_failure(self.url):
            self.healthy = False

    def __repr__(self) -> str:
        return f"<Worker {self.url} {self.protocol} models={list(self.models)} inflight={self.inflight}>"


class WorkerSet:
    """An immutable index of the live workers by model."""

    __slots__ = ("_groups", "by_model", "by_url", "models", "sole_model", "workers")

    def __init__(self, workers: Iterable[Worker] = ()) -> None:
        self.workers: tuple[Worker, ...] = tuple(workers)
        self.by_url: Mapping[str, Worker] = MappingProxyType({w.url: w for w in self.workers})
        index: dict[str, list[Worker]] = {}
        for w in self.workers:
            for m in w.models:
                index.setdefault(m, []).append(w)
        # ``group`` reads the plain dict: compiled (scripts/build_mypyc.sh), ``get`` on the
        # read-only view is a generic method call per request.
        self._groups: dict[str, tuple[Worker, ...]] = {m: tuple(ws) for m, ws in index.items()}
        self.by_model: Mapping[str, tuple[Worker, ...]] = MappingProxyType(self._groups)
        self.models: tuple[str, ...] = tuple(sorted(index))
        # A request without ``model`` can only be routed when the fleet serves one model.
        self.sole_model: str | None = self.models[0] if len(self.models) == 1 else None

    def group(self, model: str) -> tuple[Worker, ...] | None:
        """The workers serving ``model`` (``by_model.get``), None if none does."""
        return self._groups.get(model)

    def healthy_models(self) -> list[str]:
        """Models served by at least one healthy worker (``GET /v1/models``)."""
        return [m for m in self.models if any(w.healthy for w in self.by_model[m])]

    def __len__(self) -> int:
        return len(self.workers)


def reconcile(
    current: WorkerSet,
    specs: Sequence[WorkerSpecLike],
    pool_factory: Callable[[WorkerSpec], UpstreamPool] = make_pool,
    outcomes_of: Callable[[str, str], UpstreamOutcomes] | None = None,
) -> tuple[WorkerSet, list[Worker]]:
    """The new set for ``specs`` and the workers that left it (their pools must be closed).

    A worker whose URL, protocol and models are unchanged keeps its live object (pool, in-flight
    count, health); anything else gets a fresh one, with the counts ``outcomes_of`` keeps for its
    (URL, protocol) over the router's lifetime (``RouterState.outcomes_of``).
    """
    kept: list[Worker] = []
    for given in specs:
        spec = WorkerSpec(given.url, given.protocol, tuple(given.models))
        old = current.by_url.get(spec.url)
        if old is not None and old.spec == spec:
            kept.append(old)
            continue
        counts = outcomes_of(spec.url, spec.protocol) if outcomes_of is not None else None
        kept.append(Worker(spec, pool_factory(spec), counts))
    survivors = {id(w) for w in kept}
    removed = [w for w in current.workers if id(w) not in survivors]
    return WorkerSet(kept), removed
