"""`fleetplane workers list|add|remove` as an operator types them (SPEC §1): flags, `--output json`
(protobuf's JSON mapping), exit codes, and one-line errors that name the field."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ROOT, ControlPlaneProcess
from tests.fakes.fake_workers import HANG, FakeWorker, cli_json, until
from tests.fakes.ports import free_port


@pytest.fixture
def cp(plane: ControlPlaneProcess) -> tuple[str, str]:
    return ("--control-plane", plane.target)


def one_line_error(result: subprocess.CompletedProcess[str], prefix: str) -> str:
    """Exit 1, nothing on stdout, exactly one stderr line starting with ``prefix``, no traceback."""
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    return str(lines[0])


def test_add_with_every_flag_then_list_and_remove(cp: tuple[str, str]) -> None:
    """add with --protocol, repeated --model and --load-endpoint (a wildcard one), JSON out; list
    shows it in the table and as JSON; remove says what it removed and list no longer has it."""
    url = "http://127.0.0.1:5801"
    added = fleetplane(
        "workers",
        "add",
        url,
        "--protocol",
        "h2c",
        "--model",
        "a",
        "--model",
        "b",
        "--load-endpoint",
        "tcp://*:5801",
        "--load-endpoint",
        "tcp://127.0.0.1:5802",
        *cp,
        "--output",
        "json",
    )
    worker = cli_json(added)["worker"]
    assert worker["url"] == url and worker["protocol"] == "WORKER_PROTOCOL_H2C"
    assert worker["resolvedProtocol"] == "WORKER_PROTOCOL_H2C" and worker["models"] == ["a", "b"]
    assert worker["loadEndpoints"] == ["tcp://127.0.0.1:5801", "tcp://127.0.0.1:5802"]
    assert (worker["dpSize"], worker["discovered"], worker["discoveryError"]) == (2, False, "")
    table = fleetplane("workers", "list", *cp)
    assert table.returncode == 0 and table.stderr == ""
    header, *rows = table.stdout.splitlines()
    assert header.split()[:4] == ["URL", "PROTOCOL", "MODELS", "RANKS"]
    (row,) = [r for r in rows if r.startswith(url + " ")]
    assert "h2c" in row and "a, b" in row and "tcp://127.0.0.1:5802" in row
    assert url in [
        w["url"] for w in cli_json(fleetplane("workers", "list", *cp, "--output", "json"))["workers"]
    ]
    removed = fleetplane("workers", "remove", url, *cp)
    assert removed.returncode == 0 and removed.stdout.strip() == f"removed {url}"
    assert url not in fleetplane("workers", "list", *cp).stdout


@pytest.mark.parametrize(
    ("args", "prefix"),
    [
        (("add", "127.0.0.1:5803"), "fleetplane workers add: INVALID_ARGUMENT: url: "),
        (("add", "ftp://127.0.0.1:5803"), "fleetplane workers add: INVALID_ARGUMENT: url: "),
        (("add", "http://127.0.0.1:5803/v1"), "fleetplane workers add: INVALID_ARGUMENT: url: "),
        (("add", "http://127.0.0.1:70000"), "fleetplane workers add: INVALID_ARGUMENT: url: "),
        (("add", ""), "fleetplane workers add: INVALID_ARGUMENT: url: "),
        (
            ("add", "http://127.0.0.1:5803", "--load-endpoint", "udp://127.0.0.1:1"),
            "fleetplane workers add: INVALID_ARGUMENT: load_endpoints[0]: ",
        ),
        (
            ("add", "h2c://127.0.0.1:5803", "--protocol", "http1", "--load-endpoint", "tcp://*:1"),
            "fleetplane workers add: INVALID_ARGUMENT: protocol: ",
        ),
        (
            ("add", "http://127.0.0.1:5803", "--model", "", "--load-endpoint", "tcp://*:1"),
            "fleetplane workers add: INVALID_ARGUMENT: models[0]: ",
        ),
        (("remove", "http://127.0.0.1:5803"), "fleetplane workers remove: NOT_FOUND: url: "),
        (("remove", "nonsense"), "fleetplane workers remove: INVALID_ARGUMENT: url: "),
    ],
)
def test_refusals_are_one_line_and_exit_1(cp: tuple[str, str], args: tuple[str, ...], prefix: str) -> None:
    """Every refusal is one stderr line naming the command, the status and the field; exit 1."""
    one_line_error(fleetplane("workers", *args, *cp), prefix)
    one_line_error(fleetplane("workers", *args, *cp, "--output", "json"), prefix)


def test_usage_errors_exit_2() -> None:
    """An unknown --protocol or a missing URL is a usage error (exit 2) naming what is allowed."""
    bad = fleetplane("workers", "add", "http://127.0.0.1:5804", "--protocol", "http3")
    assert (
        bad.returncode == 2 and "auto" in bad.stderr and "h2c" in bad.stderr and "Traceback" not in bad.stderr
    )
    missing = fleetplane("workers", "add")
    assert missing.returncode == 2 and "URL" in missing.stderr


def test_an_unreachable_control_plane_is_one_line_exit_1() -> None:
    """No control plane at the address: one line naming it, exit 1, for list, add and remove."""
    target = f"127.0.0.1:{free_port()}"
    for args in (("list",), ("add", "http://127.0.0.1:5805"), ("remove", "http://127.0.0.1:5805")):
        line = one_line_error(
            fleetplane("workers", *args, "--control-plane", target, "--timeout-s", "2"),
            f"fleetplane workers {args[0]}: ",
        )
        assert target in line


def test_add_of_a_worker_that_is_not_up_says_it_will_be_retried(cp: tuple[str, str]) -> None:
    """Registering before the engine answers succeeds (exit 0) and says so plainly: what failed and
    that the control plane keeps asking; the table does not pretend endpoints were discovered."""
    url = f"http://127.0.0.1:{free_port()}"
    added = fleetplane("workers", "add", url, *cp)
    assert added.returncode == 0, added.stderr
    assert "Connection refused" in added.stdout and "background" in added.stdout
    assert "(discovered)" not in added.stdout
    listed = cli_json(fleetplane("workers", "list", *cp, "--output", "json"))
    (worker,) = [w for w in listed["workers"] if w["url"] == url]
    assert "background" in worker["discoveryError"]
    fleetplane("workers", "remove", url, *cp)


def test_add_of_a_hung_worker_answers_within_the_timeout_given(cp: tuple[str, str]) -> None:
    """`--timeout-s 3` against a worker that never answers: the command ends in about 3 s, not
    the discovery's own worst case, and still registers the worker with the reason."""
    with FakeWorker({"/server_info": HANG, "/v1/models": HANG}) as hung:
        started = time.monotonic()
        added = fleetplane("workers", "add", hung.url, *cp, "--timeout-s", "3", "--output", "json")
        took = time.monotonic() - started
    worker = cli_json(added)["worker"]
    assert "no answer within" in worker["discoveryError"]
    assert took < 5.0, took
    assert json.loads(fleetplane("workers", "remove", hung.url, *cp, "--output", "json").stdout) == {}


def test_ctrl_c_while_add_waits_is_one_line_exit_130(cp: tuple[str, str]) -> None:
    """Ctrl-C during `workers add` (waiting on a hung worker's discovery): no traceback, one line,
    exit 130 as a shell reports SIGINT."""
    with FakeWorker({"/server_info": HANG, "/v1/models": HANG}) as hung:
        command = [
            sys.executable,
            "-c",
            "import sys; from controlplane.cli.main import main; sys.exit(main())",
        ]
        proc = subprocess.Popen(
            [*command, "workers", "add", hung.url, *cp],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            until(lambda: hung.hits.get("/server_info"), timeout_s=20)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 130 and out == ""
    assert err.splitlines() == ["fleetplane workers: interrupted"]
