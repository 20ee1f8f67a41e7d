"""The embedded default store: contracts in one SQLite file (SPEC §3.2, §6 Durability).

Every change is one transaction that reads the scope's head, has ``changes.py`` decide what to
append (``expected_version`` and the other preconditions), bumps the store-wide revision kept in
``meta`` and appends an immutable row; it is acknowledged only after COMMIT (WAL,
``synchronous=FULL``). Nothing is ever updated in place or deleted, so a revision is never
reused, across restarts included.

Reads of the live set are served from an in-memory ``Snapshot``. The database thread builds the
next snapshot right after each COMMIT (so snapshots are built in commit order), and the event loop
publishes the newest one and wakes ``wait_for_change`` callers.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from controlplane.contracts import (
    SamplingContract,
    contract_to_json,
    parse_contract_json,
)
from controlplane.errors import NotFound
from controlplane.store import changes
from controlplane.store.database import SqliteDatabase
from controlplane.store.model import (
    EMPTY_SNAPSHOT,
    ChangeKind,
    ContractVersion,
    HistoryPage,
    Snapshot,
)
from controlplane.store.published import PublishedSnapshots

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0), ('schema_version', 1);
CREATE TABLE IF NOT EXISTS contract_versions (
    scope          TEXT    NOT NULL,
    version        INTEGER NOT NULL,
    revision       INTEGER NOT NULL UNIQUE,
    change         TEXT    NOT NULL CHECK (change IN ('update', 'delete', 'rollback')),
    params         TEXT,
    conflict       TEXT,
    author         TEXT    NOT NULL,
    create_time_us INTEGER NOT NULL,
    comment        TEXT    NOT NULL,
    rolled_back_from_version INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, version)
);
"""

_COLUMNS = (
    "scope, version, revision, change, params, conflict, author, create_time_us, comment, "
    "rolled_back_from_version"
)
_Row = tuple[str, int, int, str, str | None, str | None, str, int, str, int]


def _from_row(row: _Row) -> ContractVersion:
    scope, version, revision, change, params, conflict, author, create_us, comment, rb_from = row
    contract = None if params is None else parse_contract_json(params, conflict or "reject")
    return ContractVersion(
        scope, version, revision, ChangeKind(change), contract, author, create_us, comment, rb_from
    )


def next_revision(conn: sqlite3.Connection) -> int:
    """Bump and return the store-wide revision; call inside a write transaction."""
    (revision,) = conn.execute(
        "UPDATE meta SET value = value + 1 WHERE key = 'revision' RETURNING value"
    ).fetchone()
    return int(revision)


class SqliteStore(PublishedSnapshots):
    """``Store`` on SQLite; ``database`` is shared with other tables in the same file."""

    def __init__(self, path: Path) -> None:
        super().__init__()  # the published snapshot: touched only on the event loop
        self.database = SqliteDatabase(path)
        self._committed = EMPTY_SNAPSHOT  # touched only on the database thread

    @property
    def path(self) -> Path:
        return self.database.path

    async def open(self) -> None:
        await self.database.open()
        self._publish(await self.database.read(self._load))

    async def close(self) -> None:
        await self.database.close()

    async def update(
        self,
        scope: str,
        contract: SamplingContract,
        *,
        expected_version: int | None,
        allow_missing: bool,
        author: str,
        comment: str,
    ) -> ContractVersion:
        def write(conn: sqlite3.Connection) -> tuple[ContractVersion, Snapshot]:
            head = self._head(conn, scope)
            change = changes.update(
                scope, head, contract, expected_version=expected_version, allow_missing=allow_missing
            )
            return self._append(conn, change, author, comment)

        return await self._write(write)

    async def delete(
        self, scope: str, *, expected_version: int | None, author: str, comment: str
    ) -> ContractVersion:
        def write(conn: sqlite3.Connection) -> tuple[ContractVersion, Snapshot]:
            change = changes.delete(scope, self._head(conn, scope), expected_version=expected_version)
            return self._append(conn, change, author, comment)

        return await self._write(write)

    async def rollback(
        self, scope: str, version: int, *, expected_version: int | None, author: str, comment: str
    ) -> ContractVersion:
        changes.check_rollback_version(version)

        def write(conn: sqlite3.Connection) -> tuple[ContractVersion, Snapshot]:
            head = self._head(conn, scope)
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM contract_versions WHERE scope = ? AND version = ?",
                (scope, version),
            ).fetchone()
            target = None if row is None else _from_row(row)
            change = changes.rollback(scope, version, head, target, expected_version=expected_version)
            return self._append(conn, change, author, comment)

        return await self._write(write)

    async def history(self, scope: str, *, page_size: int, before_version: int | None) -> HistoryPage:
        def read(conn: sqlite3.Connection) -> HistoryPage:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM contract_versions WHERE scope = ? AND version < ? "
                "ORDER BY version DESC LIMIT ?",
                (scope, before_version if before_version is not None else 2**62, page_size + 1),
            ).fetchall()
            if not rows and before_version is None:
                raise NotFound(f"scope {scope!r} has no history", field="scope")
            versions = tuple(_from_row(r) for r in rows[:page_size])
            more = len(rows) > page_size
            return HistoryPage(versions, versions[-1].version if more else None)

        return await self.database.read(read)

    # -- database thread -------------------------------------------------------------------

    def _load(self, conn: sqlite3.Connection) -> Snapshot:
        conn.executescript(SCHEMA)
        (revision,) = conn.execute("SELECT value FROM meta WHERE key = 'revision'").fetchone()
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM contract_versions AS v WHERE version = "
            "(SELECT MAX(version) FROM contract_versions WHERE scope = v.scope)"
        ).fetchall()
        self._committed = Snapshot.of(int(revision), [_from_row(r) for r in rows])
        return self._committed

    @staticmethod
    def _head(conn: sqlite3.Connection, scope: str) -> ContractVersion | None:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM contract_versions WHERE scope = ? ORDER BY version DESC LIMIT 1",
            (scope,),
        ).fetchone()
        return None if row is None else _from_row(row)

    def _append(
        self, conn: sqlite3.Connection, change: changes.Change, author: str, comment: str
    ) -> tuple[ContractVersion, Snapshot]:
        written = change.written(
            revision=next_revision(conn),
            author=author,
            comment=comment,
            create_time_us=time.time_ns() // 1000,
        )
        contract = written.contract
        conn.execute(
            f"INSERT INTO contract_versions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                written.scope,
                written.version,
                written.revision,
                written.change.value,
                None if contract is None else contract_to_json(contract),
                None if contract is None else contract.conflict.value,
                written.author,
                written.create_time_us,
                written.comment,
                written.rolled_back_from_version,
            ),
        )
        # Built on the database thread so snapshots follow commit order; kept only once the
        # COMMIT succeeded (``_write``'s after_commit).
        return written, self._committed.with_version(written)

    # -- event loop ------------------------------------------------------------------------

    async def _write(
        self, fn: Callable[[sqlite3.Connection], tuple[ContractVersion, Snapshot]]
    ) -> ContractVersion:
        def committed(result: tuple[ContractVersion, Snapshot]) -> None:
            self._committed = result[1]

        async def commit_and_publish() -> ContractVersion:
            written, snapshot = await self.database.transaction(fn, committed)
            self._publish(snapshot)
            return written

        # Shielded: a client that cancels mid-write must not leave the committed change
        # unpublished to watchers.
        return await asyncio.shield(commit_and_publish())
