"""``fleetplane contract ...`` against a real control plane process, as an operator runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.control_plane import ROOT, ControlPlaneProcess


def fleetplane(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli.main", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture(scope="module")
def cp():
    with ControlPlaneProcess() as proc:
        yield proc


def contract(
    cp: ControlPlaneProcess, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return fleetplane("contract", args[0], "--control-plane", cp.target, *args[1:], stdin=stdin)


def test_set_get_list_history_rollback_delete_round_trip(cp):
    """An operator sets, reads, lists, rolls back and deletes a scope; tables show what happened."""
    first = contract(
        cp,
        "set",
        "--scope",
        "llama",
        "--comment",
        "initial",
        '{"temperature": 1, "top_k": {"min": 1, "max": 50, "default": 40}}',
    )
    assert first.returncode == 0, first.stderr
    assert "llama" in first.stdout and '"top_k": {"min": 1, "max": 50, "default": 40}' in first.stdout
    second = contract(
        cp,
        "set",
        "--scope",
        "llama",
        "--conflict",
        "allow",
        "--expected-version",
        "1",
        "-",
        stdin='{"temperature": 0.5}',
    )
    assert second.returncode == 0, second.stderr
    got = contract(cp, "get", "--scope", "llama", "--output", "json")
    doc = json.loads(got.stdout)["contract"]
    assert doc["version"] == "2" and doc["conflict"] == "CONFLICT_POLICY_ALLOW"
    assert doc["params"] == {"temperature": {"exact": 0.5}} and doc["author"] == "anonymous"
    back = contract(cp, "rollback", "--scope", "llama", "--version", "1", "--comment", "undo")
    assert back.returncode == 0 and "rollback to v1" in back.stdout
    listed = contract(cp, "list")
    assert listed.returncode == 0 and "llama" in listed.stdout and '"default": 40' in listed.stdout
    deleted = contract(cp, "delete", "--scope", "llama")
    assert deleted.returncode == 0 and "(deleted)" in deleted.stdout
    history = contract(cp, "history", "--scope", "llama", "--output", "json")
    versions = json.loads(history.stdout)["versions"]
    assert [(v["version"], v["change"]) for v in versions] == [
        ("4", "CHANGE_KIND_DELETE"),
        ("3", "CHANGE_KIND_ROLLBACK"),
        ("2", "CHANGE_KIND_UPDATE"),
        ("1", "CHANGE_KIND_UPDATE"),
    ]
    table = contract(cp, "history", "--scope", "llama", "--limit", "2")
    assert table.stdout.splitlines()[0].split()[:4] == ["SCOPE", "VERSION", "REVISION", "CHANGE"]
    assert len(table.stdout.splitlines()) == 3


def test_errors_print_the_message_and_exit_non_zero(cp):
    """Local validation exits 2 with the parser's message; server errors exit 1 with its message."""
    bad = contract(cp, "set", "--scope", "*", '{"temperature": 5}')
    assert bad.returncode == 2 and "temperature" in bad.stderr and "[0, 2]" in bad.stderr
    missing = contract(cp, "get", "--scope", "nobody")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr and "nobody" in missing.stderr
    contract(cp, "set", "--scope", "race", '{"n": 1}')
    stale = contract(cp, "set", "--scope", "race", "--expected-version", "0", '{"n": 2}')
    assert stale.returncode == 1 and "ABORTED" in stale.stderr and "version 1" in stale.stderr
    down = fleetplane("contract", "list", "--control-plane", "127.0.0.1:1", "--timeout-s", "2")
    assert down.returncode == 1 and "unavailable" in down.stderr


def test_token_authorises_the_cli(tmp_path: Path):
    """With --auth-tokens, the CLI's --token decides; the author is the token's name."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(
        json.dumps(
            {"ops": {"token": "t-admin", "role": "admin"}, "dash": {"token": "t-view", "role": "viewer"}}
        )
    )
    with ControlPlaneProcess("--auth-tokens", str(tokens)) as proc:
        denied = contract(proc, "set", "--scope", "*", "--token", "t-view", '{"n": 1}')
        assert denied.returncode == 1 and "PERMISSION_DENIED" in denied.stderr
        anon = contract(proc, "list")
        assert anon.returncode == 1 and "UNAUTHENTICATED" in anon.stderr
        ok = contract(proc, "set", "--scope", "*", "--token", "t-admin", "--output", "json", '{"n": 1}')
        assert ok.returncode == 0 and json.loads(ok.stdout)["contract"]["author"] == "ops"
