"""``--processes N``: N full router processes on one port, supervised (SPEC §1).

The supervisor does no request work. It starts N children (each ``python -m dataplane`` with
``--processes 1`` and ``REUSE_PORT_ENV`` set, so each binds the same address with SO_REUSEPORT and
the kernel spreads connections), restarts a child that dies unexpectedly (with backoff, so a
child crashing at startup does not spin), and on SIGTERM/SIGINT forwards SIGTERM to every child
(each stops accepting and finishes its in-flight requests up to its grace period), waits for them,
SIGKILLs any still alive after ``grace_s`` plus a margin, and exits 0. A child that exits with the
router's startup-error code (2) is not restarted: the supervisor stops the others and exits 2.

No orphans: children get PR_SET_PDEATHSIG (Linux), so they receive SIGTERM even if the supervisor
itself is killed with SIGKILL.

With a control plane, each child reports its status (SPEC §6 ``ReportRouterStatus``) as
``ID/SLOT`` (``ID`` from ``--router-id``, default ``HOST-<supervisor pid>``; ``SLOT`` 0..N-1): the
rollout view shows one entry per process, and a restarted child takes its slot's id again, with a
new boot id, so its predecessor's reported counts stay in the totals and none is counted twice.
Each slot also has a counts file (``process.journal``): the counts a SIGKILLed child had no
time to report are reported by the slot's next child. With ``--router-id`` a child keeps its own
(named after ``ID/SLOT``), which also outlives the supervisor; with the default id the slot's file
lives in the supervisor's directory, for the supervisor's lifetime. And each child serves its metrics to its
siblings over a unix socket in the same directory, so that ``/metrics`` on any child answers for
the whole router, with totals that survive a SIGKILLed child (``process.metrics``).

A port of 0 is resolved once here, by binding a SO_REUSEPORT socket that is kept (never listening,
so it takes no connections) for the supervisor's lifetime: every child, and every restarted child,
then binds the same concrete port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from controlplane.envflags import PARENT_PID_ENV
from dataplane.router.process.journal import COUNTS_FILE_ENV
from dataplane.router.process.metrics import METRICS_DIR_ENV, METRICS_SLOT_ENV

log = structlog.get_logger(__name__)

REUSE_PORT_ENV = "FLEETPLANE_ROUTER_REUSE_PORT"
STARTUP_ERROR_EXIT = 2  # the router's exit code for a startup error (one line on stderr)


@dataclass(slots=True)
class RestartBackoff:
    """Restart delays (pure): doubling from ``base_s`` up to ``max_s``; a child that stayed up for
    ``stable_after_s`` counts as healthy again and its next crash restarts at ``base_s``."""

    base_s: float = 0.1
    max_s: float = 5.0
    stable_after_s: float = 10.0
    crashes: int = 0

    def delay_after_exit(self, ran_for_s: float) -> float:
        if ran_for_s >= self.stable_after_s:
            self.crashes = 0
        delay = min(self.base_s * (1 << min(self.crashes, 20)), self.max_s)
        self.crashes += 1
        return delay


def reserve_port(host: str, port: int) -> tuple[socket.socket, int]:
    """Bind ``host:port`` with SO_REUSEPORT (not listening) to fix the port children will share."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock, int(sock.getsockname()[1])


# Flags the supervisor sets itself in every child (each takes one value).
_CHILD_FLAGS = ("--processes", "--listen", "--router-id")


def child_argv(argv: Sequence[str], listen: str) -> list[str]:
    """The child's arguments: ``argv`` with ``--processes`` forced to 1, ``--listen`` made concrete
    and ``--router-id`` left out (``slot_router_id`` gives each child its own)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in _CHILD_FLAGS:
            skip = True
            continue
        if arg.startswith(tuple(f"{flag}=" for flag in _CHILD_FLAGS)):
            continue
        out.append(arg)
    return [*out, "--processes", "1", "--listen", listen]


def slot_router_id(router_id: str, slot: int) -> str:
    """The id child ``slot`` reports to the control plane: stable across that child's restarts."""
    return f"{router_id}/{slot}"


class Supervisor:
    """Runs and supervises the children until a stop signal; then drains them."""

    def __init__(
        self,
        argv: Sequence[str],
        processes: int,
        *,
        grace_s: float,
        backoff: RestartBackoff | None = None,
        router_id: str | None = None,
        journals: str = "slot",
    ) -> None:
        self._argv = list(argv)  # complete command of one child
        self._router_id = router_id  # None: the children get no --router-id from here
        # "slot": one counts file per slot from here; "own": each child keeps its own (a given
        # --router-id); "off": none (--counts-journal off).
        self._journals = journals
        # Per slot: a rejection-counts file read by the slot's next child (process/journal.py), and
        # the metrics socket and snapshot through which every child answers for all (process/metrics.py).
        self._journal_dir: str | None = None
        self._processes = processes
        self._grace_s = grace_s
        self._backoffs = [backoff or RestartBackoff() for _ in range(processes)]
        self._children: list[asyncio.subprocess.Process | None] = [None] * processes
        self._stopping = asyncio.Event()
        self._exit_code = 0
        self.restarts = 0

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        self._journal_dir = tempfile.mkdtemp(prefix="fleetplane-router-")
        try:
            async with asyncio.TaskGroup() as tg:
                for slot in range(self._processes):
                    tg.create_task(self._keep(slot))
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            shutil.rmtree(self._journal_dir, ignore_errors=True)
        return self._exit_code

    async def _spawn(self, slot: int) -> asyncio.subprocess.Process:
        env = dict(os.environ)
        env[REUSE_PORT_ENV] = "1"
        env.pop("FLEETPLANE_PROCESSES", None)
        env[PARENT_PID_ENV] = str(os.getpid())  # the child dies with us (envflags.die_with_parent)
        argv = self._argv
        if self._router_id is not None:
            argv = [*argv, "--router-id", slot_router_id(self._router_id, slot)]
        if self._journal_dir is not None:
            if self._journals == "slot":
                env[COUNTS_FILE_ENV] = os.path.join(self._journal_dir, f"slot-{slot}.counts")
            # Each child serves its metrics to its siblings there (process/metrics.py).
            env[METRICS_DIR_ENV] = self._journal_dir
            env[METRICS_SLOT_ENV] = str(slot)
        return await asyncio.create_subprocess_exec(*argv, env=env, stdin=subprocess.DEVNULL)

    async def _keep(self, slot: int) -> None:
        """Keep one child slot filled until stopping, then drain it."""
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            while not self._stopping.is_set():
                started = time.monotonic()
                proc = await self._spawn(slot)
                self._children[slot] = proc
                waited = asyncio.ensure_future(proc.wait())
                await asyncio.wait({waited, stop}, return_when=asyncio.FIRST_COMPLETED)
                if self._stopping.is_set():
                    await self._drain(proc, waited)
                    return
                if proc.returncode == STARTUP_ERROR_EXIT:
                    # A flag the router refuses: restarting cannot help. Stop the others, exit 2.
                    self._exit_code = STARTUP_ERROR_EXIT
                    self._stopping.set()
                    return
                delay = self._backoffs[slot].delay_after_exit(time.monotonic() - started)
                log.warning("router process exited; restarting", code=proc.returncode, delay_s=delay)
                self.restarts += 1
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._stopping.wait()
        finally:
            stop.cancel()

    async def _drain(self, proc: asyncio.subprocess.Process, waited: asyncio.Future[int]) -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(self._grace_s + 5.0):
                await waited
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await waited


def run_supervised(
    argv: Sequence[str],
    processes: int,
    listen_host: str,
    listen_port: int,
    grace_s: float,
    router_id: str,
    journals: str = "slot",
) -> int:
    """Entry for ``python -m dataplane --processes N`` (N > 1): blocks until stopped; the exit code."""
    try:
        reservation, port = reserve_port(listen_host, listen_port)
    except OSError as exc:  # SPEC §1: startup errors are one line naming the flag and the value
        print(
            f"fleetplane router: --listen {listen_host}:{listen_port}: {exc.strerror or exc}", file=sys.stderr
        )
        return STARTUP_ERROR_EXIT
    host = f"[{listen_host}]" if ":" in listen_host else listen_host
    command = [sys.executable, "-m", "dataplane", *child_argv(argv, f"{host}:{port}")]
    print(f"fleetplane router supervisor: {processes} processes on http://{host}:{port}", flush=True)
    try:
        supervisor = Supervisor(command, processes, grace_s=grace_s, router_id=router_id, journals=journals)
        return asyncio.run(supervisor.run())
    finally:
        reservation.close()
