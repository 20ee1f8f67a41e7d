"""Worker registration validation and /server_info parsing (pure)."""

from __future__ import annotations

import pytest

from controlplane.errors import InvalidArgument
from controlplane.store.workers import Protocol
from controlplane.workers.discovery import DiscoveryError, parse_models, parse_server_info
from controlplane.workers.registration import parse_load_endpoints, parse_protocol, parse_worker_url

WORKER = parse_worker_url("http://10.0.0.5:9001")


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ("http://127.0.0.1:9001", "http://127.0.0.1:9001"),
        ("HTTP://LocalHost:9001/", "http://localhost:9001"),
        ("h2c://[::1]:9002", "h2c://[::1]:9002"),
        ("  http://engine-a.internal  ", "http://engine-a.internal"),
        ("http://engine-a.internal:80", "http://engine-a.internal"),
        ("h2c://[::1]:80/", "h2c://[::1]"),
        # A bind-all host as an engine logs it is taken as given: on the engine's own machine it
        # reaches the engine (Linux connects 0.0.0.0 and :: to the local host), as peers accept it.
        ("http://0.0.0.0:30000", "http://0.0.0.0:30000"),
        ("http://[::]:30000", "http://[::]:30000"),
    ],
)
def test_worker_url_is_normalised(raw: str, url: str) -> None:
    """Scheme and host are lower-cased, the trailing slash and blanks dropped."""
    assert parse_worker_url(raw).url == url


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("", "required"),
        ("ftp://h:1", "scheme"),
        ("https://h:1", "scheme"),
        ("http://h:0", "port"),
        ("http://h:70000", "port"),
        ("http://h:1/v1", "path"),
        ("http://user:pw@h:1", "credentials"),
        ("http://:1", "host"),
        ("http://h$x:1", "host"),
        ("127.0.0.1:9001", "scheme"),
        ("http://h..x:1", "host"),
        ("http://.:1", "host"),
        ("http://" + "a" * 64 + ":1", "host"),
        ("http://" + "a." * 127 + "a:1", "host"),
        ("http://\u00fc.example:1", "host"),
        ("http://[v1.x]:1", "IPv6"),
        ("http://[fe80::1%25eth0]:1", "IPv6"),
    ],
)
def test_bad_worker_url_names_the_field(raw: str, words: str) -> None:
    """A bad URL is INVALID_ARGUMENT naming the url field and what is wrong."""
    with pytest.raises(InvalidArgument) as err:
        parse_worker_url(raw)
    assert err.value.field == "url"
    assert err.value.message.startswith("url: ") and words in err.value.message


def test_wildcard_endpoint_host_becomes_the_worker_host() -> None:
    """tcp://*:P (an engine's bind address) means the worker's own host."""
    assert parse_load_endpoints(["tcp://*:5560", "tcp://0.0.0.0:5561", "tcp://[::]:5562"], WORKER) == (
        "tcp://10.0.0.5:5560",
        "tcp://10.0.0.5:5561",
        "tcp://10.0.0.5:5562",
    )
    assert parse_load_endpoints(["tcp://[::1]:7"], WORKER) == ("tcp://[::1]:7",)
    assert parse_load_endpoints(["tcp://[0:0::0]:8"], WORKER) == ("tcp://10.0.0.5:8",)
    doc = {
        "kv_events": {"endpoint_host": "0:0:0:0:0:0:0:0", "load_endpoint_port_base": 9, "load_topic": "load"}
    }
    assert parse_server_info(doc, WORKER).load_endpoints == ("tcp://10.0.0.5:9",)


@pytest.mark.parametrize(
    "raw", ["udp://h:1", "tcp://h", "tcp://h:0", "tcp://h:99999", "tcp://*:x", "tcp://h:1/x", "h:1"]
)
def test_bad_endpoint_is_refused(raw: str) -> None:
    """A load endpoint must be tcp://HOST:PORT; the error names its index."""
    with pytest.raises(InvalidArgument) as err:
        parse_load_endpoints(["tcp://h:1", raw], WORKER)
    assert err.value.message.startswith("load_endpoints[1]: ")


def test_duplicate_endpoint_is_refused() -> None:
    """Two ranks cannot share one endpoint."""
    with pytest.raises(InvalidArgument, match="twice"):
        parse_load_endpoints(["tcp://h:1", "tcp://h:1"], WORKER)


def test_protocol_defaults_to_auto_and_h2c_url_forbids_http1() -> None:
    """UNSPECIFIED is AUTO; HTTP1 on an h2c:// URL is a contradiction."""
    assert parse_protocol(0, WORKER) is Protocol.AUTO
    assert parse_protocol(3, WORKER) is Protocol.H2C
    with pytest.raises(InvalidArgument, match="protocol"):
        parse_protocol(2, parse_worker_url("h2c://h:1"))
    with pytest.raises(InvalidArgument, match="protocol"):
        parse_protocol(9, WORKER)


def test_server_info_gives_endpoints_per_rank_on_the_worker_host() -> None:
    """kv_events' load base + rank on the worker URL's host replaces the wildcard."""
    doc = {
        "enable_http2": True,
        "kv_events": {
            "publisher": "zmq",
            "endpoint_host": "*",
            "endpoint_port_base": 5557,
            "dp_size": 2,
            "load_endpoint_port_base": 5559,
            "load_topic": "load",
        },
    }
    info = parse_server_info(doc, WORKER)
    assert info.http2 is True
    assert info.load_endpoints == ("tcp://10.0.0.5:5559", "tcp://10.0.0.5:5560")
    assert (info.load_topic, info.load_reason) == ("load", "")


def test_server_info_with_explicit_host_keeps_it() -> None:
    """A non-wildcard endpoint_host is used as advertised (an IPv6 one bracketed or not)."""
    for host, endpoint in [
        ("10.9.9.9", "tcp://10.9.9.9:7000"),
        ("[::1]", "tcp://[::1]:7000"),
        ("::1", "tcp://[::1]:7000"),
    ]:
        doc = {"kv_events": {"endpoint_host": host, "load_endpoint_port_base": 7000, "load_topic": "load"}}
        assert parse_server_info(doc, WORKER).load_endpoints == (endpoint,)


@pytest.mark.parametrize(
    "host", [["*"], {"h": 1}, 7, "", "10.0.0.1:99", "bad host", "h..x", "[v1.x]", "fe80::1%eth0"]
)
def test_a_malformed_endpoint_host_is_a_discovery_error(host: object) -> None:
    """Any JSON value may arrive as endpoint_host: only a host an endpoint can name is taken."""
    doc = {"kv_events": {"endpoint_host": host, "load_endpoint_port_base": 7000, "load_topic": "load"}}
    with pytest.raises(DiscoveryError, match="endpoint_host"):
        parse_server_info(doc, WORKER)


def test_server_info_without_load_range_says_why() -> None:
    """No kv_events, or kv_events without a load range: no endpoints and a reason."""
    assert "no kv_events" in parse_server_info({"enable_http2": False}, WORKER).load_reason
    info = parse_server_info({"kv_events": {"endpoint_host": "*", "dp_size": 1}}, WORKER)
    assert info.load_endpoints == () and "does not publish load" in info.load_reason


@pytest.mark.parametrize(
    "kv",
    [
        {"load_endpoint_port_base": "5559", "load_topic": "load"},
        {"load_endpoint_port_base": 65535, "load_topic": "load", "dp_size": 2},
        {"load_endpoint_port_base": 5559, "load_topic": "load", "dp_size": 0},
        {"load_endpoint_port_base": 5559, "load_topic": ""},
    ],
)
def test_malformed_load_range_is_a_discovery_error(kv: dict[str, object]) -> None:
    """Wrong types, an empty topic or a range past 65535 are refused."""
    with pytest.raises(DiscoveryError):
        parse_server_info({"kv_events": kv}, WORKER)


def test_models_come_from_v1_models() -> None:
    """Model ids in order, without duplicates; entries without a valid id are left out and said."""
    models, left_out = parse_models(
        {"data": [{"id": "a"}, {"id": "b"}, {"id": "a"}, {"x": 1}, {"id": "c\n"}]}
    )
    assert models == ("a", "b") and "2 of 5 entries" in left_out
    assert parse_models({"data": [{"id": "a"}]}) == (("a",), "")
    many, left_out = parse_models({"data": [{"id": f"m{i}"} for i in range(300)]})
    assert many == tuple(f"m{i}" for i in range(256)) and "300 models, kept the first 256" in left_out
    with pytest.raises(DiscoveryError):
        parse_models({"data": "nope"})
