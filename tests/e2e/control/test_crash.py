"""kill -9 during concurrent writes loses no acknowledged write (SPEC §6 Durability)."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import grpc

from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.contract_writers import WRITERS, contract_history, temperature_for, update_request, writer
from tests.fakes.control_plane import ControlPlaneProcess


def _crash_round(cp: ControlPlaneProcess, acked: list[pb.Contract]) -> None:
    stop = threading.Event()
    threads = [
        threading.Thread(target=writer, args=(cp.target, i, acked, stop), daemon=True) for i in range(WRITERS)
    ]
    before = len(acked)
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(acked) - before < 40 and time.monotonic() < deadline:
        time.sleep(0.01)
    cp.kill()  # SIGKILL mid-stream: writers are still sending
    stop.set()
    for t in threads:
        t.join(10)
    assert len(acked) - before >= 40


def test_sigkill_during_concurrent_updates_loses_no_acknowledged_write(tmp_path: Path):
    """After kill -9 and restart every acked version is there; history is gap-free and consistent."""
    acked: list[pb.Contract] = []
    with ControlPlaneProcess(store_path=tmp_path / "control.db") as cp:
        for _ in range(2):
            _crash_round(cp, acked)
            cp.start()
        with grpc.insecure_channel(cp.target) as channel:
            stub = contract_pb2_grpc.ContractServiceStub(channel)
            scopes = {c.scope for c in acked}
            history = {scope: contract_history(stub, scope) for scope in scopes}
            by_key = {(v.scope, v.version): v for versions in history.values() for v in versions}
            for c in acked:
                stored = by_key[(c.scope, c.version)]
                assert (stored.revision, stored.comment, stored.author) == (c.revision, c.comment, c.author)
                assert stored.params == c.params
            revisions = []
            for scope, versions in history.items():
                # Newest first, versions 1..N without a gap, revisions increasing with the version.
                assert [v.version for v in versions] == list(range(len(versions), 0, -1)), scope
                assert all(a.revision > b.revision for a, b in itertools.pairwise(versions))
                for v in versions:  # written but maybe unacknowledged rows are complete too
                    assert v.params["temperature"].exact == temperature_for(v.comment)
                    assert v.params["top_k"].band.max == 40
                revisions += [v.revision for v in versions]
            assert len(revisions) == len(set(revisions))
            current = stub.ListContracts(pb.ListContractsRequest()).revision
            assert current == max(revisions)
            after = stub.UpdateContract(update_request("after", "after-restart")).contract
            assert after.revision == current + 1
