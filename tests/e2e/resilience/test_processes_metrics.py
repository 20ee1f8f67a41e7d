"""``--processes N``: ``/metrics`` on the shared port answers for the whole router (SPEC §1, §8)."""

from __future__ import annotations

import contextlib
import glob
import http.client
import json
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.chat_stream import MODEL, post_chat
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim
from tests.fakes.fleet import fleetplane
from tests.fakes.process_tree import children_of, wait_for
from tests.fakes.router import RouterProcess

CHAT = "/v1/chat/completions"
CONTRACT = '{"temperature": 0.5}'
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@contextlib.contextmanager
def supervised(processes: int, sim: EngineSim | None, *flags: str) -> Iterator[tuple[RouterProcess, str]]:
    """A ``--processes`` router (standalone on ``sim`` with ``CONTRACT``, or ``flags``) whose slot
    directory is findable: (router, its slot directory)."""
    tmp = tempfile.mkdtemp(prefix="fp-")  # short: unix socket paths are limited to 107 bytes
    env = {**os.environ, "TMPDIR": tmp}
    if sim is not None:
        flags = ("--worker", sim.url, "--override-sampling-params", CONTRACT, *flags)
    router = RouterProcess("--processes", str(processes), *flags, env=env).start()
    try:
        assert wait_for(lambda: sum("router listening" in x for x in router.output) == processes, 40)
        (slot_dir,) = glob.glob(os.path.join(tmp, "fleetplane-router-*"))
        yield router, slot_dir
    finally:
        assert router.stop() == 0
        shutil.rmtree(tmp, ignore_errors=True)


def scrape(port: int) -> Samples:
    """One ``GET /metrics`` on a fresh connection, parsed by prometheus-client's parser."""
    return samples(scrape_text(port))


def scrape_text(port: int) -> str:
    """The body of one ``GET /metrics`` on a fresh connection."""
    for _ in range(50):  # a connection queued at a child just killed is reset: try again
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            assert resp.status == 200
            return resp.read().decode()
        except ConnectionError:
            time.sleep(0.02)
        finally:
            conn.close()
    raise AssertionError("no /metrics answer")


def samples(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(found: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over the series carrying ``labels``."""
    return sum(v for (n, ls), v in found.items() if n == name and set(labels.items()) <= set(ls))


def local_exposition(slot_dir: str, slot: int) -> Samples:
    """What child ``slot`` serves its siblings (its own counts, as JSON), read from its unix socket."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(os.path.join(slot_dir, f"slot-{slot}.sock"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return {
        (name, tuple(sorted(labels.items()))): value
        for _, _, _, family in json.loads(data)
        for name, labels, value in family
    }


def rejected(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "temperature": 1.0}
    try:
        conn.request("POST", CHAT, json.dumps(body), {"content-type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def send(port: int, ok: int, refused: int) -> None:
    assert [post_chat(port)[0] for _ in range(ok)] == [200] * ok
    assert [rejected(port) for _ in range(refused)] == [400] * refused


def test_every_scrape_shows_the_whole_router() -> None:
    """Requests spread over 2 processes: every scrape shows all of them, as one router would."""
    with EngineSim() as sim, supervised(2, sim) as (router, slot_dir):
        send(router.port, ok=40, refused=10)
        own = [local_exposition(slot_dir, slot) for slot in (0, 1)]
        # The kernel spread the requests over both processes (else this test proves nothing).
        assert all(total(m, "fleetplane_requests_total", route=CHAT) > 0 for m in own)
        for _ in range(8):
            m = scrape(router.port)
            assert total(m, "fleetplane_requests_total", route=CHAT, code="200") == 40
            assert total(m, "fleetplane_requests_total", route=CHAT, code="400") == 10
            assert total(m, "fleetplane_sampling_contract_rejections_total", param="temperature") == 10
            assert total(m, "fleetplane_request_duration_seconds_count", route=CHAT) == 50
            assert total(m, "fleetplane_request_duration_seconds_bucket", route=CHAT, le="+Inf") == 50
            assert total(m, "fleetplane_upstream_requests_total", outcome="ok") == 40
            assert total(m, "fleetplane_worker_inflight") == 0
            assert total(m, "fleetplane_admission_queue_depth") == 0
            assert total(m, "fleetplane_contract_revision") == 0  # standalone: the flags' contract
            assert total(m, "fleetplane_control_plane_connected") == 0
            assert total(m, "fleetplane_router_processes_live") == 2


def test_totals_never_go_backwards_when_a_child_is_killed() -> None:
    """A SIGKILLed child's counts stay in every scrape, while it restarts and after; new ones add up."""
    with EngineSim() as sim, supervised(2, sim) as (router, slot_dir):
        send(router.port, ok=30, refused=6)
        assert total(scrape(router.port), "fleetplane_requests_total", route=CHAT) == 36
        before = [
            total(local_exposition(slot_dir, s), "fleetplane_requests_total", route=CHAT) for s in (0, 1)
        ]
        assert all(n > 0 for n in before)
        victim = children_of(router.pid)[0]
        os.kill(victim, signal.SIGKILL)
        seen, live = [], []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = scrape(router.port)
            seen.append(total(m, "fleetplane_requests_total", route=CHAT))
            live.append(total(m, "fleetplane_router_processes_live"))
            assert total(m, "fleetplane_sampling_contract_rejections_total") == 6
            if len(children_of(router.pid)) == 2 and total(m, "fleetplane_router_processes_live") == 2:
                break
            time.sleep(0.02)
        assert victim not in children_of(router.pid)
        assert seen and all(n == 36 for n in seen)
        assert 1 in live  # scrapes while the victim restarted: its counts came from its snapshot
        send(router.port, ok=10, refused=2)
        for _ in range(5):
            m = scrape(router.port)
            assert total(m, "fleetplane_requests_total", route=CHAT, code="200") == 40
            assert total(m, "fleetplane_sampling_contract_rejections_total") == 8
            assert total(m, "fleetplane_router_processes_live") == 2


def test_every_scrape_of_four_processes_holds_all_four_live() -> None:
    """With --processes 4, every /metrics answer gathers the 3 siblings' live counts, none from a snapshot."""
    with EngineSim() as sim, supervised(4, sim) as (router, _):
        send(router.port, ok=20, refused=4)
        for _ in range(15):
            m = scrape(router.port)
            assert total(m, "fleetplane_requests_total", route=CHAT) == 24
            assert total(m, "fleetplane_router_processes_live") == 4


def test_with_a_control_plane_the_revision_is_the_one_every_child_applied() -> None:
    """Every scrape shows the router connected, the revision all its processes apply, all rejections."""
    with ControlPlaneProcess() as cp, EngineSim() as sim:
        fleetplane(cp.target, "workers", "add", sim.url)
        fleetplane(cp.target, "contract", "set", "--scope", "*", CONTRACT)
        with supervised(2, None, "--control-plane", cp.target) as (router, _):
            assert wait_for(lambda: total(scrape(router.port), "fleetplane_contract_revision") >= 1, 20)
            revision = json.loads(router.get("/contract")[2])["revision"]
            fleetplane(cp.target, "contract", "set", "--scope", "*", '{"temperature": 0.25}')
            assert wait_for(lambda: total(scrape(router.port), "fleetplane_contract_revision") > revision, 20)
            send(router.port, ok=0, refused=12)
            for _ in range(6):
                m = scrape(router.port)
                assert total(m, "fleetplane_contract_revision") == revision + 1
                assert total(m, "fleetplane_control_plane_connected") == 1
                assert total(m, "fleetplane_sampling_contract_rejections_total", scope="*") == 12
