"""The KV events PUB sockets an engine advertises in ``/server_info`` (SPEC §1, reference C.2).

SGLang's ``ZmqEventPublisher`` binds one PUB socket per dp rank at the advertised KV events
endpoint (``port + rank``) and sends ``[topic, seq, msgpack(EventBatch)]`` for each batch of
prefix-cache block events. engine-sim has no prefix cache, so it has no block event to send:
these sockets are real publishers a consumer can connect and subscribe to (the ZMTP handshake
completes), and they stay silent, as an SGLang engine's do while no block is stored or evicted.
What they carry is not invented here; only where they are is (``endpoints.kv_event_sockets``).
"""

from __future__ import annotations

import structlog
import zmq

from dataplane.engine.endpoints import KvEventSockets, parse_tcp
from dataplane.engine.publisher import PublisherBindError

# SGLang's KVEventsConfig default ``hwm`` (reference C.2).
KV_EVENTS_HWM = 100_000

log = structlog.get_logger(__name__)


class KvEventsPublisher:
    """The PUB sockets of every dp rank; ``close()`` releases their ports."""

    def __init__(self, sockets: list[zmq.Socket[bytes]], endpoints: tuple[str, ...]) -> None:
        self._sockets = sockets
        self.endpoints = endpoints

    @classmethod
    def open(
        cls, plan: KvEventSockets, *, context: zmq.Context[zmq.Socket[bytes]] | None = None
    ) -> KvEventsPublisher:
        """Bind (or connect) one PUB per rank; raises :class:`PublisherBindError` naming the
        endpoint that could not be bound, after closing the ones already open."""
        ctx = context if context is not None else zmq.Context.instance()
        sockets: list[zmq.Socket[bytes]] = []
        for endpoint in plan.endpoints:
            sock = ctx.socket(zmq.PUB)
            sockets.append(sock)
            try:
                sock.setsockopt(zmq.SNDHWM, KV_EVENTS_HWM)
                sock.setsockopt(zmq.LINGER, 0)
                parsed = parse_tcp(endpoint)
                if parsed is not None and parsed.is_ipv6:
                    sock.setsockopt(zmq.IPV6, 1)
                if plan.bind:
                    sock.bind(endpoint)
                else:
                    sock.connect(endpoint)
            except zmq.ZMQError as exc:
                for opened in sockets:
                    opened.close(linger=0)
                raise PublisherBindError(f"cannot bind KV events publisher at {endpoint}: {exc}") from None
        return cls(sockets, plan.endpoints)

    def close(self) -> None:
        for sock in self._sockets:
            sock.close(linger=0)
        self._sockets = []
