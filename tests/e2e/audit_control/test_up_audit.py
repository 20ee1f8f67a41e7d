"""`fleetplane up` as a black box (SPEC §1): port 0 everywhere, from a clean workdir."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.audit_control.conftest import fleetplane
from tests.fakes.control_plane import ROOT

pytestmark = pytest.mark.timeout(120)


def _wait_banner(proc: subprocess.Popen[bytes], out: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace")
        if "Ctrl-C stops everything" in text:
            return text
        if proc.poll() is not None:
            pytest.fail(f"fleetplane up exited {proc.returncode}:\n{text}")
        time.sleep(0.1)
    pytest.fail(f"fleetplane up did not come up:\n{out.read_text(errors='replace')}")


def test_up_with_port_0_names_the_ports_it_bound(tmp_path: Path) -> None:
    """With --control-port/--http-port 0 the banner names the bound ports and the operator commands work."""
    out = tmp_path / "up.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controlplane.cli.main",
                "up",
                "--workdir",
                str(tmp_path / "fleet"),
                "--router-port",
                "0",
                "--control-port",
                "0",
                "--http-port",
                "0",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )
    try:
        banner = _wait_banner(proc, out)
        control = re.search(r"control plane\s+(127\.0\.0\.1:\d+)", banner)
        status = re.search(r"status page\s+(http://127\.0\.0\.1:\d+)/", banner)
        assert control is not None and status is not None, banner
        assert not control.group(1).endswith(":0") and not status.group(1).endswith(":0"), banner
        listed = fleetplane("contract", "list", "--control-plane", control.group(1))
        assert listed.returncode == 0, listed.stderr
        assert "temperature" in listed.stdout
        with urllib.request.urlopen(f"{status.group(1)}/healthz", timeout=5) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
