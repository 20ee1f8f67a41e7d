"""The exception -> status mapping keeps messages small enough for gRPC's trailers."""

from __future__ import annotations

import grpc

from controlplane.contracts import ContractError
from controlplane.errors import InvalidArgument, PermissionDenied, Unauthenticated
from controlplane.server.errors import MAX_MESSAGE_BYTES, clip, status_for


def test_a_long_message_is_cut_at_a_character_boundary_and_marked() -> None:
    """Cut to the byte budget of UTF-8 without splitting a character; the cut says how much is left out."""
    message = "url: bad host in '" + "\u00fc" * 5000 + "'"
    cut = clip(message)
    assert cut.startswith("url: bad host in '") and cut.endswith("more bytes)")
    assert len(cut.split("…")[0].encode()) <= MAX_MESSAGE_BYTES
    assert clip("short") == "short"


def test_domain_errors_keep_their_status_with_a_clipped_message() -> None:
    """INVALID_ARGUMENT stays INVALID_ARGUMENT however long the value it quotes."""
    code, message = status_for(InvalidArgument("models[0]: bad " + "x" * 50_000, field="models"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("models[0]: bad ")
    assert len(message.encode()) < 2 * MAX_MESSAGE_BYTES


def test_a_refused_contract_is_invalid_argument_naming_the_field() -> None:
    """A ContractError is INVALID_ARGUMENT; one about the whole map is said to concern params."""
    assert status_for(ContractError("top_k: must be an integer", field="top_k")) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "top_k: must be an integer",
    )
    code, message = status_for(ContractError("sampling contract is empty"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message == "params: sampling contract is empty"


def test_auth_refusals_keep_their_status() -> None:
    """Unauthenticated and PermissionDenied map to their own statuses with the message as is."""
    assert status_for(Unauthenticated("unknown bearer token")) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "unknown bearer token",
    )
    assert status_for(PermissionDenied("no"))[0] == grpc.StatusCode.PERMISSION_DENIED
