"""Durable router status and rejection counts (SPEC §6: ``GetRejectionStats`` survives restarts).

Two tables in the control plane's SQLite file, next to the contract store's tables but owned by
this module: the newest status record per router and the last cumulative count per (router,
boot, scope, param). They go through the contract store's ``SqliteDatabase`` (its one thread and
connection, WAL + ``synchronous=FULL``, SPEC §6 "Durability"), so the event loop never blocks on
the disk and the file has a single writer.

Writes are coalesced by the caller (``RouterService`` flushes at most once per second, and when a
report stream ends). Nothing acknowledged to a client depends on them: a router re-sends its
cumulative counts on every report, so counts not yet written when the control plane dies come
back with the router's next report after it reconnects.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Protocol

from controlplane.errors import Unavailable
from controlplane.reports.rejections import RejectionRow
from controlplane.reports.rollout import RouterRecord
from controlplane.store.database import SqliteDatabase

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS router_status (
        router_id TEXT PRIMARY KEY,
        boot_id TEXT NOT NULL,
        applied_revision INTEGER NOT NULL,
        apply_error TEXT NOT NULL,
        last_report_unix_s REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS router_rejections (
        router_id TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        param TEXT NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (router_id, boot_id, scope, param)
    )""",
    # The counts of routers with --api-keys, by client: a table of their own, so the table
    # above keeps its key (a store written before them opens unchanged).
    """CREATE TABLE IF NOT EXISTS router_client_rejections (
        router_id TEXT NOT NULL,
        boot_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        param TEXT NOT NULL,
        client TEXT NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (router_id, boot_id, scope, param, client)
    )""",
)
# Counts only grow within a boot (SPEC §6): the upsert never lowers a stored count.
_UPSERT_COUNT = """INSERT INTO router_rejections (router_id, boot_id, scope, param, count)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (router_id, boot_id, scope, param) DO UPDATE SET count = MAX(count, excluded.count)"""
_UPSERT_CLIENT_COUNT = """INSERT INTO router_client_rejections (router_id, boot_id, scope, param, client, count)
    VALUES (?, ?, ?, ?, ?, ?)
    ON CONFLICT (router_id, boot_id, scope, param, client) DO UPDATE SET count = MAX(count, excluded.count)"""
_UPSERT_STATUS = """INSERT INTO router_status
    (router_id, boot_id, applied_revision, apply_error, last_report_unix_s) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (router_id) DO UPDATE SET boot_id = excluded.boot_id,
        applied_revision = excluded.applied_revision, apply_error = excluded.apply_error,
        last_report_unix_s = excluded.last_report_unix_s"""


class RouterStoreError(Exception):
    """The router-stats table could not be read or written."""


class RouterStatsStore(Protocol):
    """Where ``RouterService`` keeps router status and rejection counts across restarts."""

    async def load(self) -> tuple[list[RouterRecord], list[RejectionRow]]: ...

    async def save(self, records: Sequence[RouterRecord], rows: Sequence[RejectionRow]) -> None: ...

    async def close(self) -> None: ...


class MemoryRouterStatsStore:
    """Keeps nothing across restarts (tests, and stores without a router-stats table)."""

    def __init__(self) -> None:
        self.records: dict[str, RouterRecord] = {}
        self.rows: dict[tuple[str, str, str, str, str], RejectionRow] = {}

    async def load(self) -> tuple[list[RouterRecord], list[RejectionRow]]:
        return list(self.records.values()), list(self.rows.values())

    async def save(self, records: Sequence[RouterRecord], rows: Sequence[RejectionRow]) -> None:
        for record in records:
            self.records[record.router_id] = record
        for row in rows:
            key = row.key
            old = self.rows.get(key)
            if old is None or row.count > old.count:
                self.rows[key] = row

    async def close(self) -> None:
        return None


class SqliteRouterStatsStore:
    """The router-stats tables in the control plane's SQLite file, on its database thread."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    @classmethod
    async def open(cls, database: SqliteDatabase) -> SqliteRouterStatsStore:
        """Create the tables if needed (``database`` is open and owned by the contract store)."""
        store = cls(database)
        try:
            await database.transaction(_create_tables)
        except sqlite3.Error as exc:
            raise RouterStoreError(f"cannot create the router stats tables: {exc}") from exc
        return store

    async def load(self) -> tuple[list[RouterRecord], list[RejectionRow]]:
        """Every stored status record and count."""
        try:
            return await self._database.read(_load)
        except sqlite3.Error as exc:
            raise RouterStoreError(f"cannot read router stats: {exc}") from exc

    async def save(self, records: Sequence[RouterRecord], rows: Sequence[RejectionRow]) -> None:
        """Write status records and counts in one durable transaction."""
        if not records and not rows:
            return
        statuses = [
            (r.router_id, r.boot_id, r.applied_revision, r.apply_error, r.last_report_unix_s) for r in records
        ]
        counts = [(r.router_id, r.boot_id, r.scope, r.param, r.count) for r in rows if not r.client]
        client_counts = [
            (r.router_id, r.boot_id, r.scope, r.param, r.client, r.count) for r in rows if r.client
        ]

        def write(conn: sqlite3.Connection) -> None:
            conn.executemany(_UPSERT_STATUS, statuses)
            conn.executemany(_UPSERT_COUNT, counts)
            conn.executemany(_UPSERT_CLIENT_COUNT, client_counts)

        try:
            await self._database.transaction(write)
        except (sqlite3.Error, Unavailable) as exc:
            raise RouterStoreError(f"cannot write router stats: {exc}") from exc

    async def close(self) -> None:
        """Nothing to do: the database belongs to the contract store, which closes it."""


def _create_tables(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)


def _load(conn: sqlite3.Connection) -> tuple[list[RouterRecord], list[RejectionRow]]:
    records = [
        RouterRecord(str(r[0]), str(r[1]), int(r[2]), str(r[3]), float(r[4]))
        for r in conn.execute(
            "SELECT router_id, boot_id, applied_revision, apply_error, last_report_unix_s FROM router_status"
        )
    ]
    rows = [
        RejectionRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]))
        for r in conn.execute("SELECT router_id, boot_id, scope, param, count FROM router_rejections")
    ]
    rows += [
        RejectionRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[5]), str(r[4]))
        for r in conn.execute(
            "SELECT router_id, boot_id, scope, param, client, count FROM router_client_rejections"
        )
    ]
    return records, rows
