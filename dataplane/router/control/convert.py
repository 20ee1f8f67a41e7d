"""What the router takes from the control plane, as plain values (SPEC §1, §6, §7). Pure: no I/O.

The control-plane client (``client.py``, the adapter) feeds protobuf messages through these
functions: a contract snapshot becomes ``{scope: SamplingContract}`` (validated again: a router
never applies a contract the parser would have refused), a registry entry a ``WorkerSpec``, a
load view an ``EngineLoad``; and the client's settings (``ControlClientSettings``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote

from controlplane.contracts import ContractError, SamplingContract, contract_from_proto
from controlplane.v1 import contract_pb2, load_pb2
from dataplane.errors import SettingsError
from dataplane.router.fleet.workers import H2C, HTTP1, WorkerAddress, WorkerSpec, WorkerUrlError


class ControlConfigError(SettingsError):
    """A ``--control-plane``/``--token``/``--tls-*`` value that cannot be used (startup error)."""


@dataclass(frozen=True, slots=True)
class ControlClientSettings:
    """How to reach the control plane and how often to talk to it."""

    target: str
    router_id: str
    token: str | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None  # with tls_key: a client certificate (mTLS)
    tls_key: Path | None = None
    workers_poll_s: float = 2.0
    report_check_s: float = 0.25
    report_heartbeat_s: float = 2.0
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 3.0


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """The engine's own view of one worker, summed over its dp ranks (SPEC §6 WatchLoads).

    The fields after ``fresh`` are None when the engine did not send them (a six-position
    LoadStat, SPEC §7); ``prefill_tokens_per_s`` is measured by :class:`LoadViews` from the two
    cumulative prefill counters.
    """

    running: int
    waiting: int
    fresh: bool
    tokens: int = 0  # KV tokens in use
    capacity: int = 0  # KV capacity (0: unknown)
    waiting_uncached_tokens: int | None = None
    total_tokens: int | None = None  # KV in use plus every queued token
    max_running: int | None = None  # running-request limit, summed over ranks
    prefill_tokens_per_s: float | None = None


class ControlTarget(Protocol):
    """What the client drives in the router."""

    def apply_contracts(self, revision: int, contracts: Mapping[str, SamplingContract], /) -> None:
        """Swap in a complete contract set; raise ValueError (nothing applied) if it cannot be."""

    def apply_workers(self, specs: Sequence[WorkerSpec], /) -> None:
        """Replace the worker set (pools of workers that left are closed once idle)."""

    def apply_loads(self, loads: Mapping[str, EngineLoad], /) -> None:
        """Replace the engine load views by url (empty: no view, own in-flight counts only)."""

    def rejection_counts(self) -> Mapping[tuple[str, str, str], int]:
        """Cumulative contract rejections since this process started, by (scope, param, client)."""

    def ejected_workers(self) -> Sequence[str]:
        """URLs of the workers out of rotation now (ejected by the health tracker), sorted."""

    def set_control_plane_connected(self, connected: bool, /) -> None:
        """Drive ``fleetplane_control_plane_connected`` (SPEC §8)."""

    def set_control_plane_replica(self, address: str, /) -> None:
        """The replica (``HOST:PORT``) the streams are on; "" while none."""


def check_target(target: str) -> str:
    """``HOST:PORT`` (IPv6 as ``[::1]:PORT``) or ControlConfigError naming the flag."""
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ControlConfigError(
            f"--control-plane {target!r}: expected HOST:PORT (e.g. 127.0.0.1:50051 or [::1]:50051)"
        )
    return target


def _host_kind(entry: str) -> str:
    """``ipv4``, ``ipv6`` or ``dns`` for a checked ``HOST:PORT`` entry."""
    host = entry.rpartition(":")[0]
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ControlConfigError(f"--control-plane {entry!r}: {host} is not an IPv6 address") from None
        return "ipv6"
    if ":" in host:
        raise ControlConfigError(
            f"--control-plane {entry!r}: an IPv6 address goes in brackets, e.g. [::1]:50051"
        )
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        if not _HOST_NAME.fullmatch(host):
            raise ControlConfigError(f"--control-plane {entry!r}: {host!r} is not a host name") from None
        return "dns"
    return "ipv4"


_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def parse_control_plane(values: Sequence[str]) -> tuple[str, ...]:
    """The control-plane replicas from ``--control-plane`` (repeated, each comma-separated).

    Every entry is ``HOST:PORT``; a bad one is a ControlConfigError naming the flag and the entry.
    """
    entries: list[str] = []
    for value in values:
        for raw in value.split(","):
            entry = raw.strip()
            if not entry:
                raise ControlConfigError(
                    f"--control-plane {value!r}: empty address (expected HOST:PORT[,HOST:PORT...])"
                )
            check_target(entry)
            _host_kind(entry)
            if entry in entries:
                raise ControlConfigError(f"--control-plane {entry!r}: given twice")
            entries.append(entry)
    if not entries:
        raise ControlConfigError("--control-plane: expected HOST:PORT[,HOST:PORT...]")
    return tuple(entries)


def grpc_target(entries: Sequence[str]) -> str:
    """One gRPC channel target for every replica, so gRPC's resolver and pick_first policy do
    the failover (gRPC naming: ``ipv4:A:P,B:P``, ``ipv6:[A]:P,[B]:P``; one entry as given, which
    gRPC's default resolver takes as ``dns:///HOST:PORT``: every address the name resolves to).

    A target names one address family or one DNS name: gRPC has no target mixing them (and
    Python cannot plug in a resolver of its own), so a mix is a startup error pointing at the
    way that works: one DNS name that resolves to every replica.
    """
    kinds = {_host_kind(entry) for entry in entries}
    if len(entries) == 1:
        # One address as before: gRPC's default (dns) resolver, its authority for TLS the entry.
        return entries[0]
    if len(kinds) == 1 and kinds != {"dns"}:
        (kind,) = kinds
        return f"{kind}:{','.join(entries)}"
    raise ControlConfigError(
        f"--control-plane {','.join(entries)!r}: give IP addresses of one family (IPv4 or IPv6) "
        "or one DNS name that resolves to every replica, not a mix (gRPC resolves one name per channel)"
    )


def check_replicas(entries: Sequence[str], *, tls: bool) -> str:
    """The gRPC target of ``entries`` (``grpc_target``), refusing several addresses with TLS:
    one channel has one authority, the name TLS checks on every replica's certificate, and an
    address list has none that fits (gRPC would check "A:P,B:P" and refuse every replica)."""
    target = grpc_target(entries)
    if tls and len(entries) > 1:
        raise ControlConfigError(
            f"--control-plane {','.join(entries)!r}: with TLS give one DNS name that resolves to every "
            "replica and that their certificates carry, not several addresses"
        )
    return target


def replica_address(subchannel_target: str) -> str:
    """A gRPC subchannel's address (``ipv4:127.0.0.1:50051``, ``ipv6:%5B::1%5D:50051``) as
    ``HOST:PORT`` (``127.0.0.1:50051``, ``[::1]:50051``), the form --control-plane takes."""
    _, sep, address = subchannel_target.partition(":")
    return unquote(address if sep else subchannel_target)


def snapshot_contracts(snapshot: contract_pb2.WatchContractsResponse) -> dict[str, SamplingContract]:
    """Convert one WatchContracts message; ContractError names the scope and the field."""
    contracts: dict[str, SamplingContract] = {}
    for message in snapshot.contracts:
        if message.scope in contracts:
            raise ContractError(f"scope {message.scope!r}: sent twice in one snapshot")
        try:
            contracts[message.scope] = contract_from_proto(message.params, message.conflict)
        except ContractError as exc:
            raise ContractError(f"scope {message.scope!r}: {exc.message}", field=exc.field) from None
    return contracts


def worker_spec(worker: load_pb2.Worker) -> WorkerSpec:
    """A registry entry as the router uses it; WorkerUrlError for a URL it cannot use.

    HTTP/1.1 unless the control plane resolved the worker to h2c or its URL forces it (SPEC §1).
    """
    address = WorkerAddress.parse(worker.url)
    h2c = address.forced_h2c or worker.resolved_protocol == load_pb2.WORKER_PROTOCOL_H2C
    return WorkerSpec(address.url, H2C if h2c else HTTP1, tuple(worker.models))


def worker_specs(workers: Sequence[load_pb2.Worker]) -> tuple[list[WorkerSpec], list[str]]:
    """The usable specs and one error line per unusable registry entry (skipped, not fatal)."""
    specs: list[WorkerSpec] = []
    errors: list[str] = []
    for worker in workers:
        try:
            specs.append(worker_spec(worker))
        except WorkerUrlError as exc:
            errors.append(str(exc))
    return specs, errors


def engine_load(view: load_pb2.WorkerLoad, prefill_tokens_per_s: float | None = None) -> EngineLoad:
    """One WorkerLoad as the balancer uses it: the counts only while FRESH (SPEC §7)."""
    extended = view.HasField("num_waiting_uncached_tokens")
    return EngineLoad(
        running=view.num_running_reqs,
        waiting=view.num_waiting_reqs,
        fresh=view.freshness == load_pb2.FRESHNESS_FRESH,
        tokens=view.num_tokens,
        capacity=view.max_total_num_tokens,
        waiting_uncached_tokens=view.num_waiting_uncached_tokens if extended else None,
        total_tokens=view.num_total_tokens if view.HasField("num_total_tokens") else None,
        max_running=view.max_running_requests if view.HasField("max_running_requests") else None,
        prefill_tokens_per_s=prefill_tokens_per_s,
    )


class PrefillRate:
    """A worker's prefill speed from its cumulative counters (SPEC §7): the tokens prefilled
    between two views over the prefill time spent on them; before any delta (or after a counter
    went backwards: the engine restarted), the lifetime average. None until it prefilled."""

    __slots__ = ("_busy_us", "_tokens", "tokens_per_s")

    def __init__(self) -> None:
        self._tokens = -1
        self._busy_us = -1
        self.tokens_per_s: float | None = None

    def update(self, tokens: int, busy_us: int) -> float | None:
        d_tokens, d_busy = tokens - self._tokens, busy_us - self._busy_us
        if self._busy_us >= 0 and d_busy > 0 and d_tokens >= 0:
            self.tokens_per_s = d_tokens / (d_busy / 1e6)
        elif (self._busy_us < 0 or d_busy < 0 or d_tokens < 0) and busy_us > 0:
            self.tokens_per_s = tokens / (busy_us / 1e6)
        self._tokens, self._busy_us = tokens, busy_us
        return self.tokens_per_s


class LoadViews:
    """Folds WatchLoads messages (a full view, then deltas) into the current view by url."""

    def __init__(self) -> None:
        self.views: dict[str, EngineLoad] = {}
        self._rates: dict[str, PrefillRate] = {}

    def fold(self, message: load_pb2.WatchLoadsResponse) -> set[str]:
        """Apply one message; returns the urls it named (changed and removed)."""
        if message.full:
            self.views = {}
        named: set[str] = set()
        for view in message.workers:
            rate: float | None = None
            if view.HasField("total_prefill_busy_us") and view.HasField("total_prefill_uncached_tokens"):
                tracker = self._rates.get(view.url)
                if tracker is None:
                    tracker = self._rates[view.url] = PrefillRate()
                rate = tracker.update(view.total_prefill_uncached_tokens, view.total_prefill_busy_us)
            self.views[view.url] = engine_load(view, rate)
            named.add(view.url)
        for url in message.removed_urls:
            self.views.pop(url, None)
            self._rates.pop(url, None)
            named.add(url)
        return named

    def clear(self) -> None:
        self.views = {}
