"""`fleetplane up` as a black box (SPEC §1): port 0 everywhere, from a clean workdir."""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.fakes.cli import fleetplane
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


def _start_up(workdir: Path, out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as sink:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controlplane.cli.main",
                "up",
                "--workdir",
                str(workdir),
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


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_killed_up_leaves_no_fleet_behind_and_up_starts_again(tmp_path: Path) -> None:
    """kill -9 of `up` stops its children (no orphans holding ports or the store); a second up keeps the contracts."""
    workdir = tmp_path / "fleet"
    first = _start_up(workdir, tmp_path / "first.out")
    try:
        banner = _wait_banner(first, tmp_path / "first.out")
        control = re.search(r"control plane\s+(127\.0\.0\.1:\d+)", banner)
        assert control is not None, banner
        made = fleetplane("contract", "set", "--control-plane", control.group(1), "--scope", "m", '{"n": 2}')
        assert made.returncode == 0, made.stderr
        children = _children(first.pid)
        assert len(children) == 4
        first.kill()
        first.wait(10)
        deadline = time.monotonic() + 20
        while [pid for pid in children if _alive(pid)]:
            assert time.monotonic() < deadline, "children outlived a killed up"
            time.sleep(0.2)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = _start_up(workdir, tmp_path / "second.out")
    try:
        banner = _wait_banner(second, tmp_path / "second.out")
        control = re.search(r"control plane\s+(127\.0\.0\.1:\d+)", banner)
        assert control is not None, banner
        kept = fleetplane("contract", "get", "--control-plane", control.group(1), "--scope", "m")
        assert kept.returncode == 0 and '{"n": 2}' in kept.stdout, kept.stdout + kept.stderr
        second.send_signal(signal.SIGINT)
        assert second.wait(30) == 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()


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
