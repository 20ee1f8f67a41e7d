"""`fleetplane up`: the whole fleet on its embedded default, as a newcomer runs it (SPEC §1)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

UP_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Up:
    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.router_port, self.control_port, self.http_port = _free_port(), _free_port(), _free_port()
        self.out = workdir.parent / f"up-{self.router_port}.out"
        self._out = self.out.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controlplane.cli.main",
                "up",
                "--workdir",
                str(workdir),
                "--router-port",
                str(self.router_port),
                "--control-port",
                str(self.control_port),
                "--http-port",
                str(self.http_port),
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )

    def wait_up(self) -> str:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.out.read_text(errors="replace")
            if "Ctrl-C stops everything" in text:
                return text
            if self.proc.poll() is not None:
                pytest.fail(f"fleetplane up exited {self.proc.returncode}:\n{text}")
            time.sleep(0.1)
        pytest.fail(f"fleetplane up did not come up:\n{self.out.read_text(errors='replace')}")

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(30)
        finally:
            self._out.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "fleet"


def _chat(port: int, body: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def _chat_until_ok(port: int, body: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    """The router may need a moment for its first snapshot and the workers' registration."""
    deadline = time.monotonic() + 20
    while True:
        result = _chat(port, body)
        if result[0] == 200 or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def test_up_serves_enforces_and_stops_cleanly(workdir: Path) -> None:
    """up serves chat through the router with the seeded contract injected, and Ctrl-C stops every
    child; FLEETPLANE_* variables left in the operator's shell do not reach the fleet it starts."""
    stray = {
        "FLEETPLANE_WORKER": "http://127.0.0.1:1",
        "FLEETPLANE_AUTH_TOKENS": str(workdir / "missing.json"),
    }
    up = Up(workdir, env={**os.environ, **stray})
    try:
        banner = up.wait_up()
        assert f"http://127.0.0.1:{up.router_port}" in banner
        assert "curl" in banner
        children = _children(up.proc.pid)
        assert len(children) == 4  # control plane, two engines, router
        hello = {"model": "fleetplane-sim", "messages": [{"role": "user", "content": "hi"}]}
        status, headers, body = _chat_until_ok(up.router_port, hello)
        assert status == 200, body
        # What the engine read: the seeded contract's values were injected (SPEC §3.3).
        read = json.loads(headers["x-sim-sampling-params"])
        assert (read["temperature"], read["top_p"], read["top_k"]) == (1.0, 0.95, 40)
        status, headers, body = _chat(up.router_port, {**hello, "top_p": 0.5})
        assert status == 400
        assert headers["x-router-error-code"] == "sampling_contract_violation"
        assert up.interrupt() == 0
        time.sleep(0.5)
        assert [pid for pid in children if _alive(pid)] == []
    finally:
        up.kill()


def test_second_up_keeps_the_contracts_of_the_first(workdir: Path) -> None:
    """A second up on the same workdir keeps the contracts the operator made during the first."""
    up = Up(workdir)
    try:
        up.wait_up()
        cli = [sys.executable, "-m", "controlplane.cli.main", "contract"]
        cp = ["--control-plane", f"127.0.0.1:{up.control_port}"]
        subprocess.run(
            [*cli, "set", *cp, "--scope", "fleetplane-sim", '{"temperature": 0.5}'],
            check=True,
            capture_output=True,
            env={**os.environ},
        )
        assert up.interrupt() == 0
    finally:
        up.kill()
    again = Up(workdir)
    try:
        again.wait_up()
        listed = subprocess.run(
            [
                *cli,
                "get",
                "--control-plane",
                f"127.0.0.1:{again.control_port}",
                "--scope",
                "fleetplane-sim",
                "--output",
                "json",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        assert "0.5" in listed.stdout
        assert again.interrupt() == 0
    finally:
        again.kill()


@pytest.mark.parametrize("value", ["x", "99999", "-1"])
def test_a_bad_port_is_one_line_naming_flag_and_value(value: str) -> None:
    """`fleetplane up --router-port VALUE` with no usable port exits 2 with one line naming both."""
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli.main", "up", "--router-port", value],
        capture_output=True,
        text=True,
        timeout=30,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1
    assert "--router-port" in lines[0] and value in lines[0] and "0-65535" in lines[0]
