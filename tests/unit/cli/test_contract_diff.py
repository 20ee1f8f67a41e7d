"""What `contract set --dry-run` and `contract diff` list as changed between two contracts."""

from __future__ import annotations

from controlplane.cli.contract_diff import contract_changes, describe
from controlplane.contracts import parse_contract_json


def _lines(
    old: str | None, new: str | None, old_policy: str = "reject", new_policy: str = "reject"
) -> list[str]:
    before = parse_contract_json(old, old_policy) if old else None
    after = parse_contract_json(new, new_policy) if new else None
    return [" ".join(line.split()) for line in contract_changes(before, after)]


def test_changed_added_and_removed_fields_in_field_order() -> None:
    """One line per differing field, in the fixed field order, marked ~ + -."""
    assert _lines('{"top_k": 40, "temperature": 1}', '{"min_p": 0.05, "temperature": 0.7}') == [
        "~ temperature 1 -> 0.7",
        "- top_k 40",
        "+ min_p 0.05",
    ]


def test_a_band_is_shown_as_the_operator_writes_it() -> None:
    """Bands print as {"min", "max", "default"} JSON on either side of the arrow."""
    assert _lines('{"top_k": 40}', '{"top_k": {"min": 1, "max": 50, "default": 40}}') == [
        '~ top_k 40 -> {"min": 1, "max": 50, "default": 40}'
    ]


def test_the_conflict_policy_is_a_change_too() -> None:
    """Same params, another policy: one line for the policy."""
    assert _lines('{"temperature": 1}', '{"temperature": 1}', "reject", "allow") == [
        "~ conflict reject -> allow"
    ]


def test_equal_contracts_have_no_changes_and_none_means_no_contract() -> None:
    """Equal numbers written differently (1 and 1.0) are no change; from or to no contract, every
    field is added or removed."""
    assert _lines('{"n": 1, "temperature": 1}', '{"n": 1.0, "temperature": 1.0}') == []
    assert _lines(None, '{"temperature": 1}') == ["+ temperature 1"]
    assert _lines('{"temperature": 1}', None) == ["- temperature 1"]
    assert describe(None) == "(no contract)"
    assert describe(parse_contract_json('{"top_p": 0.9}', "allow")) == '{"top_p": 0.9} (conflict allow)'
