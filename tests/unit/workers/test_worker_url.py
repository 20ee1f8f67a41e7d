"""Both planes spell a worker URL alike (controlplane.workers.url), so they name one worker alike."""

from __future__ import annotations

import pytest

from controlplane.workers.registration import parse_worker_url
from controlplane.workers.url import WorkerUrl, worker_url
from dataplane.router.fleet.workers import WorkerAddress


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ("HTTP://Host:80/", "http://host"),
        ("http://127.0.0.1:9001/", "http://127.0.0.1:9001"),
        ("H2C://Engine-A.Internal:8000", "h2c://engine-a.internal:8000"),
        ("h2c://[0:0::0001]:80", "h2c://[::1]"),
        ("http://[FD00::A]:9000/", "http://[fd00::a]:9000"),
    ],
)
def test_the_router_and_the_control_plane_normalise_a_worker_url_alike(raw: str, url: str):
    """RegisterWorker's key and the router's --worker name are the same normal form."""
    assert parse_worker_url(raw).url == url
    assert WorkerAddress.parse(raw).url == url


def test_the_normal_form_is_lower_case_without_the_default_port():
    """Scheme and host lose their case, port 80 is left out, an IPv6 literal is compressed in brackets."""
    assert worker_url("HTTP", "Host", 80) == "http://host"
    assert worker_url("h2c", "::0001", 9002) == "h2c://[::1]:9002"
    normal = WorkerUrl.of("http", "Host", 80)
    assert (normal.host, normal.port, normal.connect_port, normal.authority) == ("host", None, 80, "host")


def test_the_normal_form_is_stable():
    """A URL already in normal form is spelled the same again (the router re-reads registry URLs)."""
    for url in ("http://host", "h2c://[::1]:9002", "http://10.0.0.5:9001"):
        assert parse_worker_url(url).url == url
        assert WorkerAddress.parse(url).url == url
