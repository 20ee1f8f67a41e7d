"""Load publisher endpoint resolution and the /server_info advertisement (SPEC §7)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dataplane.engine.endpoints import (
    KvEventSockets,
    LoadPubRange,
    TcpEndpoint,
    describe_kv_events,
    is_load_publisher_rank,
    kv_event_sockets,
    parse_bindable_tcp,
    parse_tcp,
    resolve_load_pub_range,
    select_publisher_dp_rank,
)

KV = "tcp://*:5557"

# (load_publish_endpoint, kv_endpoint, replay_endpoint, dp_size) -> (host, base)
RESOLVED = [
    ("auto", KV, None, 1, ("*", 5558)),
    ("auto", KV, None, 2, ("*", 5559)),
    ("AUTO", KV, None, 2, ("*", 5559)),
    ("  auto ", KV, None, 1, ("*", 5558)),
    ("auto", "tcp://0.0.0.0:6000", None, 4, ("0.0.0.0", 6004)),
    ("auto", "tcp://[::]:6000", None, 2, ("::", 6002)),
    # the replay range [5559, 5561) overlaps [5559, 5561): moved past it
    ("auto", KV, "tcp://*:5559", 2, ("*", 5561)),
    # the replay range [5560, 5562) overlaps [5559, 5561) partially: moved past it
    ("auto", KV, "tcp://*:5560", 2, ("*", 5562)),
    # replay right after the load range: no overlap, no move
    ("auto", KV, "tcp://*:5561", 2, ("*", 5559)),
    ("tcp://*:7000", KV, None, 2, ("*", 7000)),
    ("tcp://0.0.0.0:7000", KV, None, 1, ("0.0.0.0", 7000)),
    ("tcp://[::]:7000", KV, None, 1, ("::", 7000)),
    # explicit ports right next to the KV range are fine
    ("tcp://*:5559", KV, None, 2, ("*", 5559)),
    ("tcp://*:5555", KV, None, 2, ("*", 5555)),
    # an advertised (non-wildcard) KV host is fine in explicit mode
    ("tcp://*:7000", "tcp://10.0.0.1:5557", None, 1, ("*", 7000)),
    ("tcp://*:65534", KV, None, 2, ("*", 65534)),
    ("auto", "tcp://*:65533", None, 1, ("*", 65534)),
]


@pytest.mark.parametrize(("mode", "kv", "replay", "dp", "expected"), RESOLVED)
def test_resolved_ranges(mode: str, kv: str, replay: str | None, dp: int, expected: tuple[str, int]) -> None:
    """Valid settings resolve to a (host, base) range of dp_size ports."""
    load_range, reason = resolve_load_pub_range(
        kv_endpoint=kv, replay_endpoint=replay, dp_size=dp, load_publish_endpoint=mode
    )
    assert reason is None
    assert load_range == LoadPubRange(host=expected[0], base=expected[1], dp_size=dp)


@pytest.mark.parametrize("mode", [None, "", "   ", "off", "OFF", " Off "])
def test_off_resolves_to_nothing_without_a_reason(mode: str | None) -> None:
    """off, empty or unset means no publisher and no error."""
    assert resolve_load_pub_range(
        kv_endpoint=KV, replay_endpoint=None, dp_size=2, load_publish_endpoint=mode
    ) == (None, None)


def test_dp_size_below_one_is_off() -> None:
    """A dp_size below 1 has no ranks to publish for."""
    assert resolve_load_pub_range(
        kv_endpoint=KV, replay_endpoint=None, dp_size=0, load_publish_endpoint="auto"
    ) == (None, None)


# (mode, kv, replay, dp, words in the reason)
REFUSED = [
    ("tcp://127.0.0.1:7000", KV, None, 1, "not a wildcard"),
    ("tcp://localhost:7000", KV, None, 1, "not a wildcard"),
    ("tcp://[::1]:7000", KV, None, 1, "not a wildcard"),
    ("tcp://:::7000", KV, None, 1, "off, auto or tcp://*:PORT"),  # bare IPv6
    ("tcp://*", KV, None, 1, "off, auto or tcp://*:PORT"),
    ("tcp://*:0", KV, None, 1, "off, auto or tcp://*:PORT"),
    ("tcp://*:70000", KV, None, 1, "off, auto or tcp://*:PORT"),
    ("tcp://*:abc", KV, None, 1, "off, auto or tcp://*:PORT"),
    ("ipc:///tmp/load", KV, None, 1, "off, auto or tcp://*:PORT"),
    ("on", KV, None, 1, "off, auto or tcp://*:PORT"),
    ("tcp://*:5557", KV, None, 1, "overlap the KV events ports"),
    ("tcp://*:5556", KV, None, 2, "overlap the KV events ports"),
    ("tcp://*:5558", KV, None, 2, "overlap the KV events ports"),
    ("tcp://*:7000", KV, "tcp://*:7001", 2, "overlap the KV replay ports"),
    ("tcp://*:7001", KV, "tcp://*:7000", 2, "overlap the KV replay ports"),
    ("tcp://*:65535", KV, None, 2, "past port 65535"),
    ("tcp://*:7000", "ipc:///tmp/kv", None, 1, "KV events endpoint to advertise"),
    ("tcp://*:7000", None, None, 1, "KV events endpoint to advertise"),
    ("auto", "tcp://127.0.0.1:5557", None, 1, "wildcard host"),
    ("auto", "tcp://:::5557", None, 1, "wildcard host"),  # bare IPv6 KV endpoint
    ("auto", "ipc:///tmp/kv", None, 1, "wildcard host"),
    ("auto", None, None, 1, "wildcard host"),
    ("auto", "tcp://*:65535", None, 1, "past port 65535"),
    ("auto", "tcp://*:65533", None, 2, "past port 65535"),
    ("auto", "tcp://*:65530", "tcp://*:65533", 2, "past port 65535"),  # moved past replay: too high
]


@pytest.mark.parametrize(("mode", "kv", "replay", "dp", "words"), REFUSED)
def test_refusals_carry_a_reason(mode: str, kv: str | None, replay: str | None, dp: int, words: str) -> None:
    """Every refusal resolves to no range and a reason naming the problem."""
    load_range, reason = resolve_load_pub_range(
        kv_endpoint=kv, replay_endpoint=replay, dp_size=dp, load_publish_endpoint=mode
    )
    assert load_range is None
    assert reason is not None and words in reason


@pytest.mark.parametrize(
    ("endpoint", "parsed"),
    [
        ("tcp://*:5557", TcpEndpoint("*", 5557)),
        ("tcp://10.1.2.3:1", TcpEndpoint("10.1.2.3", 1)),
        ("tcp://[::1]:65535", TcpEndpoint("::1", 65535)),
        ("tcp://host.example:80", TcpEndpoint("host.example", 80)),
        ("tcp://::1:5557", None),
        ("tcp://[::1]5557", None),
        ("tcp://[]:5557", None),
        ("tcp://:5557", None),
        ("tcp://*:65536", None),
        ("tcp://*:-1", None),
        ("tcp://*:+5", None),
        ("tcp://*:٥", None),
        ("udp://*:5557", None),
        ("", None),
    ],
)
def test_parse_tcp(endpoint: str, parsed: TcpEndpoint | None) -> None:
    """tcp:// endpoints parse to host and port; bare IPv6, bad ports and other schemes do not."""
    assert parse_tcp(endpoint) == parsed


def test_bindable_requires_a_wildcard_host() -> None:
    """Only *, 0.0.0.0 and [::] are bindable hosts."""
    assert parse_bindable_tcp("tcp://[::]:1") == TcpEndpoint("::", 1)
    assert parse_bindable_tcp("tcp://0.0.0.0:1") is not None
    assert parse_bindable_tcp("tcp://127.0.0.1:1") is None


def test_range_endpoints_per_rank() -> None:
    """Rank r binds base + r; IPv6 hosts are bracketed."""
    assert LoadPubRange("*", 6000, 2).endpoint(1) == "tcp://*:6001"
    assert LoadPubRange("::", 6000, 1).endpoint(0) == "tcp://[::]:6000"
    with pytest.raises(ValueError):
        LoadPubRange("*", 6000, 2).endpoint(2)


def test_publisher_rank_gating_and_dp_rank_selection() -> None:
    """Only pp/attn-TP/attn-CP rank 0 publishes; DP attention uses its attention-DP rank."""
    assert is_load_publisher_rank(pp_rank=0, attn_tp_rank=0, attn_cp_rank=0)
    assert not is_load_publisher_rank(pp_rank=0, attn_tp_rank=1, attn_cp_rank=0)
    assert select_publisher_dp_rank(attn_dp_size=4, attn_dp_rank=3, dp_rank=0) == 3
    assert select_publisher_dp_rank(attn_dp_size=1, attn_dp_rank=0, dp_rank=2) == 2
    assert select_publisher_dp_rank(attn_dp_size=1, attn_dp_rank=0, dp_rank=None) == 0


def test_server_info_block_with_load_range() -> None:
    """With a resolved range the kv_events block carries load_endpoint_port_base and load_topic."""
    block = describe_kv_events(
        kv_endpoint=KV, dp_size=2, block_size=16, load_range=LoadPubRange("*", 5559, 2)
    )
    assert block == {
        "publisher": "zmq",
        "endpoint_host": "*",
        "endpoint_port_base": 5557,
        "topic": "",
        "block_size": 16,
        "dp_size": 2,
        "load_endpoint_port_base": 5559,
        "load_topic": "load",
    }


def test_server_info_block_without_load_range() -> None:
    """Without a range neither load key appears."""
    block = describe_kv_events(kv_endpoint=KV, dp_size=1, block_size=16, load_range=None)
    assert block is not None
    assert "load_endpoint_port_base" not in block and "load_topic" not in block


@pytest.mark.parametrize(("kv", "block_size"), [("ipc:///tmp/kv", 16), (None, 16), (KV, 0)])
def test_server_info_block_absent_when_not_advertisable(kv: str | None, block_size: int) -> None:
    """No tcp KV endpoint or no page size: no kv_events block at all."""
    assert describe_kv_events(kv_endpoint=kv, dp_size=1, block_size=block_size, load_range=None) is None


@given(
    kv=st.integers(1, 65535),
    replay=st.none() | st.integers(1, 65535),
    dp=st.integers(1, 64),
    explicit=st.none() | st.integers(1, 65535),
)
def test_any_resolved_range_is_disjoint_and_in_bounds(
    kv: int, replay: int | None, dp: int, explicit: int | None
) -> None:
    """Whatever the settings, a resolved range fits under 65536 and overlaps neither the KV nor the replay range."""
    load_range, reason = resolve_load_pub_range(
        kv_endpoint=f"tcp://*:{kv}",
        replay_endpoint=None if replay is None else f"tcp://*:{replay}",
        dp_size=dp,
        load_publish_endpoint="auto" if explicit is None else f"tcp://*:{explicit}",
    )
    assert (load_range is None) != (reason is None)
    if load_range is None:
        return
    ports = set(range(load_range.base, load_range.base + dp))
    assert max(ports) <= 65535
    assert not ports & set(range(kv, kv + dp))
    if replay is not None:
        assert not ports & set(range(replay, replay + dp))


@pytest.mark.parametrize(
    ("kv", "dp", "listen", "expected"),
    [
        # A wildcard binds one port per rank on --listen's host (loopback by default, SPEC §1).
        (KV, 2, "127.0.0.1", KvEventSockets(True, ("tcp://127.0.0.1:5557", "tcp://127.0.0.1:5558"))),
        ("tcp://[::]:6000", 1, "::1", KvEventSockets(True, ("tcp://[::1]:6000",))),
        ("tcp://0.0.0.0:6000", 1, "0.0.0.0", KvEventSockets(True, ("tcp://0.0.0.0:6000",))),
        # A concrete host connects there, as SGLang's ZmqEventPublisher does (reference C.2).
        (
            "tcp://10.0.0.5:7000",
            2,
            "127.0.0.1",
            KvEventSockets(False, ("tcp://10.0.0.5:7000", "tcp://10.0.0.5:7001")),
        ),
    ],
)
def test_kv_event_sockets_one_per_rank(kv: str, dp: int, listen: str, expected: KvEventSockets) -> None:
    """Rank r's KV events socket is at port + r; wildcards bind on the listen host, others connect."""
    assert kv_event_sockets(kv, dp, listen) == (expected, None)


def test_kv_event_sockets_refusals_and_non_tcp() -> None:
    """A range past 65535 has a reason; a non-tcp endpoint (never advertised) gets no socket and no reason."""
    sockets, reason = kv_event_sockets("tcp://*:65535", 2, "127.0.0.1")
    assert sockets is None and reason is not None and "65535..65536" in reason
    assert kv_event_sockets("ipc:///tmp/kv", 1, "127.0.0.1") == (None, None)


@given(kv=st.integers(1, 65535), dp=st.integers(1, 64))
def test_kv_sockets_and_the_auto_load_range_never_share_a_port(kv: int, dp: int) -> None:
    """Whenever both resolve, the KV events ports and the auto load ports are disjoint and in bounds."""
    sockets, _ = kv_event_sockets(f"tcp://*:{kv}", dp, "127.0.0.1")
    load_range, _ = resolve_load_pub_range(
        kv_endpoint=f"tcp://*:{kv}", replay_endpoint=None, dp_size=dp, load_publish_endpoint="auto"
    )
    if sockets is None or load_range is None:
        return
    kv_ports = {int(e.rsplit(":", 1)[1]) for e in sockets.endpoints}
    assert kv_ports == set(range(kv, kv + dp)) and max(kv_ports) <= 65535
    assert not kv_ports & set(range(load_range.base, load_range.base + dp))
