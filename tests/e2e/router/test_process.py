"""The router process as an operator runs it: startup errors, listening line, clean stop."""

from __future__ import annotations

import subprocess
import sys

from tests.fakes.engine_sim import EngineSim
from tests.fakes.router import ROOT, RouterProcess


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dataplane", "--listen", "127.0.0.1:0", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_bad_contract_json_is_a_one_line_startup_error() -> None:
    """A contract outside its domain stops the router with one line naming flag, key and domain."""
    done = _run("--override-sampling-params", '{"top_p": 0}')
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "--override-sampling-params" in lines[0] and "top_p" in lines[0] and "(0, 1]" in lines[0]


def test_unreachable_worker_is_a_startup_error() -> None:
    """A --worker whose models cannot be read stops the router with the worker named."""
    done = _run("--worker", "http://127.0.0.1:1")
    assert done.returncode != 0
    assert "--worker" in done.stderr and "http://127.0.0.1:1" in done.stderr


def test_sigterm_stops_cleanly(sims: tuple[EngineSim, EngineSim]) -> None:
    """SIGTERM drains and exits 0; the router printed its listening URL with the real port."""
    router = RouterProcess("--worker", sims[0].url).start()
    assert router.port > 0 and router.url == f"http://127.0.0.1:{router.port}"
    assert router.get("/readiness")[0] == 200
    assert router.stop() == 0
