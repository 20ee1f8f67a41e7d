"""What changes between two versions of a scope's contract, as lines an operator reads. Pure.

Used by ``contract set --dry-run`` (the current version against the one proposed) and by
``contract diff`` (two stored versions). One line per field that differs, in SPEC §2 order,
then the conflict policy if it differs::

    ~ temperature         1 -> 0.7
    + min_p               0.05
    - top_k               {"min": 1, "max": 50, "default": 40}
    ~ conflict            reject -> allow

``None`` stands for "no contract" (the scope does not exist, or that version deleted it).
"""

from __future__ import annotations

from controlplane.contracts import FIELD_NAMES, SamplingContract, contract_to_json, spec_to_json

_WIDTH = 20


def _line(mark: str, name: str, text: str) -> str:
    return f"{mark} {name:<{_WIDTH}}{text}"


def contract_changes(old: SamplingContract | None, new: SamplingContract | None) -> list[str]:
    """The differing fields and policy of ``old`` -> ``new``; empty when they judge alike."""
    old_params = dict(old.params) if old is not None else {}
    new_params = dict(new.params) if new is not None else {}
    lines = []
    for name in FIELD_NAMES:
        before, after = old_params.get(name), new_params.get(name)
        if before == after:
            continue
        if before is None:
            assert after is not None
            lines.append(_line("+", name, spec_to_json(after)))
        elif after is None:
            lines.append(_line("-", name, spec_to_json(before)))
        else:
            lines.append(_line("~", name, f"{spec_to_json(before)} -> {spec_to_json(after)}"))
    if old is not None and new is not None and old.conflict is not new.conflict:
        lines.append(_line("~", "conflict", f"{old.conflict.value} -> {new.conflict.value}"))
    return lines


def describe(contract: SamplingContract | None) -> str:
    """``{"temperature": 1} (conflict reject)``, or ``(no contract)``."""
    if contract is None:
        return "(no contract)"
    return f"{contract_to_json(contract)} (conflict {contract.conflict.value})"
