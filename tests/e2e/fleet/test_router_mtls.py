"""A router subscribes to a control plane that requires client certificates (SPEC §6 TLS/mTLS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.fleet import wait_for
from tests.fakes.router import RouterProcess

CONNECTED = "fleetplane_control_plane_connected"


def test_router_speaks_mtls_to_the_control_plane(pki: Path) -> None:
    """With --tls-ca plus --tls-cert/--tls-key the router subscribes to a --tls-client-ca control
    plane (connected 1, its contract revision applied); with the CA alone it is refused (connected 0)."""
    server = ("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"))
    with ControlPlaneProcess(*server, "--tls-client-ca", str(pki / "ca.pem")) as control:
        base = ("--control-plane", control.target, "--tls-ca", str(pki / "ca.pem"))
        client = ("--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key"))
        with RouterProcess(*base, *client) as router:
            wait_for(lambda: router.metrics()[CONNECTED] == 1, 15)
            assert router.metrics()["fleetplane_contract_revision"] == 0
        with RouterProcess(*base) as anonymous:
            wait_for(lambda: any("control_plane_stream_failed" in line for line in anonymous.output), 15)
            assert anonymous.metrics()[CONNECTED] == 0


def test_a_client_certificate_without_its_key_is_a_startup_error(pki: Path) -> None:
    """`--tls-cert` without `--tls-key` exits 2 with one line naming the value and the missing flag."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dataplane",
            "--control-plane",
            "127.0.0.1:1",
            "--tls-cert",
            str(pki / "client.pem"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert str(pki / "client.pem") in lines[0] and "--tls-key" in lines[0]
