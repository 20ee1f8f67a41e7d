"""``fleetplane up``: the whole fleet on its embedded default (SPEC §1).

Starts, as child processes in their own sessions (so a terminal Ctrl-C reaches only this
supervisor, which then stops them in order): a control plane on SQLite under ``--workdir``,
two engine-sims (HTTP/1.1 with dp-size 1; h2c with dp-size 2; both publishing load over ZMQ),
registers them, and one router subscribed to the control plane. Prints the URLs, a curl line
and the operator commands, then stays up until Ctrl-C/SIGTERM and stops everything (router,
engines, control plane), exit 0. A control plane that dies is started again on the same ports
and store, while the router keeps serving on its last contract (``supervise``); any other
child that dies stops the fleet with exit 1.

The data plane is started as ``python -m dataplane`` processes: the control plane never
imports it (ARCHITECTURE.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from controlplane.cli.summary import FleetSampler, LiveSummary, StatusLine
from controlplane.envflags import ENV_PREFIX, PARENT_PID_ENV
from controlplane.errors import StartupError
from controlplane.v1 import contract_pb2, contract_pb2_grpc, load_pb2, load_pb2_grpc

MODEL = "fleetplane-sim"
# The contract seeded on the very first start of a workdir (store revision 0), so the demo
# shows injection and refusal at once. Later starts keep whatever the operator made of it.
SEED_CONTRACT = {"temperature": 1, "top_p": 0.95, "top_k": {"min": 1, "max": 50, "default": 40}}
START_TIMEOUT_S = 30.0
USAGE_EXIT = 2  # a flag's value is unusable, as argparse exits
STOP_GRACE_S = 10.0
STATE_FILE = "up-workers.json"
LOOPBACK = "127.0.0.1"  # every listener of the fleet binds here
# A control plane that dies is started again (the router meanwhile enforces its last contract,
# SPEC §6), after these delays in a row; one that stayed up this long starts the series over.
RESTART_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0)
RESTART_RESET_AFTER_S = 60.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="least severe log lines of every process it starts (their FLEETPLANE_LOG_LEVEL)",
    )
    parser.add_argument("--workdir", default="./.fleetplane", help="state directory (SQLite store, logs)")
    parser.add_argument("--router-port", type=_port, default=8080, help="router HTTP port on 127.0.0.1")
    parser.add_argument("--control-port", type=_port, default=50051, help="control plane gRPC port")
    parser.add_argument(
        "--http-port", type=_port, default=9464, help="control plane /metrics and status page"
    )


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (a whole number 0-65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0-65535)")
    return value


def _child_environment() -> dict[str, str]:
    """The children's environment: ours without FLEETPLANE_* variables. ``up`` passes every
    flag a child needs explicitly; a FLEETPLANE_WORKER or FLEETPLANE_AUTH_TOKENS left in the
    operator's shell must not reconfigure (or break) the fleet it starts (SPEC §1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["PYTHONUNBUFFERED"] = "1"
    # Without it a killed ``up`` leaves the fleet running, holding the ports and the store's
    # lock, and the next ``up`` on the same workdir cannot start (SPEC §1: no orphan process).
    env[PARENT_PID_ENV] = str(os.getpid())
    return env


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes]
    log: Path
    log_offset: int = 0  # where this run's output starts in the log (a restart appends)
    started: float = field(default_factory=time.monotonic)


@dataclass
class Fleet:
    workdir: Path
    children: list[Child] = field(default_factory=list)

    def start(self, name: str, argv: Sequence[str]) -> Child:
        child = self._spawn(name, list(argv), append=False)
        self.children.append(child)
        return child

    def restart(self, child: Child, argv: Sequence[str] | None = None) -> Child:
        """Start ``child`` again in its place (its log kept, this run appended after it)."""
        again = self._spawn(child.name, list(argv or child.argv), append=True)
        self.children[self.children.index(child)] = again
        return again

    def _spawn(self, name: str, argv: list[str], *, append: bool) -> Child:
        log = self.workdir / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab" if append else "wb") as out:
            offset = out.tell()
            proc = subprocess.Popen(
                [sys.executable, "-m", *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=_child_environment(),
            )
        return Child(name, argv, proc, log, offset)

    def dead(self) -> Child | None:
        return next((c for c in self.children if c.proc.poll() is not None), None)

    def stop(self, name: str | None = None) -> None:
        """Stop one child, or all newest first (router, engines, control plane): SIGTERM, then SIGKILL."""
        for child in reversed(self.children):
            if (name is None or child.name == name) and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
                try:
                    child.proc.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    child.proc.kill()
                    child.proc.wait()


class Stopped(Exception):
    """Ctrl-C or SIGTERM came while ``up`` waited."""


def wait_for_line(
    child: Child,
    pattern: str,
    timeout_s: float = START_TIMEOUT_S,
    stop: threading.Event | None = None,
) -> re.Match[str]:
    """Wait until this run of the child logged a line matching ``pattern`` (its "listening on" line)."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if stop is not None and stop.is_set():
            raise Stopped
        with contextlib.suppress(FileNotFoundError), child.log.open("rb") as log:
            log.seek(child.log_offset)
            match = regex.search(log.read().decode(errors="replace"))
            if match:
                return match
        if child.proc.poll() is not None:
            raise StartupError(f"{child.name} exited with {child.proc.returncode}; see {child.log}")
        time.sleep(0.05)
    raise StartupError(f"{child.name} did not start within {timeout_s:.0f} s; see {child.log}")


def _pause(stop: threading.Event, seconds: float) -> bool:
    """Sleep ``seconds`` in short steps (signals set ``stop`` from this thread); True if stopped."""
    deadline = time.monotonic() + seconds
    while not stop.is_set() and time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    return stop.is_set()


def supervise(
    fleet: Fleet, control_argv: list[str], stop: threading.Event, live: LiveSummary | None = None
) -> None:
    """Until ``stop``: restart the control plane whenever it dies; any other child dying ends ``up``.

    What the product promises (SPEC §6): a router keeps enforcing the last contract it applied
    while its control plane is away, and resumes once it is back; so the demo keeps its router
    serving and brings the control plane back (same ports, same store), with a growing delay
    while it keeps dying, each restart said on stderr. ``live`` (on a terminal): the summary line,
    redrawn meanwhile and erased before any message.
    """
    attempt = 0
    while not _pause(stop, 0.2):
        dead = fleet.dead()
        if dead is None:
            if live is not None:
                live.tick()
            continue
        if live is not None:
            live.clear()
        if dead.name != "control":
            raise StartupError(f"{dead.name} exited with {dead.proc.returncode}; see {dead.log}")
        if time.monotonic() - dead.started >= RESTART_RESET_AFTER_S:
            attempt = 0
        delay = RESTART_DELAYS_S[min(attempt, len(RESTART_DELAYS_S) - 1)]
        attempt += 1
        print(
            f"fleetplane up: the control plane exited with {dead.proc.returncode}; restarting it in "
            f"{delay:g} s (restart {attempt}; the router keeps enforcing its last contract; see {dead.log})",
            file=sys.stderr,
            flush=True,
        )
        if _pause(stop, delay):
            return
        again = fleet.restart(dead, control_argv)
        try:
            listening = wait_for_line(again, r"control plane listening on (\S+)", stop=stop)
        except StartupError as exc:  # exited again, or hung: the next turn restarts it later
            print(f"fleetplane up: {exc}", file=sys.stderr, flush=True)
            fleet.stop("control")
            continue
        print(f"fleetplane up: the control plane is back on {listening.group(1)}", flush=True)


def free_port_range(count: int) -> int:
    """A base port with ``count`` consecutive free ports on 127.0.0.1 (for ZMQ publishers)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + count > 65535:
            continue
        if all(_port_free(base + i) for i in range(count)):
            return base
    raise StartupError("could not find free ports for the load publishers")


def _port_free(port: int, host: str = "0.0.0.0") -> bool:
    """Whether a listener could bind ``host:port`` now.

    With SO_REUSEADDR, as every listener of the fleet binds (gRPC, asyncio's servers, ZMQ):
    without it the connections a listener closed moments ago (TIME_WAIT, ~60 s after the status
    page or /metrics was read) made the port look taken though the real listener would bind it.
    A port another socket listens on is refused either way.
    """
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _check_port(flag: str, port: int) -> None:
    if port and not _port_free(port, LOOPBACK):
        raise StartupError(f"{flag} {port}: port is in use; choose a free port")


def _check_workdir(workdir: Path) -> None:
    """The state directory exists (or is made) and takes files; else one line naming --workdir."""
    try:
        (workdir / "logs").mkdir(parents=True, exist_ok=True)
        probe = workdir / ".fleetplane-up-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StartupError(f"--workdir {workdir}: cannot keep the fleet's state there ({reason})") from None


def _control_argv(workdir: Path, listen: str, http_port: int) -> list[str]:
    return [
        "controlplane",
        "--listen",
        listen,
        "--store",
        f"sqlite:{workdir / 'control.db'}",
        "--http-listen",
        f"{LOOPBACK}:{http_port}",
    ]


def _engine(fleet: Fleet, name: str, dp_size: int, http2: bool) -> str:
    # auto: load ports follow the KV events range (SPEC §7): kv base + dp_size .. + 2*dp_size.
    kv_base = free_port_range(2 * dp_size)
    argv = [
        "dataplane.engine.sim",
        "--listen",
        "127.0.0.1:0",
        "--model",
        MODEL,
        "--dp-size",
        str(dp_size),
        "--kv-events-endpoint",
        f"tcp://*:{kv_base}",
        "--load-publish-endpoint",
        "auto",
        "--decode-tokens-per-s",
        "200",
    ]
    if http2:
        argv.append("--http2")
    child = fleet.start(name, argv)
    return wait_for_line(child, r"listening on (http://\S+)").group(1)


def _register(
    channel: grpc.Channel, workdir: Path, workers: list[tuple[str, load_pb2.WorkerProtocol]]
) -> None:
    stub = load_pb2_grpc.LoadServiceStub(channel)
    state = workdir / STATE_FILE
    # Workers of a previous run on this workdir listened on other ports: forget them.
    if state.exists():
        for url in json.loads(state.read_text()):
            with contextlib.suppress(grpc.RpcError):
                stub.DeregisterWorker(load_pb2.DeregisterWorkerRequest(url=url), timeout=5)
    for url, protocol in workers:
        stub.RegisterWorker(load_pb2.RegisterWorkerRequest(url=url, protocol=protocol), timeout=15)
    state.write_text(json.dumps([url for url, _ in workers]))


def _deregister(channel: grpc.Channel, workdir: Path) -> None:
    state = workdir / STATE_FILE
    if not state.exists():
        return
    stub = load_pb2_grpc.LoadServiceStub(channel)
    for url in json.loads(state.read_text()):
        with contextlib.suppress(grpc.RpcError):
            stub.DeregisterWorker(load_pb2.DeregisterWorkerRequest(url=url), timeout=5)
    state.unlink()


def _seed_contract(channel: grpc.Channel) -> bool:
    stub = contract_pb2_grpc.ContractServiceStub(channel)
    listed = stub.ListContracts(contract_pb2.ListContractsRequest(), timeout=5)
    if listed.revision != 0:
        return False
    params = {
        "temperature": contract_pb2.ParamSpec(exact=1),
        "top_p": contract_pb2.ParamSpec(exact=0.95),
        "top_k": contract_pb2.ParamSpec(band=contract_pb2.Band(min=1, max=50, default=40)),
    }
    stub.UpdateContract(
        contract_pb2.UpdateContractRequest(
            scope="*",
            params=params,
            conflict=contract_pb2.CONFLICT_POLICY_REJECT,
            expected_version=0,
            allow_missing=True,
            comment="seeded by fleetplane up",
        ),
        timeout=5,
    )
    return True


def _command_name() -> str:
    """How the operator can call us again: ``fleetplane`` when it is on PATH, else the path used."""
    argv0 = sys.argv[0]
    if Path(argv0).name != "fleetplane":
        return "fleetplane"
    on_path = shutil.which("fleetplane")
    if on_path and Path(on_path).resolve() == Path(argv0).resolve():
        return "fleetplane"
    return shlex.quote(argv0)


def _banner(fleet: Fleet, router: str, control: str, http_port: int, engines: list[str], seeded: bool) -> str:
    cp = f"--control-plane {control}"
    fp = _command_name()
    pids = {child.name: child.proc.pid for child in fleet.children}
    hello = {"model": MODEL, "messages": [{"role": "user", "content": "Hello!"}]}
    body = json.dumps(hello)
    refused = json.dumps({**hello, "temperature": 0.2})
    chat = f"curl -s {router}/v1/chat/completions -H 'content-type: application/json'"
    logs = fleet.workdir / "logs"
    lines = [
        "fleetplane is up",
        f"  router         {router}   (OpenAI-compatible; HTTP/1.1 and h2c)   pid {pids['router']}",
        f"  control plane  {control}   (gRPC: reflection + health)   pid {pids['control']}",
        f"  status page    http://127.0.0.1:{http_port}/   (metrics: /metrics; JSON: /status.json)",
        *(
            f"  engine-sim     {url}   pid {pids[name]}"
            for url, name in zip(engines, ("engine-h1", "engine-h2c"), strict=True)
        ),
        f"  logs           {logs}{os.sep}   ({', '.join(f'{c.name}.log' for c in fleet.children)})",
        "",
        "Try:",
        f"  {chat} -d '{body}'",
        "  # what the router injected: engine-sim answers with the sampling fields it read",
        f"  {chat} -o /dev/null -D - -d '{body}' | grep -i x-sim-sampling-params",
        "  # a request the contract refuses (temperature 0.2; the contract says 1)",
        f"  {chat} -d '{refused}'",
        f"  {fp} contract list {cp}",
        f"  {fp} contract set {cp} --fleet --dry-run '{json.dumps(SEED_CONTRACT)}'",
        f"  {fp} contract history {cp} --fleet",
        f"  {fp} workers list {cp}",
        f"  {fp} loads --watch {cp}",
        f"  {fp} routers {cp}",
        f"  {fp} stats {cp}",
    ]
    if seeded:
        lines.insert(lines.index("Try:"), f"Seeded the fleet-wide contract '*': {json.dumps(SEED_CONTRACT)}")
    lines += ["", "Ctrl-C stops everything."]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    # Every child reads its --log-level from the environment (envflags): one setting for all.
    os.environ["FLEETPLANE_LOG_LEVEL"] = args.log_level
    workdir = Path(args.workdir).resolve()
    try:
        _check_workdir(workdir)
    except StartupError as exc:
        print(f"fleetplane up: {exc}", file=sys.stderr)
        return USAGE_EXIT
    fleet = Fleet(workdir)
    stop = threading.Event()

    def on_signal(_signo: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    control = f"127.0.0.1:{args.control_port}"
    try:
        _check_port("--control-port", args.control_port)
        _check_port("--router-port", args.router_port)
        _check_port("--http-port", args.http_port)
        cp = fleet.start("control", _control_argv(workdir, control, args.http_port))
        # Port 0 asks the OS for a port: name the ones the control plane actually bound.
        http_port = int(wait_for_line(cp, r"control plane http on \S+:(\d+)").group(1))
        grpc_port = int(wait_for_line(cp, r"control plane listening on \S+:(\d+)").group(1))
        control = f"127.0.0.1:{grpc_port}"
        # A restart binds the same ports: the router and the operator know these.
        control_argv = _control_argv(workdir, control, http_port)
        engines = [_engine(fleet, "engine-h1", 1, False), _engine(fleet, "engine-h2c", 2, True)]
        with grpc.insecure_channel(control) as channel:
            grpc.channel_ready_future(channel).result(timeout=START_TIMEOUT_S)
            seeded = _seed_contract(channel)
            _register(
                channel,
                workdir,
                [(engines[0], load_pb2.WORKER_PROTOCOL_AUTO), (engines[1], load_pb2.WORKER_PROTOCOL_AUTO)],
            )
        router = fleet.start(
            "router",
            [
                "dataplane",
                "--listen",
                f"127.0.0.1:{args.router_port}",
                "--control-plane",
                control,
                # Stable across runs, so the rollout view keeps one row for this router.
                "--router-id",
                "up-router",
            ],
        )
        router_url = wait_for_line(router, r"listening on (http://\S+)").group(1)
        print(_banner(fleet, router_url, control, http_port, engines, seeded), flush=True)
        with grpc.insecure_channel(control) as summary_channel:
            live = LiveSummary(FleetSampler(router_url, summary_channel), StatusLine())
            try:
                supervise(fleet, control_argv, stop, live)
            finally:
                live.clear()
        print("stopping…", flush=True)
        return_code = 0
    except Stopped:
        print("stopping…", flush=True)
        return_code = 0
    except StartupError as exc:
        print(f"fleetplane up: {exc}", file=sys.stderr)
        return_code = 1
    except grpc.RpcError as exc:
        print(f"fleetplane up: control plane: {exc.details()}", file=sys.stderr)
        return_code = 1
    except grpc.FutureTimeoutError:
        print(
            f"fleetplane up: control plane at {control} did not answer; see {workdir / 'logs'}",
            file=sys.stderr,
        )
        return_code = 1
    finally:
        # Router first so no request is in flight when its workers go away.
        fleet.stop("router")
        if fleet.children and fleet.children[0].proc.poll() is None:
            with contextlib.suppress(grpc.RpcError), grpc.insecure_channel(control) as channel:
                _deregister(channel, workdir)
        fleet.stop()
    return return_code
