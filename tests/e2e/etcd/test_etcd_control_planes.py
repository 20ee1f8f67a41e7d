"""``fleetplane control --store etcd://...`` as real processes: two control planes on one etcd, the
operator CLI through either, and kill -9 of one losing no acknowledged write (SPEC §1, §6)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.contract_writers import WRITERS, contract_history, temperature_for, update_request, writer
from tests.fakes.control_plane import ROOT, ControlPlaneProcess
from tests.fakes.etcd import EtcdServer


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A real etcd of this test only (skips without the binary)."""
    with EtcdServer(tmp_path) as server:
        yield server


def fleetplane(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlplane.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_contract_set_through_one_process_is_read_through_the_other(etcd: EtcdServer):
    """`contract set` via A, then `contract get`/`history` via B: same version, revision and params."""
    store = etcd.url("cli")
    with ControlPlaneProcess("--store", store) as a, ControlPlaneProcess("--store", store) as b:
        done = fleetplane(
            "contract", "set", "--control-plane", a.target, "--scope", "llama", "--comment", "via A",
            "--output", "json", '{"temperature": 0.7, "top_k": {"min": 1, "max": 50, "default": 40}}',
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        written = json.loads(done.stdout)["contract"]
        deadline = time.monotonic() + 10
        while True:
            got = fleetplane(
                "contract", "get", "--control-plane", b.target, "--scope", "llama", "--output", "json"
            )
            if got.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert got.returncode == 0, got.stderr
        seen = json.loads(got.stdout)["contract"]
        assert int(written["version"]) == 1
        assert (seen["version"], seen["revision"], seen["comment"]) == (
            written["version"],
            written["revision"],
            "via A",
        )
        assert seen["params"] == written["params"]


def test_sigkill_of_one_plane_during_writes_loses_no_acknowledged_write(etcd: EtcdServer):
    """Writers on A, kill -9 A: B (and A restarted) hold every acked version; revisions are 1..N, no gap."""
    store = etcd.url("crash")
    acked: list[pb.Contract] = []
    with ControlPlaneProcess("--store", store) as a, ControlPlaneProcess("--store", store) as b:
        stop = threading.Event()
        threads = [
            threading.Thread(target=writer, args=(a.target, i, acked, stop), daemon=True)
            for i in range(WRITERS)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 15
        while len(acked) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        a.kill()  # SIGKILL mid-stream: writers are still sending
        stop.set()
        for t in threads:
            t.join(10)
        assert len(acked) >= 40
        a.start()
        for target in (b.target, a.target):
            with grpc.insecure_channel(target) as channel:
                stub = contract_pb2_grpc.ContractServiceStub(channel)
                history = {scope: contract_history(stub, scope) for scope in {c.scope for c in acked}}
                by_key = {(v.scope, v.version): v for versions in history.values() for v in versions}
                for c in acked:
                    stored = by_key[(c.scope, c.version)]
                    assert (stored.revision, stored.comment, stored.params) == (
                        c.revision,
                        c.comment,
                        c.params,
                    )
                revisions: list[int] = []
                for scope, versions in history.items():
                    assert [v.version for v in versions] == list(range(len(versions), 0, -1)), scope
                    assert all(x.revision > y.revision for x, y in itertools.pairwise(versions))
                    for v in versions:  # committed but unacknowledged versions are complete too
                        assert v.params["temperature"].exact == temperature_for(v.comment)
                    revisions += [v.revision for v in versions]
                # One counter in etcd: every revision used exactly once, none skipped.
                assert sorted(revisions) == list(range(1, len(revisions) + 1))
                deadline = time.monotonic() + 5
                while stub.ListContracts(pb.ListContractsRequest()).revision != len(revisions):
                    assert time.monotonic() < deadline, "the plane's watch did not catch up"
                    time.sleep(0.05)
        with grpc.insecure_channel(b.target) as channel:
            stub = contract_pb2_grpc.ContractServiceStub(channel)
            after = stub.UpdateContract(update_request("after", "after-crash")).contract
            assert after.revision == len(revisions) + 1


def test_an_unreachable_etcd_is_a_one_line_startup_error(tmp_path: Path):
    """`fleetplane control --store etcd://…` with nothing listening exits 2 with one line naming --store."""
    done = subprocess.run(
        [sys.executable, "-m", "controlplane", "--listen", "127.0.0.1:0", "--http-listen", "off",
         "--store", "etcd://127.0.0.1:1/x"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and "--store etcd://127.0.0.1:1/x" in lines[-1] and "unavailable" in lines[-1]
