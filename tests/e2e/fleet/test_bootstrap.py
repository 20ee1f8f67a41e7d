"""`scripts/bootstrap.sh` (the README's set-up command) as a newcomer watches it: one line per step,
pip's own output kept out of sight unless a step fails, then shown whole."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.fakes.process import ROOT

SCRIPT = ROOT / "scripts" / "bootstrap.sh"


def _run(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / "scripts" / "bootstrap.sh")], capture_output=True, text=True, timeout=300
    )


def test_bootstrap_prints_one_line_per_step_and_nothing_else() -> None:
    """On this checkout (its .venv exists): the steps and a closing "ready" line, no pip chatter."""
    done = _run(ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [
        "bootstrap: upgrading pip",
        "bootstrap: installing fleetplane (editable) with its development dependencies",
    ]
    assert (
        len(lines) == 3
        and lines[2].startswith("bootstrap: ready in ")
        and lines[2].endswith(" s: .venv/bin/fleetplane")
    )
    assert done.stderr == ""


def _checkout_with_python(tmp_path: Path, body: str) -> Path:
    """A copy of the script beside a .venv whose python is ``body`` (a shell script standing in for pip)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / "bootstrap.sh")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\n{body}\n")
    python.chmod(0o755)
    return tmp_path


def test_a_failing_step_shows_what_pip_said(tmp_path: Path) -> None:
    """A step that fails: exit non-zero, the step named on stderr with pip's whole output, no later step."""
    root = _checkout_with_python(
        tmp_path, 'echo "noise"; echo "ERROR: No matching distribution found for h2" >&2; exit 1'
    )
    done = _run(root)
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["bootstrap: upgrading pip"]
    assert "bootstrap: failed: .venv/bin/python -m pip install" in done.stderr
    assert "ERROR: No matching distribution found for h2" in done.stderr and "noise" in done.stderr


def test_what_pip_prints_on_success_stays_out_of_sight(tmp_path: Path) -> None:
    """Warnings a successful pip prints are not shown: the steps only."""
    root = _checkout_with_python(tmp_path, 'echo "WARNING: Location is ignored" >&2; exit 0')
    done = _run(root)
    assert done.returncode == 0 and done.stderr == ""
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["bootstrap"] * 3
