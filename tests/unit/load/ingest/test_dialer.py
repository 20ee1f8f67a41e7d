"""Load endpoints as the ingest dials them: ``tcp://HOST:PORT`` only, IPv6 literals in brackets."""

from __future__ import annotations

import socket

import pytest

from controlplane.load.ingest.dialer import Endpoint, SubscribeError, parse_endpoint


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tcp://127.0.0.1:5557", Endpoint("127.0.0.1", 5557, socket.AF_INET, numeric=True)),
        ("tcp://[::1]:5557", Endpoint("::1", 5557, socket.AF_INET6, numeric=True)),
        ("tcp://engine-3.local:65535", Endpoint("engine-3.local", 65535, socket.AF_INET, numeric=False)),
        # A scoped link-local literal is an address too (no resolver round trip).
        ("tcp://[fe80::1%eth0]:1", Endpoint("fe80::1%eth0", 1, socket.AF_INET6, numeric=True)),
    ],
)
def test_endpoints_parse_into_host_port_family(text: str, expected: Endpoint) -> None:
    """Host, port and address family; an address literal is marked numeric (no resolver)."""
    assert parse_endpoint(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "ipc:///tmp/x",
        "tcp://host",
        "tcp://:5557",
        "tcp://host:0",
        "tcp://host:65536",
        "tcp://host:55x",
        "host:1",
    ],
)
def test_other_endpoints_are_refused_with_the_endpoint_named(text: str) -> None:
    """Anything but tcp://HOST:PORT with a port in 1..65535 is a SubscribeError naming it."""
    with pytest.raises(SubscribeError, match="tcp://"):
        parse_endpoint(text)
