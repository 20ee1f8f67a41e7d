"""engine-sim's KV events endpoint (SPEC §1, reference C.2/C.3): what ``/server_info`` advertises,
a consumer finds a real ZMQ publisher at, per dp rank, next to the load publishers."""

from __future__ import annotations

import socket
import subprocess
import sys

import zmq
from zmq.utils.monitor import recv_monitor_message

from controlplane.load.wire import decode_frame
from tests.fakes.engine_sim import ROOT, EngineSim, free_port_range, kv_endpoint_with_free_load_ports


def _handshakes(endpoint: str, timeout_ms: int = 5000) -> bool:
    """Whether a ZMQ SUB connecting to ``endpoint`` completes the ZMTP handshake with a publisher."""
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    monitor = sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    try:
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(endpoint)
        if not monitor.poll(timeout_ms):
            return False
        return bool(recv_monitor_message(monitor)["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED)
    finally:
        sub.disable_monitor()
        monitor.close(linger=0)
        sub.close(linger=0)


def _load_frame(endpoint: str, timeout_ms: int = 5000) -> object:
    """The first load frame received from ``endpoint`` (decoded), or None."""
    sub = zmq.Context.instance().socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"load")
        sub.connect(endpoint)
        if not sub.poll(timeout_ms):
            return None
        return decode_frame(sub.recv_multipart())
    finally:
        sub.close(linger=0)


def test_advertised_kv_ports_have_a_publisher_per_rank_beside_the_load_ports() -> None:
    """dp-size 2, load auto: KV port + r handshakes as a ZMQ publisher for each rank; the load ports
    (KV port + 2 + r) still publish load frames."""
    kv = kv_endpoint_with_free_load_ports(2)
    with EngineSim("--dp-size", "2", "--load-publish-endpoint", "auto", "--kv-events-endpoint", kv) as sim:
        block = sim.get_json("/server_info")["kv_events"]
        base, load_base = block["endpoint_port_base"], block["load_endpoint_port_base"]
        assert block["endpoint_host"] == "*" and load_base == base + 2
        for rank in range(2):
            # A consumer replaces the wildcard with the worker URL's host (SPEC §7).
            assert _handshakes(f"tcp://{sim.host}:{base + rank}"), rank
            assert _load_frame(f"tcp://{sim.host}:{load_base + rank}") is not None, rank


def _run_sim(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dataplane.engine.sim", "--listen", "127.0.0.1:0", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_explicit_kv_port_taken_is_a_startup_error() -> None:
    """A --kv-events-endpoint port another process holds: exit 2, one line naming the flag."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = _run_sim("--kv-events-endpoint", f"tcp://*:{port}")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"engine-sim: --kv-events-endpoint 'tcp://*:{port}': cannot bind"
    )


def test_default_kv_port_taken_still_serves() -> None:
    """Without the flag the default port is shared by every engine-sim on the host: a taken one
    is a warning, and the engine still serves and advertises it."""
    holder = socket.socket()
    try:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", 5557))
            holder.listen()
        except OSError:
            pass  # someone else holds it: taken either way
        with EngineSim() as sim:
            assert sim.get_json("/server_info")["kv_events"]["endpoint_port_base"] == 5557
    finally:
        holder.close()


def test_kv_sockets_are_released_on_exit() -> None:
    """After engine-sim stops, its KV events port can be bound again (no lingering socket)."""
    base = free_port_range(1)
    with EngineSim("--kv-events-endpoint", f"tcp://*:{base}"):
        pass
    with socket.socket() as again:
        again.bind(("127.0.0.1", base))
