"""The in-process model behind bench/routing_quality.py: engines, control plane and routers in
virtual time, on the product's own parts.

- each engine is engine-sim's scheduler (``dataplane.engine.sim.scheduler``: the calibrated step
  model, chunked prefill, prefix cache, KV admission) and publishes its LoadStat through the
  product's ``PublishGate`` at SGLang's cadence (once per batch, forced after prefill, SPEC §7's
  interval of 5 otherwise, forced when idle);
- the control plane pushes every engine's last frame to every router each ``push_s`` (50 ms, as
  ``--load-push-interval-ms``), arriving ``hop_s`` later; the prefill rate comes from the product's
  ``LoadViews`` arithmetic (``control.convert.PrefillRate``);
- each router is the product's ``RouterState`` + ``Worker`` + ``Balancer`` (the real scores), its
  own work held from the send until it learns the answer ended (``hop_s`` after);
- two oracles decide instead of the routers: ``oracle-queue`` sends to the engine whose true
  running + waiting is smallest at that instant; ``oracle-start`` (clairvoyant) copies every
  engine, with each request's real length, and sends to the one where the new request would get
  its first token soonest.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from dataplane.engine.publisher import PublishGate
from dataplane.engine.sim.costs import StepCosts
from dataplane.engine.sim.scheduler import SimRequest, SimScheduler
from dataplane.router.balancer import Balancer, Policy, request_work
from dataplane.router.control.convert import EngineLoad, PrefillRate
from dataplane.router.fleet.workers import Worker, WorkerSpec
from dataplane.router.state import RouterState

ORACLES = ("oracle-queue", "oracle-start")
# least_request without any engine view: the router's own in-flight counts (standalone mode).
IN_FLIGHT = "in-flight"
STALE_AFTER_S = 3.0


@dataclass
class Arrival:
    """One request of a trace: when, from where (a router index, or ``direct`` to engine 0)."""

    at: float
    source: int  # router index; -1: a client sending straight to engine 0
    prompt_tokens: int
    max_tokens: int
    length: int  # the answer's real length (<= max_tokens)
    blocks: tuple[int, ...] = ()


@dataclass
class Outcome:
    arrival: Arrival
    engine: int
    ttft_s: float
    e2e_s: float


@dataclass
class _Engine:
    index: int
    scheduler: SimScheduler
    gate: PublishGate = field(default_factory=PublishGate)
    frame: tuple[int, ...] | None = None
    frame_at: float = -1.0
    active: dict[int, tuple[SimRequest, Arrival]] = field(default_factory=dict)

    def publish(self, now: float, force: bool) -> None:
        if not self.gate.tick(force):
            return
        counts = self.scheduler.load_stat()
        if self.gate.should_send(counts, now):
            self.gate.sent(counts, now)
            self.frame, self.frame_at = counts, now


@dataclass
class _Router:
    state: RouterState
    balancer: Balancer[Worker]
    rates: list[PrefillRate]


def engines(count: int, slots: int, capacity: int, costs: StepCosts) -> list[_Engine]:
    return [
        _Engine(
            i, SimScheduler(max_running_requests=slots, max_total_tokens=capacity, costs=costs, block_size=16)
        )
        for i in range(count)
    ]


def _router(policy: str, count: int, seed: int) -> _Router:
    state = RouterState()
    specs = [WorkerSpec(f"http://engine-{i}:1", "http1", ("m",)) for i in range(count)]
    state.apply_workers(specs, pool_factory=lambda _spec: cast(Any, None))
    balancer: Balancer[Worker] = Balancer(Policy(policy), rng=random.Random(seed))
    return _Router(state, balancer, [PrefillRate() for _ in range(count)])


def _view(engine: _Engine, rate: PrefillRate, now: float) -> EngineLoad | None:
    frame = engine.frame
    if frame is None:
        return None
    running, waiting, tokens, capacity, uncached, total, limit, prefilled, busy_us = frame
    return EngineLoad(
        running,
        waiting,
        now - engine.frame_at < STALE_AFTER_S,
        tokens,
        capacity,
        uncached,
        total,
        limit,
        rate.update(prefilled, busy_us),
    )


def _first_token_at(engine: _Engine, probe: SimRequest, now: float) -> float:
    """When ``probe`` would get its first token on a copy of ``engine`` (clairvoyant)."""
    twin = copy.deepcopy(engine.scheduler)
    twin.submit(probe, now)
    t = now
    while probe.first_token_at is None:
        end = twin.next_event_at()
        if end is None:  # cannot happen: the probe keeps it busy until its first token
            return float("inf")
        t = end
        twin.advance(t)
    return probe.first_token_at


def run(
    trace: Sequence[Arrival],
    policy: str,
    *,
    routers: int,
    engine_count: int = 4,
    slots: int = 4,
    capacity: int = 262_144,
    costs: StepCosts | None = None,
    push_s: float = 0.05,
    hop_s: float = 0.001,
    seed: int = 0,
) -> list[Outcome]:
    """Every request of ``trace`` through ``policy`` (a ``--policy`` value or an oracle)."""
    fleet = engines(engine_count, slots, capacity, costs or StepCosts())
    router_policy = (
        "least_request" if policy == IN_FLIGHT else policy if policy not in ORACLES else "least_load"
    )
    fleet_routers = [_router(router_policy, engine_count, seed + i) for i in range(routers)]
    heap: list[tuple[float, int, str, Any]] = []
    order = itertools.count()

    def at(t: float, kind: str, data: Any) -> None:
        heapq.heappush(heap, (t, next(order), kind, data))

    for arrival in trace:
        at(arrival.at, "arrive", arrival)
    end_of_trace = trace[-1].at if trace else 0.0
    at(push_s / 2, "push", None)
    outcomes: list[Outcome] = []
    rotation = itertools.count()
    pending = len(trace)

    def deliver(engine: _Engine, arrival: Arrival, now: float, held: tuple[Worker, float] | None) -> None:
        request = SimRequest(
            arrival.prompt_tokens, arrival.max_tokens, blocks=arrival.blocks, stop_at=arrival.length
        )
        engine.scheduler.submit(request, now)
        engine.active[request.rid] = (request, arrival)
        if held is not None:
            holders[request.rid] = held

    holders: dict[int, tuple[Worker, float]] = {}

    def choose(arrival: Arrival, now: float) -> None:
        if arrival.source < 0:
            deliver(fleet[0], arrival, now, None)
            return
        if policy == "oracle-queue":
            start = next(rotation) % engine_count
            best = min(
                (fleet[(start + i) % engine_count] for i in range(engine_count)),
                key=lambda e: e.scheduler.load,
            )
            deliver(best, arrival, now, None)
            return
        if policy == "oracle-start":
            probe = SimRequest(
                arrival.prompt_tokens, arrival.max_tokens, blocks=arrival.blocks, stop_at=arrival.length
            )
            best = min(fleet, key=lambda e: _first_token_at(e, copy.copy(probe), now))
            deliver(best, arrival, now, None)
            return
        router = fleet_routers[arrival.source]
        workers = router.state.workers.workers
        worker = router.balancer.pick(list(workers))
        work = request_work(arrival.max_tokens, arrival.prompt_tokens)
        worker.inflight += 1
        worker.work += work
        at(now + hop_s, "deliver", (workers.index(worker), arrival, (worker, work)))

    while pending:
        next_step = min(
            (
                (e.scheduler.next_event_at(), e.index)
                for e in fleet
                if e.scheduler.next_event_at() is not None
            ),
            default=None,
        )
        if heap and (next_step is None or heap[0][0] <= next_step[0]):
            now, _, kind, data = heapq.heappop(heap)
            if kind == "arrive":
                choose(data, now)
            elif kind == "deliver":
                index, arrival, held = data
                deliver(fleet[index], arrival, now, held)
            elif kind == "done":
                worker, work = data
                worker.inflight -= 1
                worker.work -= work
            elif kind == "push":
                for router in fleet_routers if policy != IN_FLIGHT else ():
                    views = {
                        f"http://engine-{e.index}:1": _view(e, router.rates[e.index], now) for e in fleet
                    }
                    at(now + hop_s, "views", (router, {u: v for u, v in views.items() if v is not None}))
                if now < end_of_trace + 600:
                    at(now + push_s, "push", None)
            elif kind == "views":
                router, views = data
                router.state.apply_loads(views)
            continue
        assert next_step is not None
        now, index = next_step
        engine = fleet[index]
        prefills, decodes = engine.scheduler.advance(now)
        for _ in range(prefills):
            engine.publish(now, True)
        for _ in range(decodes):
            engine.publish(now, False)
        if engine.scheduler.next_event_at() is None:
            engine.publish(now, True)
        for rid, (request, arrival) in list(engine.active.items()):
            if request.finished:
                del engine.active[rid]
                first = request.first_token_at if request.first_token_at is not None else now
                outcomes.append(Outcome(arrival, index, first - arrival.at, now - arrival.at))
                pending -= 1
                held = holders.pop(rid, None)
                if held is not None:
                    at(now + hop_s, "done", held)
    return outcomes


def saturation_rate(
    make: Callable[[random.Random], Arrival], *, slots: int, costs: StepCosts | None = None
) -> float:
    """Requests per second one engine completes with every slot always busy (closed loop) on the
    trace's mix: 100 % load, from which a scenario's offered load is set."""
    rng = random.Random(12345)
    engine = engines(1, slots, 262_144, costs or StepCosts())[0]
    scheduler = engine.scheduler
    done, now, started = 0, 0.0, None

    def feed() -> None:
        arrival = make(rng)
        scheduler.submit(
            SimRequest(
                arrival.prompt_tokens, arrival.max_tokens, blocks=arrival.blocks, stop_at=arrival.length
            ),
            now,
        )

    for _ in range(slots * 2):
        feed()
    while done < 600:
        end = scheduler.next_event_at()
        assert end is not None
        now = end
        before = scheduler.load
        scheduler.advance(now)
        finished = before - scheduler.load
        for _ in range(finished):
            feed()
        done += finished
        if started is None and done >= 100:
            started, done = now, 0
    assert started is not None
    return done / (now - started)
