"""Routing quality: one trace per scenario through every policy, two oracles and the PyPI peers.

    python bench/routing_quality.py [--requests 1500] [--seeds 3] [--scenarios NAME,...]
    python bench/routing_quality.py --live [--live-requests 360] [--peers]   # real processes too

Scenarios (4 engines with 4 running slots each, 80 % offered load, open-loop arrivals):

  two-routers     two routers, plus a client sending 20 % of the traffic straight to engine 0
                  (the case SGLang's load publisher was made for); answers of 32-160 tokens
  mixed-lengths   one router, streams of 10 and 200 tokens, half each
  bursty          one router, arrivals in bursts of 8 at once (the same mean rate)
  shared-prefix   one router, 4 system prompts of 2000 tokens shared by every request (the
                  prefix cache prefills each once), 100-token questions

The offered load is 80 % of what one engine completes with every slot busy on that scenario's
mix (``routing_model.saturation_rate``), times 4. TTFT (arrival to first token) per policy, p50 and
p99 over every request of the trace (direct ones included: they suffer from what the routers send
to engine 0), medians over ``--seeds`` traces; ratios against the oracles of the same trace.

**In-process model** (``routing_model``): engine-sim's scheduler in virtual time, the product's
publisher gate, ``LoadViews`` arithmetic, ``RouterState``/``Worker``/``Balancer``: the scores under
test are the shipped ones. **Live** (``--live``, scenario two-routers): real processes on loopback
— 4 ``engine-sim`` (load publishing on), a control plane (``--load-push-interval-ms 50``), two
``fleetplane router`` processes subscribed to it, and the same arrivals replayed as streamed chats
(wall clock); with ``--peers``, two sglang-router or vllm-router processes in the routers' place
(they poll ``/get_load``). The peers come from ``.bench-venv`` (gitignored) and run, like the whole
live part, inside ``unshare -n`` with ``HF_HUB_OFFLINE=1`` (as bench/router_peers.py)::

    python3 -m venv .bench-venv && .bench-venv/bin/pip install sglang-router vllm-router

Bounded: the model runs ``--requests`` per trace; the live run ``--live-requests`` per target with
a deadline per target.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.routing_model import IN_FLIGHT, ORACLES, Arrival, Outcome, run, saturation_rate  # noqa: E402

ENGINES = 4
SLOTS = 4
LOAD = 0.8
POLICIES = ("least_load", "power_of_two", "least_request", "round_robin", IN_FLIGHT)


@dataclass(frozen=True)
class Scenario:
    name: str
    routers: int
    direct_share: float  # of the traffic, straight to engine 0
    burst: int  # arrivals per burst (1: Poisson)
    make: Callable[[random.Random], Arrival]


def _plain(rng: random.Random) -> Arrival:
    # The answer runs to max_tokens, so the live engines (--answer-lengths max) replay the same
    # lengths the model draws.
    length = rng.randint(32, 160)
    return Arrival(0.0, 0, rng.randint(200, 1000), length, length)


def _mixed(rng: random.Random) -> Arrival:
    length = 10 if rng.random() < 0.5 else 200
    return Arrival(0.0, 0, rng.randint(200, 600), length, length)


_SYSTEMS = [tuple(hash(("system", s, i)) for i in range(125)) for s in range(4)]  # 2000 tokens each


def _shared(rng: random.Random) -> Arrival:
    system = rng.choice(_SYSTEMS)
    length = rng.randint(32, 160)
    return Arrival(0.0, 0, 2000 + 100, length, length, system)


SCENARIOS = {
    "two-routers": Scenario("two-routers", 2, 0.2, 1, _plain),
    "mixed-lengths": Scenario("mixed-lengths", 1, 0.0, 1, _mixed),
    "bursty": Scenario("bursty", 1, 0.0, 8, _plain),
    "shared-prefix": Scenario("shared-prefix", 1, 0.0, 1, _shared),
}


def trace(scenario: Scenario, requests: int, seed: int) -> list[Arrival]:
    """Open-loop arrivals at 80 % of the fleet's capacity on the scenario's mix."""
    rate = LOAD * ENGINES * saturation_rate(scenario.make, slots=SLOTS)
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    now = 0.0
    while len(arrivals) < requests:
        now += rng.expovariate(rate / scenario.burst)
        for _ in range(scenario.burst):
            arrival = scenario.make(rng)
            arrival.at = now
            if rng.random() < scenario.direct_share:
                arrival.source = -1
            else:
                arrival.source = rng.randrange(scenario.routers)
            arrivals.append(arrival)
    return arrivals[:requests]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Row:
    scenario: str
    target: str
    p50_ms: float
    p99_ms: float
    e2e_p99_ms: float


def model_rows(
    names: list[str], requests: int, seeds: int, targets: tuple[str, ...] = (*POLICIES, *ORACLES)
) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        scenario = SCENARIOS[name]
        per_target: dict[str, list[tuple[float, float, float]]] = {}
        for seed in range(1, seeds + 1):
            arrivals = trace(scenario, requests, seed)
            for target in targets:
                outcomes: list[Outcome] = run(arrivals, target, routers=scenario.routers, seed=seed)
                ttft = [o.ttft_s for o in outcomes]
                e2e = [o.e2e_s for o in outcomes]
                per_target.setdefault(target, []).append((pct(ttft, 0.5), pct(ttft, 0.99), pct(e2e, 0.99)))
        for target, runs in per_target.items():
            rows.append(
                Row(
                    name,
                    target,
                    statistics.median(r[0] for r in runs) * 1e3,
                    statistics.median(r[1] for r in runs) * 1e3,
                    statistics.median(r[2] for r in runs) * 1e3,
                )
            )
    return rows


def table(rows: list[Row], title: str) -> str:
    out = [
        f"{title}",
        "| scenario | target | TTFT p50 ms | TTFT p99 ms | vs oracle-queue | vs oracle-start | vs in-flight | e2e p99 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        base = {r.target: r for r in rows if r.scenario == row.scenario}
        queue = base.get("oracle-queue")
        start = base.get("oracle-start")
        vq = f"{row.p99_ms / queue.p99_ms:.2f}x" if queue else "—"
        vs = f"{row.p99_ms / start.p99_ms:.2f}x" if start else "—"
        own = base.get(IN_FLIGHT)
        vo = f"{row.p99_ms / own.p99_ms:.2f}x" if own else "—"
        out.append(
            f"| {row.scenario} | {row.target} | {row.p50_ms:.0f} | {row.p99_ms:.0f} | {vq} | {vs} | {vo} "
            f"| {row.e2e_p99_ms:.0f} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=1500, help="per trace (model)")
    parser.add_argument("--seeds", type=int, default=3, help="traces per scenario; medians")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--targets", default="", help="comma-separated policies/oracles (default: all)")
    parser.add_argument("--live", action="store_true", help="also real processes (scenario two-routers)")
    parser.add_argument("--peers", action="store_true", help="with --live: sglang-router and vllm-router")
    parser.add_argument("--live-requests", type=int, default=360)
    parser.add_argument("--keep-logs", action="store_true", help="with --live: keep the processes' logs")
    parser.add_argument("--no-netns", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [n for n in args.scenarios.split(",") if n]
    if args.live:
        from bench.routing_live import live_main

        return live_main(args)
    print(
        f"routing quality, in-process model: {ENGINES} engines × {SLOTS} slots, {LOAD:.0%} offered load, "
        f"{args.requests} requests per trace, medians of {args.seeds} traces"
    )
    targets = tuple(t for t in args.targets.split(",") if t) or (*POLICIES, *ORACLES)
    print(table(model_rows(names, args.requests, args.seeds, targets), ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
