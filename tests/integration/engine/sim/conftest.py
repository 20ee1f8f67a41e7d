"""An in-process engine-sim for the engine-sim integration tests, and the protocol to reach it.

``tests.fakes.sim_http.Http`` speaks HTTP/1.1 (aiohttp) or h2c prior knowledge (a small client on
the ``h2`` library) with one interface, so every endpoint test runs over both protocols.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
import zmq

from dataplane.engine.sim.app import SimApp
from dataplane.engine.sim.ranks import SimRank, build_ranks
from dataplane.engine.sim.service import server_info
from dataplane.engine.sim.settings import parse_settings
from dataplane.http.server import start_server


@dataclass
class InProcessSim:
    url: str
    ranks: list[SimRank]
    app: SimApp


@pytest.fixture
async def make_sim() -> AsyncIterator[Any]:
    """Start engine-sim in this event loop: ``await make_sim("--dp-size", "2", ...)``."""
    started: list[tuple[Any, list[asyncio.Task[None]], list[SimRank]]] = []

    async def start(*flags: str) -> InProcessSim:
        instant = (
            []
            if any(f.startswith("--decode-tokens-per-s") for f in flags)
            else ["--decode-tokens-per-s", "0"]
        )
        settings = parse_settings(["--listen", "127.0.0.1:0", *instant, *flags])
        ranks = build_ranks(settings)
        app = SimApp(
            ranks, model=settings.model, info=server_info(settings, "/tmp/m", 0), model_path="/tmp/m"
        )
        server = await start_server(app, "127.0.0.1", 0)
        tasks = [asyncio.ensure_future(rank.run()) for rank in ranks]
        started.append((server, tasks, ranks))
        return InProcessSim(f"http://127.0.0.1:{server.port}", ranks, app)

    yield start
    for server, tasks, ranks in started:
        await server.drain(0.5)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for rank in ranks:
            rank.close()


@pytest.fixture(params=["http1", "h2c"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


_raw = msgspec.msgpack.Decoder()


class LoadWatcher:
    """SUBs on every rank's load port, decoding frames independently of the project's codec."""

    def __init__(self, host: str, base: int, dp_size: int) -> None:
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.subs = []
        for rank in range(dp_size):
            sub = self.ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.LINGER, 0)
            sub.setsockopt(zmq.SUBSCRIBE, b"load")
            sub.connect(f"tcp://{host}:{base + rank}")
            self.subs.append(sub)
        # rank -> list of (seq, [tag, running, waiting, tokens, max_total, rank])
        self.frames: dict[int, list[tuple[int, list[Any]]]] = {r: [] for r in range(dp_size)}

    async def collect(self, duration_s: float = 0.0) -> None:
        """Receive whatever arrives for ``duration_s`` (yielding to the loop while waiting)."""
        deadline = time.monotonic() + duration_s
        while True:
            for rank, sub in enumerate(self.subs):
                while sub.poll(0):
                    topic, seq, payload = sub.recv_multipart()
                    assert topic == b"load" and len(seq) == 8
                    self.frames[rank].append((int.from_bytes(seq, "big", signed=True), _raw.decode(payload)))
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.005)

    def latest(self, rank: int) -> list[Any] | None:
        return self.frames[rank][-1][1] if self.frames[rank] else None

    def close(self) -> None:
        self.ctx.destroy(linger=0)


@pytest.fixture
def load_watcher() -> Iterator[Any]:
    watchers: list[LoadWatcher] = []

    def make(host: str, base: int, dp_size: int) -> LoadWatcher:
        watcher = LoadWatcher(host, base, dp_size)
        watchers.append(watcher)
        return watcher

    yield make
    for watcher in watchers:
        watcher.close()
