"""What the store keeps (SPEC §3.2): immutable versions per scope, a store-wide revision.

Pure values and the ``Store`` protocol every backend implements. A ``Snapshot`` is the live
contract set at one revision; it is immutable so it can be shared by every watcher
(ARCHITECTURE.md: go-control-plane's versioned snapshots).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from controlplane.contracts import SamplingContract
from controlplane.errors import InvalidArgument

FLEET_SCOPE = "*"
MAX_SCOPE_CHARS = 256
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


class ChangeKind(enum.Enum):
    """How a version came to be."""

    UPDATE = "update"
    DELETE = "delete"
    ROLLBACK = "rollback"


@dataclass(frozen=True, slots=True)
class ContractVersion:
    """One immutable version of one scope; ``contract`` is None for a deletion."""

    scope: str
    version: int
    revision: int
    change: ChangeKind
    contract: SamplingContract | None
    author: str
    create_time_us: int
    comment: str
    rolled_back_from_version: int = 0

    @property
    def live(self) -> bool:
        return self.change is not ChangeKind.DELETE


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The live contract set at one store revision, keyed by scope in sorted order."""

    revision: int
    contracts: Mapping[str, ContractVersion]

    @staticmethod
    def of(revision: int, versions: list[ContractVersion]) -> Snapshot:
        live = sorted((v for v in versions if v.live), key=lambda v: v.scope)
        return Snapshot(revision, MappingProxyType({v.scope: v for v in live}))

    def with_version(self, written: ContractVersion) -> Snapshot:
        """The set after ``written`` (an update/rollback replaces its scope, a delete drops it)."""
        others = [v for s, v in self.contracts.items() if s != written.scope]
        return Snapshot.of(written.revision, [*others, written])


EMPTY_SNAPSHOT = Snapshot(0, MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """Versions newest first; ``next_before_version`` continues the listing (None: last page)."""

    versions: tuple[ContractVersion, ...]
    next_before_version: int | None


def check_scope(scope: str) -> str:
    """``*`` or a model name: non-empty, printable, no whitespace, at most 256 characters."""
    if not scope:
        raise InvalidArgument('scope: must be "*" (fleet default) or a model name, got ""', field="scope")
    if len(scope) > MAX_SCOPE_CHARS:
        raise InvalidArgument(f"scope: at most {MAX_SCOPE_CHARS} characters, got {len(scope)}", field="scope")
    if not scope.isprintable() or any(c.isspace() for c in scope):
        raise InvalidArgument(f"scope: {scope!r} contains whitespace or control characters", field="scope")
    return scope


def check_page_size(page_size: int) -> int:
    """0 means the default (50); larger than 1000 is capped (contract.proto)."""
    if page_size < 0:
        raise InvalidArgument(f"page_size: must be >= 0, got {page_size}", field="page_size")
    return DEFAULT_PAGE_SIZE if page_size == 0 else min(page_size, MAX_PAGE_SIZE)


class Store(Protocol):
    """Durable, versioned contracts (SPEC §3.2). Every write is acknowledged only once durable.

    Writes take ``expected_version`` (None: unconditional; 0: the scope has no version yet) and
    raise ``VersionMismatch`` on a mismatch without writing anything; ``NotFound`` when the
    scope (or version) is missing. They return the version written.
    """

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def snapshot(self) -> Snapshot:
        """The newest live set this process knows (no I/O)."""
        ...

    async def wait_for_change(self, after_revision: int) -> Snapshot:
        """Return the newest snapshot once its revision is above ``after_revision``."""
        ...

    async def get(self, scope: str) -> ContractVersion: ...

    async def list(self) -> Snapshot: ...

    async def update(
        self,
        scope: str,
        contract: SamplingContract,
        *,
        expected_version: int | None,
        allow_missing: bool,
        author: str,
        comment: str,
    ) -> ContractVersion: ...

    async def delete(
        self, scope: str, *, expected_version: int | None, author: str, comment: str
    ) -> ContractVersion: ...

    async def rollback(
        self, scope: str, version: int, *, expected_version: int | None, author: str, comment: str
    ) -> ContractVersion: ...

    async def history(self, scope: str, *, page_size: int, before_version: int | None) -> HistoryPage: ...
