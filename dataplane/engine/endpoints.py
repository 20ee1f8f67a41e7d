"""Where the per-scheduler load publishers bind, and how ``/server_info`` advertises it (SPEC §7).

Pure: endpoint strings in, a resolved port range (or the reason there is none) out. The
bind and the advertisement both come from :func:`resolve_load_pub_range`, so what an
engine announces cannot drift from what it binds (reference C.2/C.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LOAD_TOPIC_NAME = "load"
# Parsed hosts a publisher may bind on; a concrete address would advertise one interface
# while consumers substitute the worker URL's host (SPEC §7), so only wildcards are allowed.
BIND_WILDCARD_HOSTS = frozenset({"*", "0.0.0.0", "::"})
MAX_PORT = 65535
MODE_OFF = "off"
MODE_AUTO = "auto"


@dataclass(frozen=True, slots=True)
class TcpEndpoint:
    """A parsed ``tcp://HOST:PORT``; ``host`` is unbracketed (``::`` not ``[::]``)."""

    host: str
    port: int

    @property
    def is_ipv6(self) -> bool:
        return ":" in self.host

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if self.is_ipv6 else self.host
        return f"tcp://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class LoadPubRange:
    """Ports ``base .. base + dp_size - 1`` on ``host``: one publisher per dp rank."""

    host: str
    base: int
    dp_size: int

    def endpoint(self, dp_rank: int) -> str:
        """The bind endpoint of rank ``dp_rank``: ``tcp://HOST:(base + dp_rank)``."""
        if not 0 <= dp_rank < self.dp_size:
            raise ValueError(f"dp rank {dp_rank} outside 0..{self.dp_size - 1}")
        return TcpEndpoint(self.host, self.base + dp_rank).url


def parse_tcp(endpoint: str) -> TcpEndpoint | None:
    """``tcp://HOST:PORT`` with a non-empty host and a port in 1..65535; IPv6 must be bracketed."""
    if not endpoint.startswith("tcp://"):
        return None
    rest = endpoint[len("tcp://") :]
    if rest.startswith("["):
        host, sep, port_text = rest[1:].partition("]:")
        if not sep or not host or "]" in host:
            return None
    else:
        host, sep, port_text = rest.rpartition(":")
        # A bare IPv6 address (``tcp://:::5557``) is ambiguous: refuse it (reference C.2).
        if not sep or not host or ":" in host:
            return None
    if not (port_text.isascii() and port_text.isdigit()):
        return None
    port = int(port_text)
    if not 0 < port <= MAX_PORT:
        return None
    return TcpEndpoint(host, port)


def parse_bindable_tcp(endpoint: str) -> TcpEndpoint | None:
    """A tcp endpoint whose host is a wildcard (``*``, ``0.0.0.0``, ``::``), else None."""
    parsed = parse_tcp(endpoint)
    return parsed if parsed is not None and parsed.host in BIND_WILDCARD_HOSTS else None


def _overlaps(a: int, b: int, width: int) -> bool:
    """Do ``[a, a+width)`` and ``[b, b+width)`` share a port?"""
    return a < b + width and b < a + width


def resolve_load_pub_range(
    *,
    kv_endpoint: str | None,
    replay_endpoint: str | None,
    dp_size: int,
    load_publish_endpoint: str | None,
) -> tuple[LoadPubRange | None, str | None]:
    """``(range, None)``, ``(None, None)`` when off, or ``(None, reason)`` when refused.

    ``off``/empty/None: no publisher. ``auto``: base = KV events port + dp_size, moved past
    the replay range if they overlap. ``tcp://*:PORT``: wildcard host only, must not overlap
    the KV or replay range. A range running past port 65535 is refused (SPEC §7).
    """
    mode = (load_publish_endpoint or "").strip()
    if dp_size < 1 or not mode or mode.lower() == MODE_OFF:
        return None, None
    replay = parse_tcp(replay_endpoint) if replay_endpoint else None
    if mode.lower() == MODE_AUTO:
        kv = parse_bindable_tcp(kv_endpoint or "")
        if kv is None:
            return None, (
                f"auto needs a KV events endpoint of the form tcp://*:PORT with a wildcard host "
                f"(*, 0.0.0.0 or [::]), got {kv_endpoint!r}"
            )
        host, base = kv.host, kv.port + dp_size
        if replay is not None and _overlaps(base, replay.port, dp_size):
            base = replay.port + dp_size
    else:
        kv_parsed = parse_tcp(kv_endpoint or "")
        if kv_parsed is None:
            # Without a KV tcp port /server_info has no kv_events block to carry the load range:
            # the publisher would bind but never be advertised.
            return None, f"needs a tcp:// KV events endpoint to advertise on, got {kv_endpoint!r}"
        explicit = parse_tcp(mode)
        if explicit is None:
            return None, (
                "must be off, auto or tcp://*:PORT (wildcard host, IPv6 in brackets, port 1..65535)"
            )
        if explicit.host not in BIND_WILDCARD_HOSTS:
            return None, f"host {explicit.host!r} is not a wildcard; use *, 0.0.0.0 or [::]"
        host, base = explicit.host, explicit.port
        if _overlaps(base, kv_parsed.port, dp_size):
            return None, (
                f"ports {base}..{base + dp_size - 1} overlap the KV events ports "
                f"{kv_parsed.port}..{kv_parsed.port + dp_size - 1}"
            )
        if replay is not None and _overlaps(base, replay.port, dp_size):
            return None, (
                f"ports {base}..{base + dp_size - 1} overlap the KV replay ports "
                f"{replay.port}..{replay.port + dp_size - 1}"
            )
    if base + dp_size - 1 > MAX_PORT:
        return None, f"ports {base}..{base + dp_size - 1} would run past port {MAX_PORT}"
    return LoadPubRange(host=host, base=base, dp_size=dp_size), None


@dataclass(frozen=True, slots=True)
class KvEventSockets:
    """Where the KV events PUB sockets of ranks 0..dp_size-1 go: bound, or connected (reference C.2)."""

    bind: bool
    endpoints: tuple[str, ...]


def kv_event_sockets(
    kv_endpoint: str, dp_size: int, listen_host: str
) -> tuple[KvEventSockets | None, str | None]:
    """``(sockets, None)``, or ``(None, reason)`` when the endpoint cannot carry ``dp_size`` ranks.

    As SGLang's ``ZmqEventPublisher``: rank ``r`` uses ``port + r``; a wildcard host binds, a
    concrete one connects (to a proxy that binds). Unlike SGLang, a wildcard binds on the
    engine's ``--listen`` host: every listener defaults to loopback (SPEC §1), and consumers
    replace the advertised wildcard with the worker URL's host (SPEC §7), i.e. that same host.
    A ``--listen`` on a wildcard binds the wildcard. Only ``tcp://`` is advertised (C.3), so a
    non-tcp endpoint gets no sockets and no reason: ``(None, None)``.
    """
    kv = parse_tcp(kv_endpoint)
    if kv is None or dp_size < 1:
        return None, None
    if kv.port + dp_size - 1 > MAX_PORT:
        return None, f"ports {kv.port}..{kv.port + dp_size - 1} would run past port {MAX_PORT}"
    bind = kv.host in BIND_WILDCARD_HOSTS
    host = listen_host if bind else kv.host
    endpoints = tuple(TcpEndpoint(host, kv.port + rank).url for rank in range(dp_size))
    return KvEventSockets(bind=bind, endpoints=endpoints), None


def is_load_publisher_rank(*, pp_rank: int, attn_tp_rank: int, attn_cp_rank: int) -> bool:
    """Only the first pipeline stage's attention-TP/CP rank 0 scheduler publishes (SPEC §7)."""
    return pp_rank == 0 and attn_tp_rank == 0 and attn_cp_rank == 0


def select_publisher_dp_rank(*, attn_dp_size: int, attn_dp_rank: int, dp_rank: int | None) -> int:
    """The rank a scheduler publishes as (its port offset): attention-DP rank when DP attention is on."""
    return attn_dp_rank if attn_dp_size > 1 else (dp_rank or 0)


def describe_kv_events(
    *,
    kv_endpoint: str | None,
    dp_size: int,
    block_size: int,
    load_range: LoadPubRange | None,
    topic: str = "",
) -> dict[str, Any] | None:
    """The ``kv_events`` block of ``/server_info``, or None when the KV endpoint is not tcp.

    ``load_endpoint_port_base`` and ``load_topic`` appear exactly when a load range resolved;
    consumers substitute the worker URL's host for a wildcard ``endpoint_host``.
    """
    kv = parse_tcp(kv_endpoint or "")
    if kv is None or block_size <= 0:
        return None
    block: dict[str, Any] = {
        "publisher": "zmq",
        "endpoint_host": kv.host,
        "endpoint_port_base": kv.port,
        "topic": topic,
        "block_size": block_size,
        "dp_size": dp_size,
    }
    if load_range is not None:
        block["load_endpoint_port_base"] = load_range.base
        block["load_topic"] = LOAD_TOPIC_NAME
    return block
