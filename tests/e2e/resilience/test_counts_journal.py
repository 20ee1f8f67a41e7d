"""A router killed with SIGKILL loses no rejection count (SPEC §6: a router restart neither loses
nor double counts).

Before, only ``--processes`` children had a counts journal: a single router reports every 0.25 s,
so the 400s of its last moments were never counted. Now a router with ``--router-id`` writes its
counts before each 400; restarted with the same id it reports them under the dead boot's id.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from tests.fakes.chat_client import chat, post
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim
from tests.fakes.fleet import fleetplane, wait_for
from tests.fakes.process_tree import children_of
from tests.fakes.router import RouterProcess

MODEL = "journal-model"
REJECTIONS = 40


def _by_router(control: ControlPlaneProcess, router_id: str) -> int | None:
    stats: Any = json.loads(fleetplane(control.target, "stats", "--output", "json").stdout)
    counts = [int(kc["count"]) for kc in stats.get("byRouter", []) if kc["key"] == router_id]
    return counts[0] if counts else None


def _ready(router: RouterProcess) -> bool:
    return router.get("/readiness")[0] == 200


def _every_child_applied(router: RouterProcess, processes: int) -> bool:
    metrics = router.metrics()
    live = metrics.get("fleetplane_router_processes_live", 0)
    return live == processes and metrics.get("fleetplane_contract_revision", 0) >= 1


def test_a_sigkilled_router_restarted_with_its_id_reports_every_rejection(tmp_path: Path) -> None:
    """40 requests violating the contract get 400, the router is SIGKILLed right after the last
    one, restarted with the same --router-id: GetRejectionStats shows exactly 40 for it; one more
    rejection on the new boot makes exactly 41, through its reports and its clean stop (none
    lost, none counted twice)."""
    rid = "single-journal"
    with ControlPlaneProcess(store_path=tmp_path / "control.db") as cp, EngineSim("--model", MODEL) as sim:
        fleetplane(cp.target, "workers", "add", sim.url)
        fleetplane(cp.target, "contract", "set", "--scope", "*", json.dumps({"temperature": 0.5}))
        flags = ("--control-plane", cp.target, "--router-id", rid)
        with RouterProcess(*flags, journal_dir=tmp_path) as first:
            wait_for(lambda: _ready(first), timeout_s=20)
            statuses = [
                post(first.url, "/v1/chat/completions", chat(MODEL, temperature=0.9))[0]
                for _ in range(REJECTIONS)
            ]
            first.kill()
        assert statuses == [400] * REJECTIONS
        with RouterProcess(*flags, journal_dir=tmp_path) as second:
            wait_for(lambda: _by_router(cp, rid) == REJECTIONS, timeout_s=20, interval_s=0.2)
            wait_for(lambda: _ready(second), timeout_s=20)
            post(second.url, "/v1/chat/completions", chat(MODEL, temperature=0.9))
            wait_for(lambda: _by_router(cp, rid) == REJECTIONS + 1, timeout_s=20, interval_s=0.2)
            second.stop()
        assert _by_router(cp, rid) == REJECTIONS + 1
        # A clean stop whose last report was taken leaves nothing to hand over.
        assert not list((tmp_path / "fleetplane").glob("*.counts"))


def test_a_sigkilled_process_tree_restarted_with_its_id_reports_every_rejection(tmp_path: Path) -> None:
    """--processes 2 --router-id ID: both children and the supervisor SIGKILLed right after the
    400s (nothing shuts down cleanly), then the same command again: the children (ID/0, ID/1) find
    their own journals and the totals are exactly the 400s the clients got."""
    rid = "tree-journal"
    with ControlPlaneProcess(store_path=tmp_path / "control.db") as cp, EngineSim("--model", MODEL) as sim:
        fleetplane(cp.target, "workers", "add", sim.url)
        fleetplane(cp.target, "contract", "set", "--scope", "*", json.dumps({"temperature": 0.5}))
        flags = ("--processes", "2", "--control-plane", cp.target, "--router-id", rid)
        with RouterProcess(*flags, journal_dir=tmp_path, startup_timeout_s=40) as first:
            wait_for(lambda: len(children_of(first.pid)) == 2 and _ready(first), timeout_s=30)
            # Every child has the contract: the merged revision is the lowest any child applied
            # (a few /readiness probes could all land on the same child, the other still starting).
            wait_for(lambda: _every_child_applied(first, 2), timeout_s=30)
            statuses = [
                post(first.url, "/v1/chat/completions", chat(MODEL, temperature=0.9))[0]
                for _ in range(REJECTIONS)
            ]
            for child in children_of(first.pid):
                os.kill(child, signal.SIGKILL)
            first.kill()
        assert statuses == [400] * REJECTIONS
        with RouterProcess(*flags, journal_dir=tmp_path, startup_timeout_s=40):
            wait_for(
                lambda: sum(_by_router(cp, f"{rid}/{slot}") or 0 for slot in (0, 1)) == REJECTIONS,
                timeout_s=30,
                interval_s=0.2,
            )
            time.sleep(2.5)  # past a report heartbeat: a repeated report must not add again
            assert sum(_by_router(cp, f"{rid}/{slot}") or 0 for slot in (0, 1)) == REJECTIONS
