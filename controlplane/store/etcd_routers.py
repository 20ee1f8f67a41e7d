"""Router status and rejection counts in etcd (SPEC §6: ``GetRejectionStats`` survives restarts).

Keys under ``/PREFIX/routers/`` (each part percent-encoded)::

    status/ROUTER                       the router's newest report, JSON
    rejections/ROUTER/BOOT/SCOPE/PARAM  the last cumulative count of that boot, decimal
    rejections/ROUTER/BOOT/SCOPE/PARAM/CLIENT  the same for one client (routers with --api-keys)

A router may report to any control plane on the prefix (it reconnects to another after a
failover), so two control planes can write the same count key. Counts only grow within a boot,
so a key keeps the maximum ever written: each write reads the current counts and commits only
if none of the keys it raises moved meanwhile (compare on ``mod_revision``), else re-reads. A
count is therefore never lowered by a slower writer (nothing lost), and a repeated report writes
the same maximum again (nothing double counted).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from urllib.parse import quote, unquote

from controlplane.errors import ControlPlaneError
from controlplane.reports.rejections import RejectionRow
from controlplane.reports.rollout import RouterRecord
from controlplane.store.etcd_client import (
    EtcdClient,
    Message,
    get,
    mod_revision_is,
    prefix_end,
    put,
)
from controlplane.store.routers import RouterStoreError

# Rows per transaction: one compare and one put each, under etcd's --max-txn-ops (128).
ROWS_PER_TXN = 50
MAX_ATTEMPTS = 16


def _part(text: str) -> str:
    return quote(text, safe="")


class EtcdRouterStatsStore:
    """``RouterStatsStore`` under ``/PREFIX/routers/`` of the store's etcd client."""

    def __init__(self, client: EtcdClient) -> None:
        self._client = client
        self._status = client.key("routers", "status", "")
        self._counts = client.key("routers", "rejections", "")

    def _count_key(self, row: RejectionRow) -> bytes:
        parts: tuple[str, ...] = (row.router_id, row.boot_id, row.scope, row.param)
        if row.client:
            parts += (row.client,)
        return self._counts + "/".join(_part(p) for p in parts).encode()

    async def load(self) -> tuple[list[RouterRecord], list[RejectionRow]]:
        try:
            (statuses, counts), _ = await self._client.read_all(
                (self._status, prefix_end(self._status)), (self._counts, prefix_end(self._counts))
            )
        except ControlPlaneError as exc:
            raise RouterStoreError(f"cannot read router stats: {exc.message}") from exc
        records = [_decode_record(kv.value) for kv in statuses]
        rows = [self._decode_row(kv) for kv in counts]
        return records, rows

    async def save(self, records: Sequence[RouterRecord], rows: Sequence[RejectionRow]) -> None:
        try:
            # The newest report wins: a status is a view, not a count. Newest by report time,
            # not by write order: after a failover the replica the router left may write its
            # last record (its stream ended) after the new replica wrote a newer one.
            statuses = [(self._status + _part(r.router_id).encode(), r) for r in records]
            for start in range(0, len(statuses), ROWS_PER_TXN):
                await self._put_newer(statuses[start : start + ROWS_PER_TXN])
            latest: dict[bytes, RejectionRow] = {}
            for row in rows:
                key = self._count_key(row)
                if key not in latest or row.count > latest[key].count:
                    latest[key] = row
            items = list(latest.items())
            for start in range(0, len(items), ROWS_PER_TXN):
                await self._raise_counts(items[start : start + ROWS_PER_TXN])
        except ControlPlaneError as exc:
            raise RouterStoreError(f"cannot write router stats: {exc.message}") from exc

    async def close(self) -> None:
        """Nothing to do: the client belongs to the contract store, which closes it."""

    def changes(self) -> AsyncIterator[None]:
        """Yields after every change under ``/PREFIX/routers/``, by any control plane."""
        return self._client.changes(self._client.key("routers", ""))

    async def _raise_counts(self, items: list[tuple[bytes, RejectionRow]]) -> None:
        for _ in range(MAX_ATTEMPTS):
            found = await self._client.read(*(get(key) for key, _ in items))
            compares: list[Message] = []
            puts: list[Message] = []
            for (key, row), kvs in zip(items, found, strict=True):
                stored = int(kvs[0].value) if kvs else -1
                if row.count > stored:
                    compares.append(mod_revision_is(key, kvs[0].mod_revision if kvs else 0))
                    puts.append(put(key, str(row.count).encode()))
            if not puts:
                return
            response = await self._client.txn(compares, puts)
            if response.succeeded:
                return
        raise RouterStoreError(f"rejection counts: overtaken by other writers {MAX_ATTEMPTS} times")

    async def _put_newer(self, items: list[tuple[bytes, RouterRecord]]) -> None:
        for _ in range(MAX_ATTEMPTS):
            found = await self._client.read(*(get(key) for key, _ in items))
            compares: list[Message] = []
            puts: list[Message] = []
            for (key, record), kvs in zip(items, found, strict=True):
                if kvs and _decode_record(kvs[0].value).last_report_unix_s > record.last_report_unix_s:
                    continue
                compares.append(mod_revision_is(key, kvs[0].mod_revision if kvs else 0))
                puts.append(put(key, _encode_record(record)))
            if not puts:
                return
            response = await self._client.txn(compares, puts)
            if response.succeeded:
                return
        raise RouterStoreError(f"router status: overtaken by other writers {MAX_ATTEMPTS} times")

    def _decode_row(self, kv: Message) -> RejectionRow:
        key: bytes = kv.key
        parts = [unquote(p) for p in key[len(self._counts) :].decode().split("/")]
        router, boot, scope, param = parts[:4]
        client = parts[4] if len(parts) > 4 else ""
        return RejectionRow(router, boot, scope, param, int(kv.value), client)


def _encode_record(r: RouterRecord) -> bytes:
    doc = {
        "router_id": r.router_id,
        "boot_id": r.boot_id,
        "applied_revision": r.applied_revision,
        "apply_error": r.apply_error,
        "last_report_unix_s": r.last_report_unix_s,
        "control_plane_address": r.control_plane_address,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _decode_record(raw: bytes) -> RouterRecord:
    doc = json.loads(raw)
    return RouterRecord(
        str(doc["router_id"]),
        str(doc["boot_id"]),
        int(doc["applied_revision"]),
        str(doc["apply_error"]),
        float(doc["last_report_unix_s"]),
        control_plane_address=str(doc.get("control_plane_address", "")),  # absent in older records
    )
