"""``--processes N --control-plane``: every child subscribes and reports as ``ID/SLOT`` (SPEC §1, §6).

The rollout view shows one entry per process (``ID/0`` .. ``ID/N-1``, ``ID`` defaulting to
``HOST-<supervisor pid>``); a child the supervisor restarts reports under its slot's id again, so
the view keeps N entries; rejection totals equal the 400s clients got, across children and restarts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.chat_client import chat, post
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim
from tests.fakes.fleet import fleetplane, wait_for
from tests.fakes.process_tree import children_of
from tests.fakes.router import RouterProcess

MODEL = "procs-model"
REQUESTS = 24  # over fresh connections: both children get some (SO_REUSEPORT hashes the 4-tuple)


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneProcess]:
    """A control plane with one registered engine-sim and a contract fixing temperature."""
    store = Path(tmp_path_factory.mktemp("procs")) / "control.db"
    with ControlPlaneProcess(store_path=store) as cp, EngineSim("--model", MODEL) as sim:
        fleetplane(cp.target, "workers", "add", sim.url)
        fleetplane(cp.target, "contract", "set", "--scope", "*", json.dumps({"temperature": 0.5}))
        yield cp


def _json(control: ControlPlaneProcess, *args: str) -> Any:
    return json.loads(fleetplane(control.target, *args, "--output", "json").stdout)


def _routers(control: ControlPlaneProcess, prefix: str) -> dict[str, dict[str, Any]]:
    """The rollout entries whose router id starts with ``prefix``, by id."""
    listed = _json(control, "routers")
    return {r["routerId"]: r for r in listed.get("routers", []) if r["routerId"].startswith(prefix)}


def _by_router(control: ControlPlaneProcess, prefix: str) -> dict[str, int]:
    stats = _json(control, "stats")
    return {kc["key"]: int(kc["count"]) for kc in stats.get("byRouter", []) if kc["key"].startswith(prefix)}


def _all_up(control: ControlPlaneProcess, prefix: str, ids: set[str]) -> dict[str, dict[str, Any]] | None:
    """The entries under ``prefix`` once they are exactly ``ids``, all connected and up to date."""
    routers = _routers(control, prefix)
    ok = set(routers) == ids and all(r.get("connected") and r.get("upToDate") for r in routers.values())
    return routers if ok else None


def _reject(router: RouterProcess, n: int) -> int:
    """``n`` requests violating the contract, each on a fresh connection; how many got 400."""
    statuses = [post(router.url, "/v1/chat/completions", chat(MODEL, temperature=0.9))[0] for _ in range(n)]
    return statuses.count(400)


def _settled(control: ControlPlaneProcess, prefix: str, expected: int) -> dict[str, int]:
    """Wait until the totals of ``prefix`` routers reach ``expected``; they must then stay there."""
    wait_for(lambda: sum(_by_router(control, prefix).values()) >= expected, timeout_s=10, interval_s=0.2)
    time.sleep(2.5)  # past a report heartbeat (2 s): a repeated report must not add again
    counts = _by_router(control, prefix)
    assert sum(counts.values()) == expected, counts
    return counts


def test_children_report_one_entry_each_under_the_default_id(control: ControlPlaneProcess) -> None:
    """Without --router-id the children report as HOST-<supervisor pid>/0 and /1, both up to date;
    each enforces the contract and the totals equal the 400s the clients got."""
    with RouterProcess("--processes", "2", "--control-plane", control.target, startup_timeout_s=40) as router:
        base = f"{socket.gethostname()}-{router.pid}"
        ids = {f"{base}/0", f"{base}/1"}
        wait_for(lambda: _all_up(control, base + "/", ids), timeout_s=30, interval_s=0.2)
        rejected = _reject(router, REQUESTS)
        assert rejected == REQUESTS
        counts = _settled(control, base + "/", rejected)
        assert set(counts) == ids and all(counts.values()), counts  # both children judged


def test_sigkilled_children_keep_their_slot_ids_and_counts(control: ControlPlaneProcess) -> None:
    """With --router-id ID: entries ID/0 and ID/1. Both children killed with SIGKILL right after
    answering 400s (before their next report) come back under their slots' ids with new boots;
    the totals still equal every 400 the clients got: none lost, none counted twice."""
    rid = "procs-e2e"
    with RouterProcess(
        "--processes", "2", "--control-plane", control.target, "--router-id", rid, startup_timeout_s=40
    ) as router:
        ids = {f"{rid}/0", f"{rid}/1"}
        before = wait_for(lambda: _all_up(control, rid + "/", ids), timeout_s=30, interval_s=0.2)
        victims = children_of(router.pid)
        first = _reject(router, REQUESTS)
        for victim in victims:  # at once: the last rejections are not reported yet
            os.kill(victim, signal.SIGKILL)

        def restarted() -> dict[str, dict[str, Any]] | None:
            routers = _all_up(control, rid + "/", ids)
            if routers is None or set(victims) & set(children_of(router.pid)):
                return None
            fresh = all(routers[i]["bootId"] != before[i]["bootId"] for i in ids)
            return routers if fresh else None

        wait_for(restarted, timeout_s=40, interval_s=0.2)
        second = _reject(router, REQUESTS)
        assert first == second == REQUESTS
        counts = _settled(control, rid + "/", first + second)
        assert set(counts) == ids, counts
        assert set(_routers(control, rid)) == ids  # the view still has one entry per slot
