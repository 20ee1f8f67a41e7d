"""The operator CLI's traps, closed, as an operator meets them in a shell (SPEC §1, §3.2).

The fleet-wide scope without quoting (``--fleet``, ``--scope default``), an unquoted ``*`` expanded
by a real shell refused, a warning for a scope no worker serves, ``contract set --dry-run`` and
``contract diff``, ``workers add --wait-s``, refused ``--timeout-s`` values, a clear line when
``--control-plane`` names a router or an HTTP/1 server, ``loads --watch`` into a pipe, the token's
help line, and the generated shell completion. One control plane, one engine-sim (publishing load)
and one standalone router serve the whole module.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controlplane.v1 import load_pb2, load_pb2_grpc
from tests.fakes.cli import COMMAND, fleetplane
from tests.fakes.control_plane import ROOT, ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim, kv_endpoint_with_free_load_ports
from tests.fakes.ports import free_port
from tests.fakes.router import RouterProcess

MODEL = "llama-e2e"


@pytest.fixture(scope="module")
def cp() -> Iterator[ControlPlaneProcess]:
    with ControlPlaneProcess() as proc:
        yield proc


@pytest.fixture(scope="module")
def sim(cp: ControlPlaneProcess) -> Iterator[EngineSim]:
    """An engine-sim serving MODEL that publishes load, registered with the control plane."""
    flags = ("--model", MODEL, "--load-publish-endpoint", "auto")
    with EngineSim(*flags, "--kv-events-endpoint", kv_endpoint_with_free_load_ports(1)) as engine:
        with grpc.insecure_channel(cp.target) as channel:
            load_pb2_grpc.LoadServiceStub(channel).RegisterWorker(
                load_pb2.RegisterWorkerRequest(url=engine.url), timeout=30
            )
        yield engine


@pytest.fixture(scope="module")
def router(sim: EngineSim) -> Iterator[RouterProcess]:
    with RouterProcess("--worker", sim.url) as proc:
        yield proc


def contract(
    cp: ControlPlaneProcess, action: str, *args: str, **kw: object
) -> subprocess.CompletedProcess[str]:
    return fleetplane("contract", action, "--control-plane", cp.target, *args, **kw)  # type: ignore[arg-type]


def versions(cp: ControlPlaneProcess, scope: str) -> list[str]:
    """The versions of ``scope`` in its history, newest first ([] when it has none)."""
    done = contract(cp, "history", "--scope", scope, "--output", "json")
    return [v["version"] for v in json.loads(done.stdout)["versions"]] if done.returncode == 0 else []


def one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The one stderr line of a refused command (exit ``code``, no traceback)."""
    lines = result.stderr.splitlines()
    assert result.returncode == code and len(lines) == 1, result
    return lines[0]


def test_fleet_and_scope_default_name_the_fleet_wide_scope(cp: ControlPlaneProcess, sim: EngineSim) -> None:
    """`--fleet` writes scope "*"; `--scope default` reads it back; neither needs quoting."""
    written = contract(cp, "set", "--fleet", '{"temperature": 1}', "--output", "json")
    assert written.returncode == 0, written.stderr
    assert json.loads(written.stdout)["contract"]["scope"] == "*"
    read = contract(cp, "get", "--scope", "default", "--output", "json")
    assert json.loads(read.stdout)["contract"]["params"] == {"temperature": {"exact": 1.0}}
    both = contract(cp, "get", "--fleet", "--scope", MODEL)
    assert "--scope and --fleet" in one_line(both, 2)
    neither = contract(cp, "get")
    assert "--fleet" in one_line(neither, 2)


def test_an_unquoted_star_expanded_by_the_shell_is_refused(
    cp: ControlPlaneProcess, sim: EngineSim, tmp_path: Path
) -> None:
    """In a directory holding one file, bash turns `--scope *` into `--scope notes.txt`: refused with
    a line saying to quote it or use --fleet, and no scope named after the file is written."""
    (tmp_path / "notes.txt").write_text("")
    line = " ".join(shlex.quote(a) for a in COMMAND)
    shell = subprocess.run(
        ["bash", "-c", f"{line} contract set --control-plane {cp.target} --scope * '{{\"top_p\": 0.9}}'"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=40,
    )
    message = one_line(shell, 2)
    assert "--scope notes.txt" in message and "'*'" in message and "--fleet" in message
    assert versions(cp, "notes.txt") == []


def test_a_file_named_like_a_served_model_is_no_expansion(
    cp: ControlPlaneProcess, sim: EngineSim, tmp_path: Path
) -> None:
    """A scope that names a served model is written even where a file of that name exists."""
    (tmp_path / MODEL).write_text("")
    written = contract(cp, "set", "--scope", MODEL, '{"top_p": 0.9}', cwd=tmp_path)
    assert written.returncode == 0 and written.stderr == "", written.stderr


def test_a_scope_no_worker_serves_is_written_with_a_warning(cp: ControlPlaneProcess, sim: EngineSim) -> None:
    """`set --scope ghost` is written (a contract may precede its model) but warns on stderr, naming
    the models that are served."""
    written = contract(cp, "set", "--scope", "ghost", '{"top_p": 0.9}')
    assert written.returncode == 0 and "ghost" in written.stdout
    assert written.stderr.startswith("warning: no registered worker serves model 'ghost'")
    assert f"served: {MODEL}" in written.stderr


def test_dry_run_prints_the_validated_contract_and_its_changes_and_writes_nothing(
    cp: ControlPlaneProcess, sim: EngineSim
) -> None:
    """`set --dry-run` shows the current version, the proposed contract and each change; the history
    is unchanged; a stale --expected-version says the write would be refused (exit 1)."""
    scope = "dry-" + MODEL
    assert contract(cp, "set", "--scope", scope, '{"temperature": 1, "top_k": 40}').returncode == 0
    proposed = '{"temperature": 0.7, "top_k": {"min": 1, "max": 50}, "min_p": 0.05}'
    dry = contract(cp, "set", "--scope", scope, "--dry-run", "--conflict", "reject", proposed)
    assert dry.returncode == 0, dry.stderr
    out = dry.stdout.splitlines()
    assert out[0] == f"dry run: nothing written to scope '{scope}'"
    assert out[1] == 'current   version 1: {"temperature": 1, "top_k": 40} (conflict reject)'
    assert (
        out[2]
        == 'proposed  {"temperature": 0.7, "top_k": {"min": 1, "max": 50}, "min_p": 0.05} (conflict reject)'
    )
    assert [" ".join(line.split()) for line in out[4:]] == [
        "~ temperature 1 -> 0.7",
        '~ top_k 40 -> {"min": 1, "max": 50}',
        "+ min_p 0.05",
    ]
    assert versions(cp, scope) == ["1"]
    stale = contract(cp, "set", "--scope", scope, "--dry-run", "--expected-version", "7", proposed)
    assert stale.returncode == 1 and "would be refused" in stale.stderr
    bad = contract(cp, "set", "--scope", scope, "--dry-run", '{"temperature": 9}')
    assert "outside the allowed domain" in one_line(bad, 2)
    assert versions(cp, scope) == ["1"]


def test_diff_shows_what_changed_between_two_versions(cp: ControlPlaneProcess, sim: EngineSim) -> None:
    """`contract diff --scope S 1 3` lists the changed fields and policy; a missing version is exit 1."""
    scope = "diff-" + MODEL
    for body, policy in (
        ('{"temperature": 1}', "reject"),
        ('{"top_p": 0.5}', "reject"),
        ('{"temperature": 0.5}', "allow"),
    ):
        assert contract(cp, "set", "--scope", scope, "--conflict", policy, body).returncode == 0
    diff = contract(cp, "diff", "--scope", scope, "1", "3")
    assert diff.returncode == 0, diff.stderr
    assert diff.stdout.splitlines()[0] == f"scope '{scope}': version 1 -> version 3"
    changes = [" ".join(line.split()) for line in diff.stdout.splitlines()[4:]]
    assert changes == ["~ temperature 1 -> 0.5", "~ conflict reject -> allow"]
    as_json = json.loads(contract(cp, "diff", "--scope", scope, "2", "3", "--output", "json").stdout)
    assert (as_json["from"]["version"], as_json["to"]["version"]) == ("2", "3")
    assert len(as_json["changes"]) == 3
    missing = contract(cp, "diff", "--scope", scope, "1", "9")
    assert "has no version 9" in one_line(missing, 1)


def test_malformed_json_says_where(cp: ControlPlaneProcess) -> None:
    """A contract file with a missing comma is refused with the line and column of the mistake."""
    body = '{\n  "temperature": 1\n  "top_p": 0.9\n}\n'
    refused = contract(cp, "set", "--fleet", "-", stdin=body)
    line = one_line(refused, 2)
    assert "not valid JSON" in line and "line 3 column 3" in line


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_a_timeout_that_is_not_positive_is_refused(cp: ControlPlaneProcess, value: str) -> None:
    """`--timeout-s -1` (or 0, NaN) is refused at once, one line naming the flag and the value."""
    refused = fleetplane("stats", "--control-plane", cp.target, "--timeout-s", value)
    line = one_line(refused, 2)
    assert "--timeout-s" in line and value in line and "positive" in line


def test_pointed_at_a_router_or_the_status_port_says_what_it_reached(
    cp: ControlPlaneProcess, router: RouterProcess
) -> None:
    """`--control-plane` at a router (h2c, answers 404) or at the control plane's HTTP/1 port: one
    line saying it is not a control plane and where to point, not a gRPC status dump."""
    for target in (f"{router.host}:{router.port}", cp.http_url.removeprefix("http://")):
        line = one_line(fleetplane("contract", "list", "--control-plane", target, "--timeout-s", "5"), 1)
        assert f"{target} is not a fleetplane control plane" in line, line
        assert "UNIMPLEMENTED" not in line and "--listen" in line


def test_the_token_help_line_tells_only_what_is_set() -> None:
    """--help mentions an environment token only when FLEETPLANE_TOKEN is set, and never shows it."""
    for args in (("contract", "--help"), ("contract", "list", "--help"), ("stats", "--help")):
        env = {k: v for k, v in os.environ.items() if k != "FLEETPLANE_TOKEN"}
        plain = subprocess.run(
            [*COMMAND, *args], capture_output=True, text=True, timeout=40, cwd=ROOT, env=env
        )
        assert plain.returncode == 0 and "--token" in plain.stdout
        assert "set from the environment" not in plain.stdout
        secret = fleetplane(*args, env={"FLEETPLANE_TOKEN": "s3cret-token"})
        assert "(set from the environment)" in " ".join(secret.stdout.split())
        assert "s3cret" not in secret.stdout


def _read_for(fd: int, seconds: float) -> bytes:
    out = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    return out


def test_loads_watch_into_a_pipe_writes_plain_tables(cp: ControlPlaneProcess, sim: EngineSim) -> None:
    """`loads --watch | cat`: time-stamped tables, no terminal codes; on a terminal it redraws in
    place (clear-screen codes)."""
    argv = [*COMMAND, "loads", "--watch", "--control-plane", cp.target]
    piped = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert piped.stdout is not None
    try:
        out = _read_for(piped.stdout.fileno(), 3.0)
    finally:
        piped.send_signal(signal.SIGINT)
        piped.wait(10)
    text = out.decode()
    assert f"fleetplane loads --watch  {cp.target}" in text and sim.url in text
    assert "\x1b" not in text
    primary, secondary = pty.openpty()
    on_tty = subprocess.Popen(argv, stdout=secondary, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(secondary)
    try:
        shown = _read_for(primary, 3.0)
    finally:
        on_tty.send_signal(signal.SIGINT)
        on_tty.wait(10)
        os.close(primary)
    assert b"\x1b[H\x1b[2J" in shown and sim.url.encode() in shown


def test_workers_add_wait_fails_when_discovery_does_not_succeed_in_time(cp: ControlPlaneProcess) -> None:
    """`workers add URL --wait-s 2` of a dead worker: exit 1 after about 2 s with the reason; the
    worker stays registered (its discovery retried) until removed."""
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    added = fleetplane("workers", "add", url, "--control-plane", cp.target, "--wait-s", "2")
    took = time.monotonic() - started
    assert added.returncode == 1 and url in added.stdout
    assert f"discovery of {url} did not succeed within 2 s" in added.stderr
    assert "Connection refused" in added.stderr and 2.0 <= took < 15, took
    listed = fleetplane("workers", "list", "--control-plane", cp.target, "--output", "json")
    assert url in [w["url"] for w in json.loads(listed.stdout)["workers"]]
    assert fleetplane("workers", "remove", url, "--control-plane", cp.target).returncode == 0


def test_workers_add_wait_succeeds_once_discovered(cp: ControlPlaneProcess, sim: EngineSim) -> None:
    """`workers add URL --wait-s 20` of a live engine that publishes load: exit 0, endpoints discovered."""
    added = fleetplane(
        "workers", "add", sim.url, "--control-plane", cp.target, "--wait-s", "20", "--output", "json"
    )
    assert added.returncode == 0, added.stderr
    worker = json.loads(added.stdout)["worker"]
    assert worker["discoveryError"] == "" and worker["discovered"] and worker["loadEndpoints"]


def test_shell_completion_is_generated_from_the_parsers() -> None:
    """`--print-completion bash` completes subcommands and flags in a real bash; zsh gets a compdef."""
    script = fleetplane("--print-completion", "bash")
    assert script.returncode == 0
    probe = (
        'source /dev/stdin; for line in "contract s" "contract set --f" "workers add --w"; do '
        'read -ra COMP_WORDS <<< "fleetplane $line"; COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
        'COMPREPLY=(); _shtab_fleetplane; echo "${COMPREPLY[*]}"; done'
    )
    completed = subprocess.run(
        ["bash", "-c", probe], input=script.stdout, capture_output=True, text=True, timeout=20
    )
    assert completed.stdout.splitlines() == ["set", "--fleet", "--wait-s"], completed.stderr
    zsh = fleetplane("--print-completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef fleetplane")
