"""The load plane as a user meets it (SPEC §6 LoadService, §7 consumer).

A real ``python -m controlplane`` with short freshness and push intervals, workers registered
over gRPC (explicit load endpoints) or with ``fleetplane workers add``, our own pyzmq PUB
sockets publishing frames whose msgpack we build ourselves (``tests.fakes.load_publishers``),
and the views read as a user reads them: GetLoads, WatchLoads, ``fleetplane loads``, ``/metrics``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
import zmq

from controlplane.v1 import load_pb2 as pb
from controlplane.v1 import load_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.load_publishers import PUSH_INTERVAL_S, STALE_AFTER_S, Monitor, Watcher


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlaneProcess]:
    with ControlPlaneProcess(
        "--load-stale-after-s",
        str(STALE_AFTER_S),
        "--load-push-interval-ms",
        str(int(PUSH_INTERVAL_S * 1000)),
    ) as cp:
        yield cp


@pytest.fixture
def stub(plane: ControlPlaneProcess) -> Iterator[load_pb2_grpc.LoadServiceStub]:
    with grpc.insecure_channel(plane.target) as channel:
        yield load_pb2_grpc.LoadServiceStub(channel)


@pytest.fixture
def watch(stub: load_pb2_grpc.LoadServiceStub) -> Iterator[Callable[[], Watcher]]:
    """Open WatchLoads streams (cancelled at the end of the test)."""
    made: list[Watcher] = []

    def open_one() -> Watcher:
        watcher = Watcher(call=stub.WatchLoads(pb.WatchLoadsRequest(router_id="audit-loads")))
        watcher.thread = threading.Thread(target=watcher.pump, daemon=True)
        watcher.thread.start()
        made.append(watcher)
        return watcher

    yield open_one
    for watcher in made:
        watcher.call.cancel()
    for watcher in made:
        assert watcher.thread is not None
        watcher.thread.join(5)


@pytest.fixture
def monitors() -> Iterator[Callable[[zmq.Socket[bytes]], Monitor]]:
    made: list[tuple[zmq.Socket[bytes], Monitor]] = []

    def attach(sock: zmq.Socket[bytes]) -> Monitor:
        monitor = Monitor(sock)
        made.append((sock, monitor))
        return monitor

    yield attach
    for sock, monitor in made:
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
        monitor.close()


@pytest.fixture
def pubs() -> Iterator[Callable[[str], tuple[zmq.Socket[bytes], int]]]:
    """Bind PUB sockets like an engine's scheduler (SNDHWM 8, LINGER 0)."""
    ctx = zmq.Context()
    made: list[zmq.Socket[bytes]] = []

    def bind(host: str = "127.0.0.1") -> tuple[zmq.Socket[bytes], int]:
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)
        if ":" in host:
            sock.setsockopt(zmq.IPV6, 1)
        port = sock.bind_to_random_port(f"tcp://{host}" if ":" not in host else f"tcp://[{host}]")
        made.append(sock)
        return sock, port

    yield bind
    for sock in made:
        sock.close(0)
    ctx.term()
