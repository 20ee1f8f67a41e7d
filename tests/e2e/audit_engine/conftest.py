"""The engine-side audit (issue 3, SPEC §7, §1 engine-sim) as an outside checker runs it.

Everything here is written without the product's codec or test fakes: engine-sim is started
as a process (``python -m dataplane.engine.sim``) and stopped by PID, load frames are read by
our own pyzmq SUB sockets and decoded with plain ``msgspec.msgpack.decode`` (a list, not the
product's ``LoadStat``), HTTP/1.1 goes through urllib or the official ``openai`` client, h2c
through a small prior-knowledge client on the ``h2`` library.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import msgspec
import pytest
import zmq

ROOT = Path(__file__).resolve().parents[3]


def until(check: Callable[[], bool], timeout_s: float = 10.0, interval_s: float = 0.01) -> bool:
    """Poll ``check`` until it holds or the deadline passes; the last answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval_s)


def port_free(port: int) -> bool:
    """Can a TCP listener bind ``port`` on every interface right now?"""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> int:
    """A base P with P..P+count-1 all free (chosen from the kernel's ephemeral picks)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count - 1 <= 65535 and all(port_free(p) for p in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports")


# -- engine-sim as a process ------------------------------------------------------------------


class Sim:
    """One ``engine-sim`` process: ``url``, ``port``, ``pid`` once it printed its listening line."""

    def __init__(self, *flags: str, listen: str = "127.0.0.1:0", console_script: bool = False) -> None:
        self.flags = ["--listen", listen, *flags]
        # ``fleetplane engine-sim`` (the console script; it execs, so the PID is the engine's)
        # or ``python -m dataplane.engine.sim``.
        self.program = (
            [str(Path(sys.executable).parent / "fleetplane"), "engine-sim"]
            if console_script
            else [sys.executable, "-m", "dataplane.engine.sim"]
        )
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.port = 0
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in __exit__
        self._lines: list[str] = []

    def start(self, timeout_s: float = 20.0) -> Sim:
        self.proc = subprocess.Popen(
            [*self.program, *self.flags],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        got = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self._lines.append(line)
                if "listening on http://" in line:
                    got.set()
            got.set()

        threading.Thread(target=read, daemon=True).start()
        if not got.wait(timeout_s) or not self._lines or "listening on" not in self._lines[-1]:
            self.stop()
            raise RuntimeError(f"engine-sim did not start: {self._lines} {self.stderr()}")
        self.url = self._lines[-1].split("listening on ", 1)[1].strip()
        self.port = int(self.url.rsplit(":", 1)[1])
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def get(self, path: str) -> Any:
        import urllib.request

        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> Sim:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self._stderr.close()


def run_sim(*flags: str, timeout_s: float = 20.0) -> subprocess.CompletedProcess[str]:
    """engine-sim expected to refuse its flags: run it to completion."""
    return subprocess.run(
        [sys.executable, "-m", "dataplane.engine.sim", "--listen", "127.0.0.1:0", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


# -- our own load-frame reader ------------------------------------------------------------------


@dataclass
class Frame:
    at: float
    seq: int
    stat: list[Any]


class WireError(AssertionError):
    """A frame that breaks SPEC §7's shape."""


def decode(parts: list[bytes]) -> tuple[int, list[Any]]:
    """SPEC §7 by hand: 3 frames, topic ``load``, 8-byte big-endian signed seq, msgpack array."""
    if len(parts) != 3:
        raise WireError(f"{len(parts)} frames")
    topic, seq_raw, payload = parts
    if topic != b"load" or len(seq_raw) != 8:
        raise WireError(f"topic {topic!r}, seq {seq_raw!r}")
    stat = msgspec.msgpack.decode(payload)
    if not (isinstance(stat, list) and len(stat) == 6 and stat[0] == "LoadStat"):
        raise WireError(f"payload {stat!r}")
    if not all(type(v) is int and v >= 0 for v in stat[1:5]):
        raise WireError(f"counts {stat!r}")
    if stat[5] is not None and type(stat[5]) is not int:
        raise WireError(f"rank {stat!r}")
    return int.from_bytes(seq_raw, "big", signed=True), stat


@dataclass
class LoadReader:
    """One SUB per endpoint (rank), every frame kept with its arrival time."""

    ctx: zmq.Context[zmq.Socket[bytes]]
    endpoints: list[str]
    frames: dict[int, list[Frame]] = field(default_factory=dict)
    socks: list[zmq.Socket[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i, endpoint in enumerate(self.endpoints):
            sock = self.ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.LINGER, 0)
            if endpoint.startswith("tcp://["):
                sock.setsockopt(zmq.IPV6, 1)
            sock.setsockopt(zmq.SUBSCRIBE, b"load")
            sock.connect(endpoint)
            self.socks.append(sock)
            self.frames[i] = []
        self.poller = zmq.Poller()
        for sock in self.socks:
            self.poller.register(sock, zmq.POLLIN)

    def pump(self, duration_s: float) -> None:
        """Read whatever arrives during ``duration_s``."""
        deadline = time.monotonic() + duration_s
        while (left := deadline - time.monotonic()) > 0:
            for sock, _ in self.poller.poll(max(1, int(left * 1000))):
                while True:
                    try:
                        parts = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    seq, stat = decode(parts)
                    self.frames[self.socks.index(sock)].append(Frame(time.monotonic(), seq, stat))

    def wait(self, check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                return False
            self.pump(0.02)
        return True

    def latest(self, rank: int) -> list[Any] | None:
        frames = self.frames[rank]
        return frames[-1].stat if frames else None

    def close(self) -> None:
        for sock in self.socks:
            sock.close(linger=0)


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield context
    context.destroy(linger=0)


@pytest.fixture
def readers(ctx: zmq.Context[zmq.Socket[bytes]]) -> Iterator[Callable[[list[str]], LoadReader]]:
    made: list[LoadReader] = []

    def make(endpoints: list[str]) -> LoadReader:
        reader = LoadReader(ctx, endpoints)
        made.append(reader)
        return reader

    yield make
    for reader in made:
        reader.close()


# -- h2c prior knowledge, by hand ----------------------------------------------------------------


@dataclass
class H2Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def h2c_request(
    host: str, port: int, method: str, path: str, body: bytes = b"", timeout_s: float = 10.0
) -> H2Reply:
    """One request over a fresh h2c (prior knowledge) connection."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        conn.initiate_connection()
        headers = [
            (":method", method),
            (":path", path),
            (":scheme", "http"),
            (":authority", f"{host}:{port}"),
        ]
        if body:
            headers += [("content-type", "application/json"), ("content-length", str(len(body)))]
        sid = conn.get_next_available_stream_id()
        conn.send_headers(sid, headers, end_stream=not body)
        if body:
            conn.send_data(sid, body, end_stream=True)
        sock.sendall(conn.data_to_send())
        status, got, data = 0, {}, bytearray()
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("h2c connection closed before the answer ended")
            for event in conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == sid:
                    got = {str(k): str(v) for k, v in event.headers}
                    status = int(got[":status"])
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                    data += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                    return H2Reply(status, got, bytes(data))
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == sid:
                    raise ConnectionError(f"stream reset {event.error_code}")
            sock.sendall(conn.data_to_send())
