"""RegisterWorker / DeregisterWorker / ListWorkers as a black box (SPEC §6): refusals name the
field, the registry is keyed by the normalised URL, re-registration replaces, roles apply."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.fake_workers import listed, refusal, register

Stub = load_pb2_grpc.LoadServiceStub
H1 = pb.WORKER_PROTOCOL_HTTP1
EP = ("tcp://127.0.0.1:5999",)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "127.0.0.1:9001",
        "ftp://127.0.0.1:9001",
        "https://127.0.0.1:9001",
        "tcp://127.0.0.1:9001",
        "http://127.0.0.1:9001/v1",
        "http://127.0.0.1:9001/?x=1",
        "http://127.0.0.1:9001/#top",
        "http://user:pw@127.0.0.1:9001",
        "http://127.0.0.1:0",
        "http://127.0.0.1:70000",
        "http://127.0.0.1:-1",
        "http://:9001",
        "http://[::1:9001",
        "http://h..x:9001",
        "http://" + "a" * 300 + ":9001",
        "http://\u00fcber.example:9001",
        "http://[fe80::1%25eth0]:9001",
        "http://bad host:9001",
    ],
)
def test_a_bad_url_is_invalid_argument_naming_url(stub: Stub, url: str) -> None:
    """Explicit endpoints or discovery alike: a URL that is not http|h2c://HOST[:PORT] is refused first."""
    for endpoints in (EP, ()):
        err = refusal(lambda e=endpoints: register(stub, url, protocol=H1, models=("m",), endpoints=e))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
        assert (err.details() or "").startswith("url: ")
    assert all(w.url.startswith(("http://", "h2c://")) for w in listed(stub).values())


@pytest.mark.parametrize(
    ("endpoints", "field"),
    [
        (("",), "load_endpoints[0]"),
        (("tcp://127.0.0.1:1", "udp://127.0.0.1:2"), "load_endpoints[1]"),
        (("ipc:///tmp/load",), "load_endpoints[0]"),
        (("tcp://127.0.0.1",), "load_endpoints[0]"),
        (("tcp://127.0.0.1:0",), "load_endpoints[0]"),
        (("tcp://127.0.0.1:65536",), "load_endpoints[0]"),
        (("tcp://*:0",), "load_endpoints[0]"),
        (("tcp://[::]:99999",), "load_endpoints[0]"),
        (("tcp://127.0.0.1:5/x",), "load_endpoints[0]"),
        (("tcp://h..x:5",), "load_endpoints[0]"),
        (("tcp://127.0.0.1:5", "tcp://127.0.0.1:5"), "load_endpoints"),
        (tuple(f"tcp://127.0.0.1:{20000 + i}" for i in range(1025)), "load_endpoints"),
    ],
)
def test_a_bad_load_endpoint_is_invalid_argument_naming_it(
    stub: Stub, endpoints: tuple[str, ...], field: str
) -> None:
    """Not tcp://HOST:PORT, a port outside 1..65535, a repeat, more ranks than allowed: refused."""
    err = refusal(
        lambda: register(stub, "http://127.0.0.1:5998", protocol=H1, models=("m",), endpoints=endpoints)
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.details() or "").startswith(f"{field}: "), err.details()
    assert "http://127.0.0.1:5998" not in listed(stub)


@pytest.mark.parametrize(
    ("url", "protocol", "models", "field"),
    [
        ("http://127.0.0.1:5997", 7, ("m",), "protocol"),
        ("http://127.0.0.1:5997", -1, ("m",), "protocol"),
        ("h2c://127.0.0.1:5997", H1, ("m",), "protocol"),
        ("http://127.0.0.1:5997", H1, ("",), "models"),
        ("http://127.0.0.1:5997", H1, ("a\tb",), "models"),
        ("http://127.0.0.1:5997", H1, ("x" * 257,), "models"),
        ("http://127.0.0.1:5997", H1, tuple(f"m{i}" for i in range(257)), "models"),
    ],
)
def test_a_bad_protocol_or_model_is_invalid_argument_naming_it(
    stub: Stub, url: str, protocol: int, models: tuple[str, ...], field: str
) -> None:
    """An unknown enum value, HTTP1 on an h2c:// URL, an empty or unprintable model name: refused."""
    err = refusal(lambda: register(stub, url, protocol=protocol, models=models, endpoints=EP))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (err.details() or "").startswith(field), err.details()


def test_the_registry_key_is_the_normalised_url(stub: Stub) -> None:
    """Case, a trailing slash, blanks, a leading-zero or default (80) port name the same worker;
    IPv6 is bracketed and compressed."""
    first = register(stub, " HTTP://LocalHost:05996/ ", protocol=H1, models=("m",), endpoints=EP)
    assert first.url == "http://localhost:5996"
    again = register(stub, "http://localhost:5996", protocol=H1, models=("m",), endpoints=EP)
    assert again.url == first.url and [u for u in listed(stub) if "5996" in u] == [first.url]
    six = register(
        stub, "http://[0:0:0:0:0:0:0:1]:5996", protocol=H1, models=("m",), endpoints=("tcp://*:5996",)
    )
    assert six.url == "http://[::1]:5996" and list(six.load_endpoints) == ["tcp://[::1]:5996"]
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url="http://LOCALHOST:5996/"), timeout=10)
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url="http://[::1]:5996"), timeout=10)
    assert not [u for u in listed(stub) if "5996" in u]
    default = register(stub, "http://engine-x.internal:80", protocol=H1, models=("m",), endpoints=EP)
    assert default.url == "http://engine-x.internal"
    assert (
        register(stub, "http://engine-x.internal", protocol=H1, models=("m",), endpoints=EP).url
        == default.url
    )
    assert [u for u in listed(stub) if "engine-x" in u] == [default.url]
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url="http://engine-x.internal:80"), timeout=10)
    assert not [u for u in listed(stub) if "engine-x" in u]


def test_registering_again_replaces_and_is_idempotent(stub: Stub) -> None:
    """The same request twice leaves one identical worker (a newer time); a changed one replaces it."""
    url = "http://127.0.0.1:5995"
    first = register(stub, url, protocol=H1, models=("a", "b"), endpoints=EP)
    second = register(stub, url, protocol=H1, models=("a", "b"), endpoints=EP)
    first.ClearField("register_time")
    stamped = pb.Worker()
    stamped.CopyFrom(second)
    second.ClearField("register_time")
    assert first == second and listed(stub)[url] == stamped
    changed = register(
        stub, url, protocol=pb.WORKER_PROTOCOL_H2C, models=("c",), endpoints=("tcp://*:6001", "tcp://*:6002")
    )
    assert listed(stub)[url] == changed
    assert (changed.resolved_protocol, list(changed.models), changed.dp_size) == (
        pb.WORKER_PROTOCOL_H2C,
        ["c"],
        2,
    )


def test_http_and_h2c_urls_of_one_host_port_are_one_worker(stub: Stub) -> None:
    """h2c://H:P replaces http://H:P (one engine, one port), and removing either name removes it."""
    register(stub, "http://127.0.0.1:5994", protocol=H1, models=("m",), endpoints=EP)
    h2c = register(stub, "h2c://127.0.0.1:5994", models=("m",), endpoints=EP)
    assert h2c.resolved_protocol == pb.WORKER_PROTOCOL_H2C
    assert [u for u in listed(stub) if "5994" in u] == ["h2c://127.0.0.1:5994"]
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url="http://127.0.0.1:5994"), timeout=10)
    assert not [u for u in listed(stub) if "5994" in u]


def test_deregistering_an_unknown_worker_is_not_found_and_a_bad_url_invalid(stub: Stub) -> None:
    """NOT_FOUND naming the URL for a worker never registered; INVALID_ARGUMENT for a non-URL."""
    err = refusal(
        lambda: stub.DeregisterWorker(pb.DeregisterWorkerRequest(url="http://127.0.0.1:5993"), timeout=10)
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND and "http://127.0.0.1:5993" in (err.details() or "")
    for bad in ("", "ftp://x:1"):
        err = refusal(lambda bad=bad: stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=bad), timeout=10))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and (err.details() or "").startswith("url: ")


def test_roles_router_and_viewer_list_but_only_admin_registers(tmp_path: Path) -> None:
    """With --auth-tokens: admin adds and removes; router and viewer list but get PERMISSION_DENIED
    (one line, exit 1) on add/remove; no token is UNAUTHENTICATED."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps(
            {
                "ops": {"token": "admin-secret", "role": "admin"},
                "edge": {"token": "router-secret", "role": "router"},
                "dash": {"token": "viewer-secret", "role": "viewer"},
            }
        )
    )
    url = "http://127.0.0.1:5992"
    add = ("workers", "add", url, "--protocol", "http1", "--model", "m", "--load-endpoint", EP[0])
    with ControlPlaneProcess("--auth-tokens", str(tokens)) as cp:
        target = ("--control-plane", cp.target)
        for token in ("router-secret", "viewer-secret"):
            refused = fleetplane(*add, *target, "--token", token)
            assert refused.returncode == 1 and refused.stdout == ""
            assert refused.stderr.splitlines() == [refused.stderr.strip()]
            assert refused.stderr.startswith("fleetplane workers add: PERMISSION_DENIED")
            assert token not in refused.stderr
        anonymous = fleetplane("workers", "list", *target)
        assert anonymous.returncode == 1 and "UNAUTHENTICATED" in anonymous.stderr
        added = fleetplane(*add, *target, "--token", "admin-secret")
        assert added.returncode == 0, added.stderr
        for token in ("router-secret", "viewer-secret"):
            seen = fleetplane("workers", "list", *target, "--token", token, "--output", "json")
            assert seen.returncode == 0 and [w["url"] for w in json.loads(seen.stdout)["workers"]] == [url]
            removed = fleetplane("workers", "remove", url, *target, "--token", token)
            assert removed.returncode == 1 and "PERMISSION_DENIED" in removed.stderr
        assert fleetplane("workers", "remove", url, *target, "--token", "admin-secret").returncode == 0
        assert "secret" not in "".join(cp.log_lines)


@pytest.mark.parametrize(
    ("url", "endpoints", "models", "field"),
    [
        ("http://" + "a" * 20_000 + ":1", (), (), "url"),
        ("http://127.0.0.1:5991/" + "p" * 20_000, (), (), "url"),
        ("http://127.0.0.1:5991", ("tcp://" + "b" * 20_000 + ":1",), ("m",), "load_endpoints[0]"),
        ("http://127.0.0.1:5991", EP, ("\x00" * 20_000,), "models[0]"),
    ],
)
def test_a_huge_refused_value_is_still_invalid_argument_naming_the_field(
    stub: Stub, url: str, endpoints: tuple[str, ...], models: tuple[str, ...], field: str
) -> None:
    """A refusal quoting a 20 KB value must not outgrow gRPC's metadata limit (the client would see
    RESOURCE_EXHAUSTED "Stream removed" and never learn which field was wrong)."""
    err = refusal(lambda: register(stub, url, protocol=H1, models=models, endpoints=endpoints))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert (err.details() or "").startswith(f"{field}: ") and len(err.details() or "") < 2048
    gone = refusal(lambda: stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10))
    assert gone.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND)


def test_list_workers_is_sorted_by_url(stub: Stub) -> None:
    """ListWorkers (and so `workers list`) is sorted by URL whatever the registration order (SPEC §6 proto)."""
    urls = ["http://127.0.0.1:5989", "h2c://127.0.0.1:5987", "http://127.0.0.1:5988"]
    for url in urls:
        register(stub, url, protocol=pb.WORKER_PROTOCOL_H2C, models=("m",), endpoints=EP)
    order = list(stub.ListWorkers(pb.ListWorkersRequest(), timeout=10).workers)
    assert [w.url for w in order] == sorted(w.url for w in order)
    assert set(urls) <= {w.url for w in order}
    for url in urls:
        stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)
