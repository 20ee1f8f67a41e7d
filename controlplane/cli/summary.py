"""The one-line live summary ``fleetplane up`` keeps at the bottom of a terminal.

    14:02:07  3.2 req/s  ·  rejections 5 (+1)  ·  workers fresh 3/3  ·  Ctrl-C stops

Requests per second and rejections come from the router's ``/metrics`` (the judged and forwarded
routes only: the summary's own scrape and health checks are not traffic), freshness from the
control plane's ``GetLoads``. Every read is bounded and a failed one shows as ``?``: the line
must never stop ``up`` from supervising its fleet. Shown only on a terminal (``StatusLine``).
"""

from __future__ import annotations

import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import TextIO

import grpc
from prometheus_client.parser import text_string_to_metric_families

from controlplane.v1 import load_pb2, load_pb2_grpc

READ_TIMEOUT_S = 0.5
# The router's own endpoints: reading them is not client traffic.
_NOT_TRAFFIC = frozenset({"/metrics", "/health", "/readiness", "/contract", "/v1/models"})


@dataclass(frozen=True, slots=True)
class Sample:
    """Cumulative counts read at ``at_s`` (monotonic); None where a read failed."""

    at_s: float
    requests: float | None
    rejections: float | None
    fresh: int | None
    workers: int | None


def router_counts(exposition: str) -> tuple[float, float]:
    """(requests answered on traffic routes, sampling-contract rejections) from ``/metrics`` text."""
    requests = rejections = 0.0
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            if s.name == "fleetplane_requests_total" and s.labels.get("route") not in _NOT_TRAFFIC:
                requests += s.value
            elif s.name == "fleetplane_sampling_contract_rejections_total":
                rejections += s.value
    return requests, rejections


def summary_line(previous: Sample | None, current: Sample, clock: str) -> str:
    """The text of the line (pure)."""
    rate = "?"
    if (
        previous is not None
        and previous.requests is not None
        and current.requests is not None
        and current.at_s > previous.at_s
    ):
        rate = f"{max(0.0, current.requests - previous.requests) / (current.at_s - previous.at_s):.1f}"
    rejections = "?" if current.rejections is None else f"{current.rejections:.0f}"
    if previous is not None and previous.rejections is not None and current.rejections is not None:
        rejections += f" (+{max(0.0, current.rejections - previous.rejections):.0f})"
    fresh = "?" if current.fresh is None or current.workers is None else f"{current.fresh}/{current.workers}"
    return f"{clock}  {rate} req/s  ·  rejections {rejections}  ·  workers fresh {fresh}  ·  Ctrl-C stops"


class FleetSampler:
    """Reads the router's counters and the control plane's freshness, each bounded in time."""

    def __init__(self, router_url: str, channel: grpc.Channel) -> None:
        self._metrics_url = f"{router_url}/metrics"
        self._loads = load_pb2_grpc.LoadServiceStub(channel)

    def sample(self) -> Sample:
        requests = rejections = None
        try:
            with urllib.request.urlopen(self._metrics_url, timeout=READ_TIMEOUT_S) as resp:
                requests, rejections = router_counts(resp.read().decode())
        except (OSError, ValueError):
            pass  # the router restarting or slow: shown as "?"
        fresh = workers = None
        try:
            loads = self._loads.GetLoads(load_pb2.GetLoadsRequest(), timeout=READ_TIMEOUT_S)
            workers = len(loads.workers)
            fresh = sum(1 for w in loads.workers if w.freshness == load_pb2.FRESHNESS_FRESH)
        except grpc.RpcError:
            pass  # the control plane restarting: shown as "?"
        return Sample(time.monotonic(), requests, rejections, fresh, workers)


class StatusLine:
    """A line redrawn in place at the bottom of a terminal; nothing at all when not a terminal."""

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self._out = out
        self.enabled = out.isatty()
        self._shown = False

    def show(self, text: str) -> None:
        if self.enabled:
            # \r and "erase line" (ECMA-48 EL): the new text replaces the old one in place.
            self._out.write(f"\r\x1b[K{text}")
            self._out.flush()
            self._shown = True

    def clear(self) -> None:
        """Erase the line before other output, so a message never lands after the summary."""
        if self.enabled and self._shown:
            self._out.write("\r\x1b[K")
            self._out.flush()
            self._shown = False


class LiveSummary:
    """The summary redrawn every ``every_s`` by ``tick()`` (called from ``up``'s supervision loop)."""

    def __init__(self, sampler: FleetSampler, line: StatusLine, every_s: float = 1.0) -> None:
        self._sampler = sampler
        self._line = line
        self._every_s = every_s
        self._previous: Sample | None = None
        self._due = 0.0

    def tick(self) -> None:
        if not self._line.enabled or time.monotonic() < self._due:
            return
        current = self._sampler.sample()
        self._line.show(summary_line(self._previous, current, time.strftime("%H:%M:%S")))
        self._previous = current
        self._due = current.at_s + self._every_s

    def clear(self) -> None:
        self._line.clear()
