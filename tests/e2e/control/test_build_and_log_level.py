"""What an operator reads first: ``fleetplane --version``, build and process metrics on both planes, ``--log-level``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import time
import urllib.request
from pathlib import Path

from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.router import RouterProcess

VERSION = importlib.metadata.version("fleetplane")


def _metrics(url: str, token: str | None = None) -> str:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(
        urllib.request.Request(url + "/metrics", headers=headers), timeout=10
    ) as answer:
        return str(answer.read().decode())


def test_version_comes_from_the_package() -> None:
    """``fleetplane --version`` prints the installed package's version."""
    done = fleetplane("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"fleetplane {VERSION}"


def test_both_planes_expose_build_info_and_process_metrics() -> None:
    """Router and control plane ``/metrics`` name the build and carry process_* and python_info."""
    build = f'python="{platform.python_version()}",version="{VERSION}"'
    # The router's also says which form its hot path runs in: the one this run asked for, if it did.
    form = os.environ.get("FLEETPLANE_FORM", "")
    router_build = rf'fleetplane_build_info{{form="{form or "(compiled|plain)"}",{build}}} 1.0'
    with ControlPlaneProcess() as control, RouterProcess() as router:
        router_text, control_text = _metrics(router.url), _metrics(control.http_url)
        assert re.search(router_build, router_text), router_text
        assert f"fleetplane_build_info{{{build}}} 1.0" in control_text
        for text in (router_text, control_text):
            assert "process_resident_memory_bytes" in text
            assert "process_cpu_seconds_total" in text
            assert "python_info{" in text


def test_log_level_warning_silences_info_lines() -> None:
    """``--log-level warning``: the router's and the control plane's info lines are not written."""
    with RouterProcess("--log-level", "warning") as quiet, RouterProcess() as chatty:
        time.sleep(0.5)
        assert any('"router started"' in line or "router started" in line for line in chatty.output)
        assert not any("router started" in line for line in quiet.output)
    with ControlPlaneProcess("--log-level", "error") as quiet_cp, ControlPlaneProcess() as chatty_cp:
        time.sleep(0.5)
        assert any('"level": "info"' in line for line in chatty_cp.log_lines)
        assert not any('"level": "info"' in line for line in quiet_cp.log_lines)


def test_a_bad_log_level_is_one_startup_line() -> None:
    """``--log-level loud`` stops the router with one line naming the flag and the choices."""
    done = fleetplane("router", "--log-level", "loud")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--log-level" in lines[0] and "warning" in lines[0], done.stderr


def test_grpc_calls_are_counted_and_timed_by_method_and_code(tmp_path: Path) -> None:
    """After an answered and a refused call, /metrics counts each under its method and code, with a latency histogram."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"op": {"token": "op-token-0123456789", "role": "viewer"}}))
    with ControlPlaneProcess("--auth-tokens", str(tokens)) as control:
        ok = fleetplane("stats", "--control-plane", control.target, "--token", "op-token-0123456789")
        assert ok.returncode == 0, ok.stderr
        refused = fleetplane("stats", "--control-plane", control.target, "--token", "wrong-token-0123456")
        assert refused.returncode != 0
        text = _metrics(control.http_url, "op-token-0123456789")
    labels = 'grpc_method="GetRejectionStats",grpc_service="controlplane.v1.RouterService",grpc_type="unary"'
    assert f'grpc_server_handled_total{{grpc_code="OK",{labels}}} 1.0' in text
    assert f'grpc_server_handled_total{{grpc_code="UNAUTHENTICATED",{labels}}} 1.0' in text
    assert f'grpc_server_handling_seconds_count{{grpc_code="OK",{labels}}} 1.0' in text
