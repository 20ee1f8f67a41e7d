"""The operator CLI as a black box (SPEC §1): flags anywhere, scriptable JSON, mTLS, pipes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ROOT, ControlPlaneProcess


def test_json_output_includes_zero_values(control_plane: ControlPlaneProcess) -> None:
    """`stats --output json` on a fresh control plane says total 0 (protobuf JSON with defaults)."""
    got = fleetplane("stats", "--control-plane", control_plane.target, "--output", "json")
    assert got.returncode == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["total"] == "0"
    assert doc["byField"] == [] and doc["byRouter"] == []
    listed = json.loads(
        fleetplane("contract", "list", "--control-plane", control_plane.target, "--output", "json").stdout
    )
    assert listed == {"contracts": [], "revision": "0"}


def test_connection_flags_work_before_and_after_the_action(control_plane: ControlPlaneProcess) -> None:
    """`contract --output json --control-plane X set ...` equals `contract set ... --control-plane X`."""
    cp = ("--control-plane", control_plane.target)
    before = fleetplane("contract", "--output", "json", *cp, "set", "--scope", "m", '{"n": 1}')
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["contract"]["version"] == "1"
    after = fleetplane("contract", "get", "--scope", "m", *cp, "--output", "json")
    assert json.loads(after.stdout)["contract"]["params"] == {"n": {"exact": 1.0}}
    workers = fleetplane("workers", *cp, "--output", "json", "list")
    assert workers.returncode == 0 and json.loads(workers.stdout) == {"workers": []}


def test_a_flag_on_the_command_line_wins_over_the_environment(control_plane: ControlPlaneProcess) -> None:
    """FLEETPLANE_CONTROL_PLANE is the default; --control-plane before or after the action wins."""
    env = {"FLEETPLANE_CONTROL_PLANE": "127.0.0.1:1", "FLEETPLANE_OUTPUT": "json"}
    for args in (
        ("contract", "--control-plane", control_plane.target, "list"),
        ("contract", "list", "--control-plane", control_plane.target),
    ):
        got = fleetplane(*args, env=env)
        assert got.returncode == 0, got.stderr
        assert json.loads(got.stdout)["revision"] == "0"
    refused = fleetplane("contract", "list", "--timeout-s", "2", env=env)
    assert refused.returncode == 1 and "127.0.0.1:1" in refused.stderr


def test_operator_commands_speak_mtls(pki: Path) -> None:
    """Against --tls-client-ca the CLI connects with --tls-ca plus --tls-cert/--tls-key; without a cert it fails."""
    tls = ("--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"))
    with ControlPlaneProcess(*tls, "--tls-client-ca", str(pki / "ca.pem")) as cp:
        base = (
            "contract",
            "list",
            "--control-plane",
            cp.target,
            "--tls-ca",
            str(pki / "ca.pem"),
            "--timeout-s",
            "5",
        )
        ok = fleetplane(*base, "--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key"))
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.startswith("revision 0")
        assert fleetplane(*base).returncode == 1
        half = fleetplane(*base, "--tls-cert", str(pki / "client.pem"))
        assert half.returncode == 2 and "--tls-key" in half.stderr


def test_a_closed_pipe_is_no_traceback(control_plane: ControlPlaneProcess) -> None:
    """`fleetplane contract list | head -0` ends without a Python traceback on stderr."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controlplane.cli.main",
            "contract",
            "list",
            "--output",
            "json",
            "--control-plane",
            control_plane.target,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command writes
    err = proc.stderr.read()
    proc.wait(30)
    assert b"Traceback" not in err
