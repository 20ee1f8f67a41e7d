"""Control-plane settings validation and the latest-value broadcast (no sockets)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from controlplane.broadcast import Broadcast
from controlplane.errors import SettingsError
from controlplane.settings import Address, ControlSettings, parse_address, parse_store


@pytest.mark.parametrize(
    ("value", "address", "loopback"),
    [
        ("127.0.0.1:50051", Address("127.0.0.1", 50051), True),
        ("[::1]:0", Address("::1", 0), True),
        ("localhost:9", Address("localhost", 9), True),
        ("0.0.0.0:1", Address("0.0.0.0", 1), False),
        ("example.org:1", Address("example.org", 1), False),
    ],
)
def test_addresses(value, address, loopback):
    """HOST:PORT and [V6]:PORT parse; only loopback hosts count as loopback."""
    assert parse_address("--listen", value) == address
    assert address.loopback is loopback


@pytest.mark.parametrize("value", ["50051", "host:", "host:99999", ":80", "h:p"])
def test_bad_addresses_name_the_flag(value):
    """A malformed address is refused with the flag and the value in the message."""
    with pytest.raises(SettingsError, match="--listen"):
        parse_address("--listen", value)


def test_store_urls():
    """sqlite:PATH is a path; a malformed sqlite: or an unknown scheme is refused naming --store."""
    assert parse_store("sqlite:/tmp/x.db") == Path("/tmp/x.db")
    for bad in ("sqlite:", "postgres://x"):
        with pytest.raises(SettingsError, match="--store"):
            parse_store(bad)


def test_tls_flags_come_in_pairs():
    """--tls-cert without --tls-key, or a client CA without a certificate, is refused."""
    with pytest.raises(SettingsError, match="--tls-cert"):
        ControlSettings.build(store="sqlite:x", tls_cert="c.pem")
    with pytest.raises(SettingsError, match="--tls-client-ca"):
        ControlSettings.build(store="sqlite:x", tls_client_ca="ca.pem")
    assert ControlSettings.build(store="sqlite:x", http_listen="off").http_listen is None


async def test_broadcast_collapses_notifications_into_one_wakeup():
    """Many notifications while a subscriber is busy wake it once; it then reads the newest value."""
    broadcast = Broadcast()
    latest = 0
    with broadcast.subscribe() as slot:
        slot.clear()
        for latest in range(1, 100):  # noqa: B007 (the newest value is what the subscriber reads)
            broadcast.notify()
        await asyncio.wait_for(slot.wait(), 1)
        slot.clear()
        assert latest == 99
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slot.wait(), 0.05)
        assert len(broadcast) == 1
    assert len(broadcast) == 0


async def test_close_wakes_every_subscriber():
    """close() wakes waiting subscribers and marks them closed."""
    broadcast = Broadcast()
    with broadcast.subscribe() as a, broadcast.subscribe() as b:
        a.clear()
        b.clear()
        waiters = asyncio.gather(a.wait(), b.wait())
        broadcast.close()
        await asyncio.wait_for(waiters, 1)
        assert a.closed and b.closed


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan])
def test_load_stale_after_must_be_a_finite_positive_number_of_seconds(value: float) -> None:
    """--load-stale-after-s inf would mean never STALE, nan never fresh: both refused, naming the flag."""
    with pytest.raises(SettingsError, match="--load-stale-after-s"):
        ControlSettings.build(store="sqlite:x", load_stale_after_s=value)
