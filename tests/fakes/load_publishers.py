"""Engines' load publishers played by our own PUB sockets, and the control plane's views read back.

Frames are built here with plain msgpack (not the product's codec); the views are read as a user
reads them: GetLoads, WatchLoads, ``/metrics`` (SPEC §6, §7)."""

from __future__ import annotations

import itertools
import re
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import msgspec
import zmq
from zmq.utils.monitor import recv_monitor_message

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess


def view(stub: load_pb2_grpc.LoadServiceStub, url: str) -> pb.WorkerLoad:
    (found,) = [w for w in stub.GetLoads(pb.GetLoadsRequest(), timeout=10).workers if w.url == url]
    return found


def until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def publish_until(
    sock: zmq.Socket[bytes], parts: Callable[[], list[bytes]], check: Callable[[], bool]
) -> None:
    """Publish (a SUB joins late: the first frames may be lost) until the view shows it."""
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "the view never showed the frames"
        sock.send_multipart(parts())
        time.sleep(0.05)


STALE_AFTER_S = 0.6


PUSH_INTERVAL_S = 0.1


_ports = itertools.count(20_000)


def stat(running: int, waiting: int, tokens: int, capacity: int, dp_rank: object, *extra: object) -> bytes:
    """``msgpack(["LoadStat", ...])`` as a plain array (not through the product's ``LoadStat`` codec)."""
    return msgspec.msgpack.encode(["LoadStat", running, waiting, tokens, capacity, dp_rank, *extra])


def frame(seq: int, running: int, waiting: int, tokens: int, capacity: int, dp_rank: object) -> list[bytes]:
    """``[b"load", seq as 8-byte big-endian signed, msgpack(LoadStat)]`` (SPEC §7)."""
    return [b"load", seq.to_bytes(8, "big", signed=True), stat(running, waiting, tokens, capacity, dp_rank)]


def fake_url(host: str = "127.0.0.1") -> str:
    """A worker URL nothing listens on (endpoints, models and protocol are given explicitly)."""
    return f"http://{host}:{next(_ports)}"


def register(stub: load_pb2_grpc.LoadServiceStub, url: str, endpoints: list[str]) -> pb.Worker:
    request = pb.RegisterWorkerRequest(
        url=url, protocol=pb.WORKER_PROTOCOL_HTTP1, models=["audit-model"], load_endpoints=endpoints
    )
    return stub.RegisterWorker(request, timeout=30).worker


def deregister(stub: load_pb2_grpc.LoadServiceStub, url: str) -> None:
    stub.DeregisterWorker(pb.DeregisterWorkerRequest(url=url), timeout=10)


def rank(stub: load_pb2_grpc.LoadServiceStub, url: str, dp_rank: int = 0) -> pb.RankLoad:
    return view(stub, url).ranks[dp_rank]


class Publisher:
    """One PUB socket and its sequence counter: ``send`` publishes the next frame."""

    def __init__(self, sock: zmq.Socket[bytes], port: int, dp_rank: int | None = 0) -> None:
        self.sock = sock
        self.port = port
        self.dp_rank = dp_rank
        self.seq = 0
        self.url = ""  # the worker it publishes for, once registered

    def send(self, running: int = 1, waiting: int = 0, tokens: int = 1, capacity: int = 10) -> int:
        """Publish the next frame; returns its seq."""
        seq = self.seq
        self.sock.send_multipart(frame(seq, running, waiting, tokens, capacity, self.dp_rank))
        self.seq += 1
        return seq

    def send_raw(self, parts: list[bytes]) -> None:
        self.sock.send_multipart(parts)

    def join(self, check: Callable[[], bool], running: int = 1, capacity: int = 10) -> None:
        """Publish until ``check`` (a SUB joins late: the first frames may be lost)."""
        publish_until(self.sock, lambda: self._next(running, capacity), check)

    def _next(self, running: int, capacity: int) -> list[bytes]:
        parts = frame(self.seq, running, 0, 1, capacity, self.dp_rank)
        self.seq += 1
        return parts


@dataclass
class Watcher:
    """A WatchLoads stream read on a thread; every message kept with its arrival time."""

    call: grpc.Future  # type: ignore[type-arg]
    messages: list[tuple[float, pb.WatchLoadsResponse]] = field(default_factory=list)
    error: list[grpc.RpcError] = field(default_factory=list)
    thread: threading.Thread | None = None

    def pump(self) -> None:
        try:
            for message in self.call:
                self.messages.append((time.monotonic(), message))
        except grpc.RpcError as exc:
            self.error.append(exc)

    def workers(self, url: str) -> list[pb.WorkerLoad]:
        """Every pushed state of ``url``, oldest first."""
        return [w for _, m in list(self.messages) for w in m.workers if w.url == url]

    def latest(self) -> dict[str, pb.WorkerLoad]:
        """The view a client builds: the full message, then deltas applied (removals included)."""
        state: dict[str, pb.WorkerLoad] = {}
        for _, message in list(self.messages):
            if message.full:
                state = {}
            state.update((w.url, w) for w in message.workers)
            for url in message.removed_urls:
                state.pop(url, None)
        return state


class Monitor:
    """The publisher's side of its connections (libzmq socket monitor): who connected, who left."""

    def __init__(self, sock: zmq.Socket[bytes]) -> None:
        self._mon = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED)
        self._accepted = 0
        self._disconnected = 0

    def _poll(self) -> None:
        while self._mon.poll(0):
            event = recv_monitor_message(self._mon)
            if event["event"] == zmq.EVENT_ACCEPTED:
                self._accepted += 1
            elif event["event"] == zmq.EVENT_DISCONNECTED:
                self._disconnected += 1

    @property
    def accepted(self) -> int:
        """Connections accepted since the monitor was attached."""
        self._poll()
        return self._accepted

    @property
    def disconnected(self) -> int:
        """Connections lost since the monitor was attached."""
        self._poll()
        return self._disconnected

    @property
    def connected(self) -> int:
        self._poll()
        return self._accepted - self._disconnected

    def close(self) -> None:
        self._mon.close(0)


def metric(plane: ControlPlaneProcess, series: str) -> float:
    """One series of the control plane's /metrics (``name`` or ``name{labels}``), -1 when absent."""
    with urllib.request.urlopen(f"{plane.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else -1.0


def frame_counters(plane: ControlPlaneProcess) -> dict[str, float]:
    """``fleetplane_load_frames_total{outcome}`` and ``fleetplane_load_dropped_frames_total`` from /metrics."""
    with urllib.request.urlopen(f"{plane.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    counters = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'^fleetplane_load_frames_total\{outcome="(\w+)"\} (\S+)$', text, re.M)
    }
    dropped = re.search(r"^fleetplane_load_dropped_frames_total (\S+)$", text, re.M)
    counters["dropped"] = float(dropped.group(1)) if dropped else -1.0
    return counters
