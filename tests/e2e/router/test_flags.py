"""``fleetplane router`` / ``engine-sim`` flags as an operator meets them (SPEC §1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fakes.engine_sim import EngineSim
from tests.fakes.process import ROOT
from tests.fakes.raw_http import MODEL, engine_read, envelope, request
from tests.fakes.router import RouterProcess

ROUTER_FLAGS = [
    "--listen",
    "--control-plane",
    "--token",
    "--tls-ca",
    "--worker",
    "--override-sampling-params",
    "--sampling-param-conflict",
    "--policy",
    "--max-concurrency",
    "--queue-size",
    "--queue-timeout-s",
    "--request-timeout-s",
    "--max-body-bytes",
    "--processes",
    "--router-id",
]
ENGINE_SIM_FLAGS = [
    "--listen",
    "--http2",
    "--model",
    "--dp-size",
    "--kv-events-endpoint",
    "--load-publish-endpoint",
    "--max-running-requests",
    "--max-total-tokens",
    "--decode-tokens-per-s",
]


def fleetplane(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``fleetplane ARGS`` as a process (the console script's module), bounded in time."""
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(("command", "flags"), [("router", ROUTER_FLAGS), ("engine-sim", ENGINE_SIM_FLAGS)])
def test_help_lists_every_spec_flag(command: str, flags: list[str]) -> None:
    """``fleetplane COMMAND --help`` exits 0 and documents every SPEC §1 flag."""
    done = fleetplane(command, "--help")
    assert done.returncode == 0
    for flag in flags:
        assert flag in done.stdout, flag


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--policy", "random"], ["--policy", "random", "least_load"]),
        (["--max-concurrency", "lots"], ["--max-concurrency", "lots", "whole number"]),
        (["--queue-timeout-s", "soon"], ["--queue-timeout-s", "soon", "seconds"]),
        (["--max-concurrency", "0"], ["--max-concurrency", "0"]),
        (["--queue-timeout-s", "-1"], ["--queue-timeout-s", "-1"]),
        (["--sampling-param-conflict", "allow"], ["--sampling-param-conflict", "--override-sampling-params"]),
        (["--override-sampling-params", '{"top_p": 0}'], ["--override-sampling-params", "top_p", "(0, 1]"]),
        (["--worker", "ftp://h:1"], ["--worker", "ftp://h:1"]),
        (["--listen", "nowhere"], ["--listen", "nowhere"]),
        (["--no-such-flag"], ["--no-such-flag"]),
    ],
)
def test_bad_router_flag_is_one_line_and_exit_2(args: list[str], names: list[str]) -> None:
    """A bad router flag exits 2 with exactly one stderr line naming the flag and the value."""
    done = fleetplane("router", *args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for name in names:
        assert name in lines[0]


def test_bad_environment_value_is_one_line_naming_the_variable() -> None:
    """FLEETPLANE_POLICY=random stops the router with one line naming the variable."""
    done = fleetplane("router", env={"FLEETPLANE_POLICY": "random"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "fleetplane router: FLEETPLANE_POLICY='random': must be one of least_load, least_request, power_of_two, round_robin"
    ]


def test_router_configured_from_the_environment_alone(sim: EngineSim) -> None:
    """Every setting may come from FLEETPLANE_<FLAG>: workers, contract, policy and limits apply."""
    env = {
        **os.environ,
        "FLEETPLANE_LISTEN": "127.0.0.1:0",
        "FLEETPLANE_WORKER": f"{sim.url},{sim.url}",
        "FLEETPLANE_OVERRIDE_SAMPLING_PARAMS": '{"temperature": 0.25, "n": 1}',
        "FLEETPLANE_SAMPLING_PARAM_CONFLICT": "allow",
        "FLEETPLANE_POLICY": "round_robin",
        "FLEETPLANE_MAX_BODY_BYTES": "400",
        "FLEETPLANE_MAX_CONCURRENCY": "4",
        "FLEETPLANE_QUEUE_SIZE": "0",
        "FLEETPLANE_QUEUE_TIMEOUT_S": "5",
        "FLEETPLANE_REQUEST_TIMEOUT_S": "5",
    }
    process = RouterProcess(env=env)
    process.flags = []  # not even --listen: FLEETPLANE_LISTEN must do it
    with process as router:
        body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 1, "temperature": 1.5})
        ok = request(router, "POST", "/v1/completions", body.encode())
        assert ok.status == 200
        read = engine_read(ok)
        assert (read["temperature"], read["n"]) == (1.5, 1)  # allow: passed unchanged, n injected
        assert request(router, "GET", "/readiness").json()["workers"] == 2
        contract = request(router, "GET", "/contract").json()
        assert contract["contracts"]["*"]["conflict"] == "allow"
        big = request(router, "POST", "/v1/completions", b" " * 401)
        assert big.status == 413
        assert envelope(big)["code"] == "payload_too_large"


def test_flags_win_over_the_environment(sim: EngineSim) -> None:
    """A flag beats its FLEETPLANE_ variable; a repeatable flag replaces the variable's list."""
    env = {
        **os.environ,
        "FLEETPLANE_WORKER": "http://127.0.0.1:1",
        "FLEETPLANE_MAX_BODY_BYTES": "10",
        "FLEETPLANE_POLICY": "not-a-policy",
    }
    with RouterProcess(
        "--worker", sim.url, "--max-body-bytes", "100000", "--policy", "least_load", env=env
    ) as r:
        assert request(r, "GET", "/readiness").json()["workers"] == 1
        body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 1}).encode()
        assert request(r, "POST", "/v1/completions", body).status == 200
