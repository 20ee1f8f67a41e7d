"""Loopback ports for tests that must name a port before anything listens on it."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Below the kernel's ephemeral range (net.ipv4.ip_local_port_range), where no outgoing connection
# takes a source port: a port picked from that range, free when picked, can be taken before its
# server binds it by any connection meanwhile, including a client retrying that very port, which
# then connects to itself once its source port is the target (TCP simultaneous open, RFC 9293
# §3.5): the server's bind fails with EADDRINUSE.
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10000


def _ephemeral_low() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback port nobody listens on right now, outside the ephemeral range (see above)."""
    low = _ephemeral_low()
    picks = random.Random()
    for _ in range(200):
        port = picks.randrange(_LOWEST, low) if low > _LOWEST + 100 else picks.randrange(1024, low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port below {low}")
