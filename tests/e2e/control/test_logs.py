"""Control-plane logs (SPEC §8): one JSON object per stderr line when stderr is not a terminal."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ROOT, ControlPlaneProcess


def _json_lines(lines: list[str]) -> list[dict[str, object]]:
    docs = [json.loads(line) for line in lines if line.strip()]
    for doc in docs:
        assert isinstance(doc, dict) and {"event", "level", "timestamp"} <= doc.keys(), doc
    return docs


def test_every_stderr_line_of_a_running_control_plane_is_json() -> None:
    """Start, a contract change, a refused call and a graceful stop: every stderr line is a JSON object."""
    with ControlPlaneProcess() as cp:
        assert (
            fleetplane("contract", "set", "--control-plane", cp.target, "--scope", "*", '{"n": 1}').returncode
            == 0
        )
        assert fleetplane("contract", "get", "--control-plane", cp.target, "--scope", "nope").returncode == 1
        assert cp.stop() == 0
        events = [doc["event"] for doc in _json_lines(cp.log_lines)]
    assert "control_plane_started" in events and "contract_changed" in events
    assert events[-1] == "control_plane_stopped"


def test_standard_library_loggers_are_rendered_as_json_too() -> None:
    """asyncio's and grpc's stdlib log records come out as JSON lines with their logger name."""
    code = (
        "import logging\n"
        "from controlplane.server.logs import configure_logging\n"
        "configure_logging()\n"
        "try:\n    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    logging.getLogger('asyncio').error('Task exception was never retrieved', exc_info=True)\n"
        "logging.getLogger('grpc').warning('peer %s went away', 'x')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=30)
    docs = _json_lines(proc.stderr.splitlines())
    assert [(d["logger"], d["level"], d["event"]) for d in docs] == [
        ("asyncio", "error", "Task exception was never retrieved"),
        ("grpc", "warning", "peer x went away"),
    ]
    assert "ZeroDivisionError" in str(docs[0]["exception"])
