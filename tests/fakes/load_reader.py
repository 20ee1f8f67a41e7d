"""Load frames read as an outside checker reads them: our own pyzmq SUB sockets and a SPEC §7 decoder.

Frames are decoded with plain ``msgspec.msgpack.decode`` (a list), not the product's ``LoadStat``
codec, so a codec bug cannot hide on both sides. ``ctx`` and ``readers`` are fixtures."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest
import zmq


@dataclass
class Frame:
    at: float
    seq: int
    stat: list[Any]


class WireError(AssertionError):
    """A frame that breaks SPEC §7's shape."""


def decode(parts: list[bytes]) -> tuple[int, list[Any]]:
    """SPEC §7 by hand: 3 frames, topic ``load``, 8-byte big-endian signed seq, msgpack array of
    the six original positions or SGLang 0.5.23's eleven (the appended five counts)."""
    if len(parts) != 3:
        raise WireError(f"{len(parts)} frames")
    topic, seq_raw, payload = parts
    if topic != b"load" or len(seq_raw) != 8:
        raise WireError(f"topic {topic!r}, seq {seq_raw!r}")
    stat = msgspec.msgpack.decode(payload)
    if not (isinstance(stat, list) and len(stat) in (6, 11) and stat[0] == "LoadStat"):
        raise WireError(f"payload {stat!r}")
    if not all(type(v) is int and v >= 0 for v in (*stat[1:5], *stat[6:])):
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
