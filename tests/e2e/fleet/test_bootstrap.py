"""`scripts/bootstrap.sh` (the README's set-up command) as a newcomer watches it: one line per step,
pip's own output kept out of sight unless a step fails, then shown whole."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.fakes.process import ROOT

SCRIPT = ROOT / "scripts" / "bootstrap.sh"


def _run(root: Path, form: str = "plain") -> subprocess.CompletedProcess[str]:
    """The script on ``root``; FLEETPLANE_FORM=plain unless told (no 2-minute compile of this checkout)."""
    return subprocess.run(
        ["bash", str(root / "scripts" / "bootstrap.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, FLEETPLANE_FORM=form),
    )


def test_bootstrap_prints_one_line_per_step_and_nothing_else() -> None:
    """On this checkout (its .venv exists): the steps and a closing "ready" line, no pip chatter."""
    done = _run(ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        "bootstrap: upgrading pip",
        "bootstrap: installing fleetplane (editable) with its development dependencies",
        "bootstrap: not compiling the hot path (FLEETPLANE_FORM=plain)",
    ]
    assert (
        len(lines) == 4
        and lines[3].startswith("bootstrap: ready in ")
        and lines[3].endswith(" s: .venv/bin/fleetplane")
    )
    assert done.stderr == ""


def _checkout_with_python(tmp_path: Path, body: str, build: str = "exit 0") -> Path:
    """A copy of the script beside a .venv whose python is ``body`` (a shell script standing in for
    pip) and a scripts/build_mypyc.sh that is ``build``."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / "bootstrap.sh")
    mypyc = tmp_path / "scripts" / "build_mypyc.sh"
    mypyc.write_text(f"#!/bin/sh\n{build}\n")
    mypyc.chmod(0o755)
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
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["bootstrap"] * 4


def test_the_hot_path_is_compiled_and_the_build_says_so(tmp_path: Path) -> None:
    """Unless FLEETPLANE_FORM=plain: a compile step, then the build's own last line as a step."""
    build = 'echo "gcc chatter"; echo "mypyc: compiled 3 modules in 61 s"'
    done = _run(_checkout_with_python(tmp_path, "exit 0", build), form="auto")
    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[2:4] == [
        "bootstrap: compiling the hot path with mypyc, profile-guided (≈ 4-5 min, skipped while current)",
        "bootstrap: mypyc: compiled 3 modules in 61 s",
    ]
    assert len(lines) == 5 and "gcc chatter" not in done.stdout


def test_a_failed_compile_leaves_the_plain_form_and_says_why(tmp_path: Path) -> None:
    """No compiler: bootstrap still succeeds, says the plain form runs and shows the build's last words."""
    build = (
        'if [ "$1" = --clean ]; then exit 0; fi; echo "error: command \'gcc\' failed: No such file"; exit 1'
    )
    done = _run(_checkout_with_python(tmp_path, "exit 0", build), form="auto")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert (
        lines[3]
        == "bootstrap: compiling failed, so the plain form runs (the same code); scripts/build_mypyc.sh said:"
    )
    assert lines[4] == "  error: command 'gcc' failed: No such file"
    assert lines[-1].startswith("bootstrap: ready in ")
