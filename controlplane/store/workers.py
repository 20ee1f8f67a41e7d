"""The durable worker registry (SPEC §6: RegisterWorker survives restarts): the stored record,
the ``WorkerRegistry`` protocol and its memory and SQLite backends (etcd: ``etcd_workers.py``).

The record is defined here, with the store, as the contracts' ``ContractVersion`` is in
``model.py``: the backends persist it and everything above (``workers/``, ``load/``, ``server/``)
reads it. One table, ``workers``, in the control plane's SQLite file, owned by this module and written
through the contract store's ``SqliteDatabase`` (its one thread and connection: WAL +
``synchronous=FULL``, so ``put``/``delete`` return only once the change is on disk, SPEC §6
"Durability"). ``MemoryWorkerRegistry`` keeps nothing across restarts (tests, and a store
without a SQLite file).
"""

from __future__ import annotations

import enum
import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol as TypingProtocol
from typing import TypeVar

from controlplane.errors import Unavailable
from controlplane.store.database import SqliteDatabase

# The topic of a worker registered with explicit load endpoints (SPEC §7: kv_events.load_topic).
LOAD_TOPIC = "load"


class Protocol(enum.IntEnum):
    """Numbered as the protobuf ``WorkerProtocol`` enum."""

    AUTO = 1
    HTTP1 = 2
    H2C = 3


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A registered worker as stored (the registry's row and ``Worker`` message)."""

    url: str
    protocol: Protocol
    resolved_protocol: Protocol
    models: tuple[str, ...] = ()
    load_endpoints: tuple[str, ...] = ()
    load_topic: str = LOAD_TOPIC
    discovered: bool = False
    register_time_unix_s: float = 0.0
    discovery_error: str = ""

    @property
    def dp_size(self) -> int:
        return len(self.load_endpoints)


_SCHEMA = """CREATE TABLE IF NOT EXISTS workers (
    url TEXT PRIMARY KEY,
    protocol INTEGER NOT NULL,
    resolved_protocol INTEGER NOT NULL,
    models TEXT NOT NULL,
    load_endpoints TEXT NOT NULL,
    load_topic TEXT NOT NULL,
    discovered INTEGER NOT NULL,
    register_time_unix_s REAL NOT NULL,
    discovery_error TEXT NOT NULL
)"""
_COLUMNS = (
    "url, protocol, resolved_protocol, models, load_endpoints, load_topic, discovered, "
    "register_time_unix_s, discovery_error"
)
T = TypeVar("T")
_UPSERT = f"INSERT OR REPLACE INTO workers ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


class WorkerRegistry(TypingProtocol):
    """Where registered workers live across control-plane restarts."""

    async def list(self) -> list[WorkerRecord]:
        """Every worker, sorted by URL."""
        ...

    async def put(self, record: WorkerRecord, *, replaces: Sequence[str] = ()) -> None:
        """Add or replace ``record`` (and remove ``replaces``) in one durable transaction."""
        ...

    async def put_many(self, records: Sequence[WorkerRecord]) -> None:
        """Add or replace many workers in one durable transaction (bulk registration)."""
        ...

    async def delete(self, url: str) -> bool:
        """Remove a worker; False if it was not registered."""
        ...


class MemoryWorkerRegistry:
    """A registry that forgets everything on restart."""

    def __init__(self) -> None:
        self._records: dict[str, WorkerRecord] = {}

    async def list(self) -> list[WorkerRecord]:
        return [self._records[url] for url in sorted(self._records)]

    async def put(self, record: WorkerRecord, *, replaces: Sequence[str] = ()) -> None:
        for url in replaces:
            self._records.pop(url, None)
        self._records[record.url] = record

    async def put_many(self, records: Sequence[WorkerRecord]) -> None:
        for record in records:
            self._records[record.url] = record

    async def delete(self, url: str) -> bool:
        return self._records.pop(url, None) is not None


class SqliteWorkerRegistry:
    """The ``workers`` table of the shared SQLite file."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database

    @classmethod
    async def open(cls, database: SqliteDatabase) -> SqliteWorkerRegistry:
        registry = cls(database)
        await registry._run_write(lambda conn: conn.execute(_SCHEMA))
        return registry

    async def list(self) -> list[WorkerRecord]:
        def read(conn: sqlite3.Connection) -> list[WorkerRecord]:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM workers ORDER BY url").fetchall()
            return [_record(row) for row in rows]

        try:
            return await self._db.read(read)
        except sqlite3.Error as exc:
            raise Unavailable(f"cannot read the worker registry: {exc}") from exc

    async def put(self, record: WorkerRecord, *, replaces: Sequence[str] = ()) -> None:
        def write(conn: sqlite3.Connection) -> None:
            for url in replaces:
                conn.execute("DELETE FROM workers WHERE url = ?", (url,))
            conn.execute(_UPSERT, _row(record))

        await self._run_write(write)

    async def put_many(self, records: Sequence[WorkerRecord]) -> None:
        rows = [_row(record) for record in records]
        await self._run_write(lambda conn: conn.executemany(_UPSERT, rows))

    async def delete(self, url: str) -> bool:
        def write(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM workers WHERE url = ?", (url,)).rowcount > 0

        return await self._run_write(write)

    async def _run_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await self._db.transaction(fn)
        except sqlite3.Error as exc:
            raise Unavailable(f"cannot write the worker registry: {exc}") from exc


def _row(record: WorkerRecord) -> tuple[object, ...]:
    return (
        record.url,
        int(record.protocol),
        int(record.resolved_protocol),
        json.dumps(list(record.models)),
        json.dumps(list(record.load_endpoints)),
        record.load_topic,
        int(record.discovered),
        record.register_time_unix_s,
        record.discovery_error,
    )


def _record(row: tuple[object, ...]) -> WorkerRecord:
    url, protocol, resolved, models, endpoints, topic, discovered, registered, error = row
    return WorkerRecord(
        url=str(url),
        protocol=Protocol(int(str(protocol))),
        resolved_protocol=Protocol(int(str(resolved))),
        models=tuple(json.loads(str(models))),
        load_endpoints=tuple(json.loads(str(endpoints))),
        load_topic=str(topic),
        discovered=bool(discovered),
        register_time_unix_s=float(str(registered)),
        discovery_error=str(error),
    )
