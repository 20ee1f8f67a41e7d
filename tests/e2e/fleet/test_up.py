"""`fleetplane up`: the whole fleet on its embedded default, as a newcomer runs it (SPEC §1)."""

from __future__ import annotations

import json
import os
import re
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
    def __init__(
        self, workdir: Path, env: dict[str, str] | None = None, ports: tuple[int, int, int] | None = None
    ) -> None:
        self.router_port, self.control_port, self.http_port = ports or (
            _free_port(),
            _free_port(),
            _free_port(),
        )
        self.out = workdir.parent / f"up-{self.router_port}-{time.monotonic_ns()}.out"
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

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def child(self, module: str) -> int:
        """The PID of the child running ``python -m module``."""
        for pid in _children(self.proc.pid):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv[1:3] == [b"-m", module.encode()]:
                return pid
        raise AssertionError(f"no child runs -m {module}: {_children(self.proc.pid)}")

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
        # Not a terminal: no live summary line and no terminal codes in the captured output.
        assert "\x1b" not in up.output() and "req/s" not in up.output()
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


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as resp:
        resp.read()
        return int(resp.status)


def test_up_restarts_at_once_on_the_same_ports_after_the_status_page_was_read(workdir: Path) -> None:
    """Read /metrics and the status page (their closes leave TIME_WAIT), Ctrl-C, up again at once: it starts."""
    up = Up(workdir)
    ports = (up.router_port, up.control_port, up.http_port)
    try:
        up.wait_up()
        for path in ("/metrics", "/", "/metrics", "/healthz"):
            assert _get(f"http://127.0.0.1:{up.http_port}{path}") == 200
        assert up.interrupt() == 0
    finally:
        up.kill()
    again = Up(workdir, ports=ports)
    try:
        banner = again.wait_up()
        assert f"http://127.0.0.1:{up.router_port}" in banner and "port is in use" not in banner
        assert again.interrupt() == 0
    finally:
        again.kill()


def test_a_port_another_process_listens_on_is_still_refused(workdir: Path) -> None:
    """up --http-port P with P taken by a listener: one line naming the flag, exit 1, nothing started."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = Up(workdir, ports=(_free_port(), _free_port(), port))
        try:
            assert up.proc.wait(30) == 1
            lines = up.output().strip().splitlines()
            assert lines == [f"fleetplane up: --http-port {port}: port is in use; choose a free port"]
        finally:
            up.kill()


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_an_unusable_workdir_is_one_line_naming_the_flag(tmp_path: Path, kind: str) -> None:
    """up --workdir PATH where PATH is a file (or below one): one line naming --workdir, exit 2, no traceback."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    path = blocker if kind == "a file" else blocker / "fleet"
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli.main", "up", "--workdir", str(path),
         "--router-port", "0", "--control-port", "0", "--http-port", "0"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"fleetplane up: --workdir {path}: ") and "Traceback" not in done.stderr
    assert done.stdout == ""


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_an_unwritable_workdir_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    """up --workdir DIR where DIR cannot be written: one line naming --workdir, exit 2."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli.main", "up", "--workdir", str(locked)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "--workdir" in lines[0]


def test_a_killed_control_plane_is_restarted_while_the_router_keeps_enforcing(workdir: Path) -> None:
    """kill -9 of up's control plane: the router goes on serving with the contract (fail-static),
    up says it restarts it, and the control plane comes back on the same port with the contracts."""
    up = Up(workdir, ports=(0, 0, 0))
    try:
        banner = up.wait_up()
        router_port = int(re.search(r"router\s+http://127\.0\.0\.1:(\d+)", banner).group(1))  # type: ignore[union-attr]
        control = re.search(r"control plane\s+(127\.0\.0\.1:\d+)", banner).group(1)  # type: ignore[union-attr]
        hello = {"model": "fleetplane-sim", "messages": [{"role": "user", "content": "hi"}]}
        assert _chat_until_ok(router_port, hello)[0] == 200
        cli = [sys.executable, "-m", "controlplane.cli.main", "contract", "get", "--control-plane", control,
               "--scope", "*", "--output", "json", "--timeout-s", "3"]  # fmt: skip
        before = subprocess.run(cli, capture_output=True, text=True, timeout=30, check=True).stdout
        engines_and_router = [p for p in _children(up.proc.pid) if p != up.child("controlplane")]
        os.kill(up.child("controlplane"), signal.SIGKILL)
        # The router keeps enforcing the last contract while the control plane is away.
        status, headers, _ = _chat(router_port, hello)
        assert status == 200 and json.loads(headers["x-sim-sampling-params"])["temperature"] == 1.0
        status, headers, _ = _chat(router_port, {**hello, "top_p": 0.5})
        assert (status, headers["x-router-error-code"]) == (400, "sampling_contract_violation")
        deadline = time.monotonic() + 30
        while "the control plane is back" not in up.output():
            assert time.monotonic() < deadline and up.proc.poll() is None, up.output()
            time.sleep(0.1)
        assert "the control plane exited with -9; restarting it in" in up.output()
        after = subprocess.run(cli, capture_output=True, text=True, timeout=30, check=True).stdout
        assert json.loads(after)["contract"] == json.loads(before)["contract"]
        assert [p for p in engines_and_router if not _alive(p)] == []  # nothing else was restarted
        assert _chat(router_port, {**hello, "top_p": 0.5})[0] == 400
        children = _children(up.proc.pid)
        assert up.interrupt() == 0
        time.sleep(0.5)
        assert [pid for pid in children if _alive(pid)] == []
    finally:
        up.kill()
