"""The control plane's ``--worker-api-key``: workers that want a key (SGLang's ``--api-key``) are
discovered with it, and without it their discovery fails saying why."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.engine_sim import EngineSim, kv_endpoint_with_free_load_ports

WORKER_KEY = "sk-worker-0123456789abcdef"


def keyed_engine() -> EngineSim:
    """An engine-sim that publishes load and answers 401 unless a request carries exactly its key."""
    publish = ("--load-publish-endpoint", "auto", "--kv-events-endpoint", kv_endpoint_with_free_load_ports(1))
    return EngineSim("--api-key", WORKER_KEY, *publish)


def test_a_keyed_worker_is_discovered_with_the_control_planes_key(tmp_path: Path) -> None:
    """`workers add --wait-s` of a worker answering 401 without exactly its key: models found, exit 0;
    the key is in no output of the control plane."""
    key_file = tmp_path / "worker.key"
    key_file.write_text(WORKER_KEY + "\n")
    with (
        keyed_engine() as worker,
        ControlPlaneProcess("--worker-api-key-file", str(key_file)) as cp,
    ):
        added = fleetplane(
            "workers", "add", worker.url, "--control-plane", cp.target, "--wait-s", "20", "--output", "json"
        )
        assert added.returncode == 0, added.stderr
        found = json.loads(added.stdout)["worker"]
        assert found["discoveryError"] == "" and found["discovered"] and found["loadEndpoints"]
        assert WORKER_KEY not in "\n".join(cp.output)


def test_without_the_key_discovery_of_a_keyed_worker_fails_naming_the_401() -> None:
    """The same worker, a control plane without the key: `workers add --wait-s` exits 1 with HTTP 401."""
    with keyed_engine() as worker, ControlPlaneProcess() as cp:
        added = fleetplane("workers", "add", worker.url, "--control-plane", cp.target, "--wait-s", "5")
    assert added.returncode == 1
    assert "HTTP 401" in added.stderr, added.stderr


def test_a_bad_key_file_is_one_startup_line() -> None:
    """`fleetplane control --worker-api-key-file MISSING`: exit 2, one line naming the flag and the file."""
    done = fleetplane(
        "control", "--listen", "127.0.0.1:0", "--worker-api-key-file", "/nonexistent/worker.key"
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--worker-api-key-file '/nonexistent/worker.key': cannot read" in lines[0]
