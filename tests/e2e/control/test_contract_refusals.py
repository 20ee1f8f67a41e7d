"""Every SPEC §3.1 refusal, as an operator meets it: INVALID_ARGUMENT / exit 2 naming key, value, domain."""

from __future__ import annotations

import math

import grpc
import pytest

from controlplane.v1 import contract_pb2 as pb
from controlplane.v1 import contract_pb2_grpc
from tests.fakes.cli import fleetplane
from tests.fakes.control_plane import ControlPlaneProcess

# (operator JSON, substrings the message must contain: the key, the value, the domain)
CLI_REFUSALS = [
    ("[1]", ["JSON object"]),
    ("{}", ["empty", "temperature"]),
    ('{"max_tokens": 1}', ['"max_tokens"', "supported"]),
    ('{"top_p": 1, "top_p": 1}', ['"top_p"', "more than once"]),
    ('{"temperature": "1"}', ['"temperature"', '"1"', "[0, 2]"]),
    ('{"top_p": true}', ['"top_p"', "true", "(0, 1]"]),
    ('{"n": null}', ['"n"', "null", "[1, 128]"]),
    ('{"top_k": {"max": 5}}', ['"top_k"', '"min"']),
    ('{"top_k": {"min": 1, "max": 5, "max": 6}}', ['"top_k"', '"max"', "more than once"]),
    ('{"top_k": {"min": 1, "max": 5, "mid": 3}}', ['"top_k"', '"mid"']),
    ('{"min_p": {"min": "0", "max": 1}}', ['"min_p"', '"0"', "[0, 1]"]),
    ('{"temperature": {"min": 1.5, "max": 1}}', ['"temperature"', "1.5", "1"]),
    ('{"top_k": {"min": 0, "max": 5}}', ['"top_k"', "0", ">= 1"]),
    ('{"repetition_penalty": 0}', ['"repetition_penalty"', "0", "(0, 2]"]),
    ('{"frequency_penalty": NaN}', ['"frequency_penalty"', "NaN", "[-2, 2]"]),
    ('{"presence_penalty": {"min": -3, "max": 0}}', ['"presence_penalty"', "-3", "[-2, 2]"]),
    ('{"top_k": 2.5}', ['"top_k"', "2.5", "whole"]),
    ('{"n": {"min": 1, "max": 2.5}}', ['"n"', "2.5", "whole"]),
    ('{"temperature": {"min": 0, "max": 1, "default": 1.5}}', ['"temperature"', "1.5", "[0, 1]"]),
]


@pytest.mark.parametrize(("text", "needles"), CLI_REFUSALS)
def test_contract_set_refuses_with_key_value_and_domain(
    shared_control_plane: ControlPlaneProcess, text: str, needles: list[str]
) -> None:
    """`contract set` refuses a bad contract with exit 2 and one line naming what is wrong."""
    got = fleetplane("contract", "set", "--control-plane", shared_control_plane.target, "--scope", "*", text)
    assert got.returncode == 2, got.stdout
    line = got.stderr.strip()
    assert "\n" not in line
    for needle in needles:
        assert needle in line, line


def test_a_band_under_allow_is_refused(shared_control_plane: ControlPlaneProcess) -> None:
    """A band needs conflict reject: `--conflict allow` with a band exits 2 naming the key."""
    got = fleetplane(
        "contract",
        "set",
        "--control-plane",
        shared_control_plane.target,
        "--scope",
        "*",
        "--conflict",
        "allow",
        '{"top_k": {"min": 1, "max": 5}}',
    )
    assert got.returncode == 2
    assert '"top_k"' in got.stderr and "reject" in got.stderr


def _band(lo: float, hi: float, default: float | None = None) -> pb.ParamSpec:
    band = pb.Band(min=lo, max=hi)
    if default is not None:
        band.default = default
    return pb.ParamSpec(band=band)


GRPC_REFUSALS = [
    ({}, pb.CONFLICT_POLICY_REJECT, ["params", "empty"]),
    ({"max_tokens": pb.ParamSpec(exact=1)}, pb.CONFLICT_POLICY_REJECT, ['"max_tokens"']),
    ({"temperature": pb.ParamSpec()}, pb.CONFLICT_POLICY_REJECT, ['"temperature"']),
    (
        {"temperature": pb.ParamSpec(exact=math.nan)},
        pb.CONFLICT_POLICY_REJECT,
        ['"temperature"', "NaN", "[0, 2]"],
    ),
    ({"top_p": pb.ParamSpec(exact=0)}, pb.CONFLICT_POLICY_REJECT, ['"top_p"', "0", "(0, 1]"]),
    ({"top_k": pb.ParamSpec(exact=1.5)}, pb.CONFLICT_POLICY_REJECT, ['"top_k"', "1.5", "whole"]),
    ({"top_k": _band(-1, 5)}, pb.CONFLICT_POLICY_REJECT, ['"top_k"', "-1", ">= 1"]),
    ({"min_p": _band(0.5, 0.1)}, pb.CONFLICT_POLICY_REJECT, ['"min_p"', "0.5", "0.1"]),
    ({"n": _band(1, 4, 9)}, pb.CONFLICT_POLICY_REJECT, ['"n"', "9", "[1, 4]"]),
    ({"top_k": _band(1, 5)}, pb.CONFLICT_POLICY_ALLOW, ['"top_k"', "reject"]),
    ({"temperature": pb.ParamSpec(exact=1)}, 7, ["conflict", "7"]),
]


@pytest.mark.parametrize(("params", "conflict", "needles"), GRPC_REFUSALS)
def test_update_contract_refuses_with_invalid_argument(
    shared_control_plane: ControlPlaneProcess,
    params: dict[str, pb.ParamSpec],
    conflict: int,
    needles: list[str],
) -> None:
    """UpdateContract answers INVALID_ARGUMENT naming the field, and writes nothing."""
    channel = grpc.insecure_channel(shared_control_plane.target)
    stub = contract_pb2_grpc.ContractServiceStub(channel)
    request = pb.UpdateContractRequest(scope="*", params=params, conflict=conflict, allow_missing=True)  # type: ignore[arg-type]
    with pytest.raises(grpc.RpcError) as info:
        stub.UpdateContract(request, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    for needle in needles:
        assert needle in info.value.details(), info.value.details()
    assert stub.ListContracts(pb.ListContractsRequest(), timeout=10).revision == 0
    channel.close()
