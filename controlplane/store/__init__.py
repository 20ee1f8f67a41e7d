"""Durable versioned contracts: the ``Store`` protocol and its backends (SPEC §3.2, §6)."""

from __future__ import annotations

from controlplane.store.database import SqliteDatabase, connect
from controlplane.store.model import (
    FLEET_SCOPE,
    ChangeKind,
    ContractVersion,
    HistoryPage,
    Snapshot,
    Store,
    check_page_size,
    check_scope,
)
from controlplane.store.sqlite import SqliteStore

__all__ = [
    "FLEET_SCOPE",
    "ChangeKind",
    "ContractVersion",
    "HistoryPage",
    "Snapshot",
    "SqliteDatabase",
    "SqliteStore",
    "Store",
    "check_page_size",
    "check_scope",
    "connect",
]
