"""Loopback ports for tests that must name a port before anything listens on it."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port nobody listens on right now (the kernel's pick for 127.0.0.1:0)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
