"""One exposition for a ``--processes N`` router out of its processes' expositions (SPEC §1, §8).

Pure: Prometheus text in (prometheus-client's parser), merged metric families out, rendered by
prometheus-client. How each family combines across processes, and why:

- counters and histograms (requests, durations, upstream exchanges, rejections): summed, bucket by
  bucket, ``_sum`` and ``_count`` included. Every process uses the same buckets (``BUCKETS_S``), so
  the sum of cumulative buckets is the cumulative bucket of the whole router: exactly what one
  process serving all the traffic would show.
- gauges that count something per process (``fleetplane_worker_inflight``,
  ``fleetplane_admission_queue_depth``): summed; the router's in-flight requests are the sum of
  its processes'. Summing is the default for a gauge.
- ``MIN_FAMILIES``, whose value is a state every process must share for the router to have it:
  ``fleetplane_contract_revision`` is the lowest revision applied (the revision the *whole* router
  enforces; -1 while any process has none, so a lagging process is visible and an alert on
  "revision < expected" fires until every process caught up); ``fleetplane_control_plane_connected``
  is 1 only while every process is connected (one disconnected process serves a stale contract);
  ``fleetplane_worker_healthy`` is 1 only while no process has the worker ejected.

Between processes the families travel as compact JSON (``wire``/``add_wire``), not Prometheus
text: prometheus-client's text parser takes ~8 ms for one router's exposition, the JSON decoder
~0.1 ms, and a scrape of ``--processes 4`` decodes three of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import msgspec
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

MIN_FAMILIES = frozenset(
    (
        "fleetplane_contract_revision",
        "fleetplane_control_plane_connected",
        "fleetplane_worker_healthy",
        # The same in every process (1), and the router's start is its first process's.
        "fleetplane_build_info",
        "python_info",
        "process_start_time_seconds",
        "process_max_fds",
    )
)
# Families whose totals must survive a process restart (they only ever go up).
CARRIED_TYPES = frozenset(("counter", "histogram"))

_SampleKey = tuple[str, tuple[tuple[str, str], ...]]
_Sample = tuple[str, dict[str, str], float]
# One family on the wire: name, help, type, samples (name, labels, value).
WireFamily = tuple[str, str, str, list[_Sample]]
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(list[WireFamily]).decode


class ExpositionError(ValueError):
    """A text that is not Prometheus exposition format."""


def decode_wire(data: bytes) -> list[WireFamily]:
    """Families as ``MergedFamilies.wire`` encoded them; ``ExpositionError`` for anything else."""
    try:
        return _decode(data)
    except msgspec.DecodeError as exc:
        raise ExpositionError(str(exc)) from None


class _Family:
    __slots__ = ("documentation", "name", "samples", "take_min", "type")

    def __init__(self, name: str, documentation: str, typ: str) -> None:
        self.name = name
        self.documentation = documentation
        self.type = typ
        self.take_min = name in MIN_FAMILIES
        # Insertion order is the order of first appearance: a histogram's buckets stay together.
        self.samples: dict[_SampleKey, _Sample] = {}

    def add(self, samples_in: Iterable[_Sample]) -> None:
        samples = self.samples
        for name, labels, value in samples_in:
            key = (name, tuple(sorted(labels.items())))
            seen = samples.get(key)
            if seen is None:
                samples[key] = (name, labels, value)
            elif self.take_min:
                samples[key] = (name, seen[1], min(seen[2], value))
            else:
                samples[key] = (name, seen[1], seen[2] + value)

    def metric(self) -> Metric:
        out = Metric(self.name, self.documentation, self.type)
        for name, labels, value in self.samples.values():
            out.add_sample(name, labels, value)
        return out


class MergedFamilies:
    """Metric families combined process by process (see the module doc for the rules)."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}

    def add(self, metrics: Iterable[Metric], *, carried_only: bool = False) -> None:
        """Combine ``metrics`` in; ``carried_only`` keeps counters and histograms only."""
        for metric in metrics:
            samples = ((s.name, s.labels, s.value) for s in metric.samples)
            self._add(metric.name, metric.documentation, metric.type, samples, carried_only)

    def add_wire(self, families: list[WireFamily], *, carried_only: bool = False) -> None:
        """Combine families decoded by ``decode_wire`` in."""
        for name, documentation, typ, samples in families:
            self._add(name, documentation, typ, samples, carried_only)

    def _add(
        self, name: str, documentation: str, typ: str, samples: Iterable[_Sample], carried_only: bool
    ) -> None:
        if carried_only and typ not in CARRIED_TYPES:
            return
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = _Family(name, documentation, typ)
        family.add(samples)

    def add_gauge(self, name: str, documentation: str, value: float) -> None:
        """A gauge of the merged answer itself (replaces any family of that name)."""
        family = self._families[name] = _Family(name, documentation, "gauge")
        family.add([(name, {}, value)])

    def wire(self, *, carried_only: bool = False) -> bytes:
        """The families as JSON for another process (``decode_wire``)."""
        return _encode(
            [
                (f.name, f.documentation, f.type, list(f.samples.values()))
                for f in self._families.values()
                if not carried_only or f.type in CARRIED_TYPES
            ]
        )

    def metrics(self, *, carried_only: bool = False) -> list[Metric]:
        return [f.metric() for f in self._families.values() if not carried_only or f.type in CARRIED_TYPES]

    def render(self, *, carried_only: bool = False) -> bytes:
        """The Prometheus text of the merged families."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed(self.metrics(carried_only=carried_only)))
        return generate_latest(registry)


class _Fixed(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)
