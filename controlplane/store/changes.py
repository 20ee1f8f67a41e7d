"""What a contract write makes of a scope's history (SPEC §3.2), decided once for every backend.

A backend reads the scope's head (its newest version, a deletion included) and, for a rollback,
the target version (SQLite: inside its write transaction; etcd: before its compare-and-swap),
asks here, and appends the ``Change`` it gets, or writes nothing when this raises:

* ``expected_version`` (None: unconditional; 0: the scope has no version yet) must be the
  head's version, else ``VersionMismatch`` (``ABORTED``), checked before anything else;
* an update needs a live head unless ``allow_missing``; a delete needs a live head;
* a rollback needs a history, the target version in it, and a target with params (a deletion
  cannot be rolled back to).

Every refusal names the request field it concerns (SPEC §6). Pure: the backend numbers the
change (the store-wide revision) and dates it.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.contracts import SamplingContract
from controlplane.errors import InvalidArgument, NotFound, VersionMismatch
from controlplane.store.model import ChangeKind, ContractVersion


@dataclass(frozen=True, slots=True)
class Change:
    """The version a write appends to ``scope``, before the backend gives it a revision and a time."""

    scope: str
    version: int
    kind: ChangeKind
    contract: SamplingContract | None  # None for a deletion
    rolled_back_from_version: int = 0

    def written(self, *, revision: int, author: str, comment: str, create_time_us: int) -> ContractVersion:
        return ContractVersion(
            scope=self.scope,
            version=self.version,
            revision=revision,
            change=self.kind,
            contract=self.contract,
            author=author,
            create_time_us=create_time_us,
            comment=comment,
            rolled_back_from_version=self.rolled_back_from_version,
        )


def update(
    scope: str,
    head: ContractVersion | None,
    contract: SamplingContract,
    *,
    expected_version: int | None,
    allow_missing: bool,
) -> Change:
    """Set ``scope``'s contract; a scope without a live contract only with ``allow_missing``."""
    _check_expected(scope, head, expected_version)
    if (head is None or not head.live) and not allow_missing:
        raise NotFound(f"scope {scope!r} has no contract (set allow_missing to create it)", field="scope")
    return Change(scope, _next_version(head), ChangeKind.UPDATE, contract)


def delete(scope: str, head: ContractVersion | None, *, expected_version: int | None) -> Change:
    """End ``scope``'s live contract (a version without params; the history stays)."""
    _check_expected(scope, head, expected_version)
    if head is None or not head.live:
        raise NotFound(f"scope {scope!r} has no contract to delete", field="scope")
    return Change(scope, _next_version(head), ChangeKind.DELETE, None)


def check_rollback_version(version: int) -> None:
    """The target of a rollback, checked before anything is read."""
    if version < 1:
        raise InvalidArgument(f"version: must be >= 1, got {version}", field="version")


def rollback(
    scope: str,
    version: int,
    head: ContractVersion | None,
    target: ContractVersion | None,
    *,
    expected_version: int | None,
) -> Change:
    """Make version ``version`` (``target``, None when missing) of ``scope`` live again, as a new version."""
    _check_expected(scope, head, expected_version)
    if head is None:
        raise NotFound(f"scope {scope!r} has no history", field="scope")
    if target is None:
        raise NotFound(
            f"version: scope {scope!r} has no version {version} (latest is {head.version})", field="version"
        )
    if target.contract is None:
        raise InvalidArgument(
            f"version: version {version} of scope {scope!r} is a deletion; roll back to a version with params",
            field="version",
        )
    return Change(scope, _next_version(head), ChangeKind.ROLLBACK, target.contract, version)


def _check_expected(scope: str, head: ContractVersion | None, expected_version: int | None) -> None:
    current = 0 if head is None else head.version
    if expected_version is not None and expected_version != current:
        raise VersionMismatch(
            f"expected_version: scope {scope!r} is at version {current}, not {expected_version}",
            field="expected_version",
        )


def _next_version(head: ContractVersion | None) -> int:
    return 1 if head is None else head.version + 1
