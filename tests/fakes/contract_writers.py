"""Concurrent ContractService writers for crash tests (SPEC §6 Durability): every acknowledged
write is recorded, and each write's params are derived from its comment so a torn row would show."""

from __future__ import annotations

import threading

import grpc

from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc

WRITERS = 4


def temperature_for(comment: str) -> float:
    """Each write's params are derived from its comment, so a half-written row would show."""
    return (sum(map(ord, comment)) % 200) / 100


def update_request(scope: str, comment: str, expected: int | None = None) -> pb.UpdateContractRequest:
    # {"temperature": T, "top_k": {"min": 1, "max": 40}} as the API's messages (SPEC §6).
    params = {
        "temperature": pb.ParamSpec(exact=temperature_for(comment)),
        "top_k": pb.ParamSpec(band=pb.Band(min=1, max=40)),
    }
    req = pb.UpdateContractRequest(
        scope=scope, params=params, conflict=pb.CONFLICT_POLICY_REJECT, allow_missing=True, comment=comment
    )
    if expected is not None:
        req.expected_version = expected
    return req


def writer(target: str, index: int, acked: list[pb.Contract], stop: threading.Event) -> None:
    """Writes until the server dies; records every acknowledged version."""
    with grpc.insecure_channel(target) as channel:
        stub = contract_pb2_grpc.ContractServiceStub(channel)
        # Half the writers share one scope with expected_version (optimistic concurrency under load).
        scope = "*" if index % 2 else f"model-{index}"
        i = 0
        while not stop.is_set():
            comment = f"w{index}-{i}"
            i += 1
            try:
                expected = None
                if scope == "*":
                    try:
                        expected = stub.GetContract(
                            pb.GetContractRequest(scope=scope), timeout=2
                        ).contract.version
                    except grpc.RpcError as exc:
                        if exc.code() != grpc.StatusCode.NOT_FOUND:
                            raise
                        expected = 0
                acked.append(
                    stub.UpdateContract(update_request(scope, comment, expected), timeout=2).contract
                )
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.ABORTED:
                    continue
                return  # the server is gone


def contract_history(stub: contract_pb2_grpc.ContractServiceStub, scope: str) -> list[pb.Contract]:
    versions: list[pb.Contract] = []
    token = ""
    while True:
        page = stub.ListContractHistory(
            pb.ListContractHistoryRequest(scope=scope, page_size=100, page_token=token)
        )
        versions += page.versions
        token = page.next_page_token
        if not token:
            return versions
