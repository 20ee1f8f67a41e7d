"""Router CPU per request as a deterministic instruction count (valgrind callgrind), no sockets.

    python bench/router_instructions.py [--requests 2000]     # needs valgrind: apt-get install -y valgrind

Wall-clock and CPU-time figures on this shared 2-core machine move by ±30 % with the other
processes; instruction counts do not, so small hot-path changes can be compared A/B. Both rows run
in one process on uvloop with in-memory transports (what the kernel does for the sockets is not
counted: bench/router_overhead.py measures that):

- ``router``: an HTTP/1.1 client connection of the router's front door (``dataplane.http``)
  receives the 1 KiB chat request of bench/router_overhead.py; the router (a contract injecting
  two fields: every feature on) forwards it over its pooled HTTP/1.1 upstream connection, whose
  transport answers with engine-sim's answer bytes; the client's next request follows its answer;
- ``bare``: the same front door and request with a handler that answers the same bytes at once:
  the baseline of one HTTP hop on the same stack;
- ``floor``: ``bench/floor_proxy.py`` (the featureless uvloop + httptools hop that
  bench/router_floor.py divides by) on the same loop, its upstream connection answered the
  same way: ``router`` / ``floor`` is the instruction side of that benchmark's h1→h1 ratio
  (the kernel's share is not in it);
- ``--dialects``: the router again, with the same text sent to ``/v1/responses`` and to
  ``/generate`` (fields under ``sampling_params``);
- ``--h2c``: the chat request again, forwarded to an h2c worker (``upstream.h2c``) whose
  transport answers each HEADERS frame with the same answer as HEADERS + DATA frames (the row
  ``router-h2c``);
- ``--front-h2c``: the chat request again, sent by an h2c prior-knowledge client (RFC 9113 §3.3)
  to the router's front door (``dataplane.http.http2``), forwarded to the HTTP/1.1 worker (the
  row ``h2c-router``), and to the bare handler (``h2c-bare``); one stream at a time on one
  connection, the next request's HEADERS + DATA sent when the answer's END_STREAM arrives;
- ``--access-log``: the chat request again on a router with ``--access-log /dev/null`` (the
  row ``router-log``): the buffering per request, the timer's batches, their encoding and writes;
- ``--stream``: the chat request with ``"stream": true``; the worker answers a chunked SSE stream
  of 16 token events and ``[DONE]``, one event per read (the row ``router-sse``): the relay's
  per-chunk cost, against the floor relaying the same reads (the row ``floor-sse``); with
  ``--front-h2c`` also from the h2c client (the row ``h2c-router-sse``);
  with ``--h2c`` also from an h2c worker (the row ``router-h2c-sse``: HEADERS + the first
  event's DATA frame, then one DATA frame per read, ``[DONE]`` with END_STREAM);
- ``--openai-headers``: the chat request again with the 17 headers the official ``openai`` Python
  client sends (``bench.loadgen.OPENAI_CLIENT_HEADERS``; the request above has 3), through the router (the row
  ``router-openai``) and the floor (``floor-openai``): what each header costs on the way;
- ``--workers N``: the chat request again on a router with N workers whose engine load views are
  FRESH (a control plane's, applied once), so the balancer scores N candidates per request
  (``least_load``; the row ``router-Nw``).
- ``--rejections``: the chat request with ``"temperature": 3``, which the contract refuses: the
  router answers 400 ``sampling_contract_violation`` itself (the row ``reject``), and again with
  the rejection counts journal a router with ``--router-id`` and a control plane keeps (the row
  ``reject-journal``: the record rewritten on every rejection, before its 400 goes out).

Each row is measured as (instructions of N requests - instructions of N/4 requests) / (3N/4), so
interpreter start-up and imports cancel out.

``--cpu-time K`` measures the same rows as CPU time instead, without valgrind: K rounds, each row
once a round in its own process (a warm-up of N requests, then 3 timed runs of N); the row is
its fastest run's CPU ns per request (the run the machine's other processes disturbed least).
Instructions leave out what a cache miss or a mispredicted branch costs; this does not, and in
the same run the floor row keeps it honest: compare ratios, not nanoseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loadgen import OPENAI_CLIENT_HEADERS, chat_body, post  # noqa: E402

MODEL = "sim-model"
CONTRACT = '{"temperature": 0.7, "top_p": 0.95}'
_ANSWER_BODY = json.dumps(
    {
        "id": "chatcmpl-0",
        "model": MODEL,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "sim " * 16}}],
    }
).encode()
UPSTREAM_ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    b'x-sim-sampling-params: {"temperature":0.7,"top_p":0.95}\r\n'
    b"content-length: %d\r\n\r\n%s" % (len(_ANSWER_BODY), _ANSWER_BODY)
)
_CHAT_BODY = chat_body(MODEL, stream=False, size=1024, max_tokens=16)
REQUEST = post("127.0.0.1", 8000, "/v1/chat/completions", _CHAT_BODY)
# SSE (engine-sim's shape): 16 token events then [DONE], chunked; each event in its own read.
_SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


_SSE_EVENT = (
    b'data: {"id":"chatcmpl-0","object":"chat.completion.chunk","model":"%s",'
    b'"choices":[{"index":0,"delta":{"content":"sim "}}]}\n\n' % MODEL.encode()
)
UPSTREAM_SSE = (
    [_SSE_HEAD + _chunk(_SSE_EVENT)]
    + [_chunk(_SSE_EVENT)] * 15
    + [_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]
)
STREAM_REQUEST = post(
    "127.0.0.1", 8000, "/v1/chat/completions", chat_body(MODEL, stream=True, size=1024, max_tokens=16)
)
# The same ~1 KiB of text on two other dialects (SPEC §5.1): top level (/v1/responses) and
# nested under sampling_params (/generate); the contract injects there the same way.
_TEXT = "x" * 900
ROUTE_REQUESTS = {
    "router": REQUEST,
    "responses": post(
        "127.0.0.1",
        8000,
        "/v1/responses",
        json.dumps({"model": MODEL, "input": _TEXT, "max_output_tokens": 16}).encode(),
    ),
    "generate": post(
        "127.0.0.1",
        8000,
        "/generate",
        json.dumps({"text": _TEXT, "sampling_params": {"max_new_tokens": 16}}).encode(),
    ),
}


# The chat request as the official ``openai`` Python client sends it (17 headers).
OPENAI_REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
    + "".join(f"{name}: {value}\r\n" for name, value in OPENAI_CLIENT_HEADERS).encode()
    + b"Content-Length: %d\r\n\r\n%s" % (len(_CHAT_BODY), _CHAT_BODY)
)
# The chat request with a temperature the contract refuses (it says 0.7).
REJECTED_REQUEST = post(
    "127.0.0.1", 8000, "/v1/chat/completions", _CHAT_BODY.replace(b'"model":', b'"temperature":3,"model":', 1)
)
# Every row's request (the chat request unless named here).
REQUESTS = {
    **ROUTE_REQUESTS,
    "router-openai": OPENAI_REQUEST,
    "floor-openai": OPENAI_REQUEST,
    "reject": REJECTED_REQUEST,
    "reject-journal": REJECTED_REQUEST,
}


class _Socket:
    family = 2  # AF_INET: the server sets TCP_NODELAY on it

    def setsockopt(self, *args: object) -> None:
        pass


class MemoryTransport:
    """Enough of ``asyncio.Transport`` for the server and the upstream pool; writes go to ``sink``.

    ``writelines``: uvloop sends the pieces with one ``writev``, nothing joined in the writer's
    process. A peer that reads the bytes gets them joined, as its one read would; for a peer that
    does not (``peer_reads=False``: the HTTP/1.1 worker, which answers each request unread) they
    are not joined, so the writer is not charged a copy uvloop does not make."""

    def __init__(self, sink: Callable[[bytes], object], *, peer_reads: bool = True) -> None:
        self._sink = sink
        self._peer_reads = peer_reads
        self._closing = False

    def write(self, data: bytes) -> None:
        self._sink(data)

    def writelines(self, lines: list[bytes]) -> None:
        self._sink(b"".join(lines) if self._peer_reads else b"")

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    abort = close

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return _Socket() if name == "socket" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False


def _frame(kind: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream_id.to_bytes(4, "big") + payload


def _hpack_literal(name: bytes, value: bytes) -> bytes:
    """A literal field without indexing, new name, no Huffman (RFC 7541 §6.2.2); short strings."""
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes((len(name),)) + name + bytes((len(value),)) + value


# The worker's side of an h2c connection: its SETTINGS, the ACK of ours, the connection window
# opened wide once (RFC 9113 §6.9.1), then per stream the answer of UPSTREAM_ANSWER as frames.
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_H2_SERVER_START = (
    _frame(4, 0, 0, b"") + _frame(4, 1, 0, b"") + _frame(8, 0, 0, (2**31 - 1 - 65535).to_bytes(4, "big"))
)
_H2_ANSWER_BLOCK = (
    b"\x88"  # :status 200, static table index 8
    + _hpack_literal(b"content-type", b"application/json")
    + _hpack_literal(b"x-sim-sampling-params", b'{"temperature":0.7,"top_p":0.95}')
    + _hpack_literal(b"content-length", str(len(_ANSWER_BODY)).encode())
)


# The answer's two frames around the stream id (``_h2_answers``): HEADERS then DATA.
_H2_ANSWER_HEADERS = _frame(1, 0x4, 0, _H2_ANSWER_BLOCK)[:5]  # END_HEADERS
_H2_ANSWER_MIDDLE = _H2_ANSWER_BLOCK + _frame(0, 0x1, 0, _ANSWER_BODY)[:5]  # END_STREAM
_FRAME_HEAD = struct.Struct(">HBBxI")  # a frame header: length (16 + 8 bits), type, stream id


def _h2_answers(data: bytes) -> bytes:
    """The worker's frames for every request HEADERS frame in what the router wrote.

    Interpreted, and counted in the ``router-h2c`` row: one ``unpack_from`` per frame and the
    answer joined from constant parts around the stream id keep it small (the same bytes as
    ``_frame(1, 0x4, sid, _H2_ANSWER_BLOCK) + _frame(0, 0x1, sid, _ANSWER_BODY)``).
    """
    at = len(_H2_PREFACE) if data.startswith(_H2_PREFACE) else 0
    out: list[bytes] = []
    last = len(data) - 9
    unpack = _FRAME_HEAD.unpack_from
    while at <= last:
        high, low, kind, stream_id = unpack(data, at)
        if kind == 1:  # HEADERS
            sid = (stream_id & 0x7FFFFFFF).to_bytes(4, "big")
            out += (_H2_ANSWER_HEADERS, sid, _H2_ANSWER_MIDDLE, sid, _ANSWER_BODY)
        at += 9 + (high << 8 | low)
    return b"".join(out)


# The SSE answer of an h2c worker (``router-h2c-sse``): the reads of UPSTREAM_SSE as frames, around
# the stream id: HEADERS (:status 200, content-type) + the first event, one event per read, then
# [DONE] with END_STREAM.
_H2_SSE_BLOCK = b"\x88" + _hpack_literal(b"content-type", b"text/event-stream")
_H2_SSE_HEADERS = _frame(1, 0x4, 0, _H2_SSE_BLOCK)[:5]
_H2_SSE_EVENT = _frame(0, 0, 0, _SSE_EVENT)[:5]
_H2_SSE_DONE = _frame(0, 0x1, 0, b"data: [DONE]\n\n")[:5]


def _h2_sse_reads(data: bytes) -> list[bytes]:
    """The worker's reads for the (one) request HEADERS frame in what the router wrote."""
    at = len(_H2_PREFACE) if data.startswith(_H2_PREFACE) else 0
    last = len(data) - 9
    unpack = _FRAME_HEAD.unpack_from
    while at <= last:
        high, low, kind, stream_id = unpack(data, at)
        if kind == 1:  # HEADERS
            sid = (stream_id & 0x7FFFFFFF).to_bytes(4, "big")
            event = _H2_SSE_EVENT + sid + _SSE_EVENT
            return [
                b"".join((_H2_SSE_HEADERS, sid, _H2_SSE_BLOCK, event)),
                *[event] * 15,
                b"".join((_H2_SSE_DONE, sid, b"data: [DONE]\n\n")),
            ]
        at += 9 + (high << 8 | low)
    return []


# The h2c client's side of the front door: its preface, SETTINGS and a connection window opened
# wide (the answers would use up the 65535 of RFC 9113's default), then per request HEADERS
# (:method POST and :scheme http fully indexed, the rest literal) and the body as one DATA frame.
_FRONT_START = _H2_PREFACE + _frame(4, 0, 0, b"") + _frame(8, 0, 0, (2**31 - 1 - 65535).to_bytes(4, "big"))


def _front_template(request: bytes) -> tuple[bytes, ...]:
    """The parts of one request's HEADERS + DATA around the stream id (``_front_request``)."""
    body = request[request.index(b"\r\n\r\n") + 4 :]
    block = (
        b"\x83\x86"
        + _hpack_literal(b":path", b"/v1/chat/completions")
        + _hpack_literal(b":authority", b"127.0.0.1:8000")
        + _hpack_literal(b"content-type", b"application/json")
        + _hpack_literal(b"content-length", str(len(body)).encode())
    )
    return _frame(1, 0x4, 0, block)[:5], block, _frame(0, 0x1, 0, body)[:5], body


_FRONT = _front_template(REQUEST)
_FRONT_SSE = _front_template(STREAM_REQUEST)


def _front_request(stream_id: int, template: tuple[bytes, ...] = _FRONT) -> bytes:
    """HEADERS + DATA of one request (built from templates: the client's own cost stays small)."""
    sid = stream_id.to_bytes(4, "big")
    headers, block, data, body = template
    return b"".join((headers, sid, block, data, sid, body))


def _fresh_views(urls: list[str]) -> dict[str, Any]:
    """FRESH engine views of SGLang 0.5.23's full LoadStat, a different load on each worker."""
    from dataplane.router.control.convert import EngineLoad

    views = {}
    for i, url in enumerate(urls):
        fields = {
            "running": 2 + i,
            "waiting": i % 2,
            "fresh": True,
            "tokens": 4000 + 500 * i,
            "capacity": 262144,
            "waiting_uncached_tokens": 300 * (i % 2),
            "total_tokens": 4300 + 500 * i,
            "max_running": 8,
            "prefill_tokens_per_s": 30000.0,
        }
        known = EngineLoad.__dataclass_fields__  # the view's fields at this commit
        views[url] = EngineLoad(**{k: v for k, v in fields.items() if k in known})
    return views


async def _drive(mode: str, n: int) -> None:
    from dataplane.http import Request, Responder, ServerLimits
    from dataplane.http.context import ServerContext
    from dataplane.http.http1 import Http1Connection
    from dataplane.router.app import Router
    from dataplane.router.fleet.workers import WorkerSpec
    from dataplane.router.process.journal import CountsJournal
    from dataplane.router.settings import build_parser, settings_from_args

    loop = asyncio.get_running_loop()
    journal: CountsJournal | None = None
    streamed = mode in ("floor-sse", "router-sse", "router-h2c-sse")
    request = STREAM_REQUEST if streamed else REQUESTS.get(mode, REQUEST)
    workers = (
        int(mode.split("-")[1].removesuffix("w"))
        if mode.startswith("router-")
        and mode not in ("router-h2c", "router-log", "router-sse", "router-h2c-sse", "router-openai")
        else 0
    )
    if mode in ("router-h2c", "router-h2c-sse"):
        # The worker's side is the memory loop's (``_memory_loop``): the pool's own connect path.
        url = "h2c://127.0.0.1:9"
        args = ["--listen", "127.0.0.1:0", "--worker", url, "--override-sampling-params", CONTRACT]
        router = Router(settings_from_args(build_parser().parse_args(args)))
        router.state.apply_workers([WorkerSpec(url, "h2c", (MODEL,))])
        handler: Any = router.proxy.handle
    elif (
        mode in ROUTE_REQUESTS
        or workers
        or mode
        in (
            "h2c-router",
            "h2c-router-sse",
            "router-log",
            "router-sse",
            "router-openai",
            "reject",
            "reject-journal",
        )
    ):
        urls = [f"http://127.0.0.1:{9 + i}" for i in range(max(1, workers))]
        args = ["--listen", "127.0.0.1:0", "--worker", urls[0], "--override-sampling-params", CONTRACT]
        if mode == "router-log":
            args += ["--access-log", os.devnull]
        router = Router(settings_from_args(build_parser().parse_args(args)))
        if router.access_log is not None:
            router.access_log.start()  # its timer and its writes are counted too
        router.state.apply_workers([WorkerSpec(url, "http1", (MODEL,)) for url in urls])
        if workers:
            router.state.apply_loads(_fresh_views(urls))
        if mode == "reject-journal":
            scratch = Path(tempfile.mkdtemp(prefix="router-instructions-"))
            journal = CountsJournal.open(str(scratch / "router.counts"), "bench")
            assert journal is not None
            journal.start("boot")
            router.state.rejection_listener = journal.record

        handler: Any = router.proxy.handle
    else:
        head_end = UPSTREAM_ANSWER.index(b"\r\n\r\n")
        headers = [tuple(line.split(b": ", 1)) for line in UPSTREAM_ANSWER[:head_end].split(b"\r\n")[1:-1]]

        def handler(request: Request, responder: Responder) -> None:
            responder.respond(200, headers, _ANSWER_BODY)

    done = loop.create_future()
    answered = 0
    expected = b"HTTP/1.1 400 " if mode.startswith("reject") else b"HTTP/1.1 200 "
    if mode.startswith("h2c-"):
        await _drive_h2c(loop, handler, n, done, _FRONT_SSE if mode == "h2c-router-sse" else _FRONT)
        return
    if mode.startswith("floor"):
        from bench.floor_proxy import _Client

        client: Any = _Client("127.0.0.1", 9)
    else:
        client = Http1Connection(ServerContext(handler, ServerLimits(), loop))

    in_answer = False

    def on_answer(data: bytes) -> None:
        nonlocal answered, in_answer
        if not in_answer and not data.startswith(expected):
            done.set_exception(RuntimeError(f"unexpected answer: {data[:300]!r}"))
            return
        if streamed:  # a chunked answer arrives in several writes; its last chunk ends it
            in_answer = not data.endswith(b"0\r\n\r\n")
            if in_answer:
                return
        answered += 1
        if answered >= n:
            done.set_result(None)
        else:
            loop.call_soon(client.data_received, request)

    client.connection_made(MemoryTransport(on_answer))  # type: ignore[arg-type]
    loop.call_soon(client.data_received, request)
    await done
    if mode == "router-log":
        await router.access_log.stop()  # type: ignore[union-attr]  # the last batch: encoded and written
    if journal is not None:
        journal.remove()
        os.rmdir(Path(journal.path).parent)


async def _drive_h2c(
    loop: asyncio.AbstractEventLoop, handler: Any, n: int, done: Any, template: tuple[bytes, ...]
) -> None:
    """The ``h2c-*`` rows: one h2c client connection of the front door, one stream at a time."""
    from dataplane.http import ServerLimits
    from dataplane.http.context import ServerContext
    from dataplane.http.http2 import Http2Connection

    server = Http2Connection(ServerContext(handler, ServerLimits(), loop))
    answered = 0
    stream_id = 1
    settings_ack = b""

    def on_bytes(data: bytes) -> None:
        nonlocal answered, stream_id, settings_ack
        at = 0
        ended = False
        while at + 9 <= len(data):
            length = int.from_bytes(data[at : at + 3], "big")
            kind, flags = data[at + 3], data[at + 4]
            if kind == 4 and not flags & 1:  # the server's SETTINGS: acknowledged with the next request
                settings_ack = _frame(4, 1, 0, b"")
            elif kind == 1 and data[at + 9] != 0x88:  # :status 200 (static index 8)
                done.set_exception(RuntimeError(f"unexpected answer: {data[:300]!r}"))
                return
            elif kind in (3, 7):
                done.set_exception(RuntimeError(f"reset or GOAWAY: {data[:300]!r}"))
                return
            if kind in (0, 1) and flags & 1:
                ended = True
            at += 9 + length
        if not ended:
            return
        answered += 1
        if answered >= n:
            done.set_result(None)
            return
        stream_id += 2
        request, settings_ack = settings_ack + _front_request(stream_id, template), b""
        loop.call_soon(server.data_received, request)

    server.connection_made(MemoryTransport(on_bytes))  # type: ignore[arg-type]
    loop.call_soon(server.data_received, _FRONT_START + _front_request(stream_id, template))
    await done


def _memory_loop(answer: list[bytes]) -> Any:
    """uvloop whose connections to a worker are in memory: the upstream pool's own connect path
    runs (patching the pool would not reach it once compiled: scripts/build_mypyc.sh). The
    worker answers each request with the reads of ``answer``, one per loop turn."""
    import uvloop

    from dataplane.router.upstream.h2c.connection import H2Connection

    class MemoryLoop(uvloop.Loop):
        async def create_connection(  # type: ignore[override]
            self, factory: Callable[[], Any], *_: object, **__: object
        ) -> Any:
            conn = factory()
            if isinstance(conn, H2Connection):
                # An h2c worker: its frames for each request HEADERS, in a later loop turn.
                def worker(data: bytes) -> None:
                    if answer is UPSTREAM_SSE:
                        reads = _h2_sse_reads(data)
                        if reads:
                            self.call_soon(feed_h2, reads, 0)
                        return
                    frames = _h2_answers(data)
                    if frames:
                        self.call_soon(conn.data_received, frames)

                def feed_h2(reads: list[bytes], i: int) -> None:
                    conn.data_received(reads[i])
                    if i + 1 < len(reads):
                        self.call_soon(feed_h2, reads, i + 1)

                transport = MemoryTransport(worker)
                conn.connection_made(transport)  # type: ignore[arg-type]
                conn.data_received(_H2_SERVER_START)
                return transport, conn

            def feed(i: int) -> None:
                conn.data_received(answer[i])
                if i + 1 < len(answer):
                    self.call_soon(feed, i + 1)

            # The worker answers in a later loop turn, as a socket read would.
            transport = MemoryTransport(lambda _: self.call_soon(feed, 0), peer_reads=False)
            conn.connection_made(transport)
            return transport, conn

    return MemoryLoop()


def _instructions(mode: str, n: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--cache-sim=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--inner",
                mode,
                "--requests",
                str(n),
            ],
            env={**os.environ, "PYTHONHASHSEED": "0"},
            capture_output=True,
            check=True,
        )
        with open(out) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    raise SystemExit("no totals in the callgrind output")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--inner", help=argparse.SUPPRESS)
    parser.add_argument(
        "--cpu-time",
        type=int,
        default=0,
        metavar="K",
        help="CPU ns per request, fastest of K rounds, no valgrind",
    )
    parser.add_argument(
        "--dialects", action="store_true", help="also /v1/responses and /generate (SPEC §5.1), same contract"
    )
    parser.add_argument("--workers", type=int, default=0, help="also N workers with FRESH engine views")
    parser.add_argument(
        "--rejections",
        action="store_true",
        help="also a request the contract refuses (400), with and without the journal",
    )
    parser.add_argument("--h2c", action="store_true", help="also the chat request to an h2c worker")
    parser.add_argument(
        "--front-h2c", action="store_true", help="also an h2c client at the front door (h2c-router, h2c-bare)"
    )
    parser.add_argument(
        "--stream", action="store_true", help="also the chat request streamed (SSE, 16 events)"
    )
    parser.add_argument(
        "--access-log", action="store_true", help="also the router with --access-log (to /dev/null)"
    )
    parser.add_argument(
        "--openai-headers",
        action="store_true",
        help="also the chat request with the official openai client's 17 headers (floor-openai, router-openai)",
    )
    args = parser.parse_args()
    if args.inner and args.inner not in _ROWS and not re.fullmatch(r"router-[1-9]\d*w", args.inner):
        parser.error(f"no row {args.inner!r}: {', '.join(_ROWS)} or router-Nw")
    if args.inner:
        import gc

        import uvloop

        gc.collect()
        gc.freeze()
        answer = UPSTREAM_SSE if args.inner.endswith("-sse") else [UPSTREAM_ANSWER]
        uvloop.run(_drive(args.inner, args.requests), loop_factory=lambda: _memory_loop(answer))
        fastest = math.inf
        for _ in range(args.cpu_time):
            started = time.process_time()
            uvloop.run(_drive(args.inner, args.requests), loop_factory=lambda: _memory_loop(answer))
            fastest = min(fastest, time.process_time() - started)
        if args.cpu_time:
            print(fastest / args.requests * 1e9)
        return 0
    if args.cpu_time:
        return _cpu_table(_modes(args), args.requests, args.cpu_time)
    if shutil.which("valgrind") is None:
        print("valgrind not found: install it with `apt-get install -y valgrind`", file=sys.stderr)
        return 2
    n, small = args.requests, args.requests // 4
    per_request = {}
    for mode in _modes(args):
        per_request[mode] = (_instructions(mode, n) - _instructions(mode, small)) / (n - small)
    print(f"router instructions — 1 KiB chat body, in-memory transports, uvloop, {n} - {small} requests")
    print(f"{'mode':<16}{'instructions/req':>18}{'x bare':>8}")
    for mode, value in per_request.items():
        print(f"{mode:<16}{value:>18,.0f}{value / per_request['bare']:>8.2f}")
    return 0


# Every row ``--inner`` runs (besides router-Nw).
_ROWS: tuple[str, ...] = (
    "bare", "floor", "floor-openai", "floor-sse", *ROUTE_REQUESTS, "router-openai", "router-log", "router-sse",
    "router-h2c", "router-h2c-sse", "h2c-bare", "h2c-router", "h2c-router-sse", "reject", "reject-journal",
)  # fmt: skip


def _cpu_table(modes: list[str], n: int, rounds: int) -> int:
    per_request = dict.fromkeys(modes, math.inf)
    for _ in range(rounds):  # rows alternate, so a busy spell of the machine hits them all alike
        for mode in modes:
            out = subprocess.run(
                [sys.executable, __file__, "--inner", mode, "--requests", str(n), "--cpu-time", "3"],
                env={**os.environ, "PYTHONHASHSEED": "0"},
                capture_output=True,
                text=True,
                check=True,
            )
            per_request[mode] = min(per_request[mode], float(out.stdout.split()[-1]))
    print(
        f"router CPU time — 1 KiB chat body, in-memory transports, uvloop, fastest of {rounds} x 3 runs"
        f" of {n} requests"
    )
    print(f"{'mode':<16}{'CPU ns/req':>12}{'x bare':>8}{'x floor':>9}")
    for mode, value in per_request.items():
        print(
            f"{mode:<16}{value:>12,.0f}{value / per_request['bare']:>8.2f}{value / per_request['floor']:>9.2f}"
        )
    return 0


def _modes(args: argparse.Namespace) -> list[str]:
    modes = ["bare", "floor", "router", *(("responses", "generate") if args.dialects else ())]
    if args.h2c:
        modes.append("router-h2c")
    if args.front_h2c:
        modes += ["h2c-bare", "h2c-router"]
    if args.access_log:
        modes.append("router-log")
    if args.openai_headers:
        modes += ["floor-openai", "router-openai"]
    if args.stream:
        modes += ["floor-sse", "router-sse"]
        if args.h2c:
            modes.append("router-h2c-sse")
        if args.front_h2c:
            modes.append("h2c-router-sse")
    if args.workers:
        modes.append(f"router-{args.workers}w")
    if args.rejections:
        modes += ["reject", "reject-journal"]
    return modes


if __name__ == "__main__":
    raise SystemExit(main())
