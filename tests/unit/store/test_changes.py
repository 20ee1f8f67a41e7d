"""The one decision of what an update, delete or rollback appends (both backends ask it)."""

from __future__ import annotations

import pytest

from controlplane.contracts import SamplingContract, parse_contract_json
from controlplane.errors import InvalidArgument, NotFound, VersionMismatch
from controlplane.store import changes
from controlplane.store.model import ChangeKind, ContractVersion

CONTRACT = parse_contract_json('{"temperature": 0.5}')
OTHER = parse_contract_json('{"top_k": 40}')


def _version(version: int, contract: SamplingContract | None = CONTRACT) -> ContractVersion:
    kind = ChangeKind.UPDATE if contract is not None else ChangeKind.DELETE
    return ContractVersion("m", version, version * 10, kind, contract, "op", 0, "")


def test_update_appends_the_next_version_of_the_scope():
    """An update of a live scope appends head + 1 with the new contract."""
    change = changes.update("m", _version(3), OTHER, expected_version=None, allow_missing=False)
    assert (change.scope, change.version, change.kind, change.contract) == ("m", 4, ChangeKind.UPDATE, OTHER)


def test_update_of_a_missing_or_deleted_scope_needs_allow_missing():
    """Without allow_missing an update of no contract is NOT_FOUND on scope; with it, version 1 (or head + 1)."""
    for head in (None, _version(2, None)):
        with pytest.raises(NotFound, match="set allow_missing to create it") as info:
            changes.update("m", head, CONTRACT, expected_version=None, allow_missing=False)
        assert info.value.field == "scope"
    assert changes.update("m", None, CONTRACT, expected_version=0, allow_missing=True).version == 1
    assert (
        changes.update("m", _version(2, None), CONTRACT, expected_version=None, allow_missing=True).version
        == 3
    )


def test_a_stale_expected_version_is_refused_before_any_other_rule():
    """expected_version other than the head's version is ABORTED, even where NOT_FOUND would also apply."""
    with pytest.raises(VersionMismatch, match="'m' is at version 0, not 2"):
        changes.update("m", None, CONTRACT, expected_version=2, allow_missing=False)
    with pytest.raises(VersionMismatch, match="at version 3, not 1"):
        changes.delete("m", _version(3), expected_version=1)
    with pytest.raises(VersionMismatch, match="at version 0, not 5") as info:
        changes.rollback("m", 1, None, None, expected_version=5)
    assert info.value.field == "expected_version"


def test_delete_needs_a_live_contract_and_appends_a_version_without_params():
    """Deleting nothing (or a deletion) is NOT_FOUND; a delete is a version with no contract."""
    for head in (None, _version(2, None)):
        with pytest.raises(NotFound, match="has no contract to delete"):
            changes.delete("m", head, expected_version=None)
    change = changes.delete("m", _version(2), expected_version=2)
    assert (change.version, change.kind, change.contract) == (3, ChangeKind.DELETE, None)


def test_rollback_reapplies_the_target_as_a_new_version():
    """A rollback appends head + 1 with the target's contract and says which version it came from."""
    change = changes.rollback("m", 1, _version(4, OTHER), _version(1), expected_version=None)
    assert (change.version, change.kind, change.contract, change.rolled_back_from_version) == (
        5,
        ChangeKind.ROLLBACK,
        CONTRACT,
        1,
    )


def test_rollback_refusals_name_the_field():
    """No history is NOT_FOUND on scope; a missing target NOT_FOUND on version; a deletion INVALID_ARGUMENT."""
    with pytest.raises(NotFound, match="has no history") as scope_missing:
        changes.rollback("m", 1, None, None, expected_version=None)
    with pytest.raises(NotFound, match=r"has no version 7 \(latest is 4\)") as version_missing:
        changes.rollback("m", 7, _version(4), None, expected_version=None)
    with pytest.raises(InvalidArgument, match="is a deletion") as deletion:
        changes.rollback("m", 2, _version(4), _version(2, None), expected_version=None)
    with pytest.raises(InvalidArgument, match="must be >= 1, got 0") as too_low:
        changes.check_rollback_version(0)
    fields = [e.value.field for e in (scope_missing, version_missing, deletion, too_low)]
    assert fields == ["scope", "version", "version", "version"]


def test_the_backend_numbers_and_dates_what_is_written():
    """The written version carries the backend's revision and time and the caller's author and comment."""
    written = changes.delete("m", _version(2), expected_version=None).written(
        revision=21, author="alice", comment="bye", create_time_us=7
    )
    assert written == ContractVersion("m", 3, 21, ChangeKind.DELETE, None, "alice", 7, "bye")
