"""The CLI and metrics references in docs/ are generated from the code and kept current, and no
text a user reads (the references, every --help) cites the SPEC, which users do not have."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fakes.process import ROOT

DOCS = ROOT / "docs"
COMMANDS = [
    (),
    ("up",),
    ("control",),
    ("contract",),
    *[("contract", a) for a in ("list", "get", "set", "delete", "history", "rollback", "diff")],
    ("workers",),
    *[("workers", a) for a in ("list", "add", "remove")],
    ("loads",),
    ("routers",),
    ("stats",),
    ("router",),
    ("engine-sim",),
]


def test_the_committed_references_match_the_code() -> None:
    """`scripts/gen_docs.py --check` passes: a flag or metric added without regenerating fails here."""
    done = subprocess.run(
        [sys.executable, "scripts/gen_docs.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_the_references_cover_every_command_and_both_planes() -> None:
    """Each command has a section with its flags; each plane's metrics have a table."""
    cli = (DOCS / "cli-reference.md").read_text()
    for command in COMMANDS:
        assert f"`{' '.join(('fleetplane', *command))}`" in cli, command
    assert "`--scope`" in cli and "`FLEETPLANE_TIMEOUT_S`" in cli and "`--max-body-bytes`" in cli
    metrics = (DOCS / "metrics-reference.md").read_text()
    assert "`fleetplane_requests_total` | counter | `route`, `code`" in metrics
    assert "`fleetplane_load_workers` | gauge | `freshness`" in metrics


def test_no_reference_cites_the_spec() -> None:
    """The generated references hold help texts and metric HELP strings: none says "SPEC"."""
    for name in ("cli-reference.md", "metrics-reference.md"):
        assert "SPEC" not in (DOCS / name).read_text(), name


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "fleetplane")
def test_no_help_output_cites_the_spec(command: tuple[str, ...]) -> None:
    """`fleetplane ... --help`, as a user runs it, says nothing of a SPEC section."""
    done = subprocess.run(
        [sys.executable, "-m", "controlplane.cli.main", *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "usage:" in done.stdout, done.stderr
    assert "SPEC" not in done.stdout and "§" not in done.stdout
