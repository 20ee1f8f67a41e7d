"""Durable router status and rejection counts (SPEC §6: ``GetRejectionStats`` survives restarts).

Two tables in the control plane's SQLite file, next to the contract store's tables but owned by
this module (its own connection): the newest status record per router and the last cumulative
count per (router, boot, scope, param). Same durability settings as the contract store (WAL,
``synchronous=FULL``, SPEC §6 "Durability"); every blocking call runs in a worker thread.

Writes are coalesced by the caller (``RouterService`` flushes at most once per second, and when a
report stream ends). Nothing acknowledged to a client depends on them: a router re-sends its
cumulative counts on every report, so counts not yet written when the control plane dies come
back with the router's next report after it reconnects.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from controlplane.routers.rejections import RejectionRow
from controlplane.routers.rollout import RouterRecord

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
)
# Counts only grow within a boot (SPEC §6): the upsert never lowers a stored count.
_UPSERT_COUNT = """INSERT INTO router_rejections (router_id, boot_id, scope, param, count)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (router_id, boot_id, scope, param) DO UPDATE SET count = MAX(count, excluded.count)"""
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
        self.rows: dict[tuple[str, str, str, str], RejectionRow] = {}

    async def load(self) -> tuple[list[RouterRecord], list[RejectionRow]]:
        return list(self.records.values()), list(self.rows.values())

    async def save(self, records: Sequence[RouterRecord], rows: Sequence[RejectionRow]) -> None:
        for record in records:
            self.records[record.router_id] = record
        for row in rows:
            key = (row.router_id, row.boot_id, row.scope, row.param)
            old = self.rows.get(key)
            if old is None or row.count > old.count:
                self.rows[key] = row

    async def close(self) -> None:
        return None


class SqliteRouterStatsStore:
    """The router-stats tables in a SQLite file (shared with the contract store)."""

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, path: str | Path) -> SqliteRouterStatsStore:
        """Open (creating the tables if needed)."""
        store = cls(path)
        await asyncio.to_thread(store._open)
        return store

    def _open(self) -> None:
        try:
            # isolation_level=None: explicit BEGIN/COMMIT, so one save is one durable transaction.
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            # The contract store writes the same file through its own connection.
            conn.execute("PRAGMA busy_timeout=5000")
            for statement in _SCHEMA:
                conn.execute(statement)
        except sqlite3.Error as exc:
            raise RouterStoreError(f"cannot open router stats in {self._path}: {exc}") from exc
        self._conn = conn

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RouterStoreError("router stats store is closed")
        return self._conn

    async def load(self) -> tuple[list[RouterRecord], list[RejectionRow]]:
        """Every stored status record and count."""
        return await asyncio.to_thread(self._load)

    def _load(self) -> tuple[list[RouterRecord], list[RejectionRow]]:
        with self._lock:
            conn = self._connection()
            try:
                records = [
                    RouterRecord(str(r[0]), str(r[1]), int(r[2]), str(r[3]), float(r[4]))
                    for r in conn.execute(
                        "SELECT router_id, boot_id, applied_revision, apply_error, last_report_unix_s"
                        " FROM router_status"
                    )
                ]
                rows = [
                    RejectionRow(str(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]))
                    for r in conn.execute(
                        "SELECT router_id, boot_id, scope, param, count FROM router_rejections"
                    )
                ]
            except sqlite3.Error as exc:
                raise RouterStoreError(f"cannot read router stats: {exc}") from exc
        return records, rows

    async def save(self, records: Sequence[RouterRecord], rows: Sequence[RejectionRow]) -> None:
        """Write status records and counts in one durable transaction."""
        if records or rows:
            await asyncio.to_thread(self._save, list(records), list(rows))

    def _save(self, records: list[RouterRecord], rows: list[RejectionRow]) -> None:
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(
                        _UPSERT_STATUS,
                        [
                            (r.router_id, r.boot_id, r.applied_revision, r.apply_error, r.last_report_unix_s)
                            for r in records
                        ],
                    )
                    conn.executemany(
                        _UPSERT_COUNT, [(r.router_id, r.boot_id, r.scope, r.param, r.count) for r in rows]
                    )
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise RouterStoreError(f"cannot write router stats: {exc}") from exc

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        await asyncio.to_thread(self._close)

    def _close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
