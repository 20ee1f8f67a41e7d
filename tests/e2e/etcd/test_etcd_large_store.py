"""A control plane on etcd reopens a store whose contract heads are larger than one gRPC message
(gRPC's default receive limit is 4 MiB): the resync pages its read (SPEC §6 "Durability")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.control_plane import ControlPlaneProcess
from tests.fakes.etcd import EtcdServer

# A 4096-character comment of "é" is 8 KiB in protobuf (and 24 KiB as stored, escaped in JSON):
# 600 scopes make more than 4 MiB of heads however they are encoded.
SCOPES = 600
COMMENT = "é" * 4096
HEADS_BYTES_AT_LEAST = 4 * 1024 * 1024


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A real etcd of this test only (skips without the binary)."""
    with EtcdServer(tmp_path) as server:
        yield server


def _update(scope: str) -> pb.UpdateContractRequest:
    return pb.UpdateContractRequest(
        scope=scope,
        params={"temperature": pb.ParamSpec(exact=0.5)},
        conflict=pb.CONFLICT_POLICY_REJECT,
        allow_missing=True,
        comment=COMMENT,
    )


def test_a_replica_restarts_on_more_than_4_mib_of_contract_heads_and_serves_every_scope(etcd: EtcdServer):
    """600 scopes with 4096-character comments: a restarted replica and a new one come up and serve all."""
    store = etcd.url("big")
    scopes = [f"model-{i:03d}" for i in range(SCOPES)]
    with ControlPlaneProcess("--store", store) as first:
        with grpc.insecure_channel(first.target) as channel:
            stub = contract_pb2_grpc.ContractServiceStub(channel)
            written = [stub.UpdateContract(_update(s), timeout=10).contract for s in scopes]
        assert sum(c.ByteSize() for c in written) > HEADS_BYTES_AT_LEAST
        first.restart()
        with ControlPlaneProcess("--store", store) as second:
            for plane in (first, second):
                assert plane.returncode is None
                with grpc.insecure_channel(plane.target) as channel:
                    stub = contract_pb2_grpc.ContractServiceStub(channel)
                    for scope, contract in zip(scopes, written, strict=True):
                        got = stub.GetContract(pb.GetContractRequest(scope=scope), timeout=10).contract
                        assert (got.version, got.revision, got.comment) == (
                            contract.version,
                            contract.revision,
                            COMMENT,
                        )
