"""Request bodies cannot make a real router hold unbounded memory (SPEC §5: 413 before buffering,
admission; the bodies still arriving are bounded too).

20 connections each send most of a 30 MB body and stall (before: +602 MB of RSS with
``--max-concurrency 4``, the bodies being buffered outside admission). The router holds at most
``--max-buffered-body-bytes`` (256 MiB by default) of request bodies: past it the largest bodies
still arriving are refused with 503 ``buffers_full``, and a client with a small request is
still answered meanwhile.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.fakes.bystander import Bystander
from tests.fakes.chat_client import MODEL, chat
from tests.fakes.engine_sim import EngineSim
from tests.fakes.process_tree import rss_bytes
from tests.fakes.raw_h2 import H2Uploader
from tests.fakes.router import RouterProcess

MIB = 1024 * 1024
BODY = 30_000_000  # announced by each attacker, under --max-body-bytes (32 MiB)
ATTACKERS = 20
CAP = 256 * MIB  # the default --max-buffered-body-bytes
# What else a router process may add while it holds CAP of bodies: allocator slack, the bytes
# objects of reads in flight, the bystander's requests.
SLACK = 96 * MIB


@pytest.fixture(scope="module")
def router() -> Iterator[RouterProcess]:
    with (
        EngineSim("--model", MODEL) as sim,
        RouterProcess("--worker", sim.url, "--max-concurrency", "4") as r,
    ):
        yield r


def _answers(socks: list[socket.socket]) -> list[bytes]:
    """The first bytes each attacker got back (b"" when nothing yet)."""
    out = []
    for sock in socks:
        sock.setblocking(False)
        try:
            out.append(sock.recv(65536))
        except (BlockingIOError, OSError):
            out.append(b"")
    return out


def test_unfinished_http1_bodies_stay_under_the_cap(router: RouterProcess) -> None:
    """20 HTTP/1.1 bodies of 30 MB, each stalled before its last byte: the router's RSS grows by
    less than the 256 MiB cap plus slack, some attackers get 503 buffers_full, and small
    chat requests on other connections are answered 200 throughout."""
    before = peak = rss_bytes(router.pid)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % BODY
    )
    socks = [socket.create_connection(("127.0.0.1", router.port)) for _ in range(ATTACKERS)]
    for sock in socks:
        sock.sendall(head)
    chunk = b" " * MIB
    alive = set(range(ATTACKERS))
    with Bystander(router.port, "/v1/chat/completions", json.dumps(chat()).encode()) as bystander:
        for _ in range(BODY // MIB - 1):
            for i in list(alive):
                try:
                    socks[i].sendall(chunk)
                except OSError:
                    alive.discard(i)
            peak = max(peak, rss_bytes(router.pid))
        time.sleep(0.5)
        peak = max(peak, rss_bytes(router.pid))
    answers = _answers(socks)
    for sock in socks:
        sock.close()
    assert peak - before < CAP + SLACK, (before, peak)
    refused = [a for a in answers if a.startswith(b"HTTP/1.1 503 ")]
    assert refused and all(b"x-router-error-code: buffers_full" in a for a in refused), answers
    assert bystander.statuses and set(bystander.statuses) == {200}, (bystander.statuses, bystander.errors)


def test_unfinished_h2_bodies_stay_under_the_cap(router: RouterProcess) -> None:
    """The same over h2c: 20 connections, each with two streams sending 15 MB and never ending
    them (each within the windows the router advertises): RSS stays under the cap plus slack,
    the largest streams are refused 503, and small requests are still answered."""
    before = peak = rss_bytes(router.pid)
    uploaders = [H2Uploader(router.port) for _ in range(ATTACKERS)]
    streams = [(u, u.open()) for u in uploaders for _ in range(2)]
    with Bystander(router.port, "/v1/chat/completions", json.dumps(chat()).encode()) as bystander:
        for _ in range(15):
            for uploader, sid in streams:
                uploader.send(sid, MIB)
                uploader.drain(0)
            peak = max(peak, rss_bytes(router.pid))
        time.sleep(0.5)
        for uploader in uploaders:
            uploader.drain(0.2)
        peak = max(peak, rss_bytes(router.pid))
    refused = [u.answers[sid] for u, sid in streams if sid in u.answers]
    for uploader in uploaders:
        uploader.close()
    assert peak - before < CAP + SLACK, (before, peak)
    assert refused and set(refused) == {503}, refused
    assert bystander.statuses and set(bystander.statuses) == {200}, (bystander.statuses, bystander.errors)
