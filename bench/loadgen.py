"""A bounded, closed-loop HTTP/1.1 load generator and /proc CPU accounting for the router benchmarks.

Shared by ``bench/router_overhead.py`` and ``bench/router_peers.py`` (import, don't copy).
``concurrency`` keep-alive connections each send the same precomputed request, read the whole
answer (Content-Length or chunked, httptools-parsed) and send the next, until ``total`` answers
came back. Per request it records the latency to the last byte and to the first body byte (the
first SSE event for streaming answers).

The CPU a process spent is read from ``/proc`` (every thread, plus its descendants), so "router CPU per request" = CPU delta over the run / requests answered.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import httptools


def chat_body(model: str, *, stream: bool, size: int = 1024, max_tokens: int = 16) -> bytes:
    """A chat completion body padded to ``size`` bytes with message text."""
    base = {"model": model, "messages": [{"role": "user", "content": ""}], "max_tokens": max_tokens}
    if stream:
        base["stream"] = True
    pad = size - len(json.dumps(base, separators=(",", ":")))
    base["messages"][0]["content"] = "x" * max(pad, 0)  # type: ignore[index]
    return json.dumps(base, separators=(",", ":")).encode()


# The headers the official ``openai`` Python client (3.63, over httpx) sends with a chat request
# besides Host and Content-Length, in its order, as a socket read them on this machine (the key
# is a placeholder). A router forwards all but Connection.
OPENAI_CLIENT_HEADERS: tuple[tuple[str, str], ...] = (
    ("Accept-Encoding", "gzip, deflate"),
    ("Connection", "keep-alive"),
    ("authorization", "Bearer sk-local"),
    ("accept", "application/json"),
    ("content-type", "application/json"),
    ("user-agent", "OpenAI/Python 3.63.0"),
    ("x-stainless-lang", "python"),
    ("x-stainless-package-version", "3.63.0"),
    ("x-stainless-os", "Linux"),
    ("x-stainless-arch", "x64"),
    ("x-stainless-runtime", "CPython"),
    ("x-stainless-runtime-version", "3.11.7"),
    ("x-stainless-async", "false"),
    ("x-stainless-retry-count", "0"),
    ("x-stainless-read-timeout", "600"),
)


def post(host: str, port: int, path: str, body: bytes) -> bytes:
    """The raw HTTP/1.1 request bytes, sent as-is for every request."""
    return (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


@dataclass
class LoadResult:
    """Outcome of one load run; latencies in seconds, sorted."""

    ok: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    first_byte_s: list[float] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.ok / self.elapsed_s if self.elapsed_s else 0.0

    def pct(self, q: float, first_byte: bool = False) -> float:
        data = self.first_byte_s if first_byte else self.latencies_s
        if not data:
            return float("nan")
        return data[min(len(data) - 1, int(q * len(data)))]


class _Client(asyncio.Protocol):
    def __init__(
        self, request: bytes, budget: list[int], result: LoadResult, done: asyncio.Future[None]
    ) -> None:
        self.request = request
        self.budget = budget
        self.result = result
        self.done = done
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.t0 = 0.0
        self.first = 0.0
        self.status = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike.
        self.transport = cast(asyncio.Transport, transport)
        self.send()

    def send(self) -> None:
        if self.budget[0] <= 0:
            assert self.transport is not None
            self.transport.close()
            return
        self.budget[0] -= 1
        self.first = 0.0
        self.t0 = time.perf_counter()
        assert self.transport is not None
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.result.errors += 1
            assert self.transport is not None
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        if not self.first:
            self.first = time.perf_counter()

    def on_message_complete(self) -> None:
        now = time.perf_counter()
        if self.parser.get_status_code() == 200:
            self.result.ok += 1
            self.result.latencies_s.append(now - self.t0)
            self.result.first_byte_s.append((self.first or now) - self.t0)
        else:
            self.result.errors += 1
        self.send()

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def run_load(host: str, port: int, request: bytes, *, concurrency: int, total: int) -> LoadResult:
    """Send ``total`` requests over ``concurrency`` keep-alive connections; wait for every answer."""
    loop = asyncio.get_running_loop()
    result = LoadResult()
    budget = [total]
    dones = [loop.create_future() for _ in range(concurrency)]
    start = time.perf_counter()
    for done in dones:
        await loop.create_connection(lambda d=done: _Client(request, budget, result, d), host, port)
    await asyncio.wait_for(asyncio.gather(*dones), timeout=max(60.0, total / 50))
    result.elapsed_s = time.perf_counter() - start
    result.latencies_s.sort()
    result.first_byte_s.sort()
    return result


def wrk_script(body: bytes, headers: Sequence[tuple[str, str]]) -> str:
    """A wrk Lua script that POSTs ``body`` with ``headers`` (wrk adds Host and Content-Length)."""
    lines = ['wrk.method = "POST"']
    lines += [f"wrk.headers[{json.dumps(name)}] = {json.dumps(value)}" for name, value in headers]
    lines.append(f"wrk.body = {json.dumps(body.decode())}")
    return "\n".join(lines) + "\n"


def proc_stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: the fields start after its last ")".
    return stat[stat.rindex(b")") + 2 :].split()


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        fields = proc_stat(int(entry)) if entry.isdigit() else None
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def kernel_seconds(pid: int) -> float:
    """System (kernel) CPU time of ``pid`` and every live descendant, all threads, in seconds:
    ``/proc/PID/stat``'s stime, in 10 ms ticks (a few thousand requests read it to ±0.5 µs)."""
    ticks = 0
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                ticks += int(f.read().rsplit(b")", 1)[1].split()[12])
        except (OSError, ValueError, IndexError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def io_calls(pid: int) -> int:
    """Read and write system calls so far of ``pid`` and every live descendant (``/proc/PID/io``
    syscr + syscw): how many pieces a proxy took an answer in. The kernel counts read(2),
    write(2) and their vector forms there, not recv/send (which the Rust peers use for part of
    their sockets), so the count compares Python proxies with each other."""
    total = 0
    for p in _descendants(pid):
        try:
            with open(f"/proc/{p}/io", "rb") as f:
                for line in f:
                    if line.startswith((b"syscr:", b"syscw:")):
                        total += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and every live descendant, all threads, in seconds.

    Read from ``/proc/PID/task/TID/schedstat`` (nanoseconds; stat's utime/stime tick at 10 ms,
    too coarse for a few thousand requests).
    """
    total = 0
    for p in _descendants(pid):
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9
