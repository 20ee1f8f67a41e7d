"""The processes a live benchmark starts, and the loopback-only namespace it runs them in.

Shared by bench/router_floor.py, bench/router_peers.py, bench/routing_live.py and
bench/router_background.py: each starts engine-sims (with their load publishers and a control
plane holding them, for a subscribed router), fleetplane routers and the PyPI peer routers,
waits for them, and stops them by PID.

The peers (``sglang-router``, ``vllm-router``, from ``.bench-venv``) try to download model
tokenizers at start, so a benchmark that runs them re-executes itself inside ``unshare -n``
(loopback only) with ``HF_HUB_OFFLINE=1`` (``in_loopback_namespace``), and engine-sim reports a
local directory as its model path.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
PEERS = ROOT / ".bench-venv" / "bin"
NETNS_MARK = "FLEETPLANE_BENCH_NETNS"
# The peers read these and then never reach for the hub.
PEER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    port: int

    def stop(self) -> None:
        stop(self.popen)


def stop(popen: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 10 s: this process only, by its PID."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def spawn(
    name: str,
    argv: list[str],
    port: int,
    logs: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Proc:
    """Start ``argv`` with stdout and stderr into ``logs/NAME.log``."""
    log = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    popen = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd
    )
    return Proc(name, popen, port)


def wait_http(p: Proc, path: str, timeout_s: float = 60.0) -> None:
    """Until ``GET path`` answers 200; RuntimeError if the process exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if p.popen.poll() is not None:
            raise RuntimeError(f"{p.name} exited with {p.popen.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{p.port}{path}", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{p.name} not ready on {path} after {timeout_s}s")


def wait_port(p: Proc, timeout_s: float = 30.0) -> None:
    """Until the port accepts a connection (for listeners with no HTTP/1.1 health path)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if p.popen.poll() is not None:
            raise RuntimeError(f"{p.name} exited with {p.popen.returncode}")
        try:
            socket.create_connection(("127.0.0.1", p.port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{p.name} not listening after {timeout_s}s")


def engine_sim_argv(port: int, model: str, model_dir: Path, *extra: str) -> list[str]:
    """engine-sim on ``port``, reporting ``model_dir`` (local) as its model path."""
    argv = [PY, "-m", "dataplane.engine.sim", "--listen", f"127.0.0.1:{port}", "--model", model]
    return [*argv, "--model-path", str(model_dir), *extra]


def compiled_form_missing(tree: Path) -> str | None:
    """Why ``tree`` has no current compiled form (``scripts/build_mypyc.sh`` not run there, or
    its sources edited since), or None when ``FLEETPLANE_FORM=compiled`` imports it."""
    env = dict(os.environ, PYTHONPATH=str(tree), FLEETPLANE_FORM="compiled")
    probe = "import dataplane.router.path.forwarder as m; print(m.__file__)"
    where = subprocess.run([PY, "-c", probe], env=env, cwd=tree, capture_output=True, text=True)
    if where.returncode == 0 and where.stdout.strip().endswith(".so"):
        return None
    return (where.stderr.strip().splitlines() or [where.stdout.strip()])[-1]


def publishing_engine(
    name: str, model: str, logs: Path, model_dir: Path, decode_tokens_per_s: float, *extra: str
) -> Proc:
    """engine-sim with its load publisher on (a free port), decoding ``decode_tokens_per_s``
    tokens per sequence (0: instantly)."""
    port = free_port()
    publish = ("--load-publish-endpoint", f"tcp://*:{free_port()}")
    decode = ("--decode-tokens-per-s", f"{decode_tokens_per_s:g}")
    return spawn(name, engine_sim_argv(port, model, model_dir, *decode, *publish, *extra), port, logs)


def control_plane(name: str, engines: list[Proc], h2c: bool, logs: Path, contract: str) -> tuple[Proc, str]:
    """A control plane (SQLite store in ``logs``) holding ``engines`` and ``contract`` as the
    fleet's, and its gRPC address."""
    grpc_port, http_port = free_port(), free_port()
    argv = [PY, "-m", "controlplane", "--listen", f"127.0.0.1:{grpc_port}"]
    argv += ["--http-listen", f"127.0.0.1:{http_port}", "--store", f"sqlite:{logs / (name + '.db')}"]
    plane = spawn(name, argv, http_port, logs)
    wait_http(plane, "/healthz")
    address = f"127.0.0.1:{grpc_port}"
    fleetplane = str(ROOT / ".venv" / "bin" / "fleetplane")
    for e in engines:
        url = f"{'h2c' if h2c else 'http'}://127.0.0.1:{e.port}"
        subprocess.run(
            [fleetplane, "workers", "add", url, "--control-plane", address], check=True, capture_output=True
        )
    subprocess.run(
        [fleetplane, "contract", "set", "--scope", "*", contract, "--control-plane", address],
        check=True,
        capture_output=True,
    )
    return plane, address


def peer_argv(kind: str, port: int, worker_urls: list[str], policy: str) -> list[str]:
    """``sglang-router`` or ``vllm-router`` from .bench-venv on ``port``, quiet, its metrics on a free port."""
    if kind == "sglang-router":
        argv = [
            str(PEERS / kind),
            "launch",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warn",
        ]
    elif kind == "vllm-router":
        argv = [str(PEERS / kind), "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    else:
        raise ValueError(f"unknown peer {kind!r}")
    return [*argv, "--policy", policy, "--worker-urls", *worker_urls, "--prometheus-port", str(free_port())]


def peer_env() -> dict[str, str]:
    return dict(os.environ, **PEER_ENV)


def in_loopback_namespace() -> int | None:
    """Re-execute this script inside ``unshare -n`` (loopback up) and return its exit code; None
    when already inside (the caller then runs)."""
    if os.environ.get(NETNS_MARK) == "1":
        return None
    env = dict(os.environ, **{NETNS_MARK: "1"})
    script = 'ip link set lo up && exec "$0" "$@"'
    return subprocess.call(["unshare", "-n", "sh", "-c", script, sys.executable, *sys.argv], env=env)
