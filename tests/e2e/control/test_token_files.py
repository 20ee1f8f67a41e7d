"""``--token-file`` for the operator CLI and the router: the token stays out of ``ps``; router
tokens report only router ids of their own namespace (SPEC §1, §6 Auth)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.control_plane import ROOT, ControlPlaneProcess
from tests.fakes.fleet import fleetplane, wait_for
from tests.fakes.router import RouterProcess

TOKENS = {
    "ops": {"token": "t-admin-1", "role": "admin"},
    "edge": {"token": "t-router-2", "role": "router"},
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """The tokens file, and one file per token as an operator writes it (with a trailing newline)."""
    paths = {"tokens": tmp_path / "tokens.json"}
    paths["tokens"].write_text(json.dumps(TOKENS))
    for name, entry in TOKENS.items():
        paths[name] = tmp_path / f"{name}.token"
        paths[name].write_text(entry["token"] + "\n")
    return paths


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_the_cli_reads_its_token_from_a_file_and_refuses_both_or_a_bad_file(files, tmp_path: Path):
    """`contract set --token-file F` authenticates as F's token; with --token too, or F unreadable: exit 2."""
    with ControlPlaneProcess("--auth-tokens", str(files["tokens"])) as control:
        done = fleetplane(
            control.target, "contract", "set", "--scope", "*", "--token-file", str(files["ops"]),
            "--output", "json", '{"temperature": 0.5}',
        )  # fmt: skip
        assert json.loads(done.stdout)["contract"]["author"] == "ops"
        for flags, needle in (
            (["--token", "t-admin-1", "--token-file", str(files["ops"])], "--token and --token-file"),
            (["--token-file", str(tmp_path / "missing")], "--token-file"),
        ):
            refused = fleetplane(control.target, "contract", "list", *flags, check=False)
            assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
            assert needle in refused.stderr and "t-admin-1" not in refused.stderr


def test_a_router_with_a_token_file_subscribes_and_reports_in_its_namespace_only(files):
    """--token-file keeps the token out of the command line; edge/1 is reported, "other" refused."""
    with ControlPlaneProcess("--auth-tokens", str(files["tokens"])) as control:
        admin = ["--token-file", str(files["ops"])]
        fleetplane(control.target, "contract", "set", "--scope", "*", *admin, '{"temperature": 0.5}')
        flags = ["--control-plane", control.target, "--token-file", str(files["edge"])]
        with (
            RouterProcess(*flags, "--router-id", "edge/1") as mine,
            RouterProcess(*flags, "--router-id", "other") as foreign,
        ):
            for router in (mine, foreign):
                assert "t-router-2" not in _cmdline(router.pid)
                wait_for(lambda r=router: r.metrics()["fleetplane_contract_revision"] == 1, 15)

            def reported() -> list[str]:
                listed = fleetplane(control.target, "routers", *admin, "--output", "json")
                return [r["routerId"] for r in json.loads(listed.stdout).get("routers", [])]

            wait_for(lambda: reported() == ["edge/1"], 15)
            wait_for(lambda: any("PERMISSION_DENIED" in line for line in foreign.output), 15)
            assert reported() == ["edge/1"]


def test_a_router_given_token_and_token_file_does_not_start(files):
    """`fleetplane router --token T --token-file F`: one line naming both flags, exit non-zero."""
    done = subprocess.run(
        [sys.executable, "-m", "dataplane", "--listen", "127.0.0.1:0", "--control-plane", "127.0.0.1:1",
         "--token", "t-router-2", "--token-file", str(files["edge"])],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode != 0 and len(lines) == 1 and "--token/--token-file" in lines[0]
